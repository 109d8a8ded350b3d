"""What the renderer sends, written out: the XML of each mode, its images, its tokens, clipping and settings.

A two-page toy graph (Letter pages, 612 x 792 pt) with page 0 activated,
its paragraph and its table opened and a table of page 1 only activated.
The expected XML below was checked by hand against the module's rules: the
page image is 792 pt scaled to the 1,024 px cap (791 x 1024, 29 x 37 = 1,073
tokens of 28 px patches), the table crop is its box padded by 0.01 of the
page at 144 dpi (0.82 x 612 pt and 0.3333 x 792 pt: 1004 x 528 px, 36 x 19 =
684 tokens); text mode sends the page's whole text and no image; elements
mode the page's summary and the crop.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from mage_gym.render import RenderConfig, esc, image_tokens, render, rendered_summary, text_tokens, whole_text_pages
from mage_gym.testing import make_toy_graph

P0 = '<page id="toy:p0" index="0" number="1">\n'
E1 = '<element id="toy:p0:e1" type="paragraph" state="opened"><content>page 0 item 1 growth</content></element>\n'
TABLE = "| a | b |\n|---|---|\n| 1 | 2 |"
E2 = f'<element id="toy:p0:e2" type="table" state="opened"><content>{TABLE}</content>'
CROP = '<image ref="toy:p0:e2" kind="crop" width="1004" height="528"/>'
P1 = ('<page id="toy:p1" index="1" number="2">\n<element id="toy:p1:e1" type="table" state="activated">'
      "<summary>page 1 item 1 employees</summary></element>\n</page>\n")
XML = {
    "visual": (f'<evidence doc="toy" pages="2" mode="visual">\n{P0}<summary>Section 0 revenue</summary>\n'
               '<image ref="toy:p0" kind="page" width="791" height="1024"/>\n'
               f"{E1}{E2}{CROP}</element>\n</page>\n{P1}</evidence>"),
    "text": (f'<evidence doc="toy" pages="2" mode="text">\n{P0}<text>Section 0 revenue\npage 0 item 1 growth\n'
             f"page 0 item 2 chart</text>\n{E1}{E2}</element>\n</page>\n{P1}</evidence>"),
    "elements": (f'<evidence doc="toy" pages="2" mode="elements">\n{P0}<summary>Section 0 revenue</summary>\n'
                 f"{E1}{E2}{CROP}</element>\n</page>\n{P1}</evidence>"),
}


@pytest.fixture()
def graph():
    return make_toy_graph(n_pages=2, elements_per_page=3, dim=16)


def _state(graph) -> np.ndarray:
    st = np.zeros(graph.n_nodes, dtype=np.int8)
    st[0] = 1  # page 0 activated
    st[graph.n_pages + 1] = st[graph.n_pages + 2] = 2  # its paragraph and its table opened
    st[graph.n_pages + 4] = 1  # page 1's table activated: page 1 is shown as its container only
    return st


@pytest.mark.parametrize("mode", ["visual", "text", "elements"])
def test_each_mode_sends_exactly_this(graph, mode: str) -> None:
    r = render(graph, _state(graph), mode, question="q?")
    assert r.xml == XML[mode] and r.mode == mode and r.question == "q?"
    assert r.node_ids == ("toy:p0", "toy:p0:e1", "toy:p0:e2", "toy:p1:e1")
    assert r.opened_ids == ("toy:p0:e1", "toy:p0:e2")
    assert r.page_image_ids == (("toy:p0",) if mode == "visual" else ())
    assert r.page_text_ids == (("toy:p0",) if mode == "text" else ())
    images = [(i.node_id, i.kind, i.page, i.width, i.height, i.bbox) for i in r.images]
    page_image = ("toy:p0", "page", 0, 791, 1024, (0.0, 0.0, 1.0, 1.0))
    crop = ("toy:p0:e2", "crop", 0, 1004, 528, tuple(graph.elements[2].bbox))
    assert images == {"visual": [page_image, crop], "text": [], "elements": [crop]}[mode]
    assert r.image_tokens == {"visual": 1073 + 684, "text": 0, "elements": 684}[mode]
    assert r.text_tokens == math.ceil(len(XML[mode]) / 4) + 1
    page_frag = XML[mode][XML[mode].index(P0):XML[mode].index(E1)]
    page_image_tokens = 1073 if mode == "visual" else 0
    crop_tokens = 0 if mode == "text" else 684
    e2 = E2 + (CROP if mode != "text" else "") + "</element>\n"
    assert r.node_tokens == (("toy:p0", math.ceil((len(page_frag) + len("</page>\n")) / 4) + page_image_tokens),
                             ("toy:p0:e1", math.ceil(len(E1) / 4)),
                             ("toy:p0:e2", math.ceil(len(e2) / 4) + crop_tokens),
                             ("toy:p1:e1", math.ceil(len(P1[P1.index("<element"):P1.index("</page>")]) / 4)))


def test_a_memo_changes_nothing_and_is_filled_once_per_mode_and_config(graph) -> None:
    memo: dict = {}
    for mode in ("visual", "text"):
        first = render(graph, _state(graph), mode, memo=memo)
        again = render(graph, _state(graph), mode, memo=memo)
        assert first == again == render(graph, _state(graph), mode)
    assert set(memo) == {("visual", RenderConfig()), ("text", RenderConfig())}
    pages, elements = memo[("visual", RenderConfig())]
    assert sorted(pages) == [2 * 0 + 1, 2 * 1 + 0] and sorted(elements) == [2 * 1 + 1, 2 * 2 + 1, 2 * 4 + 0]


def test_clipping_limits_and_whole_text(graph) -> None:
    cfg = {"max_opened_chars": 10, "max_summary_chars": 7}
    st = _state(graph)
    r = render(graph, st, "text", config=cfg)
    assert "<text>Section 0  [truncated]</text>" in r.xml and r.page_text_ids == ()  # clipped: not whole
    assert "<content>page 0 ite [truncated]</content>" in r.xml
    assert "<summary>page 1  [truncated]</summary>" in r.xml
    exact = render(graph, st, "text", config={"max_opened_chars": len(graph.pages[0].text)})
    assert exact.page_text_ids == ("toy:p0",) and "[truncated]</text>" not in exact.xml
    assert whole_text_pages(graph).tolist() == [True, True]
    assert whole_text_pages(graph, {"max_opened_chars": len(graph.pages[0].text)}).tolist() == [True, False]
    assert whole_text_pages(graph, mode="elements").tolist() == [False, False]
    empty = replace(graph, pages=[replace(graph.pages[0], text=""), graph.pages[1]])
    assert whole_text_pages(empty).tolist() == [False, True]


def test_settings_sizes_and_loaders(graph, monkeypatch) -> None:
    assert RenderConfig.coerce(None) == RenderConfig() and RenderConfig.coerce({"patch": 14}).patch == 14
    cfg = RenderConfig(page_dpi=72, page_max_side=10_000, crop_dpi=72, crop_pad=0.0, patch=14)
    assert RenderConfig.coerce(cfg) is cfg and cfg.to_dict()["crop_pad"] == 0.0
    with pytest.raises(TypeError) as err:
        RenderConfig.coerce({"dpi": 1, "zoom": 2})
    assert str(err.value) == ("unknown render setting(s) ['dpi', 'zoom']; valid: page_dpi, page_max_side, crop_dpi, "
                              "crop_pad, patch, max_image_tokens, min_image_tokens, max_opened_chars, "
                              "max_summary_chars")
    r = render(graph, _state(graph), "visual", config=cfg)
    assert [(i.width, i.height) for i in r.images] == [(612, 792), (490, 248)]  # 72 dpi, no pad
    assert r.image_tokens == image_tokens(612, 792, cfg) + image_tokens(490, 248, cfg) == 1280 + 35 * 18  # the page's 44 x 57 patches, capped
    calls = []
    monkeypatch.setattr(type(graph), "page_image", lambda self, p, dpi=0, max_side=0: calls.append(("page", p, dpi,
                                                                                                   max_side)))
    monkeypatch.setattr(type(graph), "crop", lambda self, n, dpi=0, pad=0: calls.append(("crop", n, dpi, pad)))
    for image in r.images:
        image.load()
    assert calls == [("page", 0, 72, 10_000), ("crop", graph.n_pages + 2, 72, 0.0)]
    assert image_tokens(0, 0) == RenderConfig().min_image_tokens and text_tokens("abcde") == 2
    assert esc('a"b<c>&') == "a&quot;b&lt;c&gt;&amp;"


def test_rendered_summary_describes_without_pixels(graph) -> None:
    r = render(graph, _state(graph), "visual", question="q?")
    s = rendered_summary(r)
    assert s == {"mode": "visual", "xml": XML["visual"], "text_tokens": r.text_tokens, "image_tokens": 1757,
                 "images": [{"node_id": "toy:p0", "page": 0, "kind": "page", "bbox": [0.0, 0.0, 1.0, 1.0],
                             "width": 791, "height": 1024},
                            {"node_id": "toy:p0:e2", "page": 0, "kind": "crop", "bbox": list(graph.elements[2].bbox),
                             "width": 1004, "height": 528}]}


# --- edges of the sizes, the memo's reuse, the defaults and the errors (mutation survivors of render) ----------------

def test_a_memo_reuses_each_fragment_so_an_image_is_one_object_across_renders(graph) -> None:
    """A memo keeps each node's fragment: the second render hands back the same image objects (pixels load once)."""
    st = _state(graph)
    st[1] = 1  # page 1 activated too: fragments past index 0 are looked up again
    memo: dict = {}
    first, again = render(graph, st, "visual", memo=memo), render(graph, st, "visual", memo=memo)
    assert len(first.images) == 3 and all(a is b for a, b in zip(first.images, again.images))
    fresh = render(graph, st, "visual")
    assert fresh == first and not any(a is b for a, b in zip(fresh.images, first.images))


