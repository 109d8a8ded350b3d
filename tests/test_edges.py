"""Edges of the evidence graph, checked on hand-made documents (no PDF, no model)."""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.graph.build import build_from_parsed
from mage_gym.graph.edges import (
    EdgeConfig,
    build_edges,
    caption_pairs,
    is_caption_like,
    RANK_GRID,
    knn_pairs,
    section_structure,
)
from mage_gym.graph.schema import EDGE_KINDS, DocumentSource, ParsedDocument, ParsedElement, ParsedPage
from mage_gym.testing import HashingEncoder

SRC = DocumentSource(kind="pdf", path="<hand-made>")
W, H = 600.0, 800.0


def el(t: str, x0: float, y0: float, x1: float, y1: float, text: str = "", **kw) -> ParsedElement:
    """An element with a box given in fractions of the page (converted to points)."""
    return ParsedElement(type=t, bbox=(x0 * W, y0 * H, x1 * W, y1 * H), text=text, **kw)


def report_doc() -> ParsedDocument:
    """Three pages; a heading tree that crosses page breaks; a chart with caption; a table with header text."""
    p0 = ParsedPage(index=0, width=W, height=H, elements=[
        el("title", .1, .05, .9, .10, "Annual Report 2023", heading_level=1),
        el("paragraph", .1, .12, .9, .20, "This report describes the company. It has many parts."),
        el("title", .1, .25, .9, .29, "Revenue", heading_level=2),
        el("paragraph", .1, .30, .9, .38, "Revenue grew in every region during the year."),
        el("chart", .1, .42, .9, .70, "Asia Europe Americas"),
        el("caption", .1, .72, .9, .75, "Figure 1: Revenue by region in millions"),
    ])
    p1 = ParsedPage(index=1, width=W, height=H, elements=[
        el("paragraph", .1, .05, .9, .15, "Revenue details continue on this page with regional notes."),
        el("paragraph", .1, .20, .9, .24, "Operating margin by segment in millions"),
        el("table", .1, .26, .9, .50, "Segment Margin\nRetail 12\nCloud 30",
           table_markdown="| Segment | Margin |\n|---|---|\n| Retail | 12 |\n| Cloud | 30 |"),
        el("title", .1, .55, .9, .60, "Costs", heading_level=2),
        el("paragraph", .1, .62, .9, .75, "Costs fell because of lower energy prices."),
    ])
    p2 = ParsedPage(index=2, width=W, height=H, elements=[
        el("title", .1, .05, .9, .10, "Outlook", heading_level=1),
        el("paragraph", .1, .12, .9, .30, "Next year we expect steady growth, as Figure 1 suggests."),
        el("paragraph", .1, .32, .9, .35, "   "),  # empty: dropped
        el("figure", .2, .40, .8, .80, "map legend north south"),
    ])
    return ParsedDocument(pages=[p0, p1, p2], parser="hand")


@pytest.fixture(scope="module")
def graph():
    return build_from_parsed(report_doc(), SRC, "rep", encoder=HashingEncoder())


def test_reference_joins_a_mention_to_the_caption_it_names(graph):
    refs = edges_of(graph, "reference")
    assert [(s, d, lab) for s, d, lab, _ in refs] == [(idx(graph, 2, 1), idx(graph, 0, 5), "figure")]
    off = build_from_parsed(report_doc(), SRC, "rep", encoder=HashingEncoder(), edge_cfg={"references": False})
    assert off.edge_counts()["reference"] == 0  # the paper's five relations only


def edges_of(g, kind):
    k = EDGE_KINDS.index(kind)
    sel = g.edge_kind == k
    return list(zip(g.edge_src[sel].tolist(), g.edge_dst[sel].tolist(),
                    [lab for lab, s in zip(g.edge_label, sel) if s], g.edge_weight[sel].tolist()))


def idx(g, page, i):
    return g.index_of[f"rep:p{page}:e{i}"]


