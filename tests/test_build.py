"""The build pipeline: records, ids, summaries, caching through build_graph / load_graph.

A fake parser (monkeypatched into the parser registry) returns a hand-made
document and a hashing encoder replaces MiniLM, so nothing here needs a model;
a tiny PDF made on the fly supplies real bytes for the cache key.
"""
from __future__ import annotations

import numpy as np
import pytest

import mage_gym.graph.parsers as parsers_pkg
from mage_gym.graph import store
from mage_gym.graph.build import build_from_parsed, build_graph, failed_pages, load_graph
from mage_gym.graph.errors import DocumentError, MissingDocumentError
from mage_gym.graph.prepare import EmbedConfig, embed_pages, prepare_page
from mage_gym.graph.schema import DocumentSource, PageFailure, ParsedDocument, ParsedElement, ParsedPage
from mage_gym.graph.store import GraphNotBuiltError
from mage_gym.graph.summarize import first_sentences, summarize_element, summarize_page, table_shape
from mage_gym.testing import HashingEncoder

SRC = DocumentSource(kind="pdf", path="<hand-made>")


def parsed_doc(n_pages: int = 3) -> ParsedDocument:
    pages = []
    for p in range(n_pages):
        pages.append(ParsedPage(index=p, width=612, height=792, elements=[
            ParsedElement("title", (61.2, 39.6, 550.8, 79.2), f"Chapter {p}", heading_level=1),
            ParsedElement("paragraph", (61.2, 100, 550.8, 200),
                          f"Page {p} opens with this sentence about sales. " + "More words follow here. " * 12),
            ParsedElement("figure", (100, 250, 500, 500), "inside text"),
            ParsedElement("caption", (100, 505, 500, 530), f"Figure {p}: Sales by month"),
            ParsedElement("paragraph", (61.2, 600, 550.8, 620), ""),  # empty -> dropped
            ParsedElement("table", (61.2, 640, 550.8, 780), "",
                          table_markdown="| Month | Sales |\n|---|---|\n| Jan | 1 |\n| Feb | 2 |\n| Mar | 3 |"),
        ]))
    return ParsedDocument(pages=pages, parser="fake", warnings=[])


class FakeParser:
    name = "fake"
    calls = 0

    def __init__(self, **cfg):
        self.cfg = cfg

    def parse(self, source, pages=None, max_pages=None, progress=None):
        FakeParser.calls += 1
        doc = parsed_doc(5)
        keep = [p for p in doc.pages if (max_pages is None or p.index < max_pages)
                and (pages is None or p.index in pages)]
        return ParsedDocument(pages=keep, parser="fake", warnings=["truncated"] if max_pages else [])


@pytest.fixture()
def pdf(tmp_path):
    import pymupdf

    doc = pymupdf.open()
    for i in range(5):
        doc.new_page().insert_text((72, 72), f"page {i}")
    path = tmp_path / "tiny report.pdf"
    doc.save(path)
    return path


@pytest.fixture()
def fake_parser(monkeypatch):
    FakeParser.calls = 0
    monkeypatch.setattr(parsers_pkg, "get_parser", lambda name, **cfg: FakeParser(**cfg))
    return FakeParser


# --- records ---------------------------------------------------------------------


def test_records_ids_and_normalisation():
    g = build_from_parsed(parsed_doc(), SRC, "d", encoder=HashingEncoder())
    assert g.n_pages == 3 and g.n_elements == 3 * 5  # the empty paragraph is dropped
    assert [p.node_id for p in g.pages] == ["d:p0", "d:p1", "d:p2"]
    assert [e.node_id for e in g.elements[:5]] == [f"d:p0:e{i}" for i in range(5)]
    assert [e.reading_order for e in g.elements] == list(range(g.n_elements))
    assert g.meta["dropped_empty_elements"] == 3
    for e in g.elements:
        assert all(0.0 <= v <= 1.0 for v in e.bbox) and e.bbox[0] <= e.bbox[2] and e.bbox[1] <= e.bbox[3]
    assert g.elements[0].bbox == pytest.approx((0.1, 0.05, 0.9, 0.1))
    assert g.elements[0].heading_level == 1 and g.elements[1].heading_level is None
    assert g.pages[0].n_elements == 5 and g.pages[0].width == 612
    # page text: element texts in reading order; tables without text contribute their markdown
    assert g.pages[1].text.startswith("Chapter 1\nPage 1 opens") and "| Month | Sales |" in g.pages[1].text
    assert g.elements_of_page(2)[0].text == "Chapter 2"