def test_the_default_mode_is_visual_and_bad_input_is_named(graph) -> None:
    assert render(graph, _state(graph)).mode == "visual"
    assert render(graph, _state(graph)).xml == XML["visual"]
    with pytest.raises(ValueError, match=r"unknown render mode 'pixels'; expected one of"):
        render(graph, _state(graph), "pixels")
    with pytest.raises(ValueError, match=rf"node-state table has shape \(3,\); graph has {graph.n_nodes} nodes"):
        render(graph, np.zeros(3, dtype=np.int8))


def test_page_and_crop_sizes_at_their_edges() -> None:
    from mage_gym.graph.schema import Element, Page
    from mage_gym.render import _crop_size_px, _page_size_px

    cfg = RenderConfig()  # 144 dpi (x2), pages capped at 1,024 px, crops padded by 0.01 of the page
    page = lambda w, h: Page(node_id="p", index=0, width=w, height=h, text="", summary="")  # noqa: E731
    assert _page_size_px(page(0.0, 0.0), cfg) == (2, 2)  # a page without a size counts as 1 x 1 pt
    assert _page_size_px(page(1.0, 100_000.0), cfg) == (1, 1024)  # a long strip: at least one pixel wide
    assert _page_size_px(page(100_000.0, 1.0), cfg) == (1024, 1)
    el = lambda box: Element(node_id="e", page=0, index=0, type="figure", bbox=box, text="", summary="",  # noqa: E731
                             reading_order=0)
    letter = page(612.0, 792.0)
    # at the page's right and bottom edges the padding stops at the page: 0.5..1.0 plus 0.01 on the inner side
    assert _crop_size_px(letter, el((0.5, 0.5, 1.0, 1.0)), cfg) == (round(0.51 * 612 * 2), round(0.51 * 792 * 2))
    flat = RenderConfig(crop_pad=0.0)
    assert _crop_size_px(letter, el((0.3, 0.3, 0.3, 0.6)), flat) == (1, round(0.3 * 792 * 2))  # a zero-width box
    assert _crop_size_px(letter, el((0.3, 0.3, 0.6, 0.3)), flat) == (round(0.3 * 612 * 2), 1)


