"""Dense page-text retrieval: MiniLM over chunks of each page's full text; a page scores its best chunk.

Why a second dense channel: the graph's page vectors pool the vectors of
80-character element snippets (cheap, and the best dense signal on slides
and papers), but a dense financial page carries its facts in table rows and
later sentences that no snippet reaches. Encoding the page's whole searchable
text (``retrieval.text.page_text``: element text in reading order, OCR text
for image-only pages, table markdown, running header/footer) in chunks that
fit the model's 256 tokens, and scoring a page by its best chunk, finds those
pages; neither channel wins on every dataset, so the hybrid fuses both
(``hybrid_pages``; figures in ``docs/results/embed_quality/``).

Cost: one encoder pass over every page's text, once per graph and encoder.
The vectors live in their own on-disk cache (``$MAGE_GYM_CACHE/page_text``),
not in the graph: a file per document, addressed by a sha256 of the exact
chunk texts plus the encoder (name, precision, dimension) and the chunking
config, written atomically (temporary file + ``os.replace``) and verified on
load. Content addressing covers graphs without a cache key (synthetic graphs,
the environment's page-only views) and can never serve vectors of other text.
A query costs one matrix-vector product over the chunks; the question's
vector is the one :func:`mage_gym.retrieval.make_query` already made.

Elements score their page's value (an element on a page whose text matches
is a better candidate than one on a page that does not); the hybrid decides
whether that enters its element fusion (``element_weights``).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval.base import Query, Scores
from mage_gym.retrieval.cache import GraphIndexCache
from mage_gym.retrieval.text import page_text

log = logging.getLogger(__name__)

#: Bump when chunking or what the vectors mean changes (old cache files then miss).
PAGE_TEXT_VERSION = "1"
#: Encoder calls per progress-bar step when a graph's chunks are embedded.
_BLOCK = 256
_WS = re.compile(r"\s+")


class TextEncoder(Protocol):
    def encode(self, texts: list[str]) -> np.ndarray: ...


# --- chunking ------------------------------------------------------------------------


def split_page_text(text: str, chunk_chars: int) -> list[str]:
    """Cut a page's text into chunks of at most ``chunk_chars`` characters.

    Lines (elements, in reading order) are packed whole while they fit; a line
    longer than a chunk is cut at word boundaries (a word longer than a chunk
    is cut hard). Whitespace is collapsed; empty text gives no chunk.
    """
    if chunk_chars < 1:
        raise ValueError(f"chunk_chars must be >= 1, got {chunk_chars}")
    pieces: list[str] = []
    for raw in (text or "").splitlines():
        line = _WS.sub(" ", raw).strip()
        while len(line) > chunk_chars:
            cut = line.rfind(" ", 0, chunk_chars + 1)
            if cut <= 0:
                cut = chunk_chars
            pieces.append(line[:cut].strip())
            line = line[cut:].strip()
        if line:
            pieces.append(line)
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + 1 + len(piece) > chunk_chars:
            chunks.append(current)
            current = piece
        else:
            current = f"{current}\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks


@dataclass(frozen=True)
class PageChunks:
    """Every page's chunks, pages in order: ``texts[i]`` belongs to page ``page[i]``."""

    texts: list[str]
    page: np.ndarray  # int32 [n_chunks], non-decreasing
    n_pages: int

    def digest(self) -> str:
        """sha256 of the exact chunk texts and their pages (the content part of the cache key)."""
        h = hashlib.sha256(f"{self.n_pages}\x1e".encode())
        for p, t in zip(self.page.tolist(), self.texts):
            h.update(f"{p}\x1f{t}\x1e".encode())
        return h.hexdigest()


def page_chunks(graph: EvidenceGraph, chunk_chars: int) -> PageChunks:
    """Chunks of every page's searchable text (the text BM25 indexes, :func:`page_text`)."""
    texts: list[str] = []
    pages: list[int] = []
    for i in range(graph.n_pages):
        for chunk in split_page_text(page_text(graph, i), chunk_chars):
            texts.append(chunk)
            pages.append(i)
    return PageChunks(texts=texts, page=np.asarray(pages, dtype=np.int32), n_pages=graph.n_pages)


# --- the on-disk vector cache --------------------------------------------------------


def default_cache_dir() -> Path:
    """``$MAGE_GYM_CACHE/page_text`` (beside the graphs, OCR and reader caches)."""
    from mage_gym.paths import cache_root

    return cache_root() / "page_text"


