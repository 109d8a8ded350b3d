"""The offline pipeline: document -> parsed pages -> evidence graph (cached).

Stages, and where each runs:

1. *parse* (``get_parser(name).parse``) and *prepare* (normalise boxes to
   [0, 1], drop empty text regions, pair captions, choose the text to embed)
   are per page, so with ``workers > 1`` contiguous page chunks go to worker
   processes, which also *embed* their chunk's texts: embedding is the most
   expensive stage, and doing it where the text already is halves the wall
   time on two cores without shipping text back and forth twice.
2. *assemble* is document-wide and runs in the calling process: ids, reading
   order, the section tree (headings span pages), summaries, the five edge
   kinds, meta.
3. the result is written to the content-addressed cache (:mod:`.store`); a
   second call with the same bytes and settings loads it in milliseconds
   without importing a parser or torch.

Worker processes are kept in a process-wide pool (one encoder loaded per
worker, torch limited to ``cores // workers`` threads each) so a corpus build
or a benchmark pays the ~1-3 s encoder load once per worker, not per document.
"""
from __future__ import annotations

import atexit
import json
import logging
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

import numpy as np

from mage_gym.graph.edges import EdgeConfig, build_edges, caption_pairs, section_structure
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import (
    VISUAL_TYPES,
    BBox,
    DocumentSource,
    Element,
    Page,
    ParsedDocument,
    ParsedElement,
    ParsedPage,
    element_id,
    is_failure,
    page_id,
)
from mage_gym.graph.store import GRAPH_VERSION, GraphNotBuiltError, cache_key, load_cached, save_graph
from mage_gym.graph.summarize import clean, summarize_element, summarize_page

if TYPE_CHECKING:  # pragma: no cover - process pools are imported when first used
    from concurrent.futures import Future, ProcessPoolExecutor

log = logging.getLogger(__name__)