def test_image_tokens_count_patches_of_at_least_one_pixel() -> None:
    unit = RenderConfig(patch=1, min_image_tokens=1)
    assert image_tokens(1, 5, unit) == 5 and image_tokens(5, 1, unit) == 5 and image_tokens(0, 3, unit) == 3


def test_whole_text_is_one_character_or_more_and_the_mask_is_bool(graph) -> None:
    from mage_gym.render import page_text_whole

    one = replace(graph.pages[0], text="x")
    assert page_text_whole(one, RenderConfig()) is True
    assert page_text_whole(replace(one, text=""), RenderConfig()) is False
    mask = whole_text_pages(graph)
    assert mask.dtype == bool and mask.tolist() == [True, True]
    assert whole_text_pages(graph, mode="elements").dtype == bool


def test_an_opened_element_sends_its_table_only_for_a_table_and_an_activated_one_its_summary(graph) -> None:
    els = list(graph.elements)
    els[1] = replace(els[1], table_markdown="| x |", summary="the summary")  # a paragraph carrying markdown
    els[2] = replace(els[2], table_markdown=None)  # a table without markdown
    g = replace(graph, elements=els)
    st = np.zeros(g.n_nodes, dtype=np.int8)
    st[0], st[g.n_pages + 1], st[g.n_pages + 2] = 1, 2, 2
    xml = render(g, st, "text").xml
    assert "<content>page 0 item 1 growth</content>" in xml and "| x |" not in xml
    assert f"<content>{esc(els[2].text)}</content>" in xml
    st[g.n_pages + 1] = 1
    assert "<summary>the summary</summary>" in render(g, st, "text").xml


