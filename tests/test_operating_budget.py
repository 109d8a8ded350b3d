"""Comparisons with topk_page beyond equal cost: at its operating budget, and by cost at equal evidence.

The issue's three pinned cases: a policy that reads topk_page's pages and stops early gets 0 at the operating
budget and a cost ratio above 1; a policy that reads more is compared on the curve at its own cost; a sub-page
policy gets no operating-budget credit for the tokens it leaves unused.
"""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.bench.equal_cost import (COMPARISONS, DELTAS, cost_ratio_at_equal_evidence, cost_ratio_over_seeds,
                                       cost_to_reach, delta_at_equal_cost, delta_at_operating_budget,
                                       equal_cost_block, interpolate_at, operating_budget_over_seeds,
                                       validate_block)

KS = list(range(0, 9))  # the curve's k, with the k = 0 floor


def _curve(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """topk_page's per-question recall and tokens at k = 0..8: recall grows with k, ~1,000 tokens a page."""
    rng = np.random.default_rng(seed)
    gold_rank = rng.integers(1, 12, size=n)  # the k at which each question's gold page arrives
    metric = np.array([(gold_rank <= k).astype(float) for k in KS])
    cost = np.array([np.full(n, 1000.0 * k) + (rng.uniform(0, 100, n) if k else 0.0) for k in KS])
    return metric, cost


def test_reading_top_ks_pages_and_stopping_early_is_zero_at_the_budget_and_cheaper_at_equal_evidence() -> None:
    metric, cost = _curve(200)
    # adaptive stop: the same gold as topk_page at k=5, but each question stops at its gold page (or reads all 5)
    stop = np.array([int(np.argmax(metric[:6, q])) if metric[5, q] else 5 for q in range(200)])
    stop = np.maximum(stop, 1)
    pm, pc = metric[5], cost[stop, np.arange(200)]
    assert pc.mean() < cost[5].mean()
    op = delta_at_operating_budget(pm, pc, metric, cost, KS, k=5)
    assert op["mean"] == pytest.approx(0.0, abs=1e-12) and op["overspent"] is False
    assert op["lo"] == pytest.approx(0.0, abs=1e-12) and op["hi"] == pytest.approx(0.0, abs=1e-12)
    assert op["budget_cost"] == pytest.approx(cost[5].mean()) and op["k"] == 5
    ratio = cost_ratio_at_equal_evidence(pm, pc, metric, cost)
    assert ratio["mean"] == pytest.approx(cost_to_reach(pm.mean(), cost.mean(axis=1), metric.mean(axis=1)) / pc.mean())
    assert ratio["mean"] > 1.0 and ratio["lo"] > 1.0 and ratio["above_curve"] is False
    # the equal-cost view credits it for the same thing (it reads less): positive, not zero
    assert delta_at_equal_cost(pm, pc, metric, cost)["mean"] > 0.05


def test_a_policy_that_reads_more_is_compared_on_the_curve_at_its_own_cost() -> None:
    metric, cost = _curve(120, seed=1)
    pm, pc = np.clip(metric[7] + 0.1, 0, 1), cost[7]  # reads 7 pages at k=5's operating budget
    op = delta_at_operating_budget(pm, pc, metric, cost, KS, k=5)
    eq = delta_at_equal_cost(pm, pc, metric, cost)
    assert op["overspent"] is True and op["mean"] == pytest.approx(eq["mean"])
    assert op["mean"] == pytest.approx(pm.mean() - interpolate_at(pc.mean(), cost.mean(axis=1), metric.mean(axis=1)))
    assert op["mean"] < pm.mean() - metric[5].mean()  # not credited with what the extra pages found


def test_a_sub_page_policy_gets_no_credit_for_tokens_it_leaves_unused() -> None:
    metric, cost = _curve(150, seed=2)
    pm, pc = 0.6 * metric[5], np.full(150, 700.0)  # elements: 60% of topk@5's recall for under one page
    op = delta_at_operating_budget(pm, pc, metric, cost, KS, k=5)
    assert op["mean"] == pytest.approx(pm.mean() - metric[5].mean()) and op["mean"] < 0
    assert op["overspent"] is False and op["hi"] < 0
    assert delta_at_equal_cost(pm, pc, metric, cost)["mean"] > 0  # the k=0 floor: an efficiency figure only
    # the same policy with the same recall as topk@5 still gets exactly 0, however little it reads
    assert delta_at_operating_budget(metric[5], pc, metric, cost, KS, k=5)["mean"] == pytest.approx(0.0)


def test_cost_to_reach_inverts_the_curve_and_evidence_beyond_it_has_no_ratio() -> None:
    c, m = np.array([0.0, 1000.0, 2000.0, 3000.0]), np.array([0.0, 0.4, 0.6, 0.7])
    for target in (0.0, 0.2, 0.4, 0.5, 0.65, 0.7):
        need = cost_to_reach(target, c, m)
        assert interpolate_at(need, c, m) == pytest.approx(target)
    assert cost_to_reach(0.5, c, m) == pytest.approx(1500.0)
    assert cost_to_reach(0.71, c, m) is None
    # a curve point whose cost does not exceed every earlier one is skipped, as interpolate_at skips it
    assert cost_to_reach(0.5, np.array([0.0, 1000.0, 800.0]), np.array([0.0, 0.4, 0.6])) is None
    assert cost_to_reach(0.5, np.array([0.0, 1000.0, 1000.0, 2000.0]), np.array([0.0, 0.4, 0.9, 0.6])) == (
        pytest.approx(1500.0))
    # the first point that reaches the target counts, even if a later one dips
    assert cost_to_reach(0.5, np.array([0.0, 1000.0, 2000.0]), np.array([0.0, 0.6, 0.5])) == pytest.approx(
        1000.0 * 0.5 / 0.6)
    metric, cost = _curve(60, seed=3)
    beyond = cost_ratio_at_equal_evidence(np.ones(60), cost[3], metric, cost)
    assert beyond["mean"] is None and beyond["above_curve"] is True and beyond["lo"] is None
    nothing = cost_ratio_at_equal_evidence(np.zeros(60), np.zeros(60), metric, cost)
    assert nothing["mean"] is None and nothing["above_curve"] is False  # no tokens spent: no ratio


def test_operating_budget_needs_its_k_on_the_curve_and_overspending_beyond_the_curve_is_null() -> None:
    metric, cost = _curve(40, seed=4)
    no_k = delta_at_operating_budget(metric[3], cost[3], metric[:4], cost[:4], KS[:4], k=5)
    assert no_k["mean"] is None and no_k["budget_cost"] is None
    beyond = delta_at_operating_budget(metric[8], cost[8] * 2, metric, cost, KS, k=5)
    assert beyond["mean"] is None and beyond["overspent"] is True


def test_over_seeds_the_figure_is_the_mean_of_each_seeds_with_one_interval() -> None:
    metric, cost = _curve(80, seed=5)
    a = (metric[5], cost[3], metric, cost)  # topk@5's evidence for 3 pages' tokens
    b = (metric[4], cost[2], metric, cost)
    op = operating_budget_over_seeds([a, b], [KS, KS], k=5)
    assert op["mean"] == pytest.approx(np.mean([0.0, metric[4].mean() - metric[5].mean()]))
    assert op["values"][0] == pytest.approx(0.0) and op["seeds"] == 2 and op["lo"] <= op["mean"] <= op["hi"]
    ratio = cost_ratio_over_seeds([a, b])
    single = [cost_ratio_at_equal_evidence(*s)["mean"] for s in (a, b)]
    assert ratio["mean"] == pytest.approx(np.mean(single)) and len(ratio["topk_costs"]) == 2
    with pytest.raises(ValueError, match="one k per curve point"):
        operating_budget_over_seeds([a], [KS[:3]], k=5)


def _row(policy: str, q: str, recall: float | None, tokens: float, item: float | None = None) -> dict:
    return {"policy": policy, "episode_id": q, "components": {"support": recall if recall is not None else 1.0},
            "metrics": {"evidence_page_recall": recall, "tokens_rendered": tokens, "pages_rendered": tokens / 1000,
                        "item_support": item}}


def test_the_benchmark_block_carries_every_figure_at_the_runs_k() -> None:
    qs = [f"q{i}" for i in range(40)]
    curve = {k: {q: _row("topk_page", q, min(1.0, 0.15 * k), 1000.0 * k, min(1.0, 0.1 * k)) for q in qs}
             for k in range(1, 7)}
    mine = [_row("p", q, 0.75, 2500.0, 0.5) for q in qs] + [_row("p", "unanswerable", None, 900.0)]
    block = equal_cost_block(mine, curve, "visual", n_boot=200, k=5)
    validate_block(block)
    assert block["operating_budget"] == {"k": 5, "tokens": pytest.approx(5000.0)}
    assert block["delta_recall_at_operating_budget"]["mean"] == pytest.approx(0.75 - 0.75)
    assert block["delta_item_support_at_operating_budget"]["mean"] == pytest.approx(0.5 - 0.5)
    assert block["delta_item_support_at_operating_budget"]["n"] == 40
    assert block["cost_ratio_recall_at_equal_evidence"]["mean"] == pytest.approx(5000.0 / 2500.0)
    assert block["delta_support_at_operating_budget"]["n"] == 41  # support: every finished episode
    assert block["delta_recall_at_equal_tokens"]["mean"] == pytest.approx(0.75 - 0.375)
    assert set(k for k, _, _ in COMPARISONS) <= set(block)
    no_k = equal_cost_block(mine, curve, "visual", n_boot=50)
    assert no_k["delta_recall_at_operating_budget"]["mean"] is None and no_k["operating_budget"]["k"] is None
    del block["cost_ratio_support_at_equal_evidence"]
    with pytest.raises(ValueError, match="cost_ratio_support_at_equal_evidence"):
        validate_block(block)
    old = {key: v for key, v in no_k.items() if key in {d for d, _, _ in DELTAS} | {"baseline", "render_mode", "ks"}}
    validate_block(old)  # results written before these figures existed still validate


def test_headroom_sources_state_both_claims_adaptive_stop_reads_less_and_finds_no_more() -> None:
    from mage_gym.bench.headroom_sources import SourceFigures, aggregate_sources

    rng = np.random.default_rng(7)
    rows = []
    for i in range(40):
        gold_at = int(rng.integers(1, 8))  # the k at which this question's gold page arrives
        recall = [float(j >= gold_at) for j in range(9)]
        tokens = [1000 * j for j in range(9)]
        stop = next(j for j in range(1, 6) if recall[j] >= recall[5])
        rows.append(SourceFigures(f"q{i}", "test", False, recall, tokens, list(range(9)), sources={
            "adaptive_stop@5": {"recall": recall[stop], "tokens": tokens[stop], "pages": stop},
            "rerank@10": {"recall": float(gold_at <= 10), "tokens": tokens[5], "pages": 5}}))
    out = aggregate_sources(rows, n_boot=200, k=5)["sources"]
    stop = out["adaptive_stop@5"]
    assert stop["delta_recall_at_operating_budget"]["mean"] == pytest.approx(0.0)
    assert stop["cost_ratio_recall_at_equal_evidence"]["mean"] > 1.0
    assert stop["delta_recall_at_equal_tokens"]["mean"] > 0.0  # the old figure credited reading less
    rerank = out["rerank@10"]  # topk_page's tokens, more gold: the same gain under both views
    assert rerank["delta_recall_at_operating_budget"]["mean"] == pytest.approx(
        rerank["delta_recall_at_equal_tokens"]["mean"]) and rerank["delta_recall_at_operating_budget"]["mean"] > 0


def test_seed_aggregates_carry_the_operating_budget_and_the_cost_ratio(tmp_path) -> None:
    import json

    from experiments.analysis.aggregate_seeds import aggregate

    dirs = []
    for s, (op, ratio) in enumerate(((0.0, 1.5), (0.1, None))):
        block = {"baseline": "topk_page", "render_mode": "visual", "ks": [0, 1, 2], "operating_budget": {"k": 2},
                 **{k: {"mean": 0.3, "lo": 0.2, "hi": 0.4, "n": 40, "interpretable": True} for k, _, _ in DELTAS},
                 "delta_recall_at_operating_budget": {"mean": op, "lo": op - 0.1, "hi": op + 0.1, "n": 40},
                 "cost_ratio_recall_at_equal_evidence": {"mean": ratio, "lo": None, "hi": None, "n": 40}}
        d = tmp_path / f"s{s}"
        d.mkdir()
        (d / "results.json").write_text(json.dumps({"runs": [{"policy": "ppo", "budget": {"k": 2}, "dataset": "x",
                                                             "split": "test", "metrics": {}, "equal_cost": block}]}))
        dirs.append(d)
    m = aggregate(dirs)["runs"][0]["metrics"]
    assert m["delta_recall_at_operating_budget"] == pytest.approx(0.05)
    assert m["delta_recall_at_operating_budget_per_seed"] == [0.0, 0.1]
    assert m["cost_ratio_recall_at_equal_evidence"] is None  # a seed beyond the curve: no mean ratio


def test_the_frontier_draws_each_policy_across_its_budgets_against_the_floored_curve(tmp_path) -> None:
    from mage_gym.bench.frontier import curve_points, plot_frontier, policy_points

    curve = {k: {q: _row("topk_page", q, 0.2 * k, 1000.0 * k) for q in ("a", "b")} for k in (1, 2, 3)}
    curve[2]["c"] = _row("topk_page", "c", None, 500.0)  # no gold: left out of the recall means
    assert curve_points(curve, "evidence_page_recall") == [(0, 0.0, 0.0), (1, 1000.0, 0.2), (2, 2000.0, 0.4),
                                                           (3, 3000.0, pytest.approx(0.6))]
    assert curve_points({}, "evidence_page_recall") == []
    runs = [{"policy": p, "budget": {**dict(k=k, m=4, M=24, T=6, B=16)}, "privileged": p == "oracle",
             "metrics": {"tokens_rendered": t, "evidence_page_recall": r, "item_support": None}}
            for p, k, t, r in (("heuristic", 5, 4000.0, 0.7), ("heuristic", 2, 1500.0, 0.5), ("topk_page", 5, 1, 1),
                               ("oracle", 5, 3000.0, 0.9))]
    pts = policy_points(runs, "evidence_page_recall")
    assert list(pts) == [("heuristic", False), ("oracle", True)]
    assert [p[:2] for p in pts[("heuristic", False)]] == [(1500.0, 0.5), (4000.0, 0.7)]  # in order of cost
    assert policy_points(runs, "item_support") == {}
    png = plot_frontier(runs, {"visual": curve}, tmp_path / "f.png", operating_k=2).read_bytes()
    assert png[:4] == b"\x89PNG"


def test_the_block_passes_its_bootstrap_settings_on_and_drops_failed_episodes() -> None:
    """Each figure of the block is the function's own figure on the run's finished questions, with the block's
    n_boot and seed (1,000 and 0 by default)."""
    from mage_gym.bench.equal_cost import policy_arrays

    rng = np.random.default_rng(9)
    qs = [f"q{i}" for i in range(36)]
    curve = {k: {q: _row("topk_page", q, min(1.0, 0.15 * k + rng.uniform(0, 0.1)), 1000.0 * k + rng.uniform(0, 90),
                         min(1.0, 0.1 * k)) for q in qs} for k in range(1, 7)}
    mine = [_row("p", q, float(rng.uniform(0.3, 0.9)), float(rng.uniform(1500, 4500)), 0.5) for q in qs]
    failed = {**_row("p", "q0", 0.0, 99000.0), "failed": True}  # a failed retry of q0 is no question of its own
    block = equal_cost_block(mine + [failed], curve, "visual", n_boot=60, seed=3, k=5)
    for key, metric, cost in COMPARISONS:
        qids, pm, pc, ks, cm, cc = policy_arrays(mine + [failed], curve, metric, cost)
        assert len(qids) == 36 and max(pc) < 99000.0
        if key.endswith("operating_budget"):
            want = delta_at_operating_budget(pm, pc, cm, cc, ks, 5, n_boot=60, seed=3)
        elif key.startswith("cost_ratio"):
            want = cost_ratio_at_equal_evidence(pm, pc, cm, cc, n_boot=60, seed=3)
        else:
            want = delta_at_equal_cost(pm, pc, cm, cc, n_boot=60, seed=3)
        assert block[key] == want and want["lo"] is not None
    assert equal_cost_block(mine, curve, "visual", k=5) == equal_cost_block(mine, curve, "visual", n_boot=1000,
                                                                            seed=0, k=5)


def test_a_figure_without_a_curve_or_without_k_is_empty_with_its_question_count() -> None:
    qs = [f"q{i}" for i in range(12)]
    mine = [_row("p", q, 0.5, 2000.0, 0.5) for q in qs]
    empty = {"mean": None, "lo": None, "hi": None, "n": 12, "interpretable": False}
    no_curve = equal_cost_block(mine, {}, "visual", n_boot=20, k=5)
    assert all(no_curve[key] == empty for key, _, _ in COMPARISONS)
    curve = {k: {q: _row("topk_page", q, 0.15 * k, 1000.0 * k, 0.1 * k) for q in qs} for k in range(1, 4)}
    no_k = equal_cost_block(mine, curve, "visual", n_boot=20)
    assert all(no_k[key] == empty for key in ("delta_recall_at_operating_budget", "delta_support_at_operating_budget",
                                              "delta_item_support_at_operating_budget"))
    assert no_k["operating_budget"] == {"k": None, "tokens": None}
    assert equal_cost_block([], curve, "visual", n_boot=20, k=2)["delta_recall_at_equal_tokens"] == {**empty, "n": 0}


def test_validate_block_names_what_a_block_lacks() -> None:
    with pytest.raises(ValueError, match="lacks baseline/render_mode/ks"):
        validate_block({"baseline": "topk_page", "ks": [0, 1]})
    with pytest.raises(ValueError, match="lacks baseline/render_mode/ks"):
        validate_block(["baseline", "render_mode", "ks"])
    with pytest.raises(ValueError, match="equal_cost.delta_recall_at_equal_tokens must hold"):
        validate_block({"baseline": "topk_page", "render_mode": "visual", "ks": [0, 1]})
