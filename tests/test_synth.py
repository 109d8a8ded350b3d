"""Tests of the synthetic long-document generator (mage_gym.data.synth).

One small corpus (3 documents, 12-16 pages) is generated once per module with
the process pool, then regenerated serially to check byte-identical output.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from mage_gym.data.episode import Episode
from mage_gym.data.synth import (
    QUESTION_KINDS,
    SynthConfig,
    SynthConfigError,
    episode_from_json,
    episode_to_json,
    generate_corpus,
    generate_document,
    load_synth,
    read_manifest,
)

SMALL = SynthConfig(min_pages=10, max_pages=13, questions_per_doc=10)
SEED = 5


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("synth_a")
    generate_corpus(root, 3, seed=SEED, cfg=SMALL, workers=1, progress=False)
    return root


@pytest.fixture(scope="module")
def episodes(corpus: Path) -> list[Episode]:
    return load_synth(corpus)


@pytest.fixture(scope="module")
def layouts(corpus: Path) -> dict[str, dict]:
    man = read_manifest(corpus)
    return {d["doc_id"]: json.loads((corpus / d["layout"]).read_text()) for d in man["docs"]}


def _elements_by_id(layout: dict) -> dict[str, dict]:
    return {e["id"]: e for e in layout["elements"]}


# --- determinism ----------------------------------------------------------------------


def test_same_seed_gives_identical_bytes(corpus: Path, tmp_path: Path) -> None:
    res = generate_document(tmp_path, 1, SEED, SMALL)
    assert (tmp_path / res.file).read_bytes() == (corpus / res.file).read_bytes()
    assert (tmp_path / res.layout_file).read_bytes() == (corpus / res.layout_file).read_bytes()
    mine = [line for line in (corpus / "episodes.jsonl").read_text().splitlines() if f'"{res.doc_id}"' in line]
    assert [json.dumps(r, ensure_ascii=False) for r in res.episodes] == mine


def test_process_pool_matches_serial_run(tmp_path: Path) -> None:
    cfg = SynthConfig(min_pages=3, max_pages=4, questions_per_doc=4)
    generate_corpus(tmp_path / "pool", 2, seed=1, cfg=cfg, workers=2, progress=False)
    generate_corpus(tmp_path / "serial", 2, seed=1, cfg=cfg, workers=1, progress=False)
    for name in ("episodes.jsonl", "corpus.json", "pdfs/synth_s1_d0001.pdf"):
        assert (tmp_path / "pool" / name).read_bytes() == (tmp_path / "serial" / name).read_bytes(), name


def test_different_seed_gives_different_document(corpus: Path, tmp_path: Path) -> None:
    other = generate_document(tmp_path, 0, SEED + 1, SMALL)
    mine = read_manifest(corpus)["docs"][0]
    assert other.sha256 != mine["sha256"]
    mine_questions = [e.question for e in load_synth(corpus) if e.doc_id == mine["doc_id"]]
    assert [r["question"] for r in other.episodes] != mine_questions


# --- corpus shape ---------------------------------------------------------------------------


def test_manifest_and_page_counts(corpus: Path) -> None:
    man = read_manifest(corpus)
    assert man["seed"] == SEED and man["n_docs"] == 3 and len(man["docs"]) == 3
    assert man["config"]["min_pages"] == SMALL.min_pages
    import pymupdf

    for d in man["docs"]:
        assert SMALL.min_pages <= d["n_pages"] <= SMALL.max_pages
        with pymupdf.open(corpus / d["file"]) as doc:
            assert len(doc) == d["n_pages"]


def test_every_question_kind_appears(episodes: list[Episode]) -> None:
    kinds = Counter(ep.extra["question_kind"] for ep in episodes)
    assert set(kinds) == set(QUESTION_KINDS) | {"bridge"}, kinds
    for ep in episodes:
        if ep.extra["question_kind"] == "bridge":
            assert ep.task_tags == ("bridge", f"bridge:{ep.extra['bridge']['type']}")
            assert ep.n_hops == 2
        else:
            assert ep.task_tags == (ep.extra["question_kind"],)
            assert ep.evidence_hops == () and ep.n_hops == 1
        assert ep.benchmark == "synth"
    assert len({ep.episode_id for ep in episodes}) == len(episodes)


def test_gold_regions_inside_pages(corpus: Path, episodes: list[Episode]) -> None:
    pages = {d["doc_id"]: d["n_pages"] for d in read_manifest(corpus)["docs"]}
    for ep in episodes:
        if not ep.answerable:
            continue
        assert ep.evidence_regions, ep.episode_id
        assert ep.evidence_pages == tuple(sorted({r.page for r in ep.evidence_regions}))
        for r in ep.evidence_regions:
            assert 0 <= r.page < pages[ep.doc_id]
            x0, y0, x1, y1 = r.bbox
            assert 0.0 <= x0 < x1 <= 1.0 and 0.0 <= y0 < y1 <= 1.0
            assert r.type in {"paragraph", "table", "chart", "figure", "list", "title"}
        assert ep.evidence_sources and set(ep.evidence_sources) <= {
            "Pure-text (Plain-text)", "Table", "Chart", "Figure", "Generalized-text (Layout)"}


def test_unanswerable_questions_have_no_gold_and_absent_entity(corpus: Path, episodes: list[Episode]) -> None:
    import pymupdf

    unans = [ep for ep in episodes if not ep.answerable]
    assert unans
    for ep in unans:
        assert ep.answer == "Not answerable" and ep.answer_format == "None"
        assert not ep.evidence_pages and not ep.evidence_regions and not ep.extra["gold_element_ids"]
        with pymupdf.open(ep.source) as doc:
            text = " ".join(p.get_text() for p in doc)
        assert ep.extra["absent"] not in text
    for ep in episodes:
        if ep.answerable:
            assert ep.answer_format in {"Int", "Float", "Str", "List"}


def _shown(answer: str) -> str:
    """The answer as the document prints it (thousands separators)."""
    decimals = len(answer.split(".")[1]) if "." in answer else 0
    return f"{float(answer):,.{decimals}f}"


def test_answers_are_where_the_gold_says(episodes: list[Episode], layouts: dict[str, dict]) -> None:
    """Text/table answers are in the PDF's text inside the gold box; chart values only in pixels."""
    import pymupdf

    checked: Counter[str] = Counter()
    docs = {ep.doc_id: pymupdf.open(ep.source) for ep in episodes}
    for ep in episodes:
        kind = ep.extra["question_kind"]
        els = _elements_by_id(layouts[ep.doc_id])
        gold = [els[i] for i in ep.extra["gold_element_ids"]]
        if kind in ("fact_lookup", "table_lookup"):
            page = docs[ep.doc_id][gold[0]["page"]]
            x0, y0, x1, y1 = gold[0]["bbox"]
            clip = pymupdf.Rect(x0 * page.rect.width, y0 * page.rect.height, x1 * page.rect.width,
                                y1 * page.rect.height) + (-1, -1, 1, 1)
            assert _shown(ep.answer) in page.get_text("text", clip=clip), (ep.question, ep.answer)
            checked[kind] += 1
        elif kind == "chart_reading":
            assert gold[0]["type"] == "chart" and gold[0]["text"] == ""
            caption = els[gold[0]["id"] + ".caption"]["text"]
            assert _shown(ep.answer) not in caption, (ep.question, ep.answer)
            # no text on the page restates this fact (another fact may share the value by chance, e.g. in a table)
            _, entity, _, year = ep.extra["fact"]
            for el in layouts[ep.doc_id]["elements"]:
                if el["page"] == gold[0]["page"] and el["type"] == "paragraph" and entity in el["text"]:
                    assert not (_shown(ep.answer) in el["text"] and str(year) in el["text"]), (ep.question, el)
            checked[kind] += 1
        elif kind == "list_count":
            lst = next(g for g in gold if g["type"] == "list")
            assert int(ep.answer) == len(lst["text"].split("\n"))
            checked[kind] += 1
        elif kind == "section_locate":
            title = next(g for g in gold if g["type"] == "title")
            assert title["text"] == f"{ep.extra['section_number']} {ep.answer}"
            para = next(g for g in gold if g["type"] == "paragraph")
            assert ep.extra["initiative"] in para["text"]
            checked[kind] += 1
    for d in docs.values():
        d.close()
    assert set(checked) == {"fact_lookup", "table_lookup", "chart_reading", "list_count", "section_locate"}


