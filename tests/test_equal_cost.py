"""Equal-cost deltas: interpolation on the top-k curve, no extrapolation, paired bootstrap intervals."""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.bench.equal_cost import (MIN_QUESTIONS, curve_arrays, delta_at_equal_cost, delta_over_seeds,
                                       interpolate_at, paired_delta)


def test_interpolation_is_linear_between_neighbours_and_never_extrapolates() -> None:
    cost, metric = np.array([100.0, 200.0, 300.0]), np.array([0.2, 0.4, 0.5])
    assert interpolate_at(150.0, cost, metric) == pytest.approx(0.3)
    assert interpolate_at(200.0, cost, metric) == pytest.approx(0.4)
    assert interpolate_at(275.0, cost, metric) == pytest.approx(0.475)
    assert interpolate_at(99.0, cost, metric) is None and interpolate_at(301.0, cost, metric) is None


def test_curve_points_whose_cost_does_not_grow_are_skipped() -> None:
    flat = np.array([100.0, 200.0, 200.0, 300.0]), np.array([0.2, 0.4, 0.6, 0.8])  # k=2 and k=3 cost the same
    assert interpolate_at(200.0, *flat) == pytest.approx(0.4)  # the flat stretch keeps its first point
    assert interpolate_at(250.0, *flat) == pytest.approx(0.6)  # between (200, 0.4) and (300, 0.8); not 0.7
    assert interpolate_at(200.0 + 1e-6, *flat) == pytest.approx(0.4, abs=1e-6)  # continuous at the flat point
    back = np.array([100.0, 300.0, 150.0, 400.0]), np.array([0.1, 0.5, 0.2, 0.9])  # k=3 cheaper than k=2
    assert interpolate_at(350.0, *back) == pytest.approx(0.7)  # between (300, 0.5) and (400, 0.9); not 0.725
    assert interpolate_at(175.0, *back) == pytest.approx(0.25)
    assert interpolate_at(400.0, *back) == pytest.approx(0.9) and interpolate_at(401.0, *back) is None


def test_the_interval_is_none_when_more_than_half_of_the_resamples_fall_outside_the_curve() -> None:
    """Two seeds, each inside the curve on all questions, that fall outside on opposite halves of the resamples."""
    n, top = 10, 1000.0
    half = np.arange(n) < 5
    cm, cc = np.vstack([np.zeros(n), np.full(n, 0.5)]), np.vstack([np.zeros(n), np.full(n, top)])
    pm = np.full(n, 0.4)
    a = np.where(half, top - 1.01, top + 1.0)  # mean 999.995: outside when a resample draws < 5 of the first half
    b = np.where(half, top + 1.0, top - 1.01)  # outside when it draws > 5
    res = delta_over_seeds([(pm, a, cm, cc), (pm, b, cm, cc)], n_boot=1000)
    assert res["mean"] == pytest.approx(0.4 - 0.5 * 999.995 / top)
    assert res["lo"] is None and res["hi"] is None
    kept = delta_over_seeds([(pm, a, cm, cc)], n_boot=1000)  # one seed alone: about 60 % of resamples inside
    assert kept["lo"] is not None and kept["lo"] <= kept["mean"] <= kept["hi"]