def test_every_kind_present_and_arrays_typed(graph):
    counts = graph.edge_counts()
    assert all(counts[k] > 0 for k in EDGE_KINDS), counts
    assert graph.edge_src.dtype == np.int32 and graph.edge_dst.dtype == np.int32
    assert graph.edge_kind.dtype == np.int8 and graph.edge_weight.dtype == np.float32
    assert len(graph.edge_label) == graph.n_edges
    assert graph.edge_src.max() < graph.n_nodes and graph.edge_dst.max() < graph.n_nodes


def test_containment_page_to_each_element(graph):
    cont = edges_of(graph, "containment")
    assert len(cont) == graph.n_elements
    for s, d, lab, _ in cont:
        assert s < graph.n_pages and d >= graph.n_pages
        assert graph.node(d).page == s and lab == "contains"


def test_reading_order_crosses_pages(graph):
    ro = {(s, d) for s, d, _, _ in edges_of(graph, "reading_order")}
    n_p = graph.n_pages
    for j in range(graph.n_elements - 1):
        assert (n_p + j, n_p + j + 1) in ro
    assert (idx(graph, 0, 5), idx(graph, 1, 0)) in ro  # last of page 0 -> first of page 1
    assert (0, 1) in ro and (1, 2) in ro
    assert len(ro) == graph.n_elements - 1 + graph.n_pages - 1


def test_layout_pairs_caption_and_table_header(graph):
    lay = {(s, d): (lab, w) for s, d, lab, w in edges_of(graph, "layout")}
    chart, caption = idx(graph, 0, 4), idx(graph, 0, 5)
    assert lay[(chart, caption)][0] == "below"
    header, table = idx(graph, 1, 1), idx(graph, 1, 2)
    assert lay[(header, table)][0] == "below"
    for (s, d), (lab, w) in lay.items():
        assert lab in ("left", "right", "above", "below")
        assert 0 < w <= 1
        assert graph.node(s).page == graph.node(d).page  # same page only
        assert s < d


def test_layout_forced_caption_when_not_among_nearest():
    """Tiny labels hugging a chart push its caption out of the k nearest; the pairing must survive."""
    els = [el("chart", .2, .2, .8, .5, "")]
    els += [el("paragraph", .2 + .15 * i, .505, .3 + .15 * i, .515, f"axis label {i}") for i in range(4)]
    els.append(el("caption", .2, .56, .8, .6, "Figure 7: Unit sales"))
    doc = ParsedDocument(pages=[ParsedPage(index=0, width=W, height=H, elements=els)], parser="hand")
    g = build_from_parsed(doc, SRC, "rep", encoder=None, edge_cfg={"layout_k": 1})
    lay = {(s, d) for s, d, _, _ in edges_of(g, "layout")}
    assert (1, 6) in lay  # chart (node 1) <-> caption (node 6)
    assert g.edge_counts()["semantic"] == 0  # no encoder, no semantic edges


def test_layout_directions_side_by_side():
    els = [el("paragraph", .05, .1, .45, .3, "left column"), el("paragraph", .55, .1, .95, .3, "right column")]
    doc = ParsedDocument(pages=[ParsedPage(index=0, width=W, height=H, elements=els)], parser="hand")
    g = build_from_parsed(doc, SRC, "d", encoder=None)
    assert [(s, d, lab) for s, d, lab, _ in edges_of(g, "layout")] == [(1, 2, "right")]


def test_layout_k_bounds_degree():
    rng = np.random.default_rng(0)
    els = []
    for i in range(30):
        x, y = rng.uniform(0, .9), rng.uniform(0, .95)
        els.append(el("paragraph", x, y, x + .08, y + .03, f"text {i}"))
    doc = ParsedDocument(pages=[ParsedPage(index=0, width=W, height=H, elements=els)], parser="hand")
    g = build_from_parsed(doc, SRC, "d", encoder=None, edge_cfg={"layout_k": 3})
    lay = edges_of(g, "layout")
    pairs = {(s, d) for s, d, _, _ in lay}
    assert len(pairs) == len(lay)  # no duplicate pair
    # each element got its 3 nearest: every element has degree >= 3 and the total is at most 3 per element
    deg = np.bincount([s for s, _, _, _ in lay] + [d for _, d, _, _ in lay], minlength=g.n_nodes)[1:]
    assert deg.min() >= 3 and len(lay) <= 3 * 30