class Encoder(Protocol):
    """What the builder needs from a text encoder (tests inject a fake one)."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class HashingEncoder:
    """Deterministic bag-of-words vectors: a model-free stand-in for MiniLM.

    Why: unit tests (here and in modules that build graphs from hand-made
    documents, e.g. the synthetic generator) need vectors where texts that
    share words are similar and unrelated texts are not, without loading a
    model. Words are hashed (crc32, stable across processes) into ``dim``
    buckets with a sign; vectors are L2-normalised; empty text gives zeros.
    """

    def __init__(self, dim: int = 64, name: str = "hashing-bow") -> None:
        self.dim = dim
        self.name = f"{name}-{dim}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import re
        import zlib

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z0-9]+", (t or "").lower()):
                h = zlib.crc32(w.encode())
                out[i, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


@dataclass(frozen=True)
class EmbedConfig:
    """How texts become vectors (part of the cache key).

    Why truncate: MiniLM costs about the same per *token* at any length (~6k
    tokens/s on two cores), so a 2,000-character paragraph costs 8x a
    250-character one while its first few sentences already say what it is
    about. ``page_vectors="mean"`` pools a page's element vectors (weighted
    by their text length) instead of encoding the page text again: it covers
    the whole page (the encoder would cut a page at 256 tokens) and costs
    nothing; ``"text"`` encodes the page text itself.

    Measured on 64 MMLongBench-Doc dev questions (10 text-layer documents,
    fast parser), page recall@5 of the question vector against the page
    vectors: ``"text"`` 0.54; ``"mean"`` 0.64 with elements cut at 300
    characters, 0.62 at 600 (which costs ~40 % more tokens on a 10-K).
    The cut: on 174 questions over 25 documents
    (``experiments/embed_quality.py --docs 25 --element-chars 120 200 300``)
    page recall@5 was 0.701 / 0.695 / 0.695 and best-element page recall@5
    0.695 / 0.684 / 0.678 at 120 / 200 / 300 characters, for 231k / 308k /
    372k tokens: the first sentence carries what dense retrieval uses. A
    second run with the fast parser's re-joined blocks
    (``--element-chars 60 80 120 --precisions bfloat16``): page recall@5
    0.724 / 0.730 / 0.701, best-element 0.672 / 0.707 / 0.690, for 144k /
    173k / 223k tokens. So the default is 80, the best on both measures (BM25
    and the reader still see the whole text).
    """

    element_max_chars: int = 80
    page_max_chars: int = 1500
    page_vectors: str = "mean"  # "mean" | "text"
    dtype: str = "float32"  # "float32" | "float16" (halves cache size and load time)

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any] | "EmbedConfig" | None) -> "EmbedConfig":
        if cfg is None:
            return cls()
        if isinstance(cfg, EmbedConfig):
            return cfg
        known = {f.name for f in fields(cls)}
        unknown = set(cfg) - known
        if unknown:
            raise ValueError(f"unknown embed config keys {sorted(unknown)}; known: {sorted(known)}")
        out = cls(**dict(cfg))
        if out.page_vectors not in ("mean", "text"):
            raise ValueError(f"page_vectors must be 'mean' or 'text', got {out.page_vectors!r}")
        if out.dtype not in ("float32", "float16"):
            raise ValueError(f"dtype must be 'float32' or 'float16', got {out.dtype!r}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- stage 1: per-page preparation (runs in workers) ------------------------------


@dataclass
class PreparedPage:
    """One parsed page made ready for assembly: kept elements with normalised boxes."""

    index: int
    width: float
    height: float
    elements: list[ParsedElement]
    boxes: list[BBox]
    captions: dict[int, list[int]]  # visual position -> caption/header positions
    embed_texts: list[str]  # what each element's vector encodes
    header_text: str = ""
    footer_text: str = ""
    image_only: bool = False
    warnings: list[str] = field(default_factory=list)
    dropped: int = 0

    @property
    def text(self) -> str:
        """All element text in reading order (tables: their text, else markdown)."""
        return "\n".join(t for t in (element_text(e) for e in self.elements) if t)


def element_text(e: ParsedElement) -> str:
    return (e.text or "").strip() or (e.table_markdown or "").strip()


def _normalise(bbox: Sequence[float], w: float, h: float) -> BBox:
    x0, y0, x1, y1 = (float(v) for v in bbox)
    if x1 < x0:
        x0, x1 = x1, x0
    if y1 < y0:
        y0, y1 = y1, y0
    c = lambda v: min(1.0, max(0.0, v))  # noqa: E731
    return (c(x0 / w), c(y0 / h), c(x1 / w), c(y1 / h))


def _markdown_for_embedding(md: str) -> str:
    """Table markdown without the ``|---|`` rule and with single spaces (fewer tokens)."""
    lines = [ln for ln in md.splitlines() if ln.strip() and not set(ln.strip()) <= set("|-: ")]
    return clean(" ".join(lines).replace("|", " | "))


def prepare_page(page: ParsedPage, cfg: EmbedConfig = EmbedConfig(),
                 caption_gap: float = EdgeConfig.caption_max_gap) -> PreparedPage:
    """Normalise one parsed page; decide each element's embedding text.

    Text regions with no text are dropped (they would be nodes with nothing to
    read or match); visuals are kept even when empty (their pixels matter).
    Figures and tables embed their caption together with their own text so
    a question about "the chart of revenue by region" can find the chart.
    """
    w, h = float(page.width), float(page.height)
    warns = list(page.warnings)
    if w <= 0 or h <= 0:
        # a page the parser could not measure: fall back to the elements' extent
        w = max([e.bbox[2] for e in page.elements] + [1.0])
        h = max([e.bbox[3] for e in page.elements] + [1.0])
        if page.elements:
            warns.append("page size unknown; boxes normalised to the elements' extent")
    kept = [e for e in page.elements if e.type in VISUAL_TYPES or (e.text or "").strip()]
    boxes = [_normalise(e.bbox, w, h) for e in kept]
    texts = [element_text(e) for e in kept]
    caps = caption_pairs([e.type for e in kept], boxes, texts, caption_gap)
    embed: list[str] = []
    for i, e in enumerate(kept):
        if e.type == "table":
            body = (e.text or "").strip() or _markdown_for_embedding(e.table_markdown or "")
        else:
            body = (e.text or "").strip()
        if i in caps:
            body = " ".join([*(clean(texts[c]) for c in caps[i]), body]).strip()
        embed.append(clean(body)[: cfg.element_max_chars])
    return PreparedPage(
        index=page.index, width=float(page.width), height=float(page.height), elements=kept, boxes=boxes,
        captions=caps, embed_texts=embed, header_text=page.header_text, footer_text=page.footer_text,
        image_only=page.image_only, warnings=warns, dropped=len(page.elements) - len(kept),
    )


def _encode(encoder: Encoder, texts: list[str], progress: bool, block: int = 512) -> np.ndarray:
    """Encode, in length-sorted blocks under a progress bar when there are many texts."""
    if not progress or len(texts) <= 2 * block:
        return np.asarray(encoder.encode(texts), dtype=np.float32)
    from tqdm import tqdm

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), encoder.dim), np.float32)
    for lo in tqdm(range(0, len(order), block), desc="embed", unit="block", disable=None, leave=False):
        idx = order[lo : lo + block]
        out[idx] = encoder.encode([texts[i] for i in idx])
    return out


def embed_pages(prepared: Sequence[PreparedPage], encoder: Encoder | None,
                cfg: EmbedConfig = EmbedConfig(), progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(page vectors, element vectors) of prepared pages, float32, L2-normalised.

    Identical texts (repeated boilerplate, page furniture) are encoded once.
    With ``encoder=None`` the vectors are zeros (a graph without semantics,
    e.g. for a parse-only benchmark).
    """
    el_texts = [t for p in prepared for t in p.embed_texts]
    page_texts = [clean(p.text)[: cfg.page_max_chars] for p in prepared] if cfg.page_vectors == "text" else []
    dim = encoder.dim if encoder is not None else 0
    if encoder is None:
        return np.zeros((len(prepared), 0), np.float32), np.zeros((len(el_texts), 0), np.float32)
    uniq = list(dict.fromkeys(t for t in el_texts + page_texts if t))
    vecs = _encode(encoder, uniq, progress) if uniq else np.zeros((0, dim), np.float32)
    row = {t: i for i, t in enumerate(uniq)}

    def lookup(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), dim), np.float32)
        for i, t in enumerate(texts):
            if t:
                out[i] = vecs[row[t]]
        return out

    el_vecs = lookup(el_texts)
    if cfg.page_vectors == "text":
        page_vecs = lookup(page_texts)
    else:
        page_vecs = np.zeros((len(prepared), dim), np.float32)
        lo = 0
        for i, p in enumerate(prepared):
            n = len(p.embed_texts)
            if n:
                wts = np.asarray([len(t) for t in p.embed_texts], np.float32)
                page_vecs[i] = wts @ el_vecs[lo : lo + n]
            lo += n
        norms = np.linalg.norm(page_vecs, axis=1, keepdims=True)
        page_vecs = np.divide(page_vecs, norms, out=np.zeros_like(page_vecs), where=norms > 0)
    return page_vecs, el_vecs