class ChunkVectorStore:
    """One ``<key>.npz`` per (chunk texts, encoder, chunking): vectors and chunk pages.

    Writes go to a unique temporary file in the same folder, renamed into place
    with ``os.replace`` (atomic), so a reader sees a whole file or none. A file
    that fails to load, names another key or has the wrong shapes is deleted
    and reported as a miss.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self._root = Path(root).expanduser() if root is not None else None

    @property
    def root(self) -> Path:
        return self._root if self._root is not None else default_cache_dir()

    def path(self, key: str) -> Path:
        return self.root / f"{key}.npz"

    def load(self, key: str, n_chunks: int) -> np.ndarray | None:
        path = self.path(key)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                stored_key = str(z["key"])
                vectors = np.ascontiguousarray(z["vectors"], dtype=np.float32)
            if stored_key != key or vectors.ndim != 2 or vectors.shape[0] != n_chunks \
                    or not np.isfinite(vectors).all():
                raise ValueError(f"entry does not match (key {stored_key[:12]}, shape {vectors.shape})")
            return vectors
        except Exception as exc:  # noqa: BLE001 - any unreadable entry is a miss, never trusted
            log.warning("page-text vector cache entry %s is invalid (%s); recomputing", path.name, exc)
            path.unlink(missing_ok=True)
            return None

    def save(self, key: str, vectors: np.ndarray) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path(key)
        tmp = path.with_name(f".tmp-{uuid.uuid4().hex}.npz")
        try:
            with open(tmp, "wb") as f:
                np.savez(f, key=np.asarray(key), vectors=np.ascontiguousarray(vectors, dtype=np.float32))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path


# --- the index and the retriever ----------------------------------------------------------


@dataclass
class PageTextIndex:
    """Chunk vectors of one graph and how they fold back onto pages."""

    vectors: np.ndarray  # float32 [n_chunks, dim], L2-normalised (zero rows for empty text)
    chunk_page: np.ndarray  # int32 [n_chunks], non-decreasing
    n_pages: int
    element_page: np.ndarray  # intp [n_elements]: page of each element of the graph indexed
    key: str  # the cache key the vectors were stored under

    def __post_init__(self) -> None:
        cp = self.chunk_page
        self._starts = np.flatnonzero(np.r_[True, cp[1:] != cp[:-1]]) if len(cp) else np.zeros(0, np.intp)
        self._start_pages = cp[self._starts]

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1]) if self.vectors.ndim == 2 else 0

    def page_scores(self, vec: np.ndarray) -> np.ndarray:
        """float32 [n_pages]: each page's best chunk cosine (0 for a page without text)."""
        out = np.zeros(self.n_pages, dtype=np.float32)
        if not len(self.chunk_page):
            return out
        sims = np.einsum("ij,j->i", self.vectors, vec.astype(np.float32, copy=False))
        out[self._start_pages] = np.maximum.reduceat(sims, self._starts)
        return out


def _encoder_id(encoder: Any) -> dict[str, Any]:
    return {"name": str(getattr(encoder, "name", type(encoder).__name__)),
            "precision": getattr(encoder, "precision", None), "dim": int(getattr(encoder, "dim", 0) or 0)}