def test_section_tree_spans_pages(graph):
    sec = {(s, d): lab for s, d, lab, _ in edges_of(graph, "section")}
    report, revenue, costs, outlook = idx(graph, 0, 0), idx(graph, 0, 2), idx(graph, 1, 3), idx(graph, 2, 0)
    assert sec[(report, revenue)] == "subsection"
    assert sec[(report, costs)] == "subsection"
    assert sec[(revenue, idx(graph, 1, 0))] == "contains"  # page 1 paragraph belongs to Revenue (page 0)
    assert sec[(revenue, idx(graph, 1, 2))] == "contains"  # the table too
    assert sec[(costs, idx(graph, 1, 4))] == "contains"
    assert sec[(outlook, idx(graph, 2, 1))] == "contains"
    assert (report, outlook) not in sec and all(d != outlook for _, d in sec)  # level-1 sibling, no parent
    # every non-root element has exactly one section parent
    parents = {}
    for s, d in sec:
        assert d not in parents
        parents[d] = s


def test_section_paths_on_elements(graph):
    path = {e.node_id: e.section_path for e in graph.elements}
    assert path["rep:p0:e1"] == ("Annual Report 2023",)
    assert path["rep:p0:e2"] == ("Annual Report 2023", "Revenue")
    assert path["rep:p1:e0"] == ("Annual Report 2023", "Revenue")
    assert path["rep:p1:e4"] == ("Annual Report 2023", "Costs")
    assert path["rep:p2:e1"] == ("Outlook",)


def test_section_structure_levels_and_orphans():
    types = ["paragraph", "title", "title", "paragraph", "title", "paragraph", "title", "list"]
    levels = [None, 1, 3, None, 2, None, None, None]
    texts = ["pre", "A", "A.x", "p", "B", "q", "C", "r"]
    parent, paths = section_structure(types, levels, texts)
    assert parent == [-1, -1, 1, 2, 1, 4, -1, 6]  # level-2 B closes level-3 A.x; unlevelled C counts as level 1
    assert paths[0] == () and paths[3] == ("A", "A.x") and paths[5] == ("A", "B") and paths[7] == ("C",)


def test_semantic_threshold_and_scope():
    texts = ["quarterly revenue growth in asia", "quarterly revenue growth in europe",
             "zebra giraffe savanna", "quantum chromodynamics lattice"]
    els = [el("paragraph", .1, .1 + .2 * i, .9, .25 + .2 * i, t) for i, t in enumerate(texts)]
    doc = ParsedDocument(pages=[ParsedPage(index=0, width=W, height=H, elements=els[:2]),
                                ParsedPage(index=1, width=W, height=H, elements=els[2:])], parser="hand")
    g = build_from_parsed(doc, SRC, "s", encoder=HashingEncoder(256))
    sem = edges_of(g, "semantic")
    pairs = {(s, d) for s, d, _, _ in sem}
    assert (2, 3) in pairs  # the two revenue paragraphs
    assert not any({s, d} & {4, 5} for s, d in pairs)  # unrelated ones stay unlinked
    for s, d, lab, w in sem:
        assert w >= EdgeConfig().semantic_min_sim and lab == "similar"
        assert g.is_page(s) == g.is_page(d)  # pages with pages, elements with elements
    g_strict = build_from_parsed(doc, SRC, "s", encoder=HashingEncoder(256), edge_cfg={"semantic_min_sim": 1.01})
    assert g_strict.edge_counts()["semantic"] == 0
    g_loose = build_from_parsed(doc, SRC, "s", encoder=HashingEncoder(256),
                                edge_cfg={"semantic_min_sim": -1.0, "semantic_k_elements": 1, "semantic_k_pages": 1})
    sem = edges_of(g_loose, "semantic")
    assert sum(1 for s, d, _, _ in sem if g_loose.is_page(s)) == 1  # two pages -> one pair
    el_pairs = [(s, d) for s, d, _, _ in sem if not g_loose.is_page(s)]
    assert len(el_pairs) == len(set(el_pairs)) and 2 <= len(el_pairs) <= 4


