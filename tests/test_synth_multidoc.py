"""Cross-document synthetic questions: deterministic, answers from the drawn values, gold on every document's graph."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mage_gym.data.composite import CompositeEpisode
from mage_gym.data.io import load_episodes, save_episodes
from mage_gym.data.splits import limit_episodes, select_split
from mage_gym.data.synth.composite_corpus import check_groups, load_composite_corpus
from mage_gym.data.synth.config import SynthConfig
from mage_gym.data.synth.multidoc import CROSS_KINDS, MultiDocConfig, generate_multidoc_corpus
from mage_gym.data.synth.world import format_number

SEED = 0
#: two groups: with seed 0 the first has three reports and the second two (drawn from the group's stream)
CFG = MultiDocConfig(n_groups=2, questions_per_group=5,
                     doc=SynthConfig(min_pages=6, max_pages=6, questions_per_doc=0, bridge_questions_per_doc=0))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[CompositeEpisode]]:
    root = tmp_path_factory.mktemp("multidoc")
    manifest = generate_multidoc_corpus(root, seed=SEED, mcfg=CFG)
    return root, manifest, load_composite_corpus(root)


def test_generation_is_deterministic(corpus, tmp_path: Path) -> None:
    root, manifest, _ = corpus
    again = generate_multidoc_corpus(tmp_path, seed=SEED, mcfg=CFG)
    assert (tmp_path / "episodes.jsonl").read_bytes() == (root / "episodes.jsonl").read_bytes()
    assert [d["sha256"] for d in again["docs"]] == [d["sha256"] for d in manifest["docs"]]
    other = generate_multidoc_corpus(tmp_path / "other", seed=SEED + 1, mcfg=CFG)
    assert [d["sha256"] for d in other["docs"]] != [d["sha256"] for d in manifest["docs"]]


def test_groups_share_entities_and_differ_in_organisation(corpus) -> None:
    root, manifest, episodes = corpus
    sizes = sorted(len(v) for v in manifest["groups"].values())
    assert sizes == [2, 3]
    for gid, doc_ids in manifest["groups"].items():
        docs = [d for d in manifest["docs"] if d["doc_id"] in doc_ids]
        assert len({d["domain"] for d in docs}) == 1, "a group's reports share a domain (same metric names)"
        assert len({d["title"].split()[0] for d in docs}) == len(docs), "each report is another organisation's"
    kinds = {ep.extra["question_kind"] for ep in episodes}
    assert kinds == set(CROSS_KINDS)
    for ep in episodes:
        assert ep.kind == "cross_document" and ep.n_turns == 1
        assert set(ep.doc_ids) == set(manifest["groups"][ep.group]), "every report of the group is in the episode"
        assert all(Path(s).is_absolute() and Path(s).is_file() for s in ep.sources)
        # the shared entity, metric and year are the same fact key in every document the question reads
        keys = {tuple(e.extra["facts"][0]) for e in ep.turns[0].evidence}
        assert len(keys) == 1 and len(ep.turns[0].evidence) >= 2


def test_answers_follow_from_the_drawn_values(corpus) -> None:
    _, _, episodes = corpus
    for ep in episodes:
        t = ep.turns[0]
        orgs = [e.extra["org"] for e in t.evidence]
        vals = [float(e.extra["document_values"][0]) for e in t.evidence]
        kind = ep.extra["question_kind"]
        assert t.task_tags == ("cross_document", kind)
        for org in orgs:
            assert org in t.question
        if kind in ("comparison", "which_of"):
            assert len(set(vals)) == len(vals)
            assert t.answer == orgs[vals.index(max(vals))]
            assert len(orgs) == (2 if kind == "comparison" else 3)
        else:
            decimals = len(t.answer.split(".")[1]) if "." in t.answer else 0
            assert float(t.answer) == pytest.approx(round(sum(vals), decimals))
        for e in t.evidence:
            assert e.question == t.question and e.benchmark == "synth" and e.doc_id in ep.doc_ids


def test_gold_resolves_on_each_documents_graph(corpus) -> None:
    from mage_gym.data.gold import resolve_gold
    from mage_gym.graph import build_graph

    _, _, episodes = corpus
    graphs: dict = {}
    for ep in episodes:
        for t in ep.turns:
            assert t.answerable and t.evidence
            for e in t.evidence:
                if e.doc_id not in graphs:
                    graphs[e.doc_id] = build_graph(e.source, parser="fast", cache=False, encoder=None, progress=False)
                g = graphs[e.doc_id]
                gold = resolve_gold(e, g)
                assert gold.items, f"{ep.episode_id}: no gold on {e.doc_id}"
                assert gold.level == "element"
                if all(r.type != "chart" for r in e.evidence_regions):  # chart values live in pixels only
                    text = " ".join(g.node(i).text for item in gold.items for i in item)
                    v = e.extra["document_values"][0]
                    decimals = len(v.split(".")[1]) if "." in v else 0
                    assert format_number(float(v), decimals) in text


def test_splits_keep_a_group_together(corpus) -> None:
    _, manifest, episodes = corpus
    groups = check_groups(episodes)
    assert groups == manifest["groups"]
    owner = {d: g for g, ds in groups.items() for d in ds}
    assert len(owner) == sum(len(ds) for ds in groups.values()), "a document belongs to one group only"
    for seed in range(8):
        labelled = select_split(episodes, "all", seed=seed)
        by_group: dict[str, set[str]] = {}
        for ep in labelled:
            by_group.setdefault(ep.group, set()).add(ep.split)
            assert {e.split for t in ep.turns for e in t.evidence} == {ep.split}
        assert all(len(s) == 1 for s in by_group.values())
    assert len(limit_episodes(episodes, 3, seed=1)) == 3


def test_json_round_trip(corpus, tmp_path: Path) -> None:
    _, _, episodes = corpus
    save_episodes(tmp_path / "e.jsonl", episodes)
    back = load_episodes(tmp_path / "e.jsonl")
    assert back == episodes
    assert [b.extra for b in back] == [json.loads(json.dumps(e.extra)) for e in episodes]
    assert all(isinstance(b, CompositeEpisode) for b in back)


def test_registry_reads_a_given_root(corpus) -> None:
    from mage_gym.data.registry import load_dataset_with_report

    root, manifest, episodes = corpus
    load = load_dataset_with_report("synth_multidoc", root=root, split="all")
    assert [e.episode_id for e in load.episodes] == [e.episode_id for e in episodes]
    assert load.report.counters["groups"] == len(manifest["groups"])
    assert load.report.documents == len(manifest["docs"])
    with pytest.raises(FileNotFoundError):
        load_dataset_with_report("synth_multidoc", root=root / "absent")