def test_section_paths_and_ids_stable_across_runs():
    a = build_from_parsed(parsed_doc(), SRC, "d", encoder=HashingEncoder())
    b = build_from_parsed(parsed_doc(), SRC, "d", encoder=HashingEncoder())
    assert a.node_ids == b.node_ids and a.elements == b.elements and a.pages == b.pages
    assert a.elements[6].section_path == ("Chapter 1",)


def test_vectors_normalised_and_page_vectors_modes():
    g = build_from_parsed(parsed_doc(), SRC, "d", encoder=HashingEncoder())
    norms = np.linalg.norm(g.element_vectors, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)  # every kept element has text or a caption
    assert np.allclose(np.linalg.norm(g.page_vectors, axis=1), 1.0, atol=1e-5)
    t = build_from_parsed(parsed_doc(), SRC, "d", encoder=HashingEncoder(), embed_cfg={"page_vectors": "text"})
    assert not np.allclose(t.page_vectors, g.page_vectors) and np.array_equal(t.element_vectors, g.element_vectors)
    h = build_from_parsed(parsed_doc(), SRC, "d", encoder=HashingEncoder(), embed_cfg={"dtype": "float16"})
    assert h.element_vectors.dtype == np.float16
    with pytest.raises(ValueError):
        EmbedConfig.from_dict({"page_vectors": "max"})


def test_figure_embeds_its_caption_and_truncates():
    prep = prepare_page(parsed_doc().pages[0], EmbedConfig(element_max_chars=40))
    fig = [e.type for e in prep.elements].index("figure")
    assert prep.embed_texts[fig].startswith("Figure 0: Sales by month")
    assert all(len(t) <= 40 for t in prep.embed_texts)
    pv, ev = embed_pages([prep], None)
    assert pv.shape == (1, 0) and ev.shape == (5, 0)


def test_missing_page_filled_and_unmeasured_page_tolerated():
    doc = parsed_doc(3)
    doc.pages.pop(1)
    doc.pages[0].width = 0  # a page the parser could not measure
    g = build_from_parsed(doc, SRC, "d", encoder=HashingEncoder())
    assert g.n_pages == 3 and g.pages[1].n_elements == 0 and g.pages[1].node_id == "d:p1"
    assert any("missing" in w for w in g.meta["warnings"])
    assert g.element_vectors.shape[0] == g.n_elements


# --- summaries -------------------------------------------------------------------------


def test_summaries():
    g = build_from_parsed(parsed_doc(), SRC, "d", encoder=None)
    by_type = {e.type: e.summary for e in g.elements_of_page(0)}
    assert by_type["figure"] == "Figure: Figure 0: Sales by month"  # caption, not the inner text
    assert by_type["table"].startswith("Table (4x2): Month | Sales")
    para = by_type["paragraph"]  # whole leading sentences, as many as fit in 160 characters
    assert para.startswith("Page 0 opens with this sentence about sales. More words") and para.endswith("here.")
    assert 136 < len(para) <= 160
    assert all(len(e.summary) <= 160 for e in g.elements)
    assert g.pages[0].summary.startswith("Chapter 0 \u2014 Page 0 opens with this sentence about sales.")
    assert len(g.pages[0].summary) <= 160


