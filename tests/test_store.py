"""The content-addressed graph cache: exact round trips, verification, atomic writes."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mage_gym.graph import store
from mage_gym.graph.build import build_from_parsed
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import DocumentSource, ParsedDocument, ParsedElement, ParsedPage
from mage_gym.testing import HashingEncoder, make_toy_graph

KEY = "ab" * 32


def small_parsed() -> ParsedDocument:
    pages = []
    for p in range(3):
        pages.append(ParsedPage(index=p, width=612, height=792, header_text=f"hdr {p}", elements=[
            ParsedElement("title", (50, 40, 560, 70), f"Section {p} — Ünïcode", heading_level=1 + p % 2),
            ParsedElement("paragraph", (50, 80, 560, 200), f"Body text of page {p}. Second sentence here."),
            ParsedElement("table", (50, 220, 560, 400), "a b\n1 2", table_markdown="| a | b |\n|---|---|\n| 1 | 2 |"),
            ParsedElement("caption", (50, 402, 560, 420), f"Table {p}: numbers", ocr=True),
        ]))
    return ParsedDocument(pages=pages, parser="hand", warnings=["a warning"])


def assert_graphs_equal(a: EvidenceGraph, b: EvidenceGraph, ignore_meta: tuple[str, ...] = ()) -> None:
    assert a.doc_id == b.doc_id and a.source == b.source
    assert a.pages == b.pages
    assert a.elements == b.elements
    for name in ("edge_src", "edge_dst", "edge_kind", "edge_weight", "page_vectors", "element_vectors"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), name
    assert a.edge_label == b.edge_label
    strip = lambda m: {k: v for k, v in m.items() if k not in ignore_meta}  # noqa: E731
    assert strip(a.meta) == strip(b.meta)


@pytest.fixture()
def graph() -> EvidenceGraph:
    return build_from_parsed(small_parsed(), DocumentSource("pdf", "/x/doc.pdf"), "doc", encoder=HashingEncoder())


def test_round_trip_exact(tmp_path, graph):
    path = store.save_graph(graph, KEY, tmp_path)
    assert path == tmp_path / KEY and (path / store.MANIFEST).is_file()
    loaded = store.load_cached(KEY, tmp_path)
    assert loaded is not None
    assert_graphs_equal(graph, loaded)
    assert isinstance(loaded.elements[0].bbox, tuple) and isinstance(loaded.elements[0].section_path, tuple)
    assert loaded.elements[3].ocr is True and loaded.pages[1].header_text == "hdr 1"
    # records behave like freshly made dataclasses
    assert loaded.elements[0].area == graph.elements[0].area and hash(loaded.pages[0]) == hash(graph.pages[0])


def test_round_trip_custom_page_text(tmp_path, graph):
    """Page text is stored only where it differs from the joined element text; both kinds survive."""
    import dataclasses

    graph.pages[1] = dataclasses.replace(graph.pages[1], text="a page text written by hand")
    graph.pages[2] = dataclasses.replace(graph.pages[2], text="")
    store.save_graph(graph, KEY, tmp_path)
    rec = json.loads((tmp_path / KEY / store.RECORDS).read_text())
    assert rec["pages"]["text"][0] is None  # derived from the elements, not stored twice
    assert_graphs_equal(graph, store.load_cached(KEY, tmp_path))


def test_round_trip_toy_graph_float16(tmp_path):
    g = make_toy_graph()
    g.page_vectors = g.page_vectors.astype(np.float16)
    g.element_vectors = g.element_vectors.astype(np.float16)
    store.save_graph(g, KEY, tmp_path)
    assert_graphs_equal(g, store.load_cached(KEY, tmp_path))


def test_missing_entry_is_a_miss(tmp_path):
    assert store.load_cached(KEY, tmp_path) is None
    assert not store.has_entry(KEY, tmp_path)


@pytest.mark.parametrize("victim", ["element_vectors.npy", "records.json", "edge_src.npy", "manifest.json"])
def test_corrupted_entry_deleted(tmp_path, graph, victim):
    path = store.save_graph(graph, KEY, tmp_path)
    f = path / victim
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    assert store.load_cached(KEY, tmp_path) is None
    assert not path.exists()


def test_partial_entry_deleted(tmp_path, graph):
    path = store.save_graph(graph, KEY, tmp_path)
    (path / "page_vectors.npy").unlink()
    assert store.load_cached(KEY, tmp_path) is None and not path.exists()
    path = store.save_graph(graph, KEY, tmp_path)
    (path / store.MANIFEST).unlink()  # an entry without its manifest was never finished
    assert store.load_cached(KEY, tmp_path) is None and not path.exists()


def test_shape_mismatch_deleted(tmp_path, graph):
    path = store.save_graph(graph, KEY, tmp_path)
    m = json.loads((path / store.MANIFEST).read_text())
    m["arrays"]["edge_src"]["shape"] = [1]
    (path / store.MANIFEST).write_text(json.dumps(m))
    assert store.load_cached(KEY, tmp_path) is None and not path.exists()


def test_stale_version_deleted(tmp_path, graph, monkeypatch):
    path = store.save_graph(graph, KEY, tmp_path)
    monkeypatch.setattr(store, "GRAPH_VERSION", "999")
    assert store.load_cached(KEY, tmp_path) is None and not path.exists()


def test_atomic_write_leaves_no_partial_entry(tmp_path, graph, monkeypatch):
    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(store.json, "dump", boom)  # fails while writing the manifest, after the data files
    with pytest.raises(OSError):
        store.save_graph(graph, KEY, tmp_path)
    assert list(tmp_path.iterdir()) == []  # neither the entry nor the temporary directory remains


def test_overwrite_replaces_entry(tmp_path, graph):
    store.save_graph(make_toy_graph(), KEY, tmp_path)
    store.save_graph(graph, KEY, tmp_path)
    assert_graphs_equal(graph, store.load_cached(KEY, tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == [KEY]


def test_cache_key_depends_on_every_setting():
    base = dict(digest="d", parser="layout", parser_cfg={"ocr": True}, edge_cfg={"layout_k": 3},
                embed_model="m", version="1", extra={"max_pages": None})
    k0 = store.cache_key(**base)
    assert k0 == store.cache_key(**{**base, "parser_cfg": {"ocr": True}})  # deterministic
    for field, value in [("digest", "e"), ("parser", "fast"), ("parser_cfg", {"ocr": False}),
                         ("edge_cfg", {"layout_k": 4}), ("embed_model", "n"), ("version", "2"),
                         ("extra", {"max_pages": 5})]:
        assert store.cache_key(**{**base, field: value}) != k0, field


def test_parser_version_keys_only_its_own_parser(monkeypatch):
    """A parser's version is in its graphs' keys; a parser without one keys as before (its cached graphs stay valid)."""
    import hashlib
    import json

    base = dict(digest="d", parser_cfg={}, edge_cfg={"layout_k": 3}, embed_model="m", version="5",
                extra={"max_pages": None})

    def unversioned(parser: str) -> str:  # the key's formula before parser versions existed
        payload = {"digest": "d", "parser": parser, "parser_cfg": {}, "edge_cfg": {"layout_k": 3},
                   "embed_model": "m", "version": "5", "extra": {"max_pages": None}}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    assert "fast" not in store.PARSER_VERSIONS
    assert store.cache_key(parser="fast", **base) == unversioned("fast")
    assert store.cache_key(parser="layout", **base) != unversioned("layout")
    before = store.cache_key(parser="layout", **base)
    monkeypatch.setitem(store.PARSER_VERSIONS, "layout", "next")
    assert store.cache_key(parser="layout", **base) != before
    assert store.cache_key(parser="fast", **base) == unversioned("fast")


def test_default_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MAGE_GYM_CACHE", str(tmp_path))
    assert store.default_cache_dir() == tmp_path / "graphs"
    monkeypatch.delenv("MAGE_GYM_CACHE")
    assert store.default_cache_dir() == Path.home() / ".cache" / "mage_gym" / "graphs"


def test_load_path_imports_no_torch_or_parser(tmp_path, graph):
    """Loading a cached graph must not pay for torch, transformers or a parser."""
    store.save_graph(graph, KEY, tmp_path)
    code = textwrap.dedent(f"""
        import sys
        from mage_gym.graph.store import load_cached
        g = load_cached({KEY!r}, {str(tmp_path)!r})
        assert g is not None and g.n_elements == {graph.n_elements}
        heavy = [m for m in ("torch", "transformers", "pymupdf", "pymupdf4llm", "rapidocr_onnxruntime",
                             "mage_gym.graph.parsers") if m in sys.modules]
        print(",".join(heavy))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
