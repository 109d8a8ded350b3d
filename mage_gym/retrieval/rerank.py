"""``hybrid_rerank``: a first-stage retriever's top pages reordered by the cross-encoder.

Why a second stage: the cross-encoder (:mod:`mage_gym.retrieval.cross_encoder`)
reads question and page text together, which ranks better than comparing two
vectors, but it costs a MiniLM forward pass per (question, passage) pair, so it
only reads the ``depth`` best pages of the first stage (the env's default
hybrid unless configured), each through its ``chunks_per_page`` best chunks
(the page-text chunks of :mod:`mage_gym.retrieval.page_text`, chosen by the
page-text dense channel's cosine, which is already cached per document). A
page's cross-encoder score is its best chunk's.

Page order: the ``depth`` pages first, by the cross-encoder alone
(``combine="ce"``) or by a reciprocal-rank fusion of the cross-encoder and the
first stage (``combine="rrf"``, constant ``rrf_k``); then every other page in
first-stage order. The env takes its entry pages from this order, so
``topk_page`` and every controller under ``retriever=hybrid_rerank`` read the
same reranked pages. Elements keep the first stage's fused scores.

Relevance columns (:func:`mage_gym.env.relevance.relevance_columns`): fused
(the reranked order), the first stage's fused components (``bm25``,
``dense``), then ``cross_encoder``: the sigmoid of a page's cross-encoder
score (elements: their page's; 0 for pages it did not read). A checkpoint's
sidecar names these columns, so a controller trained under the default
retriever (last column ``page_dense``) is refused here by name, not fed a
changed column: the columns are opt-in through the retriever choice.

SearchEvidence scores with the first stage unless ``rerank_searches``
(:func:`mage_gym.env.relevance.search_page_scores` asks ``search_retriever``):
a search would otherwise cost a cross-encoder pass per step.

Cross-encoder scores are cached on disk (``$MAGE_GYM_CACHE/rerank``), keyed by
the model's digest, the question and the exact passages read, so a rerun
(another experiment, another process) does not pay them twice.
"""
from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mage_gym.cache import Cache
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval.base import Query, Retriever, Scores

COMBINES = ("ce", "rrf")


def default_cache_dir() -> Path:
    from mage_gym.paths import cache_root

    return cache_root() / "rerank"


class ScoreStore:
    """Cross-encoder scores of one (model, question, passages) triple per ``.npy`` file (atomic writes)."""

    def __init__(self, root: str | Path | None = None) -> None:
        self._root = Path(root).expanduser() if root is not None else None

    @property
    def root(self) -> Path:
        return self._root if self._root is not None else default_cache_dir()

    @staticmethod
    def key(model_digest: str, question: str, texts: list[str]) -> str:
        h = hashlib.sha256(f"{model_digest}\x1e{question}\x1e".encode())
        for t in texts:
            h.update(t.encode())
            h.update(b"\x1f")
        return h.hexdigest()

    def load(self, key: str, n: int) -> np.ndarray | None:
        path = self.root / key[:2] / f"{key}.npy"
        if not path.exists():
            return None
        try:
            arr = np.load(path, allow_pickle=False)
            if arr.shape != (n,) or not np.isfinite(arr).all():
                raise ValueError(f"shape {arr.shape}, expected ({n},)")
            return arr.astype(np.float32)
        except Exception:  # noqa: BLE001 - an unreadable entry is a miss, never trusted
            path.unlink(missing_ok=True)
            return None

    def save(self, key: str, scores: np.ndarray) -> None:
        folder = self.root / key[:2]
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".tmp-{uuid.uuid4().hex}.npy"
        try:
            with open(tmp, "wb") as f:
                np.save(f, np.asarray(scores, dtype=np.float32))
            os.replace(tmp, folder / f"{key}.npy")
        finally:
            tmp.unlink(missing_ok=True)


class CrossEncoderChannel:
    """The ``cross_encoder`` relevance column: pages the reranker read get sigmoid(score), elements their page's."""

    name = "cross_encoder"

    def __init__(self, owner: "RerankedRetriever") -> None:
        self._owner = owner

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        return self._owner.score_with_components(graph, query)[1][self.name]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-np.clip(np.asarray(x, dtype=np.float64), -50, 50)))).astype(np.float32)