def _curve(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    ks = np.arange(1, 6)
    cost = np.outer(ks, np.full(n, 1000.0)) + rng.normal(0, 20, (len(ks), n))
    metric = np.clip(np.outer(ks / 6.0, np.ones(n)) + rng.normal(0, 0.05, (len(ks), n)), 0, 1)
    return metric, cost


def test_a_policy_on_the_curve_has_zero_delta_and_a_better_one_a_positive_interval() -> None:
    rng = np.random.default_rng(0)
    n = 200
    metric, cost = _curve(n, rng)
    same = delta_at_equal_cost(metric[2], cost[2], metric, cost)  # the k=3 point itself
    assert same["mean"] == pytest.approx(0.0, abs=1e-9) and same["lo"] <= 0.0 <= same["hi"]
    better = delta_at_equal_cost(np.clip(metric[2] + 0.2, 0, 1), cost[2], metric, cost)
    assert better["lo"] > 0.05 and better["interpretable"]


def test_outside_the_curve_everything_is_null_and_few_questions_are_flagged() -> None:
    rng = np.random.default_rng(1)
    metric, cost = _curve(10, rng)
    res = delta_at_equal_cost(metric[4], cost[4] * 3, metric, cost)
    assert res["mean"] is None and res["lo"] is None and res["topk_at_cost"] is None
    assert res["n"] == 10 and res["interpretable"] is (10 >= MIN_QUESTIONS)
    with pytest.raises(ValueError, match="shapes"):
        delta_at_equal_cost(metric[0][:5], cost[0], metric, cost)


def test_curve_arrays_keeps_only_points_covering_every_question() -> None:
    rows = {1: {"a": {"r": 0.1, "t": 10}, "b": {"r": 0.2, "t": 12}}, 2: {"a": {"r": 0.3, "t": 20}},
            3: {"a": {"r": 0.5, "t": 30}, "b": {"r": 0.6, "t": 31}}}
    ks, m, c = curve_arrays(rows, ["a", "b"], "r", "t", floor=False)
    assert ks == [1, 3] and m.shape == (2, 2) and c[1, 1] == 31
    # the floor: k = 0 reads nothing, so gets no gold at no cost; a policy reading less than k=1 is compared with it
    ks, m, c = curve_arrays(rows, ["a", "b"], "r", "t")
    assert ks == [0, 1, 3] and not m[0].any() and not c[0].any() and c[2, 1] == 31
    assert curve_arrays({}, ["a"], "r", "t")[0] == []  # no curve: no floor either
    d = delta_at_equal_cost([0.2, 0.2], [5.5, 5.5], m, c, n_boot=50)
    assert d["topk_at_cost"] == pytest.approx(0.15 * 5.5 / 11) and d["mean"] == pytest.approx(0.2 - 0.075)


def test_paired_delta_is_the_mean_difference_with_a_bootstrap_interval_around_it() -> None:
    rng = np.random.default_rng(0)
    b = rng.random(60)
    d = paired_delta(b + 0.1, b)  # the same shift on every question: no sampling spread at all
    assert d["mean"] == pytest.approx(0.1) and d["lo"] == pytest.approx(0.1) and d["hi"] == pytest.approx(0.1)
    assert d["n"] == 60 and d["interpretable"]
    noisy = paired_delta(b + rng.normal(0.05, 0.3, 60), b)
    assert noisy["lo"] < noisy["mean"] < noisy["hi"] and noisy["lo"] < 0.05 < noisy["hi"]
    assert paired_delta([1.0] * 5, [0.0] * 5)["interpretable"] is False
    assert paired_delta([], [])["mean"] is None
    with pytest.raises(ValueError, match="equally long"):
        paired_delta([1.0, 2.0], [1.0])


# --- the rules at their edges, and the bootstrap as documented (mutation survivors of bench/equal_cost) ----------

def _by_hand(pm, pc, cm, cc, figure, n_boot: int = 1000, seed: int = 0) -> tuple[float | None, float | None]:
    """The documented interval: ``n_boot`` resamples of the questions drawn by ``default_rng(seed)``, the figure
    recomputed on each (policy means and the whole curve), the 2.5 / 97.5 percentiles of those it is defined on,
    None when fewer than half are."""
    n = len(pm)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    vals = [figure(pm[i].mean(), pc[i].mean(), cc[:, i].mean(axis=1), cm[:, i].mean(axis=1)) for i in idx]
    vals = [v for v in vals if v is not None]
    if len(vals) < n_boot / 2:
        return None, None
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi)


def _equal_cost(pm, pc, c, m):  # the curve below climbs in cost and metric on every resample: plain np.interp
    return pm - np.interp(pc, c, m) if c[0] <= pc <= c[-1] else None


def _ratio(pm, pc, c, m):
    return np.interp(pm, m, c) / pc if m[0] <= pm <= m[-1] and pc > 0 else None


def _budget_at(j):
    return lambda pm, pc, c, m: _equal_cost(pm, max(pc, c[j]), c, m)


