"""FinanceBench regrouped by company into conversations (a format check, not real follow-ups)."""
from __future__ import annotations

from pathlib import Path

import pytest

from mage_gym.data.financebench_conversation import (
    FORMAT_CHECK_NOTE,
    chunk_sizes,
    company_of,
    load_financebench_conversation,
)
from mage_gym.data.io import data_root, load_episodes, save_episodes
from mage_gym.data.splits import limit_episodes, select_split

ROOT = data_root("financebench-dev")
needs_data = pytest.mark.skipif(not (ROOT / "financebench_open_source.jsonl").is_file(),
                                reason=f"FinanceBench dev data not found at {ROOT} (set MAGE_GYM_DATA)")


def test_company_of_doc_name() -> None:
    assert company_of("3M_2018_10K") == "3M"
    assert company_of("JOHNSON_JOHNSON_2022Q4_EARNINGS") == "JOHNSON_JOHNSON"
    assert company_of("PEPSICO_2023_8K_dated-2023-05-05") == "PEPSICO"
    assert company_of("NOYEAR") == "NOYEAR"


@pytest.mark.parametrize("n", range(0, 14))
def test_chunk_sizes(n: int) -> None:
    sizes = chunk_sizes(n)
    if n < 2:
        assert sizes == []
    else:
        assert sum(sizes) == n and all(2 <= s <= 4 for s in sizes) and max(sizes) - min(sizes) <= 1


@needs_data
def test_groups_by_company_over_real_questions(tmp_path: Path) -> None:
    from mage_gym.data.financebench import load_financebench

    single = {e.episode_id: e for e in load_financebench(ROOT).episodes}
    load = load_financebench_conversation(ROOT)
    convs, report = load.episodes, load.report
    assert convs and FORMAT_CHECK_NOTE in report.notes
    assert any(n.startswith("group ") for n in report.notes)
    assert report.counters["groups"] == len({c.group for c in convs})

    used: list[str] = []
    for c in convs:
        assert c.benchmark == "financebench" and c.extra["format_check"] is True
        assert 2 <= c.n_turns <= 4 and c.kind in ("conversation", "cross_document_conversation")
        for t, eid in zip(c.turns, c.extra["source_episode_ids"]):
            (ev,) = t.evidence
            assert ev == single[eid], "each turn's evidence is the original FinanceBench episode"
            assert t.question == ev.question and t.answer == ev.answer
            assert company_of(Path(ev.source).stem) == c.group
        assert set(c.doc_ids) == {e.doc_id for t in c.turns for e in t.evidence}, "documents = filings used"
        used += c.extra["source_episode_ids"]
    assert len(used) == len(set(used))
    # file order inside a company, and every question of a company with two or more is used
    order = list(single)
    for c in convs:
        idx = [order.index(e) for e in c.extra["source_episode_ids"]]
        assert idx == sorted(idx)
    per_company: dict[str, int] = {}
    for e in single.values():
        per_company[company_of(Path(e.source).stem)] = per_company.get(company_of(Path(e.source).stem), 0) + 1
    assert len(used) == sum(n for n in per_company.values() if n >= 2)
    assert report.skipped.get("company_with_one_question", 0) == sum(n for n in per_company.values() if n == 1)

    for seed in range(5):
        by_company: dict[str, set[str]] = {}
        for c in select_split(convs, "all", seed=seed):
            by_company.setdefault(c.group, set()).add(c.split)
        assert all(len(s) == 1 for s in by_company.values())
    assert len(limit_episodes(convs, 2)) == 2
    save_episodes(tmp_path / "c.jsonl", convs)
    assert load_episodes(tmp_path / "c.jsonl") == convs


@needs_data
def test_registry_name() -> None:
    from mage_gym.data.registry import load_dataset_with_report

    load = load_dataset_with_report("financebench_conversation", split="test", limit=2)
    assert load.report.benchmark == "financebench_conversation"
    assert all(c.split == "test" for c in load.episodes) and len(load.episodes) <= 2
