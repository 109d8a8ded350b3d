"""The in-memory evidence graph of one document.

Storage is columnar on purpose: edges are three integer arrays (source index,
target index, kind index) plus weights, and embeddings are one float matrix, so
a cached graph loads in milliseconds and the environment can build per-kind
adjacency (CSR) once and index it with numpy in the step loop. Record objects
(:class:`Edge`, networkx graphs) are produced on demand for people and tools.

Node indices: ``0 .. n_pages-1`` are pages (index == page number), then
``n_pages .. n_nodes-1`` are elements in document reading order.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from mage_gym.graph.schema import EDGE_KINDS, DocumentSource, Edge, Element, Page

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx
    from PIL import Image


@dataclass
class EvidenceGraph:
    doc_id: str
    source: DocumentSource
    pages: list[Page]
    elements: list[Element]
    edge_src: np.ndarray  # int32 [n_edges] node indices
    edge_dst: np.ndarray  # int32 [n_edges]
    edge_kind: np.ndarray  # int8 [n_edges] index into EDGE_KINDS
    edge_weight: np.ndarray  # float32 [n_edges]
    edge_label: list[str]  # [n_edges]
    page_vectors: np.ndarray  # float32/float16 [n_pages, dim], L2-normalised
    element_vectors: np.ndarray  # [n_elements, dim], L2-normalised
    meta: dict[str, Any] = field(default_factory=dict)

    # --- sizes and lookup ----------------------------------------------------

    @property
    def n_pages(self) -> int:
        return len(self.pages)

    @property
    def n_elements(self) -> int:
        return len(self.elements)

    @property
    def n_nodes(self) -> int:
        return self.n_pages + self.n_elements

    @property
    def n_edges(self) -> int:
        return int(self.edge_src.shape[0])

    @cached_property
    def node_ids(self) -> list[str]:
        return [p.node_id for p in self.pages] + [e.node_id for e in self.elements]

    @cached_property
    def index_of(self) -> dict[str, int]:
        return {nid: i for i, nid in enumerate(self.node_ids)}

    def node(self, ref: str | int) -> Page | Element:
        i = self.index_of[ref] if isinstance(ref, str) else int(ref)
        if i < 0 or i >= self.n_nodes:
            raise KeyError(f"node index {i} out of range 0..{self.n_nodes - 1}")
        return self.pages[i] if i < self.n_pages else self.elements[i - self.n_pages]

    def is_page(self, ref: str | int) -> bool:
        i = self.index_of[ref] if isinstance(ref, str) else int(ref)
        return i < self.n_pages

    def page_of(self, ref: str | int) -> int:
        """Page number of a node (a page's own number for page nodes)."""
        n = self.node(ref)
        return n.index if isinstance(n, Page) else n.page

    @cached_property
    def node_page(self) -> np.ndarray:
        """int32 [n_nodes]: page number of every node."""
        out = np.empty(self.n_nodes, dtype=np.int32)
        out[: self.n_pages] = np.arange(self.n_pages, dtype=np.int32)
        out[self.n_pages :] = np.fromiter((e.page for e in self.elements), dtype=np.int32, count=self.n_elements)
        return out

    @cached_property
    def _page_element_ranges(self) -> list[tuple[int, int]]:
        ranges: list[list[int]] = [[0, 0] for _ in range(self.n_pages)]
        seen = [False] * self.n_pages
        for j, e in enumerate(self.elements):
            i = self.n_pages + j
            if not seen[e.page]:
                ranges[e.page] = [i, i + 1]
                seen[e.page] = True
            else:
                ranges[e.page][1] = i + 1
        return [tuple(r) for r in ranges]  # type: ignore[misc]

    def elements_of_page(self, page: int) -> list[Element]:
        lo, hi = self._page_element_ranges[page]
        return self.elements[lo - self.n_pages : hi - self.n_pages] if hi > lo else []

    def element_indices_of_page(self, page: int) -> range:
        lo, hi = self._page_element_ranges[page]
        return range(lo, hi)

    @property
    def vectors(self) -> np.ndarray:
        """[n_nodes, dim] embedding matrix, pages first (float32)."""
        return np.concatenate([self.page_vectors, self.element_vectors]).astype(np.float32, copy=False)

    # --- edges ---------------------------------------------------------------

    @property
    def edges(self) -> list[Edge]:
        ids = self.node_ids
        return [
            Edge(ids[s], ids[d], EDGE_KINDS[k], float(w), lab)
            for s, d, k, w, lab in zip(
                self.edge_src.tolist(),
                self.edge_dst.tolist(),
                self.edge_kind.tolist(),
                self.edge_weight.tolist(),
                self.edge_label,
            )
        ]

    def iter_edges(self, kind: str | None = None) -> Iterator[Edge]:
        k = None if kind is None else EDGE_KINDS.index(kind)
        ids = self.node_ids
        for n in range(self.n_edges):
            if k is None or self.edge_kind[n] == k:
                yield Edge(ids[self.edge_src[n]], ids[self.edge_dst[n]], EDGE_KINDS[self.edge_kind[n]],
                           float(self.edge_weight[n]), self.edge_label[n])

    def edge_counts(self) -> dict[str, int]:
        counts = np.bincount(self.edge_kind.astype(np.int64), minlength=len(EDGE_KINDS))
        return {k: int(c) for k, c in zip(EDGE_KINDS, counts)}

    @cached_property
    def adjacency(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per edge kind, an undirected CSR ``(indptr, indices)`` over node indices.

        Undirected because evidence can be reached either way (a caption leads
        to its figure and back); the direction stays in :attr:`edges`.
        """
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for k, name in enumerate(EDGE_KINDS):
            sel = self.edge_kind == k
            s = np.concatenate([self.edge_src[sel], self.edge_dst[sel]]).astype(np.int64)
            d = np.concatenate([self.edge_dst[sel], self.edge_src[sel]]).astype(np.int32)
            order = np.lexsort((d, s))
            s, d = s[order], d[order]
            indptr = np.zeros(self.n_nodes + 1, dtype=np.int64)
            np.add.at(indptr, s + 1, 1)
            np.cumsum(indptr, out=indptr)
            out[name] = (indptr, d)
        return out

    def neighbours(self, ref: str | int, kind: str | None = None) -> list[str]:
        """Ids of nodes joined to ``ref`` by an edge of ``kind`` (any kind if None), either direction."""
        i = self.index_of[ref] if isinstance(ref, str) else int(ref)
        kinds = EDGE_KINDS if kind is None else (kind,)
        if kind is not None and kind not in EDGE_KINDS:
            raise ValueError(f"unknown edge kind {kind!r}; expected one of {EDGE_KINDS}")
        found: list[int] = []
        for k in kinds:
            indptr, idx = self.adjacency[k]
            found.extend(idx[indptr[i] : indptr[i + 1]].tolist())
        ids = self.node_ids
        return [ids[j] for j in dict.fromkeys(found)]

    # --- views ---------------------------------------------------------------

    def to_networkx(self) -> "nx.MultiDiGraph":
        """A networkx MultiDiGraph with node attributes and typed edges (for analysis, not the step loop)."""
        import networkx as nx

        g = nx.MultiDiGraph(doc_id=self.doc_id)
        for p in self.pages:
            g.add_node(p.node_id, type="page", page=p.index, summary=p.summary)
        for e in self.elements:
            g.add_node(e.node_id, type=e.type, page=e.page, bbox=e.bbox, summary=e.summary,
                       reading_order=e.reading_order, section_path=e.section_path)
        for edge in self.edges:
            g.add_edge(edge.src, edge.dst, key=edge.kind, kind=edge.kind, weight=edge.weight, label=edge.label)
        return g

    def element_type_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(e.type for e in self.elements).items()))

    def summary(self) -> str:
        """Human-readable multi-line summary (what the main job prints)."""
        types = ", ".join(f"{k}={v}" for k, v in self.element_type_counts().items()) or "none"
        kinds = ", ".join(f"{k}={v}" for k, v in self.edge_counts().items())
        ocr_pages = sum(p.image_only for p in self.pages)
        lines = [
            f"EvidenceGraph {self.doc_id!r} ({self.source.kind}: {self.source.path})",
            f"  parser: {self.meta.get('parser', '?')}  pages: {self.n_pages} (image-only/OCR: {ocr_pages})"
            f"  elements: {self.n_elements}  edges: {self.n_edges}",
            f"  elements by type: {types}",
            f"  edges by kind: {kinds}",
            f"  embeddings: {self.page_vectors.shape[1] if self.page_vectors.ndim == 2 else 0}-d, "
            f"{self.page_vectors.dtype}",
        ]
        if self.meta.get("build_seconds") is not None:
            lines.append(f"  built in {self.meta['build_seconds']:.2f} s")
        return "\n".join(lines)

    # --- pixels (lazy) -------------------------------------------------------

    def page_image(self, page: int, dpi: int = 72, max_side: int | None = None) -> "Image.Image":
        """Render a page to a PIL image on demand (never at build time)."""
        from mage_gym.graph.images import render_page

        return render_page(self.source, page, dpi=dpi, max_side=max_side)

    def crop(self, ref: str | int, dpi: int = 144, pad: float = 0.01) -> "Image.Image":
        """Render the region of an element (or a whole page) on demand."""
        from mage_gym.graph.images import render_region

        n = self.node(ref)
        if isinstance(n, Page):
            return self.page_image(n.index, dpi=dpi)
        return render_region(self.source, n.page, n.bbox, dpi=dpi, pad=pad)