def _climbing(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A policy and a 6-point curve (k = 0..5) whose cost and metric climb with k on every question."""
    rng = np.random.default_rng(seed)
    cm = np.vstack([np.zeros(n), np.cumsum(rng.uniform(0.01, 0.2, (5, n)), axis=0)])
    cc = np.vstack([np.zeros(n), np.arange(1, 6)[:, None] * 1000.0 + rng.uniform(0, 50, (5, n))])
    pm, pc = rng.uniform(0.1, 0.5, n), rng.uniform(1500, 3500, n)
    return pm, pc, cm, cc


def test_every_interval_is_the_documented_bootstrap_with_its_defaults_and_the_settings_passed_on() -> None:
    """1,000 resamples from seed 0 by default, the given n_boot and seed otherwise: a published interval reproduces."""
    from mage_gym.bench.equal_cost import (cost_ratio_at_equal_evidence, cost_ratio_over_seeds,
                                           delta_at_operating_budget, operating_budget_over_seeds)

    pm, pc, cm, cc = _climbing(40, seed=11)
    ks = list(range(6))
    calls = [
        (lambda **kw: delta_at_equal_cost(pm, pc, cm, cc, **kw), _equal_cost),
        (lambda **kw: delta_over_seeds([(pm, pc, cm, cc)], **kw), _equal_cost),
        (lambda **kw: delta_at_operating_budget(pm, pc, cm, cc, ks, 2, **kw), _budget_at(2)),
        (lambda **kw: operating_budget_over_seeds([(pm, pc, cm, cc)], [ks], 2, **kw), _budget_at(2)),
        (lambda **kw: cost_ratio_at_equal_evidence(pm, pc, cm, cc, **kw), _ratio),
        (lambda **kw: cost_ratio_over_seeds([(pm, pc, cm, cc)], **kw), _ratio),
    ]
    for call, figure in calls:
        default = call()
        assert (default["lo"], default["hi"]) == pytest.approx(_by_hand(pm, pc, cm, cc, figure), abs=1e-12)
        given = call(n_boot=200, seed=7)
        assert (given["lo"], given["hi"]) == pytest.approx(_by_hand(pm, pc, cm, cc, figure, 200, 7), abs=1e-12)
        assert call(n_boot=200, seed=7) == given  # the same seed, the same interval
    from mage_gym.bench.equal_cost import compare_over_seeds, equal_cost_rule

    plain = compare_over_seeds([(pm, pc, cm, cc)], equal_cost_rule)
    assert (plain["lo"], plain["hi"]) == pytest.approx(_by_hand(pm, pc, cm, cc, _equal_cost), abs=1e-12)
    d = paired_delta(pm, pc / 5000.0)
    x = pm - pc / 5000.0
    means = x[np.random.default_rng(0).integers(0, 40, size=(1000, 40))].mean(axis=1)
    assert (d["lo"], d["hi"]) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])), abs=1e-12)
    d = paired_delta(pm, pc / 5000.0, n_boot=100, seed=3)
    means = x[np.random.default_rng(3).integers(0, 40, size=(100, 40))].mean(axis=1)
    assert (d["lo"], d["hi"]) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])), abs=1e-12)


def test_the_interval_is_kept_when_exactly_half_of_the_resamples_fall_inside_the_curve() -> None:
    """Two questions; a resample of the second alone costs more than the curve's top (the others are inside)."""
    cm, cc = np.array([[0.0, 0.0], [0.5, 0.5]]), np.array([[0.0, 0.0], [1000.0, 1000.0]])
    pm, pc = np.array([0.4, 0.4]), np.array([1000.0 - 1.01, 1000.0 + 1.0])

    def outside(seed: int, n_boot: int) -> int:
        idx = np.random.default_rng(seed).integers(0, 2, size=(n_boot, 2))
        return int((idx == 1).all(axis=1).sum())

    half = next(s for s in range(200) if outside(s, 4) == 2)  # 2 of 4 kept: exactly half
    assert delta_at_equal_cost(pm, pc, cm, cc, n_boot=4, seed=half)["lo"] is not None
    third = next(s for s in range(200) if outside(s, 3) == 2)  # 1 of 3 kept: less than half
    res = delta_at_equal_cost(pm, pc, cm, cc, n_boot=3, seed=third)
    assert res["mean"] is not None and res["lo"] is None and res["hi"] is None


def test_each_result_carries_its_documented_keys_and_values() -> None:
    from mage_gym.bench.equal_cost import (compare_over_seeds, cost_ratio_at_equal_evidence, cost_to_reach,
                                           delta_at_operating_budget, equal_cost_rule)

    pm, pc, cm, cc = _climbing(30, seed=12)
    base = {"mean", "lo", "hi", "n", "interpretable"}
    d = delta_at_equal_cost(pm, pc, cm, cc, n_boot=20)
    assert set(d) == base | {"topk_at_cost", "cost"} and d["cost"] == pytest.approx(pc.mean())
    assert d["topk_at_cost"] == pytest.approx(interpolate_at(pc.mean(), cc.mean(axis=1), cm.mean(axis=1)))
    op = delta_at_operating_budget(pm, pc, cm, cc, list(range(6)), 4, n_boot=20)
    assert set(op) == base | {"k", "budget_cost", "cost", "overspent"} and op["cost"] == pytest.approx(pc.mean())
    r = cost_ratio_at_equal_evidence(pm, pc, cm, cc, n_boot=20)
    need = cost_to_reach(pm.mean(), cc.mean(axis=1), cm.mean(axis=1))
    assert set(r) == base | {"topk_cost", "cost", "above_curve"} and r["topk_cost"] == pytest.approx(need)
    assert r["cost"] == pytest.approx(pc.mean()) and r["mean"] == pytest.approx(need / pc.mean())
    two = [(pm, pc, cm, cc), (pm, pc * 0.9, cm, cc)]
    over = compare_over_seeds(two, equal_cost_rule, n_boot=20)
    assert set(over) == base | {"seeds", "values", "costs"} and over["costs"] == pytest.approx([pc.mean(), 0.9 * pc.mean()])
    assert over["values"] == pytest.approx([delta_at_equal_cost(*s, n_boot=20)["mean"] for s in two])
    seeds = delta_over_seeds(two, n_boot=20)
    assert set(seeds) == base | {"seeds", "costs", "topk_at_costs"} and seeds["seeds"] == 2
    assert set(paired_delta(pm, pm)) == base


def test_thirty_questions_are_interpretable_and_one_question_is_a_figure() -> None:
    from mage_gym.bench.equal_cost import cost_ratio_at_equal_evidence

    pm, pc, cm, cc = _climbing(30, seed=13)
    assert delta_at_equal_cost(pm, pc, cm, cc, n_boot=20)["interpretable"] is True
    assert delta_at_equal_cost(pm[:29], pc[:29], cm[:, :29], cc[:, :29], n_boot=20)["interpretable"] is False
    assert paired_delta(pm, pm)["interpretable"] is True and paired_delta(pm[:29], pm[:29])["interpretable"] is False
    one = delta_at_equal_cost(pm[:1], pc[:1], cm[:, :1], cc[:, :1], n_boot=20)
    at = float(np.interp(pc[0], cc[:, 0], cm[:, 0]))
    assert one["topk_at_cost"] == pytest.approx(at) and one["mean"] == pytest.approx(pm[0] - at)
    ratio = cost_ratio_at_equal_evidence(pm[:1], pc[:1], cm[:, :1], cc[:, :1], n_boot=20)
    assert ratio["topk_cost"] == pytest.approx(np.interp(pm[0], cm[:, 0], cc[:, 0]))
    none = delta_at_equal_cost([], [], np.zeros((6, 0)), np.zeros((6, 0)))
    assert none["cost"] is None and none["mean"] is None and none["n"] == 0


def test_interpolation_at_the_curves_ends_and_on_degenerate_curves() -> None:
    c, m = np.array([0.0, 1.0]), np.array([0.2, 0.6])
    assert interpolate_at(-1e-9, c, m) == pytest.approx(0.2)  # within 1e-9 of either end counts as on the curve
    assert interpolate_at(1.0 + 1e-9, c, m) == pytest.approx(0.6)
    assert interpolate_at(-2e-9, c, m) is None and interpolate_at(1.0 + 2e-9, c, m) is None
    assert interpolate_at(5.0, np.array([5.0]), np.array([0.3])) == pytest.approx(0.3)  # a one-point curve
    assert interpolate_at(1.0, np.array([]), np.array([])) is None
    assert interpolate_at(float("nan"), c, m) is None and interpolate_at(float("inf"), c, m) is None
    assert interpolate_at(0.5, [0, 1], [0, 1]) == pytest.approx(0.5)  # plain lists of ints


def test_cost_to_reach_at_its_tolerance_and_on_flat_stretches() -> None:
    from mage_gym.bench.equal_cost import cost_to_reach

    c = np.array([0.0, 100.0, 200.0, 300.0])
    # within 1e-12 of the first point: reached there, at its cost
    assert cost_to_reach(1e-12, c[:2], np.array([0.0, 0.0])) == 0.0
    assert cost_to_reach(0.5 + 1e-12, c[:2], np.array([0.5, 0.5])) == 0.0
    # a flat stretch at the target: the least cost is where it starts
    assert cost_to_reach(0.5 + 1e-12, c, np.array([0.0, 0.5, 0.5, 1.0])) == pytest.approx(100.0)
    assert cost_to_reach(0.5, np.array([]), np.array([])) is None
    assert cost_to_reach(float("nan"), c, np.array([0.0, 0.5, 0.5, 1.0])) is None
    assert cost_to_reach(0.3, np.array([7.0]), np.array([0.3])) == 7.0  # a one-point curve that reaches it
    assert cost_to_reach(0.4, np.array([7.0]), np.array([0.3])) is None


def test_a_cost_ratio_is_kept_for_a_policy_reading_under_one_page() -> None:
    from mage_gym.bench.equal_cost import cost_ratio_rule

    c, m = np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.5, 0.8])  # cost in pages
    assert cost_ratio_rule(0.25, 0.25, [0, 1, 2], c, m) == pytest.approx(0.5 / 0.25)
    assert cost_ratio_rule(0.25, 0.0, [0, 1, 2], c, m) is None  # nothing spent: no ratio