# --- stage 2: document-wide assembly -------------------------------------------------


def _order_pages(prepared: list[PreparedPage], page_vecs: np.ndarray, el_vecs: np.ndarray,
                 ) -> tuple[list[PreparedPage], np.ndarray, np.ndarray, list[str]]:
    """Pages sorted by index, with empty stand-ins for any index a parser skipped; vectors follow."""
    dim = page_vecs.shape[1] if page_vecs.ndim == 2 else 0
    offsets = np.cumsum([0] + [len(p.elements) for p in prepared])
    by_index = {p.index: i for i, p in enumerate(prepared)}
    n = max(by_index) + 1 if by_index else 0
    out: list[PreparedPage] = []
    pv = np.zeros((n, dim), np.float32)
    ev_rows: list[np.ndarray] = []
    warns = []
    for i in range(n):
        if i in by_index:
            k = by_index[i]
            out.append(prepared[k])
            pv[i] = page_vecs[k]
            ev_rows.append(np.arange(offsets[k], offsets[k + 1]))
        else:
            warns.append(f"p{i}: missing from parser output; kept as an empty page")
            out.append(PreparedPage(index=i, width=0.0, height=0.0, elements=[], boxes=[], captions={},
                                    embed_texts=[], warnings=["missing from parser output"]))
    rows = np.concatenate(ev_rows) if ev_rows else np.zeros(0, np.int64)
    return out, pv, el_vecs[rows], warns