def test_summary_helpers():
    assert first_sentences("One. Two.") == "One. Two."
    long = "A" * 300
    s = first_sentences(long)
    assert len(s) <= 160 and s.endswith("\u2026")
    assert summarize_element("figure", "legend north", caption="") == "Figure (text inside): legend north"
    assert summarize_element("chart", "", caption="") == "Chart (no text)"
    assert table_shape(None, "a b\nc d\n\ne f") == (3, 0)
    assert summarize_element("table", "a b\nc d", None, caption="Table 1: Costs") == "Table (2 rows): Table 1: Costs"
    assert summarize_page([], "", fallback="Only a chart label") == "Only a chart label"
    assert summarize_page(["Intro", "Intro"], "First. Second.") == "Intro \u2014 First."
    many = summarize_page(["A", "B", "C", "D"] + ["Long heading " * 8], "Body sentence here. Next.")
    assert many == "A / B / C \u2014 Body sentence here."


# --- build_graph / load_graph with the cache ----------------------------------------------------


def test_build_then_cached(tmp_path, pdf, fake_parser):
    cache = tmp_path / "cache"
    with pytest.raises(GraphNotBuiltError):
        load_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    g1 = build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    assert fake_parser.calls == 1 and g1.meta["cache_hit"] is False
    assert g1.doc_id == "tiny_report" and g1.n_pages == 5 and g1.source.kind == "pdf"
    assert g1.meta["parser"] == "fake" and g1.meta["digest"] and g1.meta["build_seconds"] >= 0
    g2 = build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    assert fake_parser.calls == 1 and g2.meta["cache_hit"] is True
    g3 = load_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    _assert_same(g1, g2)
    _assert_same(g1, g3)


def test_graph_with_failed_pages_is_not_cached(tmp_path, pdf, monkeypatch):
    """A page that failed (e.g. a transient ImportError) must not be frozen into the cache."""
    from mage_gym.graph.parsers.base import page_with_failure

    class FlakyParser(FakeParser):
        def parse(self, source, pages=None, max_pages=None, progress=None):
            doc = super().parse(source, pages, max_pages)
            if FakeParser.calls == 1:  # the first build loses page 2
                doc.pages[2] = page_with_failure(PageFailure.from_exception(2, "parse", ImportError("half-installed")))
            return doc

    FakeParser.calls = 0
    monkeypatch.setattr(parsers_pkg, "get_parser", lambda name, **cfg: FlakyParser(**cfg))
    cache = tmp_path / "cache"
    g1 = build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    assert failed_pages(g1) == [PageFailure(2, "parse", "ImportError", "half-installed")]
    assert g1.meta["failed_pages"] == [{"page": 2, "stage": "parse", "error_type": "ImportError",
                                        "message": "half-installed"}] and not g1.elements_of_page(2)
    assert "p2: parse failed: ImportError: half-installed" in g1.meta["warnings"]  # the same, for people
    with pytest.raises(GraphNotBuiltError):
        load_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    g2 = build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())  # parsed again, now whole
    assert FakeParser.calls == 2 and g2.meta["failed_pages"] == [] and g2.elements_of_page(2)
    assert build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder()).meta["cache_hit"] is True


def _assert_same(a, b, rebuilt: bool = False):
    assert a.pages == b.pages and a.elements == b.elements and a.edge_label == b.edge_label
    for name in ("edge_src", "edge_dst", "edge_kind", "edge_weight", "page_vectors", "element_vectors"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    skip = {"cache_hit", "build_seconds", "stage_seconds"} if rebuilt else {"cache_hit"}
    strip = lambda m: {k: v for k, v in m.items() if k not in skip}  # noqa: E731
    assert strip(a.meta) == strip(b.meta)


def test_settings_change_the_key(tmp_path, pdf, fake_parser):
    cache = tmp_path / "cache"
    g = build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    assert fake_parser.calls == 1
    g_max = build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder(), max_pages=2)
    assert fake_parser.calls == 2 and g_max.n_pages == 2 and "truncated" in g_max.meta["warnings"]
    build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder(), edge_cfg={"layout_k": 1})
    build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder(32))
    build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder(), doc_id="other")
    assert fake_parser.calls == 5
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 5
    build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder(), cache=False)
    assert fake_parser.calls == 6
    _assert_same(g, load_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder()))