def test_overspending_is_spending_more_than_the_budget_beyond_rounding() -> None:
    from mage_gym.bench.equal_cost import delta_at_operating_budget

    n, ks = 32, [0, 1, 2]
    cm, cc = np.array([np.zeros(n), np.full(n, 0.4), np.full(n, 0.7)]), np.array([np.zeros(n), np.full(n, 5000.0),
                                                                                     np.full(n, 9000.0)])
    spend = lambda tokens: delta_at_operating_budget(np.full(n, 0.5), np.full(n, tokens), cm, cc, ks, 1, n_boot=10)
    assert spend(5000.0)["overspent"] is False and spend(5000.0)["mean"] == pytest.approx(0.1)
    assert spend(5000.0 + 1e-9)["overspent"] is False  # float rounding of a mean is not overspending
    over = spend(5000.5)
    assert over["overspent"] is True and over["mean"] == pytest.approx(0.5 - (0.4 + 0.3 * 0.5 / 4000.0))


def test_shape_errors_name_what_differs_and_no_seeds_is_refused() -> None:
    from mage_gym.bench.equal_cost import compare_over_seeds, equal_cost_rule

    pm, pc, cm, cc = _climbing(5, seed=14)
    with pytest.raises(ValueError, match="shapes differ"):  # a curve cost with one k more than the metric
        delta_at_equal_cost(pm, pc, cm, np.vstack([cc, cc[-1:] + 1000.0]))
    with pytest.raises(ValueError, match="shapes differ"):  # a 1-d curve
        delta_at_equal_cost(pm, pc, cm[1], cc[1])
    with pytest.raises(ValueError, match=r"^no seeds given$"):
        compare_over_seeds([], equal_cost_rule)
    with pytest.raises(ValueError, match=r"got \(2,\) and \(1,\)"):
        paired_delta([1.0, 2.0], [1.0])


