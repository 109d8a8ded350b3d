"""Equal-cost deltas by question kind (bridge vs single-hop) and the curve's ``min_k``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.common.equal_cost import needed_ks
from experiments.equal_cost_by_hops import aggregate, subset_blocks

BUDGET = {"k": 5, "m": 4, "M": 24, "T": 6, "B": 16}


def _row(policy: str, qid: str, recall: float, tokens: float, k: int = 5) -> dict:
    return {"policy": policy, "budget": {**BUDGET, "k": k}, "episode_id": qid, "components": {"support": recall},
            "metrics": {"evidence_page_recall": recall, "tokens_rendered": tokens, "pages_rendered": tokens / 1000}}


def test_min_k_extends_a_curve_that_already_covers_the_means() -> None:
    mine = [[_row("p", "a", 0.5, 1500.0)]]
    curve = {k: {"a": _row("topk_page", "a", 0.1 * k, 1000.0 * k, k)} for k in (1, 2)}
    assert needed_ks(mine, curve, max_k=20) is None  # k=2 reaches 1500 tokens
    assert needed_ks(mine, curve, max_k=20, min_k=4) == 3
    assert needed_ks(mine, curve, max_k=2, min_k=4) is None  # never past max_k


def _run(tmp: Path, name: str, policy_rows: list[dict], curve_rows: list[dict]) -> Path:
    d = tmp / name
    d.mkdir()
    (d / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in policy_rows))
    (d / "topk_curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve_rows))
    return d


def test_subsets_are_compared_on_their_own_questions(tmp_path: Path) -> None:
    # topk_page recall grows with k on every question; the policy matches it on single-hop questions and
    # beats it by 0.3 at k=5 tokens on bridge questions
    hops = {f"s{i}": 1 for i in range(40)} | {f"b{i}": 2 for i in range(40)}
    curve = [_row("topk_page", q, 0.1 * k, 1000.0 * k, k) for k in range(1, 9) for q in hops]
    base = [_row("topk_page", q, 0.5, 5000.0) for q in hops]
    pol = [_row("ppo", q, 0.5 if h == 1 else 0.8, 5000.0) for q, h in hops.items()]
    run = _run(tmp_path, "seed0", base + pol, curve)
    blocks = subset_blocks(run, hops)
    assert blocks[("ppo", json.dumps(BUDGET, sort_keys=True), "bridge")]["delta_recall_at_equal_tokens"][
        "mean"] == pytest.approx(0.3)
    assert blocks[("ppo", json.dumps(BUDGET, sort_keys=True), "single_hop")]["delta_recall_at_equal_tokens"][
        "mean"] == pytest.approx(0.0, abs=1e-9)
    out = aggregate([run, run], hops, "synth")
    by = {(r["policy"], r["subset"]): r for r in out["runs"]}
    assert by[("ppo", "bridge")]["seeds"] == 2 and by[("ppo", "bridge")]["metrics"]["episodes"] == 40
    assert by[("ppo", "bridge")]["metrics"]["delta_recall_at_equal_tokens_per_seed"] == pytest.approx([0.3, 0.3])
    assert by[("topk_page", "bridge")]["metrics"]["delta_recall_at_equal_tokens"] is None
    assert out["subsets"] == {"single_hop": 40, "bridge": 40}
