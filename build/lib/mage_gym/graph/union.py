"""The union graph of several documents: one :class:`EvidenceGraph` for a cross-document episode.

Why a union and not a new graph type: the environment, the retrievers and the
renderer all work on an ``EvidenceGraph`` (pages first, index == page number,
elements in reading order). A question over documents A and B is played on a
graph whose pages are A's pages then B's, whose elements are A's then B's, so
every one of those invariants still holds and nothing downstream needs a
cross-document code path. What changes is bookkeeping, kept here:

* union page ``p`` is page :meth:`UnionGraph.local_page` of document
  :attr:`UnionGraph.doc_of_page` ``[p]``; ``Page.index`` and ``Element.page``
  are re-numbered to union pages, ``Element.reading_order`` is offset, node ids
  are unchanged (they already carry the document prefix, ``A:p3:e2``);
* each member's edges are kept with their node indices shifted, and
  *cross-document* semantic edges (label ``similar_xdoc``) join pages to pages
  and elements to elements of different documents with the within-document
  rules (:func:`~mage_gym.graph.edges.knn_pairs`: k nearest, ``min_sim``,
  rounded-similarity ties) restricted to other documents' nodes;
* pixels come from the right document: :meth:`UnionGraph.page_image` and
  :meth:`UnionGraph.crop` render the member's source at its local page;
* gold is resolved per document on the member graph (every single-document
  rule applies unchanged) and mapped with :meth:`UnionGraph.remap_gold`.

Unions are cached per document set: in memory (LRU keyed by the members'
digests and the edge settings; a hit returns the same object, so the per-graph
indexes of retrievers and the env stay warm) and, when every member came from
the on-disk graph store, in that store under a key made of the members' keys.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from mage_gym.graph.edges import EdgeConfig, knn_pairs
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import EDGE_KINDS, DocumentSource, Element, Page

if TYPE_CHECKING:  # pragma: no cover
    from PIL import Image

    from mage_gym.data.gold import GoldEvidence

log = logging.getLogger(__name__)

#: Bump when the union's construction changes (its disk entries then miss).
UNION_VERSION = "1"
#: Label of cross-document semantic edges (kind ``semantic``).
XDOC_LABEL = "similar_xdoc"
#: Joins member doc ids into the union's ``doc_id`` (what ``<evidence doc=...>`` shows).
DOC_SEPARATOR = "+"
_SEMANTIC = EDGE_KINDS.index("semantic")


@dataclass(frozen=True)
class DocumentSpan:
    """Where one member document sits in the union.

    Its pages are union pages ``page_offset .. page_offset + n_pages - 1``;
    its elements are ``union.elements[element_offset : element_offset + n_elements]``
    (node indices ``union.n_pages + element_offset + j``).
    """

    doc_id: str
    source: DocumentSource
    page_offset: int
    n_pages: int
    element_offset: int
    n_elements: int

    def to_dict(self) -> dict[str, Any]:
        s = self.source
        return {"doc_id": self.doc_id, "source": {"kind": s.kind, "path": s.path, "page_files": list(s.page_files)},
                "page_offset": self.page_offset, "n_pages": self.n_pages, "element_offset": self.element_offset,
                "n_elements": self.n_elements}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DocumentSpan":
        s = d["source"]
        return cls(doc_id=str(d["doc_id"]),
                   source=DocumentSource(kind=s["kind"], path=s["path"], page_files=tuple(s.get("page_files", ()))),
                   page_offset=int(d["page_offset"]), n_pages=int(d["n_pages"]),
                   element_offset=int(d["element_offset"]), n_elements=int(d["n_elements"]))


@dataclass
class UnionGraph(EvidenceGraph):
    """An :class:`EvidenceGraph` over several documents, with the map back to each of them."""

    documents: tuple[DocumentSpan, ...] = ()

    # --- document lookup ---------------------------------------------------------

    @property
    def n_documents(self) -> int:
        return len(self.documents)

    @property
    def doc_ids(self) -> tuple[str, ...]:
        return tuple(d.doc_id for d in self.documents)

    @cached_property
    def doc_of_page(self) -> np.ndarray:
        """int32 [n_pages]: the document (index into :attr:`documents`) of every union page."""
        out = np.empty(self.n_pages, dtype=np.int32)
        for i, d in enumerate(self.documents):
            out[d.page_offset: d.page_offset + d.n_pages] = i
        return out

    @cached_property
    def doc_of_node(self) -> np.ndarray:
        """int32 [n_nodes]: the document of every node (pages and elements)."""
        return self.doc_of_page[self.node_page]

    def doc_index(self, doc: int | str) -> int:
        """Index into :attr:`documents` of a document given by index or id."""
        if isinstance(doc, (int, np.integer)):
            if not 0 <= int(doc) < len(self.documents):
                raise IndexError(f"document {doc} out of range 0..{len(self.documents) - 1}")
            return int(doc)
        for i, d in enumerate(self.documents):
            if d.doc_id == doc:
                return i
        raise KeyError(f"document {doc!r} is not in this union {self.doc_ids}")

    def span(self, doc: int | str) -> DocumentSpan:
        return self.documents[self.doc_index(doc)]

    def local_page(self, page: int) -> int:
        """The page number, within its own document, of union page ``page``."""
        return int(page) - self.documents[int(self.doc_of_page[int(page)])].page_offset

    def union_page(self, doc: int | str, local_page: int) -> int:
        """The union page of a document's own page number."""
        d = self.span(doc)
        if not 0 <= int(local_page) < d.n_pages:
            raise IndexError(f"page {local_page} out of range for {d.doc_id!r} ({d.n_pages} pages)")
        return d.page_offset + int(local_page)

    def page_label(self, page: int) -> tuple[int, str | None]:
        """(1-based page number within its document, its doc id) for people; doc id None for one document."""
        if len(self.documents) <= 1:
            return int(page) + 1, None
        d = self.documents[int(self.doc_of_page[int(page)])]
        return int(page) - d.page_offset + 1, d.doc_id

    def node_map(self, doc: int | str) -> np.ndarray:
        """intp [member n_nodes]: union node index of each node index of the document's own graph."""
        d = self.span(doc)
        return np.concatenate([np.arange(d.page_offset, d.page_offset + d.n_pages, dtype=np.intp),
                               np.arange(d.n_elements, dtype=np.intp) + self.n_pages + d.element_offset])

    # --- gold ------------------------------------------------------------------

    def remap_gold(self, doc: int | str, gold: "GoldEvidence") -> "GoldEvidence":
        """A document's gold, resolved on its own graph, moved onto union node indices and page numbers."""
        from mage_gym.data.gold import GoldEvidence, assemble_gold

        if not gold.items:
            return GoldEvidence()
        d = self.span(doc)
        nmap = self.node_map(doc)
        n_member = d.n_pages + d.n_elements
        items = []
        for nodes, page, is_page in zip(gold.items, gold.item_pages, gold.item_is_page):
            if any(not 0 <= int(v) < n_member for v in nodes):
                raise ValueError(f"gold node out of range for {d.doc_id!r} ({n_member} nodes): {nodes}")
            items.append((tuple(int(nmap[v]) for v in nodes), d.page_offset + int(page), bool(is_page)))
        return assemble_gold(items)

    def merge_gold(self, golds: Sequence["GoldEvidence"]) -> "GoldEvidence":
        """One gold from several golds already on this union (e.g. each document's, from :meth:`remap_gold`)."""
        from mage_gym.data.gold import assemble_gold

        return assemble_gold((nodes, page, is_page) for g in golds
                             for nodes, page, is_page in zip(g.items, g.item_pages, g.item_is_page))

    # --- pixels: from the member's source at its local page ------------------------

    def page_image(self, page: int, dpi: int = 72, max_side: int | None = None) -> "Image.Image":
        from mage_gym.graph.images import render_page

        d = self.documents[int(self.doc_of_page[int(page)])]
        return render_page(d.source, int(page) - d.page_offset, dpi=dpi, max_side=max_side)

    def crop(self, ref: str | int, dpi: int = 144, pad: float = 0.01) -> "Image.Image":
        from mage_gym.graph.images import render_region

        n = self.node(ref)
        if isinstance(n, Page):
            return self.page_image(n.index, dpi=dpi)
        d = self.documents[int(self.doc_of_page[n.page])]
        return render_region(d.source, n.page - d.page_offset, n.bbox, dpi=dpi, pad=pad)

    def summary(self) -> str:
        docs = ", ".join(f"{d.doc_id} ({d.n_pages} pages)" for d in self.documents)
        xdoc = int(sum(1 for lab in self.edge_label if lab == XDOC_LABEL))
        return super().summary() + f"\n  union of {len(self.documents)} documents: {docs}; cross-document edges: {xdoc}"