def test_multi_page_questions_are_spread(corpus: Path, episodes: list[Episode]) -> None:
    pages = {d["doc_id"]: d["n_pages"] for d in read_manifest(corpus)["docs"]}
    multi = [ep for ep in episodes if ep.extra["question_kind"] == "multi_page"]
    assert multi
    for ep in multi:
        assert len(ep.evidence_pages) == 2 and ep.multi_page
        gap = ep.evidence_pages[1] - ep.evidence_pages[0]
        assert gap >= max(2, math.ceil(SMALL.evidence_spread * pages[ep.doc_id]))


def test_near_duplicate_distractors_on_other_pages(episodes: list[Episode], layouts: dict[str, dict]) -> None:
    with_d = 0
    relations: Counter[str] = Counter()
    for ep in episodes:
        for d in ep.extra.get("distractors", []):
            assert d["page"] not in ep.evidence_pages
            el = _elements_by_id(layouts[ep.doc_id])[d["element_id"]]
            assert el["page"] == d["page"]
            relations[d["relation"].split(":")[0]] += 1
        with_d += bool(ep.extra.get("distractors"))
    value_qs = [ep for ep in episodes if ep.extra["question_kind"] in ("fact_lookup", "table_lookup", "chart_reading")]
    assert with_d >= len(value_qs) // 2
    assert relations["other_year"] and relations["other_entity"]