def cache_key(chunks: PageChunks, encoder: Any, chunk_chars: int) -> str:
    """sha256 of the chunk texts, the encoder's identity and the chunking config."""
    payload = {"version": PAGE_TEXT_VERSION, "chunks": chunks.digest(), "encoder": _encoder_id(encoder),
               "chunk_chars": int(chunk_chars)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def encoder_for_graph(graph: EvidenceGraph) -> TextEncoder:
    """The encoder whose space the graph's (and hence the queries') vectors live in.

    Graphs built with the model-free hashing encoder (tests, ``embed_model``
    ``hashing-bow-<dim>``) get that encoder; every other graph gets the
    process-wide MiniLM, which is also what :func:`mage_gym.retrieval.make_query`
    encodes questions with.
    """
    model = str(graph.meta.get("embed_model", "") or "")
    m = re.fullmatch(r"hashing-bow-(\d+)", model)
    if m:
        from mage_gym.testing import HashingEncoder

        return HashingEncoder(int(m.group(1)))
    from mage_gym.graph.embed import get_encoder

    return get_encoder()


class PageTextDenseRetriever:
    """Cosine of ``Query.vector`` with each page's best text chunk (channel name ``page_dense``).

    Config: ``chunk_chars`` (characters per chunk; chosen on the dev sets'
    train splits, ``docs/results/embed_quality/``), ``encoder`` (an encoder or a factory; default:
    :func:`encoder_for_graph`), ``cache`` (use the on-disk vector cache),
    ``cache_dir`` (default ``$MAGE_GYM_CACHE/page_text``), ``max_graphs``
    (in-memory indexes kept), ``progress`` (a progress bar while a large graph
    is embedded). The query must carry its vector (``make_query``); queries
    without one are encoded with the same encoder as the chunks.
    """

    name = "page_dense"

    def __init__(self, chunk_chars: int = 1000, encoder: TextEncoder | Callable[[], TextEncoder] | None = None,
                 cache: bool = True, cache_dir: str | Path | None = None, max_graphs: int = 8,
                 progress: bool = True) -> None:
        if int(chunk_chars) < 50:
            raise ValueError(f"chunk_chars must be >= 50 (a chunk is a passage), got {chunk_chars}")
        self.chunk_chars = int(chunk_chars)
        self._encoder_arg = encoder
        self._encoder: TextEncoder | None = None
        self.cache = bool(cache)
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self.progress = bool(progress)
        self._indexes: GraphIndexCache[PageTextIndex] = GraphIndexCache(max_graphs)
        # the same chunk texts share vectors across graph objects (a graph and its page-only view)
        self._by_key: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._max_graphs = int(max_graphs)

    def __getstate__(self) -> dict[str, Any]:
        """Settings only (an encoder object is kept if given): indexes are rebuilt or reloaded from disk."""
        return {"chunk_chars": self.chunk_chars, "encoder": self._encoder_arg, "cache": self.cache,
                "cache_dir": self.cache_dir, "max_graphs": self._max_graphs, "progress": self.progress}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    # -- encoders

    def encoder(self, graph: EvidenceGraph) -> TextEncoder:
        if self._encoder_arg is None:
            return encoder_for_graph(graph)
        if self._encoder is None:
            enc = self._encoder_arg
            self._encoder = enc if hasattr(enc, "encode") else enc()  # type: ignore[operator, assignment]
        return self._encoder  # type: ignore[return-value]

    # -- indexing

    def index(self, graph: EvidenceGraph) -> PageTextIndex:
        """The graph's chunk vectors: in memory, else from the disk cache, else encoded (then stored)."""
        return self._indexes.get(graph, self._build)

    def _build(self, graph: EvidenceGraph) -> PageTextIndex:
        chunks = page_chunks(graph, self.chunk_chars)
        encoder = self.encoder(graph)
        key = cache_key(chunks, encoder, self.chunk_chars)
        vectors = self._vectors(key, chunks, encoder, graph.doc_id)
        element_page = np.fromiter((e.page for e in graph.elements), dtype=np.intp, count=graph.n_elements)
        return PageTextIndex(vectors=vectors, chunk_page=chunks.page, n_pages=chunks.n_pages,
                             element_page=element_page, key=key)

    def _vectors(self, key: str, chunks: PageChunks, encoder: TextEncoder, doc_id: str) -> np.ndarray:
        with self._lock:
            hit = self._by_key.get(key)
            if hit is not None:
                self._by_key.move_to_end(key)
                return hit
        store = ChunkVectorStore(self.cache_dir) if self.cache else None
        vectors = store.load(key, len(chunks.texts)) if store is not None else None
        if vectors is None:
            vectors = self._encode(encoder, chunks.texts, doc_id)
            if store is not None:
                store.save(key, vectors)
        with self._lock:
            self._by_key[key] = vectors
            while len(self._by_key) > self._max_graphs:
                self._by_key.popitem(last=False)
        return vectors

    def _encode(self, encoder: TextEncoder, texts: list[str], doc_id: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, int(getattr(encoder, "dim", 0) or 0)), dtype=np.float32)
        if len(texts) <= _BLOCK:
            return _unit_rows(encoder.encode(texts))
        from mage_gym.progress import progress_bar

        parts = []
        bar = progress_bar(range(0, len(texts), _BLOCK), desc=f"page-text vectors {doc_id[:30]}", unit="block",
                   disable=None if self.progress else True, leave=False)
        for lo in bar:
            parts.append(np.asarray(encoder.encode(texts[lo: lo + _BLOCK]), dtype=np.float32))
        return _unit_rows(np.concatenate(parts))

    # -- scoring

    def query_vector(self, graph: EvidenceGraph, query: Query) -> np.ndarray:
        if query.vector is not None:
            vec = np.asarray(query.vector, dtype=np.float32).reshape(-1)
        else:
            vec = np.asarray(self.encoder(graph).encode([query.text]), dtype=np.float32)[0]
        norm = float(np.linalg.norm(vec))
        if not np.isfinite(norm):
            raise ValueError("query vector has non-finite values")
        return vec / norm if norm > 0 else vec

    def can_score(self, graph: EvidenceGraph, query: Query) -> bool:
        """Whether ``query``'s vector lives in the space of this graph's chunk encoder, decided without
        encoding anything (a hybrid's observed-only channel is skipped otherwise: a test double's toy query
        vectors are not MiniLM's, and embedding every toy page with MiniLM would only end in an error)."""
        if query.vector is None:
            return True
        if self._encoder_arg is not None:
            dim = getattr(self.encoder(graph), "dim", None)
        else:
            m = re.fullmatch(r"hashing-bow-(\d+)", str(graph.meta.get("embed_model", "") or ""))
            if m:
                dim = int(m.group(1))
            else:
                from mage_gym.graph.embed import EMBED_DIM

                dim = EMBED_DIM
        return dim is None or int(np.size(query.vector)) == int(dim)

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        idx = self.index(graph)
        vec = self.query_vector(graph, query)
        if len(idx.chunk_page) and vec.shape[0] != idx.dim:
            raise ValueError(
                f"query vector has {vec.shape[0]} dimensions but the page-text vectors of {graph.doc_id!r} "
                f"have {idx.dim}; encode the query with the encoder of the chunks (make_query / MiniLM)")
        pages = idx.page_scores(vec)
        return Scores(pages=pages, elements=pages[idx.element_page] if len(idx.element_page)
                      else np.zeros(0, dtype=np.float32))


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)


__all__ = ["ChunkVectorStore", "PAGE_TEXT_VERSION", "PageChunks", "PageTextDenseRetriever", "PageTextIndex",
           "cache_key", "default_cache_dir", "encoder_for_graph", "page_chunks", "split_page_text"]