class RerankedRetriever:
    """Pages of ``first_stage`` reordered by a cross-encoder over its ``depth`` best pages (module docstring).

    ``scorer``: anything with ``score(question, texts) -> float [n]`` and a ``digest`` (default: the shipped
    :class:`~mage_gym.retrieval.cross_encoder.CrossEncoderScorer`, built on first use); ``depth``: pages read;
    ``chunks_per_page``: passages read per page; ``chunk_chars``: passage size (the page-text channel's);
    ``combine``: ``ce`` or ``rrf``; ``rrf_k``; ``rerank_searches``; ``cache`` / ``cache_dir``: the on-disk score
    cache (``"write"``: scores are always computed and then stored, e.g. to time them while filling the cache);
    ``checkpoint``: another adapter folder for the default scorer. The defaults of ``depth``, ``chunks_per_page``
    and ``combine`` are the settings the VAL splits chose for the shipped adapter (its ``adapter.json``, ``val``).
    """

    name = "hybrid_rerank"

    def __init__(self, first_stage: Retriever, scorer: Any = None, depth: int = 10, chunks_per_page: int = 1,
                 chunk_chars: int = 1000, combine: str = "rrf", rrf_k: float = 60.0, rerank_searches: bool = False,
                 cache: bool | str = True, cache_dir: str | Path | None = None, checkpoint: str | None = None,
                 max_graphs: int = 8, name: str = "hybrid_rerank") -> None:
        if not hasattr(first_stage, "score"):
            raise TypeError(f"first_stage must be a retriever, got {type(first_stage).__name__}")
        if int(depth) < 1 or int(chunks_per_page) < 1:
            raise ValueError(f"depth and chunks_per_page must be >= 1, got {depth}, {chunks_per_page}")
        if combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES}, got {combine!r}")
        if float(rrf_k) < 0:
            raise ValueError(f"rrf_k must be >= 0, got {rrf_k}")
        from mage_gym.retrieval.page_text import PageTextDenseRetriever

        self.first_stage = first_stage
        self._scorer = scorer
        self.checkpoint = checkpoint
        self.depth, self.chunks_per_page = int(depth), int(chunks_per_page)
        self.combine, self.rrf_k = combine, float(rrf_k)
        self.rerank_searches = bool(rerank_searches)
        if cache not in (True, False, "write"):
            raise ValueError(f"cache must be true, false or 'write', got {cache!r}")
        self.cache = cache
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self.name = str(name)
        self.passages = PageTextDenseRetriever(chunk_chars=chunk_chars, cache=bool(cache), max_graphs=max_graphs)
        self._chunks: Cache[Any] = Cache("retrieval.hybrid_rerank.chunks", max_graphs, per_graph=True)
        first_components = dict(getattr(first_stage, "components", {}) or {first_stage.name: first_stage})
        self.components: dict[str, Any] = {**first_components, "cross_encoder": CrossEncoderChannel(self)}
        self.observed: dict[str, Any] = {}
        self.last_pairs = 0  # (question, passage) pairs the last scoring read (0 when served from the cache)

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k != "components"}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        first_components = dict(getattr(self.first_stage, "components", {}) or {self.first_stage.name: self.first_stage})
        self.components = {**first_components, "cross_encoder": CrossEncoderChannel(self)}

    @property
    def scorer(self) -> Any:
        if self._scorer is None:
            from mage_gym.retrieval.cross_encoder import CrossEncoderScorer

            self._scorer = CrossEncoderScorer(self.checkpoint)
        return self._scorer

    @property
    def search_retriever(self) -> Retriever:
        """What SearchEvidence scores with (:func:`mage_gym.env.relevance.search_page_scores`)."""
        return self if self.rerank_searches else self.first_stage

    # -- first stage

    def _first(self, graph: EvidenceGraph, query: Query) -> tuple[Scores, dict[str, Scores]]:
        fs = self.first_stage
        if hasattr(fs, "score_components") and hasattr(fs, "fuse"):
            comps = fs.score_components(graph, query)
            fused = fs.fuse(comps, fs.gate(graph)) if hasattr(fs, "gate") else fs.fuse(comps)
            return fused, comps
        if hasattr(fs, "score_with_components"):
            return fs.score_with_components(graph, query)
        s = fs.score(graph, query)
        return s, {fs.name: s}

    # -- the cross-encoder over the top pages

    def passages_of(self, graph: EvidenceGraph, query: Query, pages: list[int]) -> tuple[list[str], list[int]]:
        """The passages read for ``pages``: each page's ``chunks_per_page`` chunks of best dense cosine, best first.

        Best first, not in page order: a caller that reads fewer passages per
        page (the settings grid of :mod:`mage_gym.bench.rerank_data`) or takes
        a page's first passage as its best (hard negatives) must get the ones
        this retriever would read with that setting.
        """
        from mage_gym.retrieval.page_text import page_chunks

        chunks = self._chunks.get(graph, None, lambda: page_chunks(graph, self.passages.chunk_chars))
        texts, owners = [], []
        if not len(chunks.texts):
            return texts, owners
        cp = chunks.page
        sims = None
        if self.passages.can_score(graph, query):
            idx = self.passages.index(graph)
            sims = idx.vectors @ self.passages.query_vector(graph, query)
        for p in pages:
            rows = np.flatnonzero(cp == p)
            if sims is not None:
                rows = rows[np.argsort(-sims[rows], kind="stable")]
            for i in rows[: self.chunks_per_page].tolist():
                texts.append(chunks.texts[i])
                owners.append(p)
        return texts, owners

    def page_scores(self, graph: EvidenceGraph, query: Query, pages: list[int]) -> np.ndarray:
        """float32 [len(pages)]: each page's best passage score (-inf for a page without text)."""
        texts, owners = self.passages_of(graph, query, pages)
        scores = None
        store = ScoreStore(self.cache_dir) if self.cache else None
        key = ScoreStore.key(self.scorer.digest, query.text, texts) if store is not None else ""
        if store is not None and self.cache is True:
            scores = store.load(key, len(texts))
        self.last_pairs = 0
        if scores is None:
            scores = np.asarray(self.scorer.score(query.text, texts), dtype=np.float32)
            self.last_pairs = len(texts)
            if store is not None:
                store.save(key, scores)
        out = np.full(len(pages), -np.inf, dtype=np.float32)
        where = {p: i for i, p in enumerate(pages)}
        for p, s in zip(owners, scores.tolist()):
            out[where[p]] = max(out[where[p]], s)
        return out

    # -- the retriever API

    def score_with_components(self, graph: EvidenceGraph, query: Query) -> tuple[Scores, dict[str, Scores]]:
        fused, comps = self._first(graph, query)
        n = graph.n_pages
        fp = np.asarray(fused.pages, dtype=np.float64)
        first_order = np.lexsort((np.arange(n), -fp))  # the env's tie rule: page index
        top = first_order[: self.depth].tolist()
        ce = self.page_scores(graph, query, top) if top else np.zeros(0, dtype=np.float32)
        pages = np.zeros(n, dtype=np.float32)
        pages[first_order] = (n - np.arange(n, dtype=np.float32)) / (n + 1.0)  # first-stage order, in (0, 1)
        if top:
            rerank = rerank_positions(ce, self.combine, self.rrf_k)
            pages[np.asarray(top)[rerank]] = 2.0 + (len(top) - np.arange(len(top), dtype=np.float32)) / (len(top) + 1.0)
        ce_pages = np.zeros(n, dtype=np.float32)
        if top:
            ce_pages[np.asarray(top)] = np.where(np.isfinite(ce), _sigmoid(ce), 0.0)
        el_page = graph.node_page[graph.n_pages:]  # cached on the graph
        ce_scores = Scores(pages=ce_pages, elements=ce_pages[el_page] if len(el_page) else np.zeros(0, np.float32))
        components = {**{k: v for k, v in comps.items() if k in self.components}, "cross_encoder": ce_scores}
        return Scores(pages=pages, elements=np.asarray(fused.elements, dtype=np.float32)), components

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        return self.score_with_components(graph, query)[0]


