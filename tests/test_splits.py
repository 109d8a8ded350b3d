"""Splits by document hash, deterministic limits, and the dataset registry."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from mage_gym.data.episode import Episode
from mage_gym.data.registry import canonical_name, default_root, load_dataset, load_dataset_with_report
from mage_gym.data.report import DatasetLoad, LoadReport
from mage_gym.data.splits import SPLITS, assign_split, label_splits, limit_episodes, select_split


def _episodes(n_docs: int, per_doc: int) -> list[Episode]:
    return [Episode(episode_id=f"d{d}-q{q}", benchmark="synth", doc_id=f"doc{d}", source=f"/x/doc{d}.pdf",
                    question=f"q{q}", answer="a", answer_format="Str", evidence_pages=(q,))
            for d in range(n_docs) for q in range(per_doc)]


def test_assign_split_is_deterministic_and_seeded() -> None:
    ids = [f"doc-{i}" for i in range(200)]
    a = [assign_split(d, seed=0) for d in ids]
    assert a == [assign_split(d, seed=0) for d in ids]
    assert set(a) <= set(SPLITS)
    assert a != [assign_split(d, seed=1) for d in ids]


def test_ratios_are_respected() -> None:
    ids = [f"document_{i}" for i in range(4000)]
    got = [assign_split(d, seed=3, ratios=(0.6, 0.2, 0.2)) for d in ids]
    share = {s: got.count(s) / len(ids) for s in SPLITS}
    assert share["train"] == pytest.approx(0.6, abs=0.04)
    assert share["val"] == pytest.approx(0.2, abs=0.04) and share["test"] == pytest.approx(0.2, abs=0.04)
    assert {assign_split(d, ratios=(1, 0, 0)) for d in ids[:300]} == {"train"}
    assert {assign_split(d, ratios=(0, 0, 5)) for d in ids[:300]} == {"test"}
    for bad in [(0.5, 0.5), (-1, 1, 1), (0, 0, 0)]:
        with pytest.raises(ValueError):
            assign_split("x", ratios=bad)


def test_select_split_partitions_documents() -> None:
    eps = _episodes(60, 3)
    parts = {s: select_split(eps, s, seed=7) for s in SPLITS}
    docs = {s: {e.doc_id for e in p} for s, p in parts.items()}
    assert not (docs["train"] & docs["val"]) and not (docs["train"] & docs["test"]) and not (docs["val"] & docs["test"])
    assert sum(len(p) for p in parts.values()) == len(eps)
    assert all(e.split == s for s, p in parts.items() for e in p)
    everything = select_split(eps, "all", seed=7)
    assert len(everything) == len(eps) and {e.split for e in everything} == set(SPLITS)
    assert label_splits(eps, seed=7) == everything
    with pytest.raises(ValueError):
        select_split(eps, "dev")


def test_limit_is_deterministic_ordered_and_spread() -> None:
    eps = _episodes(20, 10)
    a = limit_episodes(eps, 15, seed=0)
    assert a == limit_episodes(eps, 15, seed=0) and len(a) == 15
    positions = [eps.index(e) for e in a]
    assert positions == sorted(positions)  # file order kept
    assert len({e.doc_id for e in a}) > 2  # not just the first documents
    assert limit_episodes(eps, None) == eps and limit_episodes(eps, 500) == eps
    assert limit_episodes(eps, 15, seed=1) != a
    with pytest.raises(ValueError):
        limit_episodes(eps, -1)


def test_registry_names_and_roots(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert canonical_name("MMLongBench-Doc") == "mmlongbench"
    with pytest.raises(ValueError):
        canonical_name("squad")
    monkeypatch.setenv("MAGE_GYM_DATA", str(tmp_path))
    assert default_root("financebench") == tmp_path / "financebench-dev"
    assert default_root("longdocurl") == tmp_path / "longdocurl-sample"


def test_registry_synth_is_lazy_and_split(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[Path] = []

    def fake_load_synth(root: Path) -> list[Episode]:
        calls.append(Path(root))
        return _episodes(30, 2)

    monkeypatch.setitem(sys.modules, "mage_gym.data.synth", types.SimpleNamespace(load_synth=fake_load_synth))
    train = load_dataset("synth", root=tmp_path, split="train", seed=2)
    test = load_dataset("synth", root=tmp_path, split="test", seed=2)
    assert calls == [tmp_path, tmp_path]
    assert train and test and not ({e.doc_id for e in train} & {e.doc_id for e in test})
    load = load_dataset_with_report("synth", root=tmp_path, limit=5)
    assert isinstance(load, DatasetLoad) and len(load.episodes) == 5 and load.report.episodes == 60

    def fake_with_report(root: Path) -> DatasetLoad:
        eps = _episodes(4, 1)
        return DatasetLoad(eps, LoadReport("synth").finalise(eps))

    monkeypatch.setitem(sys.modules, "mage_gym.data.synth", types.SimpleNamespace(load_synth=fake_with_report))
    assert len(load_dataset("synth", root=tmp_path)) == 4


def test_require_episodes_names_the_settings_that_gave_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mage_gym.agent.server import main as serve
    from mage_gym.data.registry import NoEpisodesError, require_episodes

    monkeypatch.setitem(sys.modules, "mage_gym.data.synth",
                        types.SimpleNamespace(load_synth=lambda root: _episodes(6, 1)))
    assert len(require_episodes("synth", root=tmp_path, limit=4)) == 4
    with pytest.raises(NoEpisodesError, match=r"'synth' \(root=.*split='all', limit=0\) has no episodes"):
        require_episodes("synth", root=tmp_path, limit=0)
    with pytest.raises(SystemExit, match="has no episodes"):  # the chat server's command line says it and exits
        serve(["--dataset", "synth", "--root", str(tmp_path), "--limit", "0"])


@pytest.mark.real_data
def test_registry_real_splits_disjoint(data_root: Path) -> None:
    parts = {s: load_dataset("mmlongbench", root=data_root / "mmlongbench-dev", split=s) for s in SPLITS}
    every = load_dataset("mmlongbench", root=data_root / "mmlongbench-dev", split="all")
    assert len(every) >= 517  # the dev set as of 2026-12-03 (it only grows)
    assert sum(len(p) for p in parts.values()) == len(every)
    assert sorted(e.episode_id for p in parts.values() for e in p) == sorted(e.episode_id for e in every)
    docs = [{e.doc_id for e in p} for p in parts.values()]
    assert not (docs[0] & docs[1] or docs[0] & docs[2] or docs[1] & docs[2])
    a = load_dataset("financebench", root=data_root / "financebench-dev", limit=7, seed=4)
    b = load_dataset("financebench", root=data_root / "financebench-dev", limit=7, seed=4)
    assert [e.episode_id for e in a] == [e.episode_id for e in b] and len(a) == 7
