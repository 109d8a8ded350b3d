"""Per-graph arrays the step loop reads: merged adjacency, static node features, and what is derived from them.

Why: the environment must take thousands of steps per second on a 500-page
document, so nothing in a step may walk Python records. Everything that depends
only on the graph (not on the question or the state) is computed once per graph
per process and shared, read-only, by every environment in that process: the
index itself (one bounded cache, :func:`graph_index`), and whatever other
modules derive from the graph alone (the state's update tables, the question
cues' node types and page labels, the page-only search view, the renderer's
fragment memo), which hangs on the index (:meth:`GraphIndex.derived`) and so
lives and dies with it instead of sitting in module globals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import numpy as np

from mage_gym.cache import Cache
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import EDGE_KINDS, NODE_TYPES

N_KINDS = len(EDGE_KINDS)
#: Static per-node feature names (the first columns of the observation's node table).
STATIC_FEATURES: tuple[str, ...] = tuple(f"type_{t}" for t in NODE_TYPES) + (
    "page_position", "x0", "y0", "x1", "y1", "area", "section_depth", "heading_level",
    "content_size", "has_table", "ocr_or_image_only", "page_density",
)
_MAX_SECTION_DEPTH = 6.0
_CONTENT_NORM = math.log1p(4000.0)
_DENSITY_NORM = 50.0
T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class GraphIndex:
    """Read-only numpy view of one :class:`EvidenceGraph` for the environment."""

    graph: EvidenceGraph
    n_pages: int
    n_nodes: int
    node_page: np.ndarray  # intp [n] (intp everywhere: numpy fancy indexing is fastest with it)
    is_page: np.ndarray  # bool [n]
    page_lo: np.ndarray  # intp [n_pages]: first element node of each page
    page_hi: np.ndarray  # intp [n_pages]: one past the last element node
    nbr_ptr: np.ndarray  # int64 [n+1]: merged CSR over all five kinds
    nbr: np.ndarray  # intp [nnz]
    nbr_kind: np.ndarray  # int8 [nnz]
    nbr_flat: np.ndarray  # int64 [nnz] = nbr * N_KINDS + kind (index into a flat [n, 5] table)
    static: np.ndarray  # float32 [n, len(STATIC_FEATURES)]
    node_ids: list[str]
    vectors: np.ndarray  # float32 [n, dim]
    #: per-graph data other modules derived from this index, by name (see :meth:`derived`); never pickled
    memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def derived(self, name: str, build: Callable[["GraphIndex"], T]) -> T:
        """``build(self)``, computed once per index: data that depends on the graph alone.

        Why on the index: such data is valid exactly as long as the index, and
        the index is what the env's one per-graph cache bounds; a module-level
        table keyed by the index would be a second, hidden cache. Two threads
        may both build a missing value; the first stored is the one kept.
        """
        try:
            return self.memo[name]
        except KeyError:
            return self.memo.setdefault(name, build(self))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (and deep-copied) without its derived data: it is rebuilt on first use."""
        return {**self.__dict__, "memo": {}}

    @property
    def doc_id(self) -> str:
        return self.graph.doc_id

    def text(self, i: int) -> str:
        node = self.graph.pages[i] if i < self.n_pages else self.graph.elements[i - self.n_pages]
        return node.text

    def node_type(self, i: int) -> str:
        return "page" if i < self.n_pages else self.graph.elements[i - self.n_pages].type

    def elements_of(self, page: int) -> range:
        return range(int(self.page_lo[page]), int(self.page_hi[page]))


def _merged_csr(graph: EvidenceGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = graph.n_nodes
    srcs, dsts, kinds = [], [], []
    for k, name in enumerate(EDGE_KINDS):
        indptr, idx = graph.adjacency[name]
        deg = np.diff(indptr)
        srcs.append(np.repeat(np.arange(n, dtype=np.int64), deg))
        dsts.append(idx.astype(np.int32, copy=False))
        kinds.append(np.full(idx.shape[0], k, dtype=np.int8))
    src = np.concatenate(srcs) if srcs else np.zeros(0, np.int64)
    dst = np.concatenate(dsts) if dsts else np.zeros(0, np.int32)
    kind = np.concatenate(kinds) if kinds else np.zeros(0, np.int8)
    keep = src != dst  # a self-loop would make a node its own frontier
    src, dst, kind = src[keep], dst[keep], kind[keep]
    order = np.lexsort((kind, dst, src))
    src, dst, kind = src[order], dst[order], kind[order]
    # Unique (src, dst, kind) triples: the state then updates relation counts with
    # plain fancy-index increments (no np.add.at), which needs distinct targets.
    if len(src) > 1:
        first = np.ones(len(src), dtype=bool)
        first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1]) | (kind[1:] != kind[:-1])
        src, dst, kind = src[first], dst[first], kind[first]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    return ptr, dst.astype(np.intp), kind.astype(np.int8)