def test_rows_without_a_metrics_or_components_block_have_no_value() -> None:
    from mage_gym.bench.equal_cost import row_values

    assert row_values({}, "support") is None and row_values({}, "tokens_rendered") is None
    assert row_values({"components": {"support": 1}}, "support") == 1.0
    assert row_values({"metrics": {"support": 0.5}}, "support") is None  # support sits in the components only


def test_curve_arrays_count_a_missing_value_as_zero_and_add_the_floor_once() -> None:
    rows = {0: {"a": {"r": 0.9, "t": 99}}, 1: {"a": {"r": None, "t": None}}, 2: {"a": {"r": 0.5, "t": 20}}}
    ks, m, c = curve_arrays(rows, ["a"], "r", "t")
    assert ks == [0, 1, 2] and m[:, 0].tolist() == [0.0, 0.0, 0.5] and c[:, 0].tolist() == [0.0, 0.0, 20.0]


def _ep(q: str, tokens: float | None, pages: float | None, recall: float | None = 0.5, failed: bool = False) -> dict:
    metrics = {"evidence_page_recall": recall}
    metrics.update({k: v for k, v in (("tokens_rendered", tokens), ("pages_rendered", pages)) if v is not None})
    return {"episode_id": q, "components": {"support": 0.5}, "metrics": metrics, **({"failed": True} if failed else {})}


