"""Benchmark loaders: counts and conversions on the real files, defects on crafted ones."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mage_gym.data.episode import (
    FLAG_ALL_PAGES_OUT_OF_RANGE,
    FLAG_BAD_FIELD,
    FLAG_EMPTY_EVIDENCE,
    FLAG_PAGES_OUT_OF_RANGE,
    FLAG_REGION_UNMATCHED,
    FLAG_UNANSWERABLE_WITH_EVIDENCE,
    Episode,
    Region,
)
from mage_gym.data.financebench import load_financebench
from mage_gym.data.io import (
    DatasetNotFoundError,
    episode_from_dict,
    episode_to_dict,
    load_episodes,
    parse_int_list,
    parse_literal_list,
    save_episodes,
)
from mage_gym.data.longdocurl import load_longdocurl, parse_boxes
from mage_gym.data.mmlongbench import load_mmlongbench

# --- helpers -------------------------------------------------------------------


def _pdf(path: Path, n_pages: int, size: tuple[float, float] = (612, 792)) -> Path:
    import pymupdf

    doc = pymupdf.open()
    for i in range(n_pages):
        page = doc.new_page(width=size[0], height=size[1])
        page.insert_text((72, 72), f"page {i}")
    path.parent.mkdir(parents=True, exist_ok=True)
    doc.save(str(path))
    doc.close()
    return path


def _png(path: Path) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 10), "white").save(path)


def _by_question(episodes: list[Episode], prefix: str) -> Episode:
    hits = [e for e in episodes if e.question.startswith(prefix)]
    assert len(hits) == 1, f"{len(hits)} episodes start with {prefix!r}"
    return hits[0]


# --- field parsing ---------------------------------------------------------------


def test_literal_lists_parse_without_eval() -> None:
    assert parse_literal_list("['Table', 'Chart']") == ["Table", "Chart"]
    assert parse_literal_list('["a"]') == ["a"]
    assert parse_literal_list("[]") == [] and parse_literal_list("") == []
    assert parse_literal_list("__import__('os').getcwd()") is None
    assert parse_literal_list("[1, 2") is None
    assert parse_int_list("[5, '7', 3.0]") == [5, 7, 3]
    assert parse_int_list("[1.5]") is None
    assert parse_int_list("['x']") is None


def test_episode_json_roundtrip(tmp_path: Path) -> None:
    ep = Episode(episode_id="e1", benchmark="longdocurl", doc_id="d", source="/x", question="q?", answer="a",
                 answer_format="String", evidence_pages=(3, 4), page_window=(2, 9),
                 evidence_regions=(Region(3, (0.1, 0.2, 0.3, 0.4), "Table"),), task_tags=("Locating",),
                 flags=(FLAG_REGION_UNMATCHED,), extra={"k": [1, 2]})
    back = episode_from_dict(json.loads(json.dumps(episode_to_dict(ep))))
    assert back == ep and back.extra == ep.extra
    save_episodes(tmp_path / "eps.jsonl", [ep, ep.with_split("test")])
    loaded = load_episodes(tmp_path / "eps.jsonl")
    assert [e.split for e in loaded] == ["train", "test"] and loaded[0] == ep


# --- real data -------------------------------------------------------------------
#
# Counts are read off the source files themselves (not pinned): the dev data grows
# (2026-12-03: 40 -> 62 MMLongBench documents, 18 -> 53 FinanceBench filings), and
# what these tests check is that the loader keeps every question and document.


def _mmlongbench_source(root: Path) -> list[dict]:
    return json.loads((root / "mmlongbench-dev" / "samples.json").read_text(encoding="utf-8"))


def _financebench_source(root: Path) -> list[dict]:
    path = root / "financebench-dev" / "financebench_open_source.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _has_pages(field: str) -> bool:
    return bool(re.findall(r"\d+", field))


@pytest.mark.real_data
def test_mmlongbench_real_counts_and_page_conversion(data_root: Path) -> None:
    load = load_mmlongbench(data_root / "mmlongbench-dev", use_mmdocir=False)
    eps = load.episodes
    source = _mmlongbench_source(data_root)
    n_questions, n_docs = len(source), len({r["doc_id"] for r in source})
    assert n_questions >= 517 and n_docs >= 62  # the dev set as of 2026-12-03 (it only grows)
    assert len(eps) == n_questions and load.report.episodes == n_questions
    assert sum(not e.answerable for e in eps) == sum(r["answer_format"] == "None" for r in source)
    assert load.report.documents == n_docs and not load.report.skipped
    assert all(e.answer_format == "None" for e in eps if not e.answerable)
    # samples.json: evidence_pages "[5]" and "[19, 20]" (1-based)
    first = _by_question(eps, "According to the report, how do 5% of the Latinos")
    assert first.evidence_pages == (4,) and first.evidence_sources == ("Chart",)
    assert first.doc_id == "PH_2016.06.08_Economy-Final" and Path(first.source).is_file()
    second = _by_question(eps, "According to the report, which one is greater in population")
    assert second.evidence_pages == (18, 19) and second.multi_page
    assert len({e.episode_id for e in eps}) == n_questions


@pytest.mark.real_data
def test_mmlongbench_real_out_of_range_flagged_not_fatal(data_root: Path) -> None:
    eps = load_mmlongbench(data_root / "mmlongbench-dev", use_mmdocir=False).episodes
    oor = [e for e in eps if FLAG_ALL_PAGES_OUT_OF_RANGE in e.flags]
    assert len(oor) >= 2  # FACTS: 2 of the first 351 cite pages outside their PDF ("[0]" in a 1-based list)
    assert all(e.evidence_pages == () and not e.usable_for_training for e in oor)
    assert all(e.extra["dropped_evidence_pages"] == [-1] for e in oor)
    source = _mmlongbench_source(data_root)
    empty = sum(r["answer_format"] != "None" and not _has_pages(r["evidence_pages"]) for r in source)
    unanswerable_with = sum(r["answer_format"] == "None" and _has_pages(r["evidence_pages"]) for r in source)
    assert empty >= 3 and unanswerable_with >= 4  # the defects data/README.md names are really there
    assert sum(FLAG_EMPTY_EVIDENCE in e.flags for e in eps) == empty
    assert sum(FLAG_UNANSWERABLE_WITH_EVIDENCE in e.flags for e in eps) == unanswerable_with


@pytest.mark.real_data
def test_mmlongbench_real_mmdocir_regions(data_root: Path) -> None:
    load = load_mmlongbench(data_root / "mmlongbench-dev")
    eps = load.episodes
    with_regions = [e for e in eps if e.evidence_regions]
    assert len(with_regions) >= 200
    assert not any(e.evidence_regions for e in eps if not e.answerable)
    for e in with_regions:
        for r in e.evidence_regions:
            x0, y0, x1, y1 = r.bbox
            assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
            assert r.page in e.evidence_pages
    first = _by_question(eps, "According to the report, how do 5% of the Latinos")
    (reg,) = first.evidence_regions  # MMDocIR: page 4, page_size [612, 792], bbox [366, 229, 514, 383]
    assert reg.page == 4 and reg.type == "Chart"
    assert reg.bbox == pytest.approx((366 / 612, 229 / 792, 514 / 612, 383 / 792))
    # MMDocIR's pages repair the "[0]" annotation of the ITC logo question, flag kept
    itc = _by_question(eps, "WHAT IS ITC LIMITED LOGO COLOR?")
    assert itc.evidence_pages == (0,) and itc.usable_for_training and FLAG_ALL_PAGES_OUT_OF_RANGE in itc.flags
    assert load.report.counters["mmdocir_joined"] == len(with_regions)
    assert load.report.counters["mmdocir_pages_revised"] >= 1


@pytest.mark.real_data
def test_financebench_real(data_root: Path) -> None:
    load = load_financebench(data_root / "financebench-dev")
    eps = load.episodes
    source = _financebench_source(data_root)
    n_docs = len({r["doc_name"] for r in source})
    assert len(source) >= 91 and n_docs >= 53  # the dev set as of 2026-12-03 (it only grows)
    assert len(eps) == len(source) and load.report.documents == n_docs and not load.report.skipped
    assert all(e.answer_format == "Str" and e.evidence_sources == ("unknown",) for e in eps)
    assert all(e.evidence_text and len(e.evidence_text) == len(e.extra["evidence_text_pages"]) for e in eps)
    ep = next(e for e in eps if e.episode_id == "financebench_id_04254")
    assert ep.evidence_pages == (85, 87)  # 0-based in the source, kept as is
    assert ep.doc_id == "AMERICANWATERWORKS_2021_10K" and ep.source.endswith("AMERICANWATERWORKS_2021_10K.pdf")


@pytest.mark.real_data
def test_longdocurl_real(data_root: Path) -> None:
    from mage_gym.graph.sources import doc_id_for, open_source

    load = load_longdocurl(data_root / "longdocurl-sample")
    assert len(load.episodes) == 2 and load.report.documents == 2
    ep = next(e for e in load.episodes if e.episode_id == "summary2title_4127644_8_37_8")
    assert ep.page_window == (7, 36)  # start_end_idx [8, 37], 1-based inclusive
    assert ep.evidence_pages == (14, 15)  # evidence_pages [15, 16]
    assert {"Locating", "summary2title"} <= set(ep.task_tags)
    src = open_source(ep.source)
    assert src.kind == "images" and len(src.page_files) == 98
    assert Path(src.page_files[14]).name == "4127644_14.png" and doc_id_for(ep.source) == ep.doc_id
    lst = next(e for e in load.episodes if e.answer_format == "List")
    assert len(json.loads(lst.answer)) == 2


# --- crafted messy inputs ----------------------------------------------------------


def _mmlb_root(tmp_path: Path) -> Path:
    root = tmp_path / "mmlb"
    _pdf(root / "documents" / "a.pdf", 3)
    _pdf(root / "documents" / "b.pdf", 5, size=(300, 400))
    rec = lambda doc, q, pages, fmt="Str", ans="x", src="['Table']": {  # noqa: E731
        "doc_id": doc, "doc_type": "t", "question": q, "answer": ans, "evidence_pages": pages,
        "evidence_sources": src, "answer_format": fmt}
    samples = [
        rec("a.pdf", "good", "[2]"),
        rec("a.pdf", "bad literal", "[1, 2"),
        rec("missing.pdf", "missing doc", "[1]"),
        rec("missing.pdf", "missing doc again", "[1]"),
        rec("a.pdf", "empty", "[]"),
        rec("a.pdf", "unanswerable", "[2]", fmt="None", ans="Not answerable"),
        rec("a.pdf", "partly out", "[2, 9]"),
        rec("a.pdf", "all out", "[0]"),
        rec("a.pdf", "bad sources", "[1]", src="Table, Chart"),
        rec("b.pdf", "joined   question", "[1]"),
        "not a record",
    ]
    (root / "samples.json").write_text(json.dumps(samples))
    layout = {"doc_name": "b.pdf", "questions": [
        {"Q": "joined question", "A": "x", "page_id": [3], "type": "['Chart', 'Table']",
         "layout_mapping": [{"page": 3, "page_size": [600, 800], "bbox": [60, 80, 300, 400]},
                            {"page": 99, "page_size": [600, 800], "bbox": [0, 0, 1, 1]}]}]}
    (root / "mmdocir_layout.jsonl").write_text(json.dumps(layout) + "\n{broken\n")
    return root


def test_mmlongbench_messy_inputs(tmp_path: Path) -> None:
    load = load_mmlongbench(_mmlb_root(tmp_path))
    eps = {e.question: e for e in load.episodes}
    rep = load.report
    assert rep.skipped["missing_document"] == 2 and rep.skipped["bad_record"] == 1
    assert any("missing.pdf" in n for n in rep.notes)
    assert len(eps) == 8
    assert eps["good"].evidence_pages == (1,) and eps["good"].flags == ()
    assert FLAG_BAD_FIELD in eps["bad literal"].flags and FLAG_EMPTY_EVIDENCE not in eps["bad literal"].flags
    assert not eps["bad literal"].usable_for_training
    assert eps["empty"].flags == (FLAG_EMPTY_EVIDENCE,) and not eps["empty"].usable_for_training
    un = eps["unanswerable"]
    assert not un.answerable and FLAG_UNANSWERABLE_WITH_EVIDENCE in un.flags and un.usable_for_training
    assert eps["partly out"].evidence_pages == (1,) and eps["partly out"].flags == (FLAG_PAGES_OUT_OF_RANGE,)
    assert eps["all out"].flags == (FLAG_ALL_PAGES_OUT_OF_RANGE,) and not eps["all out"].usable_for_training
    assert FLAG_BAD_FIELD in eps["bad sources"].flags and eps["bad sources"].evidence_pages == (0,)
    # MMDocIR join on whitespace-normalised text; pages from MMDocIR; box scaled by its page_size
    j = eps["joined   question"]
    assert j.evidence_pages == (3,) and j.extra["source_evidence_pages"] == [0]
    (reg,) = j.evidence_regions
    assert reg.bbox == pytest.approx((0.1, 0.1, 0.5, 0.5)) and reg.type == "Chart|Table"
    assert FLAG_REGION_UNMATCHED in j.flags  # the box on page 99 could not be placed
    assert rep.counters["mmdocir_page_size_mismatch"] == 1  # 600x800 stated, 300x400 real
    assert rep.counters["mmdocir_bad_lines"] == 1
    assert rep.flagged == sum(1 for e in load.episodes if e.flags)
    assert rep.excluded_from_training == 3


def test_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    for loader in (load_mmlongbench, load_financebench, load_longdocurl):
        with pytest.raises(DatasetNotFoundError):
            loader(tmp_path / "nowhere")


def test_financebench_messy_inputs(tmp_path: Path) -> None:
    root = tmp_path / "fb"
    _pdf(root / "pdfs" / "ACME_2020_10K.pdf", 4)
    ev = lambda p, t="Revenue was 5": {"doc_name": "ACME_2020_10K", "evidence_page_num": p,  # noqa: E731
                                       "evidence_text": t, "evidence_text_full_page": t}
    lines = [
        json.dumps({"financebench_id": "a", "doc_name": "ACME_2020_10K", "question": "q1", "answer": "5",
                    "evidence": [ev(1), ev(7, "lost")]}),
        "{not json",
        json.dumps({"financebench_id": "b", "doc_name": "GONE_2020_10K", "question": "q2", "answer": "1",
                    "evidence": [ev(0)]}),
        json.dumps({"financebench_id": "c", "doc_name": "ACME_2020_10K", "question": "q3", "answer": "1",
                    "evidence": "page 2"}),
        json.dumps({"financebench_id": "d", "doc_name": "ACME_2020_10K", "question": "q4", "answer": "1",
                    "evidence": []}),
    ]
    (root / "financebench_open_source.jsonl").write_text("\n".join(lines) + "\n")
    load = load_financebench(root)
    eps = {e.episode_id: e for e in load.episodes}
    assert load.report.skipped == {"bad_json_line": 1, "missing_document": 1}
    a = eps["a"]
    assert a.evidence_pages == (1,) and a.evidence_text == ("Revenue was 5",)
    assert a.extra["evidence_text_pages"] == [1] and a.flags == (FLAG_PAGES_OUT_OF_RANGE,)
    assert FLAG_BAD_FIELD in eps["c"].flags and not eps["c"].usable_for_training
    assert eps["d"].flags == (FLAG_EMPTY_EVIDENCE,)


def _ldu_record(doc_no: str, qid: str, window: list[int], pages: list[int], detailed: str = "",
                fmt: str = "String") -> dict:
    return {"question_id": qid, "doc_no": doc_no, "total_pages": 6, "start_end_idx": window,
            "question_type": "extract", "question": f"question {qid}", "answer": 3.5,
            "detailed_evidences": detailed, "evidence_pages": pages, "evidence_sources": ["Table"],
            "answer_format": fmt, "task_tag": "Understanding",
            "images": [f"/far/away/pdf_pngs/4000-4999/{doc_no[:4]}/{doc_no}_{i}.png"
                       for i in range(window[0] - 1, window[1])]}


def test_longdocurl_messy_inputs(tmp_path: Path) -> None:
    root = tmp_path / "ldu"
    folder = root / "pdf_pngs" / "4000-4999" / "4001"
    for i in range(6):
        _png(folder / f"4001001_{i}.png")
    _png(folder / "4001999_0.png")  # another document shares the folder
    gap = root / "pdf_pngs" / "4000-4999" / "4002"
    for i in (0, 1, 3):
        _png(gap / f"4002000_{i}.png")
    recs = [
        _ldu_record("4001001", "boxes", [2, 5], [3, 4],
                    "See <box>(0.1, 0.2, 0.5, 0.6)</box>, page 4 and <box>(0.0, 0.0, 0.3, 0.3)</box>."),
        _ldu_record("4001001", "single", [2, 5], [3], "In <box>(0.2, 0.2, 0.4, 0.4)</box>"),
        _ldu_record("4001001", "outside window", [2, 3], [3, 5]),
        _ldu_record("4002000", "gappy", [1, 4], [1]),
        _ldu_record("4003000", "no folder", [1, 2], [1]),
    ]
    (root / "LongDocURL.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    load = load_longdocurl(root)
    eps = {e.episode_id: e for e in load.episodes}
    assert load.report.skipped == {"page_images_incomplete": 1, "missing_document": 1}
    assert load.report.counters["shared_image_folder"] == 1
    b = eps["boxes"]
    assert b.page_window == (1, 4) and b.evidence_pages == (2, 3) and b.answer == "3.5"
    assert b.source.endswith("4001001_*.png") and len(b.extra["page_files"]) == 6
    (reg,) = b.evidence_regions  # the first box names page 4 (1-based); the second is ambiguous
    assert reg.page == 3 and reg.bbox == pytest.approx((0.1, 0.2, 0.5, 0.6)) and reg.type == "Table"
    assert FLAG_REGION_UNMATCHED in b.flags
    assert eps["single"].evidence_regions[0].page == 2 and eps["single"].flags == ()
    out = eps["outside window"]
    assert out.page_window == (1, 2) and out.evidence_pages == (2,) and FLAG_PAGES_OUT_OF_RANGE in out.flags
    assert {"Understanding", "extract"} <= set(b.task_tags)


def test_parse_boxes_page_mentions() -> None:
    text = ("1. A (<box>(0.21, 0.83, 0.63, 0.85)</box>, page 26) 2. B (<box>(0.1, 0.2, 0.3, 0.4)</box> "
            "<box>(0.5, 0.5, 0.6, 0.6)</box>, page 27). On page 28: <box>(0.1, 0.1, 0.2, 0.2)</box> and "
            "<box>(0.3, 0.3, 0.4, 0.4)</box>")
    placed, unplaced = parse_boxes(text, [26, 27, 28])
    assert [p for p, _ in placed] == [26, 27, 27, 28, 28] and unplaced == 0
    assert parse_boxes("<box>(0.1, 0.1, 0.2, 0.2)</box>, page 9", [5, 6]) == ([], 1)
    assert parse_boxes("<box>(0.1, 0.1, 0.2, 0.2)</box>", [5]) == ([(5, (0.1, 0.1, 0.2, 0.2))], 0)


def test_dataset_stats_counts_crafted_load(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "dataset_stats", Path(__file__).resolve().parents[1] / "experiments" / "quality" / "dataset_stats.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    load = load_mmlongbench(_mmlb_root(tmp_path))
    stats = mod.compute_stats(load.episodes, load.report)
    assert stats["episodes"] == 8 and stats["documents"] == 2
    assert stats["skipped"] == {"missing_document": 2, "bad_record": 1}
    assert stats["by_pages"] == {"single": 4, "multi": 0, "none": 4}  # 3 without gold + 1 unanswerable
    assert stats["by_answer_format"] == {"Str": 7, "None": 1}
    assert stats["excluded_from_training"] == 3 and stats["flags"][FLAG_BAD_FIELD] == 2
    assert sum(stats["by_split"].values()) == 8