def _static_features(graph: EvidenceGraph, node_page: np.ndarray) -> np.ndarray:
    n, n_pages = graph.n_nodes, graph.n_pages
    f = np.zeros((n, len(STATIC_FEATURES)), dtype=np.float32)
    type_col = {t: i for i, t in enumerate(NODE_TYPES)}
    col = {name: i for i, name in enumerate(STATIC_FEATURES)}
    base = len(NODE_TYPES)
    denom = max(1, n_pages - 1)
    for p in graph.pages:
        i = p.index
        f[i, type_col["page"]] = 1.0
        f[i, col["page_position"]] = p.index / denom
        f[i, base + 1 : base + 5] = (0.0, 0.0, 1.0, 1.0)
        f[i, col["area"]] = 1.0
        f[i, col["content_size"]] = min(1.0, math.log1p(len(p.text)) / _CONTENT_NORM)
        f[i, col["ocr_or_image_only"]] = float(p.image_only)
    for j, e in enumerate(graph.elements):
        i = n_pages + j
        f[i, type_col.get(e.type, type_col["paragraph"])] = 1.0
        f[i, col["page_position"]] = e.page / denom
        f[i, base + 1 : base + 5] = np.clip(np.asarray(e.bbox, dtype=np.float32), 0.0, 1.0)
        f[i, col["area"]] = min(1.0, max(0.0, e.area))
        f[i, col["section_depth"]] = min(1.0, len(e.section_path) / _MAX_SECTION_DEPTH)
        f[i, col["heading_level"]] = min(1.0, (e.heading_level or 0) / _MAX_SECTION_DEPTH)
        size = len(e.table_markdown) if e.table_markdown else len(e.text)
        f[i, col["content_size"]] = min(1.0, math.log1p(size) / _CONTENT_NORM)
        f[i, col["has_table"]] = float(bool(e.table_markdown))
        f[i, col["ocr_or_image_only"]] = float(e.ocr)
    counts = np.bincount(node_page[n_pages:], minlength=n_pages).astype(np.float32) if n_pages else np.zeros(0)
    if n_pages:
        f[:, col["page_density"]] = np.minimum(1.0, counts[node_page] / _DENSITY_NORM)
    return f


def build_graph_index(graph: EvidenceGraph) -> GraphIndex:
    """Compute the index of ``graph`` (use :func:`graph_index` to share it)."""
    if graph.n_pages == 0:
        raise ValueError(f"graph {graph.doc_id!r} has no pages; an episode needs at least one")
    n_pages, n = graph.n_pages, graph.n_nodes
    node_page = graph.node_page.astype(np.intp)
    if n > n_pages and np.any(np.diff(node_page[n_pages:]) < 0):
        raise ValueError(f"graph {graph.doc_id!r}: elements are not grouped by page in reading order")
    is_page = np.zeros(n, dtype=bool)
    is_page[:n_pages] = True
    el_pages = node_page[n_pages:]
    pages = np.arange(n_pages)
    page_lo = (np.searchsorted(el_pages, pages, side="left") + n_pages).astype(np.intp)
    page_hi = (np.searchsorted(el_pages, pages, side="right") + n_pages).astype(np.intp)
    ptr, nbr, kind = _merged_csr(graph)
    vectors = graph.vectors
    return GraphIndex(
        graph=graph, n_pages=n_pages, n_nodes=n, node_page=node_page, is_page=is_page,
        page_lo=page_lo, page_hi=page_hi, nbr_ptr=ptr, nbr=nbr, nbr_kind=kind,
        nbr_flat=nbr * N_KINDS + kind.astype(np.intp), static=_static_features(graph, node_page),
        node_ids=graph.node_ids, vectors=np.asarray(vectors, dtype=np.float32),
    )


#: The env's per-graph index (it holds its graph, so the bound is what caps memory);
#: :func:`mage_gym.cache.reserve_graphs` raises it for a training env that cycles through its corpus.
_INDEXES: Cache[GraphIndex] = Cache("env.graph_index", 8, per_graph=True)


def graph_index(graph: EvidenceGraph) -> GraphIndex:
    """The shared index of ``graph`` in this process (built on first use, kept while cached)."""
    return _INDEXES.get(graph, None, lambda: build_graph_index(graph))