def _topk_curve(ks, tokens_per_page: float = 1000.0, qs: str = "ab") -> dict:
    return {k: {q: _ep(q, tokens_per_page * k, float(k)) for q in qs} for k in ks}


def test_needed_ks_starts_at_one_needs_two_points_and_stops_at_max_k() -> None:
    from mage_gym.bench.equal_cost import needed_ks

    mine = [[_ep("a", 500.0, 0.5), _ep("b", 500.0, 0.5)]]
    assert needed_ks(mine, {}, max_k=10) == 1  # no curve yet: k = 1 first
    assert needed_ks(mine, _topk_curve([1]), max_k=10) == 2  # k = 1 covers the means, but a curve needs two points
    assert needed_ks(mine, _topk_curve([1, 2]), max_k=10) is None
    assert needed_ks(mine, _topk_curve([1, 2, 3]), max_k=10, min_k=3) is None  # min_k itself is enough
    far = [[_ep("a", 9000.0, 9.0), _ep("b", 9000.0, 9.0)]]
    assert needed_ks(far, _topk_curve([1, 2]), max_k=3) == 3  # max_k itself may still be run
    assert needed_ks(far, _topk_curve([1, 2, 3]), max_k=3) is None


def test_needed_ks_follows_tokens_and_pages_on_finished_questions_of_every_policy() -> None:
    from mage_gym.bench.equal_cost import needed_ks

    curve = _topk_curve([1, 2])
    assert needed_ks([[_ep("a", 2500.0, 1.0), _ep("b", 2500.0, 1.0)]], curve, max_k=10) == 3  # tokens decide
    assert needed_ks([[_ep("a", 100.0, 2.5), _ep("b", 100.0, 2.5)]], curve, max_k=10) == 3  # pages decide
    # a failed episode's cost is not a policy's cost
    assert needed_ks([[_ep("a", 1000.0, 1.0), _ep("b", 90000.0, 90.0, failed=True)]], curve, max_k=10) is None
    # every finished question counts, not only those with gold (here the one without gold reads most)
    most = [[_ep("a", 1000.0, 1.0), _ep("b", 4000.0, 1.0, recall=None)]]
    assert needed_ks(most, curve, max_k=10) == 3
    # every policy counts, not only the last one
    assert needed_ks([[_ep("a", 3000.0, 1.0)], [_ep("a", 500.0, 0.5)]], curve, max_k=10) == 3
    # a cost no row records counts as 0: a curve without page counts never reaches a policy that reads pages
    no_pages = {k: {q: _ep(q, 1000.0 * k, None) for q in "ab"} for k in (1, 2)}
    assert needed_ks([[_ep("a", 500.0, 0.8)]], no_pages, max_k=10) == 3
    assert needed_ks([[_ep("a", 500.0, None)]], no_pages, max_k=10) is None