def test_no_distractors_scheduled_at_zero_density(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Near-duplicates queued for later pages: none at density 0, some at density 1 (same seed)."""
    from mage_gym.data.synth.planner import Planner

    schedule, queued = Planner._schedule_near_duplicates, []

    def counted(self, key, now):  # noqa: ANN001
        before = len(self._pending)
        schedule(self, key, now)
        queued.append(len(self._pending) - before)

    monkeypatch.setattr(Planner, "_schedule_near_duplicates", counted)
    per_density = {}
    for density in (0.0, 1.0):
        queued.clear()
        cfg = SynthConfig(min_pages=8, max_pages=8, questions_per_doc=6, distractor_density=density)
        res = generate_document(tmp_path / str(density), 0, 3, cfg)
        assert res.n_pages == 8 and res.episodes and queued, "facts were drawn, so scheduling was asked"
        per_density[density] = sum(queued)
    assert per_density[0.0] == 0 and per_density[1.0] > 0


# --- IO ------------------------------------------------------------------------------------


def test_load_synth_round_trip(corpus: Path, episodes: list[Episode]) -> None:
    lines = (corpus / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == len(episodes)
    for line, ep in zip(lines, episodes):
        rec = json.loads(line)
        assert not Path(rec["source"]).is_absolute()
        assert Path(ep.source).is_absolute() and Path(ep.source).is_file()
        back = episode_from_json(episode_to_json(ep))
        assert back == ep and back.extra == ep.extra


def test_load_synth_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_synth(tmp_path / "nope")


def test_files_stay_small(corpus: Path) -> None:
    man = read_manifest(corpus)
    for d in man["docs"]:
        assert d["bytes"] / d["n_pages"] < 20 * 1024, d  # fonts subset, charts as 64-colour PNG


def test_config_validation() -> None:
    with pytest.raises(SynthConfigError):
        SynthConfig(min_pages=10, max_pages=5)
    with pytest.raises(SynthConfigError):
        SynthConfig.from_dict({"kind_weights": {"riddles": 1.0}})
    with pytest.raises(SynthConfigError):
        SynthConfig.from_dict({"pages": 3})
    cfg = SynthConfig.from_dict({"kind_weights": {"unanswerable": 0.0}})
    assert cfg.kind_weights["unanswerable"] == 0.0 and cfg.kind_weights["fact_lookup"] > 0


# --- parse check ------------------------------------------------------------------------------


def test_fast_parser_sees_what_was_drawn(corpus: Path, layouts: dict[str, dict]) -> None:
    from mage_gym.data.synth.parse_check import REQUIRED_TYPES, check_document

    doc = read_manifest(corpus)["docs"][0]
    res = check_document(corpus / doc["file"], layouts[doc["doc_id"]]["elements"], "fast")
    for t in REQUIRED_TYPES:
        st = res.by_type.get(t)
        if st is None or st.n == 0:
            continue
        assert st.compatible == st.n, (t, st, res.misses[:5])
    assert res.by_type["paragraph"].n > 0 and res.by_type["table"].n > 0


def test_gold_resolves_to_parsed_elements(corpus: Path, episodes: list[Episode]) -> None:
    """Every gold region lands on graph element nodes (no page fallback) with the fast parser."""
    from mage_gym.data.gold import resolve_gold_detailed
    from mage_gym.graph.build import build_graph

    doc = read_manifest(corpus)["docs"][0]
    graph = build_graph(str(corpus / doc["file"]), parser="fast", cache=False, encoder=None)
    mine = [ep for ep in episodes if ep.doc_id == doc["doc_id"] and ep.answerable]
    assert mine
    for ep in mine:
        gold, stats = resolve_gold_detailed(ep, graph)
        assert stats.region_items == len(ep.evidence_regions) and stats.region_page_fallback == 0, ep.question
        assert gold.level == "element"