def assemble(prepared: list[PreparedPage], page_vecs: np.ndarray, el_vecs: np.ndarray, *, source: DocumentSource,
             doc_id: str, edge_cfg: EdgeConfig | Mapping[str, Any] | None = None,
             dtype: str = "float32", meta: Mapping[str, Any] | None = None) -> EvidenceGraph:
    """Records, section paths, summaries and edges of a whole document."""
    ecfg = EdgeConfig.from_dict(edge_cfg)
    n_el_given = sum(len(p.elements) for p in prepared)
    if el_vecs.shape[0] != n_el_given or page_vecs.shape[0] != len(prepared):
        raise ValueError(f"vectors ({page_vecs.shape[0]} pages, {el_vecs.shape[0]} elements) do not match "
                         f"the document ({len(prepared)} pages, {n_el_given} elements)")
    prepared, page_vecs, el_vecs, fill_warns = _order_pages(prepared, page_vecs, el_vecs)
    flat: list[tuple[int, int, ParsedElement, BBox]] = []
    for p in prepared:
        for j, (e, b) in enumerate(zip(p.elements, p.boxes)):
            flat.append((p.index, j, e, b))
    _, paths = section_structure([f[2].type for f in flat], [f[2].heading_level for f in flat],
                                 [element_text(f[2]) for f in flat])
    elements: list[Element] = []
    pages: list[Page] = []
    order = 0
    for p in prepared:
        texts = [element_text(e) for e in p.elements]
        titles: list[str] = []
        first_par = ""
        for j, e in enumerate(p.elements):
            caption = " ".join(clean(texts[c]) for c in p.captions.get(j, ()))
            elements.append(Element(
                node_id=element_id(doc_id, p.index, j), page=p.index, index=j, type=e.type, bbox=p.boxes[j],
                text=e.text or "", summary=summarize_element(e.type, texts[j], e.table_markdown, caption),
                reading_order=order, section_path=paths[order],
                heading_level=int(e.heading_level) if e.type == "title" and e.heading_level is not None else None,
                table_markdown=e.table_markdown, ocr=bool(e.ocr),
            ))
            order += 1
            if e.type == "title":
                titles.append(texts[j])
            elif not first_par and e.type in ("paragraph", "list"):
                first_par = texts[j]
        page_text = p.text
        pages.append(Page(
            node_id=page_id(doc_id, p.index), index=p.index, width=p.width, height=p.height, text=page_text,
            summary=summarize_page(titles, first_par, fallback=page_text), header_text=p.header_text,
            footer_text=p.footer_text, image_only=p.image_only, n_elements=len(p.elements),
        ))
    has_vectors = page_vecs.ndim == 2 and page_vecs.shape[1] > 0
    vectors = np.concatenate([page_vecs, el_vecs]).astype(np.float32, copy=False) if has_vectors else None
    edges = build_edges(pages, elements, vectors, ecfg)
    page_warns = [f"p{p.index}: {w}" for p in prepared for w in p.warnings]
    m = dict(meta or {})
    m["warnings"] = list(m.get("warnings", [])) + fill_warns + page_warns
    m["edge_cfg"] = ecfg.to_dict()
    m["dropped_empty_elements"] = int(sum(p.dropped for p in prepared))
    m.setdefault("graph_version", GRAPH_VERSION)
    np_dtype = np.float16 if dtype == "float16" else np.float32
    return EvidenceGraph(
        doc_id=doc_id, source=source, pages=pages, elements=elements,
        edge_src=edges.src, edge_dst=edges.dst, edge_kind=edges.kind, edge_weight=edges.weight,
        edge_label=edges.label, page_vectors=page_vecs.astype(np_dtype), element_vectors=el_vecs.astype(np_dtype),
        meta=m,
    )


def build_from_parsed(parsed: ParsedDocument, source: DocumentSource | str | Path, doc_id: str, *,
                      encoder: Encoder | None | str = "default", edge_cfg: Mapping[str, Any] | None = None,
                      embed_cfg: Mapping[str, Any] | None = None, meta: Mapping[str, Any] | None = None,
                      ) -> EvidenceGraph:
    """Graph of a :class:`ParsedDocument` made by hand, by a parser or by the synthetic generator.

    ``encoder="default"`` uses the process-wide MiniLM; pass any object with
    ``name``, ``dim`` and ``encode(texts)`` (tests use a hashing encoder), or
    ``None`` for a graph with empty vectors and no semantic edges.
    No cache is involved.
    """
    t0 = time.perf_counter()
    ecfg = EdgeConfig.from_dict(edge_cfg)
    mcfg = EmbedConfig.from_dict(embed_cfg)
    src = _as_source(source)
    enc = _resolve_encoder(encoder)
    prepared = [prepare_page(p, mcfg, ecfg.caption_max_gap) for p in parsed.pages]
    page_vecs, el_vecs = embed_pages(prepared, enc, mcfg)
    m = {"parser": parsed.parser, "embed_model": getattr(enc, "name", None),
         "embed_precision": getattr(enc, "precision", None), "embed_cfg": mcfg.to_dict(),
         "warnings": list(parsed.warnings), "graph_version": GRAPH_VERSION}
    m.update(meta or {})
    g = assemble(prepared, page_vecs, el_vecs, source=src, doc_id=doc_id, edge_cfg=ecfg, dtype=mcfg.dtype, meta=m)
    g.meta.setdefault("build_seconds", round(time.perf_counter() - t0, 4))
    return g


