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
