"""Headroom measurements: neighbourhoods by relation, per-episode figures, and the script end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mage_gym.bench.headroom import aggregate, measure_episode, neighbourhood_pages, page_order_in_window
from mage_gym.env import MageRAGEnv
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.testing import make_toy_graph

REPO = Path(__file__).resolve().parent.parent
QF = hash_query_fn(16)


def test_neighbourhood_grows_with_hops_and_excludes_entry_pages() -> None:
    g = make_toy_graph(n_pages=8, elements_per_page=3, dim=16, seed=0)
    one = neighbourhood_pages(g, [2], ["reading_order"], hops=1)
    two = neighbourhood_pages(g, [2], ["reading_order"], hops=2)
    assert 2 not in one and one <= two
    assert one & {1, 3}, "reading order joins a page to its neighbours"
    assert neighbourhood_pages(g, [2], [], hops=2) == set()


def test_page_order_respects_the_window() -> None:
    assert page_order_in_window([5, 1, 3, 9], (1, 5)) == [5, 1, 3]
    assert page_order_in_window([5, 1], None) == [5, 1]


def test_measure_and_aggregate_on_toy_episodes() -> None:
    env = MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=48, privileged=True, budget={"k": 1})
    kinds = ["reading_order", "layout", "section", "semantic"]
    rows = [h for h in (measure_episode(env, e, 0, 1, kinds) for e in ("elem", "page", "region")) if h is not None]
    assert rows, "toy episodes have gold pages"
    for h in rows:
        assert h.recall_at[1] <= h.recall_at[2] <= h.recall_at[3] <= 1.0
        assert h.missed <= h.gold_pages
        for hops in (1, 2):
            assert h.reach[hops]["any"] >= max(h.reach[hops][k] for k in kinds)
            assert all(0.0 <= v <= 1.0 for v in h.hood[hops].values())
        assert h.reach[2]["any"] >= h.reach[1]["any"]
    agg = aggregate(rows, kinds)
    assert agg["episodes"] == len(rows) and agg["topk_recall"] <= agg["top3k_recall"]
    if agg["missed_gold_pages"]:
        assert 0.0 <= agg["reach_1hop"]["any"] <= agg["reach_2hop"]["any"] <= 1.0


def test_measure_needs_a_privileged_env() -> None:
    from mage_gym.env import PrivilegedAccessError

    env = MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=48, budget={"k": 1})
    with pytest.raises(PrivilegedAccessError):
        measure_episode(env, "page", 0, 1, ["layout"])


@pytest.mark.slow
def test_headroom_script_on_a_generated_corpus(tmp_path: Path) -> None:
    from mage_gym.data.registry import load_dataset
    from mage_gym.data.synth import SynthConfig, generate_corpus
    from mage_gym.graph import build_graph

    root = tmp_path / "corpus"
    generate_corpus(root, 2, seed=3, cfg=SynthConfig(min_pages=6, max_pages=6, questions_per_doc=4), workers=1,
                    progress=False)
    for src in sorted({e.source for e in load_dataset("synth", root=root)}):
        build_graph(src, parser="fast")
    out = tmp_path / "run"
    env = dict(os.environ, WANDB_MODE="offline", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(REPO / "experiments" / "headroom.py"), f"hydra.run.dir={out}",
                           "dataset=synth", f"dataset.root={root}", "env.parser=fast", "env.K=16", "ks=[1,2]",
                           "graph_workers=1"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert [r["budget"]["k"] for r in res["runs"]] == [1, 2]
    for r in res["runs"]:
        m = r["metrics"]
        assert r["privileged"] is True and m["episodes"] > 0
        assert m["topk_recall"] <= m["top2k_recall"] <= m["top3k_recall"]
        assert m["oracle_recall"] is not None and m["oracle_recall"] >= m["topk_recall"] - 1e-9
        assert set(m["reach_1hop"]) == set(m["chance_1hop"]) and "any" in m["reach_1hop"]
        assert m["slot_search"]["max_pairs"] == 5000 and m["slot_search"]["width"] is None
        assert set(m["slot_reach_1"]) == set(m["reach_1hop"]) == set(m["slot_chance_2"])  # same relations
        if m["missed_gold_pages"]:
            assert m["slot_reach_0"]["any"] == pytest.approx(m["missed_in_slots_at_reset"])
            assert m["slot_reach_0"]["any"] <= m["slot_reach_1"]["any"] <= m["slot_reach_2"]["any"] <= 1.0
            assert m["slot_chance_0"]["any"] <= m["slot_chance_1"]["any"] <= m["slot_chance_2"]["any"] <= 1.0
        src = m["sources"]["all"]["sources"]  # the headroom split by source (mage_gym/bench/headroom_sources)
        assert {"topk_page", "rerank@10", "rerank_stop@15", "granularity", "adaptive_stop@15", "oracle",
                "topk_elements@2", "topk_elements@16"} <= set(src)
        assert src["topk_page"]["delta_recall_at_equal_tokens"]["mean"] == pytest.approx(0.0, abs=1e-9)
        assert src["topk_page"]["recall"] == pytest.approx(m["topk_recall"])
        assert src["oracle"]["recall"] == pytest.approx(m["oracle_recall"])
        assert src["granularity"]["recall"] == pytest.approx(m["topk_recall"])
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert rows and all(r["privileged"] for r in rows)
    assert all(r["slot"]["missed"] == r["missed"] for r in rows)
    assert np.isfinite([r["oracle"]["recall"] for r in rows]).all()