# --- encoders and worker processes --------------------------------------------------


def _resolve_encoder(encoder: Encoder | None | str) -> Encoder | None:
    if isinstance(encoder, str):
        if encoder != "default":
            raise ValueError(f"encoder must be an Encoder, None or 'default', got {encoder!r}")
        from mage_gym.graph.embed import get_encoder

        return get_encoder()
    return encoder


def _encoder_name(encoder: Encoder | None | str) -> str:
    if isinstance(encoder, str):
        from mage_gym.graph.embed import TextEncoder  # no torch import: the class is not instantiated

        return TextEncoder.name
    return "none" if encoder is None else str(encoder.name)


def _as_source(source: DocumentSource | str | Path) -> DocumentSource:
    """Classify the path without opening the PDF.

    Opening is left to the parser (which raises the typed errors): importing
    PyMuPDF costs over a second here (it pulls in its ONNX layout model), and
    the cache-hit path must not pay that.
    """
    if isinstance(source, DocumentSource):
        return source
    from mage_gym.graph.sources import open_source

    return open_source(source, validate=False)


_WORKER_PARSERS: dict[str, Any] = {}
_POOL: "ProcessPoolExecutor | None" = None
_POOL_WORKERS = 0


def _worker_init(threads: int, load_encoder: bool) -> None:
    """Runs once in each worker: share the cores, load the encoder up front."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from mage_gym.graph.onnx_threads import cap_onnx_threads

    cap_onnx_threads(threads)  # the layout model and OCR would otherwise spin one thread per core each
    if load_encoder:
        import torch

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        from mage_gym.graph.embed import get_encoder

        get_encoder()


def _worker_parser(name: str, cfg: Mapping[str, Any]) -> Any:
    from mage_gym.graph.parsers import get_parser

    key = f"{name}:{json.dumps(dict(cfg), sort_keys=True, default=str)}"
    if key not in _WORKER_PARSERS:
        _WORKER_PARSERS[key] = get_parser(name, **dict(cfg))
    return _WORKER_PARSERS[key]


def parse_and_embed_chunk(source: DocumentSource, parser: str, parser_cfg: Mapping[str, Any],
                          pages: Sequence[int] | None, max_pages: int | None, embed_cfg: Mapping[str, Any],
                          caption_gap: float, encode: bool = True,
                          ) -> tuple[list[PreparedPage], list[str], np.ndarray, np.ndarray, dict[str, Any]]:
    """Worker task: parse a contiguous page range, prepare and embed it (plus stage timings and precision)."""
    mcfg = EmbedConfig.from_dict(embed_cfg)
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # truncation is reported through the returned warnings
        parsed = _worker_parser(parser, parser_cfg).parse(source, pages=pages, max_pages=max_pages)
    prepared = [prepare_page(p, mcfg, caption_gap) for p in parsed.pages]
    t1, c1 = time.perf_counter(), time.process_time()
    enc = _resolve_encoder("default") if encode else None
    page_vecs, el_vecs = embed_pages(prepared, enc, mcfg)
    t2, c2 = time.perf_counter(), time.process_time()
    timings = {"parse": t1 - t0, "embed": t2 - t1, "parse_cpu": c1 - c0, "embed_cpu": c2 - c1,
               "peak_rss_mib": _peak_rss_mib(), "embed_precision": getattr(enc, "precision", None)}
    return prepared, list(parsed.warnings), page_vecs, el_vecs, timings


def _peak_rss_mib() -> float:
    """Peak resident memory of this process (workers report theirs: they are not our children)."""
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    except (ImportError, OSError):  # pragma: no cover - non-POSIX
        return 0.0


def get_pool(workers: int) -> "ProcessPoolExecutor":
    """The process-wide worker pool (created on first use, resized on demand).

    Workers are started with ``forkserver`` (never ``fork``: a parent that
    already ran torch may hold OpenMP threads that a forked child deadlocks on).
    """
    global _POOL, _POOL_WORKERS
    if _POOL is not None and _POOL_WORKERS == workers:
        return _POOL
    shutdown_pool()
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    threads = max(1, (os.cpu_count() or 1) // workers)
    ctx = mp.get_context("forkserver")
    _POOL = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                initargs=(threads, True))
    _POOL_WORKERS = workers
    return _POOL


def warm_pool(workers: int) -> None:
    """Start every worker (each loads the encoder) before timing anything."""
    pool = get_pool(workers)
    futs = [pool.submit(time.sleep, 0.5) for _ in range(workers)]
    for f in futs:
        f.result()


def shutdown_pool() -> None:
    global _POOL, _POOL_WORKERS
    if _POOL is not None:
        _POOL.shutdown(wait=True, cancel_futures=True)
    _POOL, _POOL_WORKERS = None, 0


atexit.register(shutdown_pool)


def _chunks(n: int, workers: int, min_pages: int = 4, max_pages: int = 32) -> list[list[int]]:
    """Contiguous page ranges of decreasing size (guided scheduling).

    Each chunk is about ``1 / (2 * workers)`` of the pages still left, kept
    between ``min_pages`` and ``max_pages`` (the cap bounds a worker's memory
    on 500-page filings). Why decreasing: with equal chunks, the worker that
    draws the last one works alone while the other idles; small chunks at the
    end let both finish together (measured by ``experiments/perf_graph.py``),
    and large ones at the start keep the per-call overhead low.
    """
    out: list[list[int]] = []
    lo = 0
    while lo < n:
        size = min(max_pages, max(min_pages, math.ceil((n - lo) / (2 * workers))))
        out.append(list(range(lo, min(n, lo + size))))
        lo += size
    return out


# --- the public entry points ---------------------------------------------------------------


def _settings_key(src: DocumentSource, parser: str, parser_cfg: Mapping[str, Any], ecfg: EdgeConfig,
                  mcfg: EmbedConfig, encoder: Encoder | None | str, doc_id: str, max_pages: int | None,
                  digest: str) -> str:
    return cache_key(digest, parser, parser_cfg, ecfg.to_dict(), _encoder_name(encoder), GRAPH_VERSION,
                     extra={"doc_id": doc_id, "max_pages": max_pages, "embed_cfg": mcfg.to_dict(),
                            "source_kind": src.kind})


def _resolve(source: str | Path | DocumentSource, doc_id: str | None) -> tuple[DocumentSource, str, str]:
    from mage_gym.graph.sources import doc_id_for, file_digest

    src = _as_source(source)
    return src, doc_id or doc_id_for(src), file_digest(src)


def load_graph(source: str | Path | DocumentSource, parser: str = "layout", *, cache_dir: str | Path | None = None,
               max_pages: int | None = None, parser_cfg: Mapping[str, Any] | None = None,
               edge_cfg: Mapping[str, Any] | None = None, embed_cfg: Mapping[str, Any] | None = None,
               doc_id: str | None = None, encoder: Encoder | None | str = "default") -> EvidenceGraph:
    """The cached graph of ``source`` for these settings; never parses or embeds.

    Raises :class:`GraphNotBuiltError` (naming the command to build it) when
    there is no valid entry.
    """
    src, did, digest = _resolve(source, doc_id)
    key = _settings_key(src, parser, dict(parser_cfg or {}), EdgeConfig.from_dict(edge_cfg),
                        EmbedConfig.from_dict(embed_cfg), encoder, did, max_pages, digest)
    g = _load_complete(key, cache_dir)
    if g is None:
        raise GraphNotBuiltError(
            f"no cached graph for {src.path} (parser={parser}, max_pages={max_pages}); build it with "
            f"mage_gym.graph.build_graph(...) or `python experiments/build_graphs.py input={src.path}`")
    return _attach(g, src, key, hit=True)


def _attach(g: EvidenceGraph, src: DocumentSource, key: str, hit: bool) -> EvidenceGraph:
    """Point a (possibly cached) graph at the caller's copy of the file."""
    if g.source != src:
        g.source = src
    g.meta["cache_key"] = key
    g.meta["cache_hit"] = hit
    return g