def rerank_positions(ce: np.ndarray, combine: str, rrf_k: float = 60.0) -> np.ndarray:
    """The new order of the first stage's top pages, as positions into them, from their cross-encoder scores.

    ``ce[i]``: the score of the first stage's ``i``-th page (-inf: a page
    without text, ranked last). ``combine="ce"`` orders by the score alone;
    ``"rrf"`` fuses the first stage's rank with the score's rank by reciprocal
    rank (``rrf_k``). Ties keep the first stage's order. One rule for the
    retriever and for the settings grid that chooses its defaults.
    """
    ce = np.asarray(ce, dtype=np.float64)
    if combine == "ce":
        key = np.where(np.isfinite(ce), ce, -1e9)
    else:
        from mage_gym.retrieval.fusion import competition_ranks

        ce_rank = competition_ranks(np.where(np.isfinite(ce), ce, -np.inf)).astype(np.float64)
        ce_rank[~np.isfinite(ce)] = np.inf
        key = 1.0 / (rrf_k + np.arange(1, len(ce) + 1)) + 1.0 / (rrf_k + ce_rank)
    return np.lexsort((np.arange(len(ce)), -key))


def settings_of(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword settings of :class:`RerankedRetriever` in ``cfg`` (what the factory passes through)."""
    keys = ("depth", "chunks_per_page", "chunk_chars", "combine", "rrf_k", "rerank_searches", "cache", "cache_dir",
            "checkpoint", "max_graphs", "name")
    return {k: cfg[k] for k in keys if k in cfg and cfg[k] is not None}


__all__ = ["COMBINES", "CrossEncoderChannel", "RerankedRetriever", "ScoreStore", "rerank_positions", "settings_of"]