def page_label(graph: EvidenceGraph, page: int) -> tuple[int, str | None]:
    """(1-based page number people read, doc id or None): the doc only for a union of several documents.

    Why a function: the renderer and the text view call it on any graph, so
    a single-document graph's output stays byte-identical.
    """
    if isinstance(graph, UnionGraph):
        return graph.page_label(page)
    return int(page) + 1, None


# --- construction ----------------------------------------------------------------------


def _copy_record(rec: Any, **changes: Any) -> Any:
    """A frozen record with some fields changed, without its __init__ (thousands per union)."""
    new = object.__new__(type(rec))
    new.__dict__.update(rec.__dict__)
    new.__dict__.update(changes)
    return new


def _edge_cfg(graphs: Sequence[EvidenceGraph], edge_cfg: EdgeConfig | Mapping[str, Any] | None) -> EdgeConfig:
    """The given settings, else the members' own (when they agree), else the defaults."""
    if edge_cfg is not None:
        return EdgeConfig.from_dict(edge_cfg)
    cfgs = [g.meta.get("edge_cfg") for g in graphs]
    if cfgs and all(isinstance(c, Mapping) for c in cfgs) and all(dict(c) == dict(cfgs[0]) for c in cfgs):
        return EdgeConfig.from_dict(dict(cfgs[0]))
    return EdgeConfig()