def build_graph(source: str | Path | DocumentSource, parser: str = "layout", *, cache: bool = True,
                cache_dir: str | Path | None = None, max_pages: int | None = None, workers: int = 1,
                parser_cfg: Mapping[str, Any] | None = None, edge_cfg: Mapping[str, Any] | None = None,
                doc_id: str | None = None, embed_cfg: Mapping[str, Any] | None = None,
                encoder: Encoder | None | str = "default", progress: bool = True) -> EvidenceGraph:
    """Evidence graph of a PDF or page-image folder, from the cache when possible.

    ``workers > 1`` parses and embeds contiguous page chunks in a persistent
    process pool (each worker holds its own encoder; only the default encoder
    can be used there). Workers start with ``forkserver``, so a script that
    calls this with ``workers > 1`` needs the usual ``if __name__ ==
    "__main__":`` guard. Typed :mod:`mage_gym.graph.errors` are raised for bad
    input. ``meta["cache_hit"]`` says whether the graph came from the cache.
    ``progress`` shows tqdm bars for long builds (only on a terminal).
    """
    t0 = time.perf_counter()
    pcfg = dict(parser_cfg or {})
    ecfg = EdgeConfig.from_dict(edge_cfg)
    mcfg = EmbedConfig.from_dict(embed_cfg)
    if workers > 1 and encoder != "default":
        raise ValueError("workers > 1 needs the default encoder (a custom encoder cannot be sent to workers)")
    src, did, digest = _resolve(source, doc_id)
    key = _settings_key(src, parser, pcfg, ecfg, mcfg, encoder, did, max_pages, digest)
    if cache:
        g = _load_complete(key, cache_dir)
        if g is not None:
            return _attach(g, src, key, hit=True)

    from mage_gym.graph.sources import page_count

    if workers > 1:
        # counted in a worker: importing PyMuPDF here would cost the caller over a second
        n_total = get_pool(workers).submit(page_count, src).result()
    else:
        n_total = page_count(src)
    n = n_total if max_pages is None or max_pages < 0 else min(n_total, max_pages)
    doc_warnings: list[str] = []
    t1 = time.perf_counter()
    if workers > 1 and n > 1:
        prepared, doc_warnings, page_vecs, el_vecs, work = _parallel(src, parser, pcfg, n, max_pages, mcfg, ecfg,
                                                                     workers, progress)
    else:
        from mage_gym.graph.parsers import get_parser

        c1 = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parsed = get_parser(parser, **pcfg).parse(src, max_pages=max_pages)
        doc_warnings = list(parsed.warnings)
        prepared = [prepare_page(p, mcfg, ecfg.caption_max_gap) for p in parsed.pages]
        tp, cp = time.perf_counter(), time.process_time()
        enc = _resolve_encoder(encoder)
        page_vecs, el_vecs = embed_pages(prepared, enc, mcfg, progress=progress)
        work = {"parse": tp - t1, "embed": time.perf_counter() - tp, "parse_cpu": cp - c1,
                "embed_cpu": time.process_time() - cp, "embed_precision": getattr(enc, "precision", None)}
    meta = {
        "parser": parser, "parser_cfg": pcfg, "embed_model": _encoder_name(encoder), "embed_cfg": mcfg.to_dict(),
        # which precision computed the vectors (not in the cache key: precisions agree to cosine >= 0.96
        # and give the same retrieval recall, see mage_gym.graph.embed)
        "embed_precision": work.get("embed_precision"),
        "graph_version": GRAPH_VERSION, "digest": digest, "max_pages": max_pages, "n_pages_total": n_total,
        "workers": workers, "warnings": doc_warnings,
    }
    t2 = time.perf_counter()
    g = assemble(prepared, page_vecs, el_vecs, source=src, doc_id=did, edge_cfg=ecfg, dtype=mcfg.dtype, meta=meta)
    t3 = time.perf_counter()
    g.meta["build_seconds"] = round(t3 - t0, 4)
    # *_busy: wall time inside the stage summed over workers; *_cpu: CPU time (all threads) summed over
    # workers, which other jobs on the machine do not inflate; the rest is wall time of the caller
    g.meta["stage_seconds"] = {"open_and_key": round(t1 - t0, 4), "parse_and_embed_wall": round(t2 - t1, 4),
                               "parse_busy": round(work["parse"], 4), "embed_busy": round(work["embed"], 4),
                               "parse_cpu": round(work["parse_cpu"], 4), "embed_cpu": round(work["embed_cpu"], 4),
                               "assemble": round(t3 - t2, 4)}
    if "peak_rss_mib" in work:
        g.meta["worker_peak_rss_mib"] = round(work["peak_rss_mib"], 1)
    g.meta["cache_key"] = key
    failed = failed_pages(g)
    g.meta["failed_pages"] = failed
    if failed:
        # Not cached: the failure may be transient (out of memory, an install broken mid-run), and a
        # cached graph with empty pages would hide it from every later run.
        log.warning("%s: %d of %d pages failed to parse (first: %s); the graph is not cached",
                    src.path, len(failed), g.n_pages, next(w for w in g.meta["warnings"] if is_failure(w)))
    elif cache:
        save_graph(g, key, cache_dir)
    g.meta["cache_hit"] = False
    return g


