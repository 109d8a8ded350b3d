"""Stage 2 of a graph build, document-wide: prepared pages + vectors -> :class:`EvidenceGraph`.

Why in the calling process: ids, reading order, the section tree (headings
span pages), summaries and the five edge kinds need every page at once, so
this runs after the per-page stage (:mod:`.prepare`) has finished, wherever
that ran. Pages a parser skipped become empty stand-ins, so node index ==
page number always holds; failed pages are listed in ``meta["failed_pages"]``
as :class:`~mage_gym.graph.schema.PageFailure` dicts.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mage_gym.graph.edges import EdgeConfig, build_edges, section_structure
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.prepare import PreparedPage, element_text
from mage_gym.graph.schema import BBox, DocumentSource, Element, Page, ParsedElement, element_id, page_id
from mage_gym.graph.store import GRAPH_VERSION
from mage_gym.graph.summarize import clean, summarize_element, summarize_page


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
    m["failed_pages"] = [p.failure.to_dict() for p in prepared if p.failure is not None]
    m.setdefault("graph_version", GRAPH_VERSION)
    np_dtype = np.float16 if dtype == "float16" else np.float32
    return EvidenceGraph(
        doc_id=doc_id, source=source, pages=pages, elements=elements,
        edge_src=edges.src, edge_dst=edges.dst, edge_kind=edges.kind, edge_weight=edges.weight,
        edge_label=edges.label, page_vectors=page_vecs.astype(np_dtype), element_vectors=el_vecs.astype(np_dtype),
        meta=m,
    )
