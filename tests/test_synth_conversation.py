"""Synthetic conversations: later turns refer back, every turn has its own exact gold and answer."""
from __future__ import annotations

from pathlib import Path

import pytest

from mage_gym.data.composite import CompositeEpisode
from mage_gym.data.io import load_episodes, save_episodes
from mage_gym.data.splits import select_split
from mage_gym.data.synth.composite_corpus import check_groups, load_composite_corpus, manifest_matches
from mage_gym.data.synth.config import SynthConfig
from mage_gym.data.synth.conversation import (
    CROSS_FOLLOW_UPS,
    FOLLOW_UPS,
    GENERATOR,
    ConversationConfig,
    generate_conversation_corpus,
    load_synth_conversation,
)

SEED = 0
CFG = ConversationConfig(n_docs=2, conversations_per_doc=3, cross_groups=1, conversations_per_cross_group=2,
                         doc=SynthConfig(min_pages=6, max_pages=6, questions_per_doc=0, bridge_questions_per_doc=0))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[CompositeEpisode]]:
    root = tmp_path_factory.mktemp("conversation")
    manifest = generate_conversation_corpus(root, seed=SEED, ccfg=CFG)
    return root, manifest, load_composite_corpus(root)


def test_generation_is_deterministic(corpus, tmp_path: Path) -> None:
    root, manifest, _ = corpus
    again = generate_conversation_corpus(tmp_path, seed=SEED, ccfg=CFG)
    assert (tmp_path / "episodes.jsonl").read_bytes() == (root / "episodes.jsonl").read_bytes()
    assert [d["sha256"] for d in again["docs"]] == [d["sha256"] for d in manifest["docs"]]


def test_shapes_and_kinds(corpus) -> None:
    _, manifest, episodes = corpus
    assert {ep.kind for ep in episodes} == {"conversation", "cross_document_conversation"}
    assert len(manifest["groups"]) == CFG.n_docs + CFG.cross_groups
    for ep in episodes:
        assert CFG.min_turns <= ep.n_turns <= CFG.max_turns
        kinds = ep.extra["turn_kinds"]
        assert kinds[0] == "first" and len(kinds) == ep.n_turns
        assert set(kinds[1:]) <= set(FOLLOW_UPS) | set(CROSS_FOLLOW_UPS)
        assert [t.task_tags for t in ep.turns] == [("conversation", k) for k in kinds]


def test_later_turns_need_the_earlier_ones(corpus) -> None:
    """A follow-up leaves out what the conversation already fixed: entity, metric, year or report."""
    _, _, episodes = corpus
    for ep in episodes:
        standalone = ep.extra["standalone_questions"]
        assert ep.turns[0].question == standalone[0]
        for t, full in zip(ep.turns[1:], standalone[1:]):
            assert t.question != full
            assert len(t.question) < len(full)
            ev = t.evidence[0]
            _, entity, _, year = ev.extra["facts"][0]
            kind = t.task_tags[1]
            if kind in ("prior_year", "other_year", "other_metric", "section"):
                assert entity not in t.question, t.question
            if kind in ("prior_year", "other_metric", "section", "other_entity"):
                assert str(year) not in t.question, t.question
            if kind in ("other_document", "compare", "combine"):
                assert entity not in t.question and str(year) not in t.question


def test_each_turn_has_its_own_gold_and_answer(corpus) -> None:
    _, _, episodes = corpus
    for ep in episodes:
        for t in ep.turns:
            assert t.answerable and t.evidence
            kind = t.task_tags[1]
            vals = [e.extra["document_values"][0] for e in t.evidence]
            for e in t.evidence:
                assert e.question == t.question and e.doc_id in ep.doc_ids
                assert e.extra["gold_element_ids"] and e.evidence_regions
            if kind == "section":
                assert len(t.evidence[0].evidence_regions) == 2  # the heading and the figure
                assert t.evidence[0].evidence_regions[0].type == "title"
            elif kind == "compare":
                orgs = [e.extra["org"] for e in t.evidence]
                assert t.answer == orgs[max(range(2), key=lambda i: float(vals[i]))]
            elif kind == "combine":
                decimals = len(t.answer.split(".")[1]) if "." in t.answer else 0
                assert float(t.answer) == pytest.approx(round(sum(float(v) for v in vals), decimals))
            else:
                assert len(t.evidence) == 1 and t.answer == vals[0]
        # a turn reading another figure has other gold than the turn before it
        facts = [tuple(tuple(f) for e in t.evidence for f in e.extra["facts"]) for t in ep.turns]
        for i in range(1, ep.n_turns):
            if ep.turns[i].task_tags[1] in ("prior_year", "other_year", "other_metric", "other_entity"):
                assert facts[i] != facts[i - 1]


def test_gold_resolves_on_each_documents_graph(corpus) -> None:
    from mage_gym.data.gold import resolve_gold
    from mage_gym.graph import build_graph

    _, _, episodes = corpus
    graphs: dict = {}
    for ep in episodes:
        for t in ep.turns:
            for e in t.evidence:
                if e.doc_id not in graphs:
                    graphs[e.doc_id] = build_graph(e.source, parser="fast", cache=False, encoder=None, progress=False)
                gold = resolve_gold(e, graphs[e.doc_id])
                assert gold.items and gold.level == "element", f"{ep.episode_id} {t.question}"
                assert len(gold.items) == len(e.evidence_regions)


def test_splits_keep_a_group_together_and_round_trip(corpus, tmp_path: Path) -> None:
    _, manifest, episodes = corpus
    assert check_groups(episodes) == manifest["groups"]
    for seed in range(6):
        by_group: dict[str, set[str]] = {}
        for ep in select_split(episodes, "all", seed=seed):
            by_group.setdefault(ep.group, set()).add(ep.split)
        assert all(len(s) == 1 for s in by_group.values())
    save_episodes(tmp_path / "e.jsonl", episodes)
    assert load_episodes(tmp_path / "e.jsonl") == episodes


def test_default_corpus_is_generated_once_then_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAGE_GYM_CACHE", str(tmp_path))
    small = ConversationConfig(n_docs=1, conversations_per_doc=1, cross_groups=0, doc=CFG.doc)
    first = load_synth_conversation(ccfg=small)
    root = tmp_path / "synth" / "conversation_s0"
    assert manifest_matches(root, GENERATOR, 0, small.to_dict())
    assert any("generated" in n for n in first.report.notes)
    stamp = (root / "episodes.jsonl").stat().st_mtime_ns
    second = load_synth_conversation(ccfg=small)
    assert (root / "episodes.jsonl").stat().st_mtime_ns == stamp and not second.report.notes
    assert second.episodes == first.episodes