def _load_complete(key: str, cache_dir: str | Path | None) -> EvidenceGraph | None:
    """The cached graph, unless it has failed pages (entries written before such graphs were refused)."""
    g = load_cached(key, cache_dir)
    failed = failed_pages(g) if g is not None else []
    if failed:
        log.warning("cached graph %s has failed pages %s; rebuilding", key[:12], failed[:5])
        return None
    return g


def failed_pages(g: EvidenceGraph) -> list[int]:
    """Indices of pages whose parse failed (their content is missing from the graph)."""
    out = set()
    for w in g.meta.get("warnings", []):
        if is_failure(w) and w.startswith("p") and w[1:2].isdigit():
            out.add(int(w[1:].split(":", 1)[0]))
    return sorted(out)


def _parallel(src: DocumentSource, parser: str, pcfg: dict, n: int, max_pages: int | None, mcfg: EmbedConfig,
              ecfg: EdgeConfig, workers: int, progress: bool = False,
              ) -> tuple[list[PreparedPage], list[str], np.ndarray, np.ndarray, dict[str, Any]]:
    from concurrent.futures import wait
    from concurrent.futures.process import BrokenProcessPool

    from tqdm import tqdm

    pool = get_pool(workers)
    futs: list[Future] = [
        pool.submit(parse_and_embed_chunk, src, parser, pcfg, chunk, max_pages, mcfg.to_dict(), ecfg.caption_max_gap)
        for chunk in _chunks(n, workers)
    ]
    try:
        with tqdm(total=n, desc=f"parse+embed {Path(src.path).name[:30]}", unit="page", leave=False,
                  disable=None if progress and n >= 20 else True) as bar:
            pending = set(futs)
            while pending:
                done, pending = wait(pending, return_when="FIRST_COMPLETED")
                for f in done:
                    if f.exception() is None:
                        bar.update(len(f.result()[0]))
        results = [f.result() for f in futs]
    except BrokenProcessPool as err:
        shutdown_pool()
        raise RuntimeError(
            f"a graph worker process died while building {src.path}: out of memory, or the calling script "
            "starts workers at import time (worker processes re-import the main script, so a script calling "
            "build_graph(workers>1) needs an `if __name__ == '__main__':` guard)") from err
    prepared: list[PreparedPage] = []
    doc_warnings: list[str] = []
    pv: list[np.ndarray] = []
    ev: list[np.ndarray] = []
    work: dict[str, Any] = {"parse": 0.0, "embed": 0.0, "parse_cpu": 0.0, "embed_cpu": 0.0, "peak_rss_mib": 0.0}
    for p, w, a, b, t in results:
        prepared.extend(p)
        doc_warnings.extend(x for x in w if x not in doc_warnings)
        pv.append(a)
        ev.append(b)
        for k in work:
            work[k] = max(work[k], t[k]) if k == "peak_rss_mib" else work[k] + t[k]
    work["embed_precision"] = results[0][4].get("embed_precision")  # workers resolve it the same way
    return prepared, doc_warnings, np.concatenate(pv), np.concatenate(ev), work