@pytest.mark.parametrize("n,k,block", [(50, 3, 7), (200, 5, 64), (9, 20, 4)])
def test_knn_pairs_matches_brute_force(n, k, block):
    rng = np.random.default_rng(n)
    v = rng.normal(size=(n, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    i, j, sim = knn_pairs(v, k, 0.1, block=block)
    s = v @ v.T
    np.fill_diagonal(s, -np.inf)
    kk = min(k, n - 1)
    want = set()
    for a in range(n):  # the documented rule: similarity on a 0.01 grid, then nearer in reading order
        order = sorted((b for b in range(n) if b != a), key=lambda b: (-np.round(s[a, b] * RANK_GRID), abs(a - b)))
        for b in order[:kk]:
            if s[a, b] >= 0.1:
                want.add((min(a, b), max(a, b)))
    assert set(zip(i.tolist(), j.tolist())) == want
    assert np.all(i < j)
    np.testing.assert_allclose(sim, s[i, j], rtol=1e-5)


def test_knn_pairs_ignore_encoder_noise_between_tied_neighbours():
    """Repeated texts have equal vectors; noise in the last digits must not choose among them."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(6, 16)).astype(np.float32)
    v = base[[0, 1, 0, 2, 0, 3, 0, 4, 5]]  # text 0 repeated at rows 0, 2, 4, 6
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    pairs = None
    for seed in range(5):
        noisy = v + np.random.default_rng(seed).normal(scale=1e-4, size=v.shape).astype(np.float32)
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        i, j, _ = knn_pairs(noisy, 1, 0.5)
        got = set(zip(i.tolist(), j.tolist()))
        assert pairs is None or got == pairs
        pairs = got
    assert {(0, 2), (2, 4), (4, 6)} <= pairs  # each copy's neighbour is the nearest copy in reading order


def test_caption_detection():
    assert is_caption_like("paragraph", "Figure 3: Sales by year")
    assert is_caption_like("paragraph", "Table 2. Results")
    assert is_caption_like("caption", "anything")
    assert not is_caption_like("paragraph", "Tablets are popular among seniors.")
    assert not is_caption_like("table", "Table 1")
    # a caption belongs to the nearest aligned visual only
    types = ["figure", "caption", "figure"]
    boxes = [(.1, .1, .9, .3), (.1, .31, .9, .34), (.1, .6, .9, .9)]
    assert caption_pairs(types, boxes, ["", "Figure 1: a", ""]) == {0: [1]}


def test_build_edges_validates_inputs(graph):
    with pytest.raises(ValueError):
        build_edges(graph.pages, graph.elements, np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError):
        build_edges(graph.pages, list(reversed(graph.elements)), None)
    with pytest.raises(ValueError):
        EdgeConfig.from_dict({"layout_neighbours": 3})


def test_edges_deterministic():
    a = build_from_parsed(report_doc(), SRC, "rep", encoder=HashingEncoder())
    b = build_from_parsed(report_doc(), SRC, "rep", encoder=HashingEncoder())
    for name in ("edge_src", "edge_dst", "edge_kind", "edge_weight"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.edge_label == b.edge_label and a.node_ids == b.node_ids


def test_knn_pair_similarities_do_not_depend_on_how_blas_splits_the_work() -> None:
    """The stored similarities are the same bits whatever the matmul block (BLAS's gemv for one row, gemm for
    many: their last bits differ, as they do between BLAS thread counts, e.g. a Ray task vs. the driver)."""
    rng = np.random.default_rng(0)
    v = rng.standard_normal((200, 384)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    # (on this project's reference CPU v[:1] @ v.T and (v @ v.T)[:1] differ in their last bits)
    one_row, all_rows = knn_pairs(v, 3, -1.0, block=1), knn_pairs(v, 3, -1.0, block=1024)
    for got, want in zip(one_row, all_rows):
        assert np.array_equal(got, want)
    i, j, sim = all_rows
    assert sim.dtype == np.float32 and np.allclose(sim, np.sum(v[i] * v[j], axis=1), atol=1e-6)