def _check_members(graphs: Sequence[EvidenceGraph]) -> None:
    if not graphs:
        raise ValueError("a union needs at least one graph")
    for g in graphs:
        if not isinstance(g, EvidenceGraph):
            raise TypeError(f"union members must be EvidenceGraphs, got {type(g).__name__}")
        if isinstance(g, UnionGraph) and len(g.documents) > 1:
            raise ValueError(f"{g.doc_id!r} is already a union of several documents; pass its members instead")
    ids = [g.doc_id for g in graphs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate documents in a union: {ids} (node ids would collide)")
    dims = {int(g.page_vectors.shape[1]) if g.page_vectors.ndim == 2 else 0 for g in graphs}
    if len(dims) > 1:
        raise ValueError(f"members have embeddings of different sizes {sorted(dims)}; build them with one encoder")
    models = {g.meta.get("embed_model") for g in graphs} - {None}
    if len(models) > 1:
        raise ValueError(f"members were embedded with different encoders {sorted(models)}: their vectors "
                         f"(and cross-document edges) would not be comparable")


def _cross_edges(vectors: np.ndarray, groups: np.ndarray, offset: int, k: int, cfg: EdgeConfig
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cross-document semantic pairs among ``vectors`` (node indices ``offset + row``)."""
    if len(np.unique(groups)) < 2:
        e = np.zeros(0, dtype=np.int64)
        return e, e, np.zeros(0, dtype=np.float32)
    i, j, sim = knn_pairs(vectors, k, cfg.semantic_min_sim, cfg.semantic_block, groups=groups)
    return i + offset, j + offset, sim


def build_union(graphs: Sequence[EvidenceGraph], edge_cfg: EdgeConfig | Mapping[str, Any] | None = None,
                digests: Sequence[str] | None = None) -> UnionGraph:
    """The union of ``graphs`` (no caching: see :func:`union_graph`)."""
    graphs = list(graphs)
    _check_members(graphs)
    cfg = _edge_cfg(graphs, edge_cfg)
    digests = list(digests) if digests is not None else [graph_digest(g) for g in graphs]
    n_pages = sum(g.n_pages for g in graphs)
    spans: list[DocumentSpan] = []
    pages: list[Page] = []
    elements: list[Element] = []
    srcs, dsts, kinds, weights, labels = [], [], [], [], []
    p_off = e_off = ro_off = 0
    for g in graphs:
        spans.append(DocumentSpan(g.doc_id, g.source, p_off, g.n_pages, e_off, g.n_elements))
        if p_off == 0 and ro_off == 0:  # the first document keeps its numbering: share its records
            pages.extend(g.pages)
            elements.extend(g.elements)
        else:
            pages.extend(_copy_record(p, index=p.index + p_off) for p in g.pages)
            elements.extend(_copy_record(e, page=e.page + p_off, reading_order=e.reading_order + ro_off)
                            for e in g.elements)
        # member node v -> union node: pages shift by p_off, elements move behind all union pages
        shift = np.where(np.arange(g.n_nodes) < g.n_pages, p_off, n_pages - g.n_pages + e_off).astype(np.int64)
        srcs.append((g.edge_src.astype(np.int64) + shift[g.edge_src]).astype(np.int32))
        dsts.append((g.edge_dst.astype(np.int64) + shift[g.edge_dst]).astype(np.int32))
        kinds.append(g.edge_kind.astype(np.int8, copy=False))
        weights.append(g.edge_weight.astype(np.float32, copy=False))
        labels.extend(g.edge_label)
        p_off += g.n_pages
        e_off += g.n_elements
        ro_off += (max(e.reading_order for e in g.elements) + 1) if g.elements else 0

    dtype = np.result_type(*[g.page_vectors.dtype for g in graphs], *[g.element_vectors.dtype for g in graphs])
    page_vectors = np.concatenate([g.page_vectors for g in graphs]).astype(dtype, copy=False)
    element_vectors = np.concatenate([g.element_vectors for g in graphs]).astype(dtype, copy=False)

    n_cross = {"pages": 0, "elements": 0}
    if len(graphs) > 1 and page_vectors.ndim == 2 and page_vectors.shape[1] > 0:
        page_groups = np.repeat(np.arange(len(graphs)), [g.n_pages for g in graphs])
        el_groups = np.repeat(np.arange(len(graphs)), [g.n_elements for g in graphs])
        for name, vecs, groups, offset, k in (
            ("elements", element_vectors, el_groups, n_pages, cfg.semantic_k_elements),
            ("pages", page_vectors, page_groups, 0, cfg.semantic_k_pages),
        ):
            s, d, sim = _cross_edges(vecs, groups, offset, k, cfg)
            n_cross[name] = int(s.shape[0])
            srcs.append(s.astype(np.int32))
            dsts.append(d.astype(np.int32))
            kinds.append(np.full(s.shape[0], _SEMANTIC, dtype=np.int8))
            weights.append(sim.astype(np.float32))
            labels.extend([XDOC_LABEL] * int(s.shape[0]))

    first = graphs[0].meta
    meta: dict[str, Any] = {
        "parser": first.get("parser") if all(g.meta.get("parser") == first.get("parser") for g in graphs) else "mixed",
        "embed_model": first.get("embed_model"),
        "edge_cfg": cfg.to_dict(),
        "union": {
            "version": UNION_VERSION,
            "documents": [s.to_dict() for s in spans],
            "digests": digests,
            "member_keys": [g.meta.get("cache_key") for g in graphs],  # graph-store keys (None: not from the store)
            "cross_edges": n_cross,
        },
    }
    if len(graphs) == 1:
        doc_id, source = graphs[0].doc_id, graphs[0].source
        meta = {**graphs[0].meta, "union": meta["union"]}
    else:
        doc_id = DOC_SEPARATOR.join(g.doc_id for g in graphs)
        source = DocumentSource(kind=graphs[0].source.kind, path=" + ".join(g.source.path for g in graphs))
    return UnionGraph(
        doc_id=doc_id, source=source, pages=pages, elements=elements,
        edge_src=np.concatenate(srcs), edge_dst=np.concatenate(dsts), edge_kind=np.concatenate(kinds),
        edge_weight=np.concatenate(weights), edge_label=labels,
        page_vectors=page_vectors, element_vectors=element_vectors, meta=meta, documents=tuple(spans),
    )


# --- caching ---------------------------------------------------------------------------


def _content_digest(graph: EvidenceGraph) -> str:
    """sha256 of what a union takes from a graph: records (ids, texts, types, boxes), edges, vectors.

    The graph-store key is included when the graph has one, but never trusted
    alone: a modified copy (``dataclasses.replace``) keeps its original's meta.
    """
    h = hashlib.sha256()
    head = (graph.meta.get("cache_key", ""), graph.doc_id, graph.n_pages, graph.n_elements)
    h.update("\x1e".join(map(str, head)).encode())
    for p in graph.pages:
        h.update(f"{p.node_id}\x1f{p.width}\x1f{p.height}\x1f{p.summary}\x1f{p.text}\x1e".encode())
    for e in graph.elements:
        h.update(f"\x1e{e.node_id}\x1f{e.type}\x1f{e.bbox}\x1f{e.summary}\x1f{e.text}\x1f{e.table_markdown}".encode())
    for arr in (graph.edge_src, graph.edge_dst, graph.edge_kind, graph.edge_weight,
                graph.page_vectors, graph.element_vectors):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update("\x1f".join(graph.edge_label).encode())
    return h.hexdigest()


_DIGESTS = None


def graph_digest(graph: EvidenceGraph) -> str:
    """A graph's identity for the union caches: a hash of its content, memoised per graph object."""
    global _DIGESTS
    if _DIGESTS is None:
        from mage_gym.retrieval.cache import GraphIndexCache

        _DIGESTS = GraphIndexCache(max_graphs=64)
    return _DIGESTS.get(graph, _content_digest)


def union_key(digests: Sequence[str], cfg: EdgeConfig) -> str:
    """sha256 of the member digests (in order), the edge settings and the union/graph versions."""
    from mage_gym.graph.store import GRAPH_VERSION

    payload = {"union": UNION_VERSION, "graph_version": GRAPH_VERSION, "members": list(digests),
               "edge_cfg": cfg.to_dict()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class _UnionCache:
    """LRU of unions by :func:`union_key` (thread-safe; a hit returns the same object)."""

    def __init__(self, max_unions: int = 8) -> None:
        self.max_unions = max_unions
        self._items: OrderedDict[str, UnionGraph] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> UnionGraph | None:
        with self._lock:
            g = self._items.get(key)
            if g is not None:
                self._items.move_to_end(key)
            return g

    def put(self, key: str, graph: UnionGraph) -> UnionGraph:
        with self._lock:
            have = self._items.get(key)
            if have is not None:  # another thread built it first: keep one object
                return have
            self._items[key] = graph
            while len(self._items) > self.max_unions:
                self._items.popitem(last=False)
            return graph

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_CACHE = _UnionCache()


def clear_union_cache() -> None:
    """Forget the in-memory unions (tests and benchmarks measuring a cold build)."""
    _CACHE.clear()


def _from_store(g: EvidenceGraph, members: Sequence[EvidenceGraph]) -> UnionGraph | None:
    """A stored union as a UnionGraph, with the members' current sources (files may have moved)."""
    info = g.meta.get("union") or {}
    try:
        spans = [DocumentSpan.from_dict(d) for d in info["documents"]]
    except (KeyError, TypeError, ValueError):
        return None
    if [s.doc_id for s in spans] != [m.doc_id for m in members] or sum(s.n_pages for s in spans) != g.n_pages:
        return None
    spans = [DocumentSpan(s.doc_id, m.source, s.page_offset, s.n_pages, s.element_offset, s.n_elements)
             for s, m in zip(spans, members)]
    source = DocumentSource(kind=members[0].source.kind, path=" + ".join(m.source.path for m in members))
    fields_ = {f: getattr(g, f) for f in ("doc_id", "pages", "elements", "edge_src", "edge_dst", "edge_kind",
                                          "edge_weight", "edge_label", "page_vectors", "element_vectors", "meta")}
    return UnionGraph(source=source, documents=tuple(spans), **fields_)


def union_graph(graphs: Sequence[EvidenceGraph], edge_cfg: EdgeConfig | Mapping[str, Any] | None = None, *,
                cache: bool = True, disk: bool | None = None, cache_dir: str | Path | None = None) -> UnionGraph:
    """The union graph of ``graphs`` (in the given order), cached per document set.

    ``edge_cfg``: semantic settings for the cross-document edges (default: the
    members' own edge settings). ``cache``: use the in-memory LRU (a hit
    returns the same object). ``disk``: also use the graph store (default:
    when every member carries a store key, i.e. came from ``build_graph``);
    ``cache_dir``: the store's directory (default the project cache).

    One graph gives a one-document union that shares its records and renders
    byte-identically.
    """
    graphs = list(graphs)
    _check_members(graphs)
    cfg = _edge_cfg(graphs, edge_cfg)
    digests = [graph_digest(g) for g in graphs]
    key = union_key(digests, cfg)
    if cache:
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
    # graphs from the store (and complete: a graph with failed pages is never stored) are worth storing with
    stored = all(isinstance(g.meta.get("cache_key"), str) and not g.meta.get("failed_pages") for g in graphs)
    use_disk = (stored if disk is None else bool(disk)) and len(graphs) > 1
    union = None
    if use_disk:
        from mage_gym.graph.store import load_cached

        loaded = load_cached(key, cache_dir)
        union = _from_store(loaded, graphs) if loaded is not None else None
        if union is not None:
            union.meta["cache_hit"] = True
    if union is None:
        union = build_union(graphs, cfg, digests)
        if use_disk:
            from mage_gym.graph.store import save_graph

            union.meta["cache_key"] = key
            try:
                save_graph(union, key, cache_dir)
            except OSError as err:  # a read-only cache must not stop an episode
                log.warning("could not store union %s: %s", key[:12], err)
            union.meta["cache_hit"] = False
    if use_disk:
        union.meta["cache_key"] = key
    return _CACHE.put(key, union) if cache else union


__all__ = ["DOC_SEPARATOR", "DocumentSpan", "UNION_VERSION", "UnionGraph", "XDOC_LABEL", "build_union",
           "clear_union_cache", "graph_digest", "page_label", "union_graph", "union_key"]