def test_corrupted_and_stale_entries_rebuilt(tmp_path, pdf, fake_parser, monkeypatch):
    cache = tmp_path / "cache"
    g = build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    entry = cache / g.meta["cache_key"]
    (entry / "edge_dst.npy").write_bytes(b"garbage")
    g2 = build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    assert fake_parser.calls == 2 and g2.meta["cache_hit"] is False
    _assert_same(g, g2, rebuilt=True)
    assert build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder()).meta["cache_hit"] is True
    # an entry written by another builder version, under the same key, is not trusted
    import json

    m = json.loads((entry / store.MANIFEST).read_text())
    m["version"] = "0-old"
    (entry / store.MANIFEST).write_text(json.dumps(m))
    g3 = build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    assert fake_parser.calls == 3 and g3.meta["cache_hit"] is False
    assert json.loads((entry / store.MANIFEST).read_text())["version"] == store.GRAPH_VERSION


def test_cached_graph_follows_moved_file(tmp_path, pdf, fake_parser):
    cache = tmp_path / "cache"
    build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    moved = tmp_path / "elsewhere.pdf"
    moved.write_bytes(pdf.read_bytes())
    g = build_graph(moved, "fake", cache_dir=cache, encoder=HashingEncoder(), doc_id="tiny_report")
    assert g.meta["cache_hit"] is True and g.source.path == str(moved.resolve())


def test_bad_input_raises_typed_errors(tmp_path, pdf):
    with pytest.raises(MissingDocumentError):
        build_graph(tmp_path / "nope.pdf", cache_dir=tmp_path, encoder=HashingEncoder())
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4 this is not a pdf")
    with pytest.raises(DocumentError):
        build_graph(bad, cache_dir=tmp_path, encoder=HashingEncoder())
    with pytest.raises(ValueError, match="default encoder"):
        build_graph(pdf, workers=2, encoder=HashingEncoder(), cache_dir=tmp_path)


def test_ctrl_c_leaves_nothing_in_the_cache(tmp_path, pdf, monkeypatch):
    """A KeyboardInterrupt while parsing, or while the entry is written, leaves no entry and no temp files."""

    class InterruptedParser(FakeParser):
        def parse(self, source, pages=None, max_pages=None, progress=None):
            progress(1)
            raise KeyboardInterrupt

    cache = tmp_path / "cache"
    monkeypatch.setattr(parsers_pkg, "get_parser", lambda name, **cfg: InterruptedParser(**cfg))
    with pytest.raises(KeyboardInterrupt):
        build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    assert not cache.exists() or not any(cache.iterdir())

    monkeypatch.setattr(parsers_pkg, "get_parser", lambda name, **cfg: FakeParser(**cfg))

    def interrupted_write(arr):
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "_npy_bytes", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    assert list(cache.iterdir()) == []  # the half-written temporary entry was removed
    with pytest.raises(GraphNotBuiltError):
        load_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())


def test_load_graph_imports_no_parser_pdf_library_or_torch(tmp_path, pdf, fake_parser):
    """The cache-hit path must not import PyMuPDF (its import loads an ONNX model), a parser or torch."""
    import subprocess
    import sys
    import textwrap

    cache = tmp_path / "cache"
    g = build_graph(pdf, "fake", cache_dir=cache, encoder=HashingEncoder())
    code = textwrap.dedent(f"""
        import sys
        from mage_gym.graph import load_graph
        from mage_gym.testing import HashingEncoder
        g = load_graph({str(pdf)!r}, "fake", cache_dir={str(cache)!r}, encoder=HashingEncoder())
        assert g.n_elements == {g.n_elements} and g.meta["cache_hit"]
        print(",".join(m for m in ("torch", "transformers", "pymupdf", "pymupdf4llm", "mage_gym.graph.parsers")
                       if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