def test_a_crop_loads_with_the_configured_padding() -> None:
    from types import SimpleNamespace

    from mage_gym.render import _crop_loader

    fake = SimpleNamespace(crop=lambda node, dpi=0, pad=0: (node, dpi, pad))
    assert _crop_loader(fake, 7, RenderConfig(crop_dpi=100, crop_pad=0.03))() == (7, 100, 0.03)


@pytest.mark.parametrize("mode", ["visual", "text", "elements"])
def test_node_share_is_what_render_adds_and_shares_renders_memo(graph, mode: str) -> None:
    """Every node's share (pages included) is the XML and image tokens a render of it adds; with a memo the
    shares read the fragments render stored (the same objects) and store theirs under render's keys."""
    from mage_gym.render import frame_chars, node_share

    cfg = RenderConfig()
    for v in range(graph.n_nodes):
        for opened in ((False,) if v < graph.n_pages else (False, True)):
            p = int(graph.node_page[v])
            st = np.zeros(graph.n_nodes, dtype=np.int8)
            st[p] = 1
            base = render(graph, st, mode, config=cfg)
            st[v] = 2 if opened else 1
            out = render(graph, st, mode, config=cfg)
            chars, images = node_share(graph, v, opened, mode, cfg)
            if v < graph.n_pages:
                assert (chars, images) == (len(out.xml) - frame_chars(graph, mode), out.image_tokens), (v, mode)
            else:
                assert (chars, images) == (len(out.xml) - len(base.xml), out.image_tokens - base.image_tokens)
    memo: dict = {}
    st = np.zeros(graph.n_nodes, dtype=np.int8)
    st[:graph.n_pages] = 1
    st[graph.n_pages:] = 2
    render(graph, st, mode, config=cfg, memo=memo)
    pages, elements = memo[(mode, cfg)]
    kept = {**{("p", k): f for k, f in pages.items()}, **{("e", k): f for k, f in elements.items()}}
    for v in range(graph.n_nodes):
        assert node_share(graph, v, True, mode, cfg, memo) == node_share(graph, v, True, mode, cfg)
    assert {("p", k): f for k, f in pages.items()} | {("e", k): f for k, f in elements.items()} == kept
    assert all(pages[k] is kept[("p", k)] for k in pages) and all(elements[k] is kept[("e", k)] for k in elements)
    fresh: dict = {}
    for v in range(graph.n_nodes):
        node_share(graph, v, v >= graph.n_pages, mode, cfg, fresh)
    pages, elements = fresh[(mode, cfg)]
    assert list(fresh) == [(mode, cfg)] and sorted(pages) == [2 * p + 1 for p in range(graph.n_pages)]
    assert sorted(elements) == [2 * j + 1 for j in range(graph.n_nodes - graph.n_pages)]
