"""Compare a policy with top-k pages: at equal cost, at top-k's operating budget, and by cost at equal evidence.

Why three figures: "finds more evidence" and "reads less" are different
claims, and one number made readers take the second for the first. topk_page
is run at every integer k of a curve (in the policy's own render mode and
reader; whole page images for an ``elements`` reader), and a policy's mean
evidence (page recall, support) and mean cost (tokens, pages) are read
against that curve three ways:

- **at equal cost** (:func:`delta_at_equal_cost`): the policy's evidence minus
  the curve's at the policy's own mean cost, linearly interpolated between
  the two neighbouring k that bracket it and never extrapolated (``None``
  outside the curve). The curve starts at k = 0 (reading nothing gets no gold
  at no cost), so a policy reading less than one page is compared with the
  mix of zero and one page that costs what it reads: an *efficiency* view.
- **at the operating budget** (:func:`delta_at_operating_budget`): the
  policy's evidence minus topk_page's at the run's k, where the policy may
  spend up to topk_page's mean cost at that k. A policy that spends more is
  read on the curve at its own cost (no credit for overspending); one that
  spends less is compared with topk_page at k (no credit for tokens left
  unused). This is the only figure from which "finds more evidence within
  top-k's budget" is claimed; the k = 0 floor plays no part in it.
- **cost at equal evidence** (:func:`cost_ratio_at_equal_evidence`): the
  cost topk_page needs on its curve to reach the policy's evidence (the least
  cost at which the interpolated curve gets there), divided by the policy's
  cost. Above 1: the policy gets the same evidence for less; ``None`` when the
  curve never reaches it (the policy finds more than top-k does at any k run).

Intervals are a paired bootstrap over question ids: each resample recomputes
the policy's means *and* the whole top-k curve on the same questions, and
applies the same rule; resamples where the rule has no value are dropped, and
the interval is ``None`` when more than half are. A learned controller is
reported as the mean over its seeds of each seed's figure, with one interval
over questions (:func:`compare_over_seeds`).

Inputs are plain per-question arrays so the arithmetic is testable on its own:
``policy_metric[q]``, ``policy_cost[q]``, and for the curve ``curve_metric[j, q]``,
``curve_cost[j, q]`` at ``ks[j]`` (questions in the same order everywhere).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

#: below this many questions a figure is reported but marked not interpretable
MIN_QUESTIONS = 30


def interpolate_at(cost: float, curve_cost: np.ndarray, curve_metric: np.ndarray) -> float | None:
    """The curve's metric at ``cost`` by linear interpolation between neighbouring points; None outside it.

    ``curve_cost`` / ``curve_metric`` are means per k, in increasing k. The
    cost is assumed to grow with k (more pages, more tokens); points that do
    not grow are skipped rather than guessed.
    """
    c = np.asarray(curve_cost, dtype=float)
    m = np.asarray(curve_metric, dtype=float)
    if c.size == 0 or not np.isfinite(cost) or cost < c[0] - 1e-9 or cost > c.max() + 1e-9:
        return None
    for j in range(len(c)):
        if abs(c[j] - cost) <= 1e-9:
            return float(m[j])
        if j + 1 < len(c) and c[j] <= cost <= c[j + 1] and c[j + 1] > c[j]:
            w = (cost - c[j]) / (c[j + 1] - c[j])
            return float((1 - w) * m[j] + w * m[j + 1])
    return None


def cost_to_reach(metric: float, curve_cost: np.ndarray, curve_metric: np.ndarray) -> float | None:
    """The least cost at which the interpolated curve reaches ``metric``; None when it never does.

    The inverse of :func:`interpolate_at` on the same piecewise-linear curve:
    the first point at or above ``metric`` is found in increasing k, and the
    cost is interpolated on the segment that climbs to it; a point whose
    cost does not grow over the one before is reached at its own cost.
    Reaching the curve's first point needs that point's cost.
    """
    c = np.asarray(curve_cost, dtype=float)
    m = np.asarray(curve_metric, dtype=float)
    if c.size == 0 or not np.isfinite(metric):
        return None
    if m[0] >= metric - 1e-12:
        return float(c[0])
    for j in range(1, len(c)):
        if m[j] >= metric - 1e-12:  # the first point that reaches it; the one before does not
            if c[j] <= c[j - 1]:
                return float(c[j])
            w = (metric - m[j - 1]) / (m[j] - m[j - 1])
            return float(c[j - 1] + w * (c[j] - c[j - 1]))
    return None


#: a comparison rule: (policy mean metric, policy mean cost, ks, curve mean cost per k, curve mean metric per k)
#: -> the figure, or None where it is undefined (outside the curve)
Rule = Callable[[float, float, Sequence[int], np.ndarray, np.ndarray], "float | None"]


def equal_cost_rule(pm: float, pc: float, ks: Sequence[int], cc: np.ndarray, cm: np.ndarray) -> float | None:
    """The policy's metric minus the curve's at the policy's own cost."""
    base = interpolate_at(pc, cc, cm)
    return None if base is None else pm - base


def operating_budget_rule(k: int) -> Rule:
    """The policy's metric minus topk_page's at ``k`` or, when the policy spends more than top-k at ``k``, at
    the policy's own cost (None when ``k`` is not on the curve or the cost lies beyond it)."""
    def rule(pm: float, pc: float, ks: Sequence[int], cc: np.ndarray, cm: np.ndarray) -> float | None:
        if k not in ks:
            return None
        budget = float(cc[list(ks).index(k)])
        base = interpolate_at(max(pc, budget), cc, cm)
        return None if base is None else pm - base
    return rule


def cost_ratio_rule(pm: float, pc: float, ks: Sequence[int], cc: np.ndarray, cm: np.ndarray) -> float | None:
    """topk_page's cost to reach the policy's metric over the policy's cost (None: never reached, or the
    policy spent nothing)."""
    need = cost_to_reach(pm, cc, cm)
    if need is None or pc <= 0:
        return None
    return need / pc


def _check(arrays: Sequence[tuple[np.ndarray, ...]]) -> int:
    if not arrays:
        raise ValueError("no seeds given")
    n = len(arrays[0][0])
    for pm, pc, cm, cc in arrays:
        if cm.ndim != 2 or cm.shape != cc.shape or cm.shape[1] != n or len(pm) != n or len(pc) != n:
            raise ValueError(f"shapes differ: policy {pm.shape}/{pc.shape}, curve {cm.shape}/{cc.shape}, "
                             f"{n} questions")
    return n


def compare_over_seeds(per_seed: Sequence[tuple[Sequence[float], Sequence[float], np.ndarray, np.ndarray]],
                       rule: Rule, ks: Sequence[Sequence[int]] | None = None, n_boot: int = 1000,
                       seed: int = 0) -> dict[str, Any]:
    """The mean over seeds of ``rule`` applied to each seed's means, with one 95 % interval over questions.

    ``per_seed`` holds, per seed, ``(policy_metric[q], policy_cost[q], curve_metric[k, q], curve_cost[k, q])``
    on the same questions in the same order; ``ks`` the curve's k per seed (``0..K-1`` when None). Each
    bootstrap resample draws one set of questions, recomputes every seed's means and whole curve on it,
    applies the rule and averages over seeds. Returns ``{"mean", "lo", "hi", "n", "interpretable", "seeds",
    "values", "costs"}``: ``values`` is each seed's figure on all questions, ``costs`` each seed's mean cost;
    ``mean`` is None when any seed's figure is.
    """
    arrays = [tuple(np.asarray(a, dtype=float) for a in s) for s in per_seed]
    n = _check(arrays)
    ks_list = [list(k) for k in ks] if ks is not None else [list(range(a[2].shape[0])) for a in arrays]
    if len(ks_list) != len(arrays) or any(len(k) != a[2].shape[0] for k, a in zip(ks_list, arrays)):
        raise ValueError(f"ks must give one k per curve point for each of the {len(arrays)} seeds")
    out: dict[str, Any] = {"mean": None, "lo": None, "hi": None, "n": n, "interpretable": n >= MIN_QUESTIONS,
                           "seeds": len(arrays), "values": [None] * len(arrays),
                           "costs": [float(pc.mean()) if n else None for _, pc, _, _ in arrays]}
    if n == 0:
        return out
    values = [rule(float(pm.mean()), float(pc.mean()), k, cc.mean(axis=1), cm.mean(axis=1))
              for (pm, pc, cm, cc), k in zip(arrays, ks_list)]
    out["values"] = values
    if any(v is None for v in values):
        return out
    out["mean"] = float(np.mean(values))
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    boot = np.mean([_bootstrap(pm, pc, cm, cc, k, idx, rule) for (pm, pc, cm, cc), k in zip(arrays, ks_list)],
                   axis=0)
    kept = boot[np.isfinite(boot)]
    if len(kept) >= n_boot / 2:
        out["lo"], out["hi"] = (float(x) for x in np.percentile(kept, [2.5, 97.5]))
    return out


def _bootstrap(pm: np.ndarray, pc: np.ndarray, cm: np.ndarray, cc: np.ndarray, ks: Sequence[int],
               idx: np.ndarray, rule: Rule) -> np.ndarray:
    """The rule's figure per resample (rows of ``idx``); NaN where it is undefined."""
    p_mean, p_cost = pm[idx].mean(axis=1), pc[idx].mean(axis=1)
    c_mean = cm[:, idx].mean(axis=2)  # [k, boot]
    c_cost = cc[:, idx].mean(axis=2)
    out = np.full(len(idx), np.nan)
    for b in range(len(idx)):
        v = rule(float(p_mean[b]), float(p_cost[b]), ks, c_cost[:, b], c_mean[:, b])
        if v is not None:
            out[b] = v
    return out


def delta_over_seeds(per_seed: Sequence[tuple[Sequence[float], Sequence[float], np.ndarray, np.ndarray]],
                     n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The mean over training seeds of each seed's delta at equal cost, with one 95 % interval over questions.

    Why: a learned controller is reported as the mean over its seeds, and
    its interval should be over questions for that mean, not one interval per
    seed. With one seed this is exactly :func:`delta_at_equal_cost`. Returns
    ``{"mean", "lo", "hi", "n", "interpretable", "seeds", "costs",
    "topk_at_costs"}``; ``mean`` is None when any seed's cost lies outside its curve.
    """
    out = compare_over_seeds(per_seed, equal_cost_rule, n_boot=n_boot, seed=seed)
    arrays = [tuple(np.asarray(a, dtype=float) for a in s) for s in per_seed]
    out["topk_at_costs"] = [None if out["n"] == 0 else interpolate_at(float(pc.mean()), cc.mean(axis=1),
                                                                      cm.mean(axis=1))
                            for _, pc, cm, cc in arrays]
    del out["values"]
    return out


def delta_at_equal_cost(policy_metric: Sequence[float], policy_cost: Sequence[float], curve_metric: np.ndarray,
                        curve_cost: np.ndarray, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``{"mean", "lo", "hi", "n", "interpretable", "topk_at_cost", "cost"}``: policy minus top-k at equal cost.

    ``mean`` is the delta on all questions; ``lo``/``hi`` the 2.5/97.5
    percentiles of the paired bootstrap (resamples where the cost falls
    outside the curve are dropped; ``None`` when more than half are). All
    ``None`` when the policy's cost lies outside the top-k curve.
    """
    out = delta_over_seeds([(policy_metric, policy_cost, curve_metric, curve_cost)], n_boot=n_boot, seed=seed)
    out["cost"], out["topk_at_cost"] = out.pop("costs")[0], out.pop("topk_at_costs")[0]
    del out["seeds"]
    return out


def operating_budget_over_seeds(per_seed: Sequence[tuple[Sequence[float], Sequence[float], np.ndarray, np.ndarray]],
                                ks: Sequence[Sequence[int]], k: int, n_boot: int = 1000, seed: int = 0
                                ) -> dict[str, Any]:
    """:func:`delta_at_operating_budget` as the mean over seeds, with one interval over questions.

    Adds ``"k"``, ``"budget_costs"`` (topk_page's mean cost at ``k`` per seed: the operating budget) and
    ``"overspent"`` (per seed: the policy spent more than that budget and was read on the curve at its own cost).
    """
    out = compare_over_seeds(per_seed, operating_budget_rule(k), ks, n_boot=n_boot, seed=seed)
    arrays = [tuple(np.asarray(a, dtype=float) for a in s) for s in per_seed]
    budgets = [float(cc[list(kk).index(k)].mean()) if (k in kk and out["n"]) else None
               for (_, _, _, cc), kk in zip(arrays, ks)]
    out["k"], out["budget_costs"] = k, budgets
    out["overspent"] = [None if b is None or c is None else bool(c > b + 1e-9) for b, c in zip(budgets, out["costs"])]
    return out


def delta_at_operating_budget(policy_metric: Sequence[float], policy_cost: Sequence[float], curve_metric: np.ndarray,
                              curve_cost: np.ndarray, ks: Sequence[int], k: int, n_boot: int = 1000, seed: int = 0
                              ) -> dict[str, Any]:
    """``{"mean", "lo", "hi", "n", "interpretable", "k", "budget_cost", "cost", "overspent"}``: the policy's
    evidence minus topk_page's at ``k`` (``ks[j]`` labels the curve's rows), the policy being allowed up to
    topk_page's mean cost at ``k`` (``budget_cost``); past it (``overspent``) it is read on the curve at its own
    cost. ``mean`` is None when ``k`` is not on the curve or an overspending policy lies beyond it."""
    out = operating_budget_over_seeds([(policy_metric, policy_cost, curve_metric, curve_cost)], [ks], k,
                                      n_boot=n_boot, seed=seed)
    return _single(out, budget_cost=out.pop("budget_costs")[0], overspent=out.pop("overspent")[0])


def cost_ratio_over_seeds(per_seed: Sequence[tuple[Sequence[float], Sequence[float], np.ndarray, np.ndarray]],
                          n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """:func:`cost_ratio_at_equal_evidence` as the mean over seeds of each seed's ratio, with one interval over
    questions; adds ``"topk_costs"`` (per seed: the cost topk_page needs to reach the policy's evidence)."""
    out = compare_over_seeds(per_seed, cost_ratio_rule, n_boot=n_boot, seed=seed)
    arrays = [tuple(np.asarray(a, dtype=float) for a in s) for s in per_seed]
    out["topk_costs"] = [None if out["n"] == 0 else cost_to_reach(float(pm.mean()), cc.mean(axis=1),
                                                                  cm.mean(axis=1)) for pm, _, cm, cc in arrays]
    return out


def cost_ratio_at_equal_evidence(policy_metric: Sequence[float], policy_cost: Sequence[float],
                                 curve_metric: np.ndarray, curve_cost: np.ndarray, n_boot: int = 1000, seed: int = 0
                                 ) -> dict[str, Any]:
    """``{"mean", "lo", "hi", "n", "interpretable", "topk_cost", "cost", "above_curve"}``: the cost topk_page
    needs on its curve to reach the policy's mean evidence, over the policy's mean cost (``mean`` is that
    ratio; above 1: the same evidence for less). ``above_curve``: topk_page never reaches it (``mean`` None)."""
    out = cost_ratio_over_seeds([(policy_metric, policy_cost, curve_metric, curve_cost)], n_boot=n_boot, seed=seed)
    need = out.pop("topk_costs")[0]
    return _single(out, topk_cost=need, above_curve=bool(out["n"]) and need is None)


def _single(out: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A one-seed result of :func:`compare_over_seeds` in the single-run form (``cost``, no per-seed lists)."""
    out["cost"] = out.pop("costs")[0]
    for key in ("seeds", "values"):
        out.pop(key, None)
    return {**out, **extra}


def paired_delta(a: Sequence[float], b: Sequence[float], n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``{"mean", "lo", "hi", "n", "interpretable"}``: mean of ``a - b`` over paired questions, 95 % bootstrap.

    For two rankings or policies scored on the same questions at the same
    cost (e.g. two retrievers' recall@5), where no curve is needed.
    """
    x = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if np.shape(a) != np.shape(b) or x.ndim != 1:
        raise ValueError(f"paired arrays must be 1-d and equally long, got {np.shape(a)} and {np.shape(b)}")
    n = len(x)
    out: dict[str, Any] = {"mean": None, "lo": None, "hi": None, "n": n, "interpretable": n >= MIN_QUESTIONS}
    if n == 0:
        return out
    means = x[np.random.default_rng(seed).integers(0, n, size=(n_boot, n))].mean(axis=1)
    out["mean"] = float(x.mean())
    out["lo"], out["hi"] = (float(v) for v in np.percentile(means, [2.5, 97.5]))
    return out


def curve_arrays(rows_by_k: Mapping[int, Mapping[str, Mapping[str, Any]]], question_ids: Sequence[str],
                 metric: str, cost: str, floor: bool = True) -> tuple[list[int], np.ndarray, np.ndarray]:
    """``(ks, metric[k, q], cost[k, q])`` from top-k episode metrics keyed by k then question id.

    Only ks that cover every question are kept (a curve point over other
    questions would not be paired). With ``floor`` (and at least one point)
    the curve starts with k = 0 at metric 0 and cost 0: the metrics compared
    (page recall, support) count gold the reader got, and reading nothing
    gets none.
    """
    ks = sorted(k for k, rows in rows_by_k.items() if k > 0 and all(q in rows for q in question_ids))
    m = np.array([[float(rows_by_k[k][q].get(metric) or 0.0) for q in question_ids] for k in ks]).reshape(
        len(ks), len(question_ids))
    c = np.array([[float(rows_by_k[k][q].get(cost) or 0.0) for q in question_ids] for k in ks]).reshape(
        len(ks), len(question_ids))
    if floor and ks:
        zero = np.zeros((1, len(question_ids)))
        ks, m, c = [0, *ks], np.vstack([zero, m]), np.vstack([zero, c])
    return ks, m, c


# --- the benchmark's side: run topk_page's curve, then attach the deltas to every run ---------------------

#: (key, metric, cost) of the deltas at equal cost; keys are ``delta_<metric short>_at_equal_<cost short>``
DELTAS: tuple[tuple[str, str, str], ...] = (
    ("delta_recall_at_equal_tokens", "evidence_page_recall", "tokens_rendered"),
    ("delta_recall_at_equal_pages", "evidence_page_recall", "pages_rendered"),
    ("delta_support_at_equal_tokens", "support", "tokens_rendered"),
    ("delta_support_at_equal_pages", "support", "pages_rendered"),
)
#: (key, metric, cost) of the deltas at topk_page's operating budget: reader tokens, the budget a reader has.
#: ``item_support`` is over the questions with item-level gold only (MMDocIR boxes, FinanceBench evidence text,
#: synthetic gold elements): the one evidence measure that means the same for page images and opened elements.
OPERATING: tuple[tuple[str, str, str], ...] = (
    ("delta_recall_at_operating_budget", "evidence_page_recall", "tokens_rendered"),
    ("delta_support_at_operating_budget", "support", "tokens_rendered"),
    ("delta_item_support_at_operating_budget", "item_support", "tokens_rendered"),
)
#: (key, metric, cost) of the cost ratios at equal evidence (the efficiency claim)
RATIOS: tuple[tuple[str, str, str], ...] = (
    ("cost_ratio_recall_at_equal_evidence", "evidence_page_recall", "tokens_rendered"),
    ("cost_ratio_support_at_equal_evidence", "support", "tokens_rendered"),
)
#: every figure of a run's ``equal_cost`` block, in the order tables list them
COMPARISONS: tuple[tuple[str, str, str], ...] = OPERATING + RATIOS + DELTAS
BASELINE = "topk_page"
#: The render mode topk_page's curve is played in for a policy of each render mode (the policy's own, except
#: ``elements``: topk_page sends whole pages, and element granularity is judged against whole page images).
BASELINE_MODE: dict[str, str] = {"elements": "visual"}


def baseline_mode(mode: str) -> str:
    """The render mode of the topk_page curve a policy played in ``mode`` is compared with."""
    return BASELINE_MODE.get(mode, mode)


def row_values(row: Mapping[str, Any], key: str) -> float | None:
    """A metric of an ``episodes.jsonl`` row (``support`` sits in its reward components)."""
    src = row.get("components", {}) if key == "support" else row.get("metrics", {})
    v = src.get(key)
    return None if v is None else float(v)


def needed_ks(policy_rows: Sequence[Sequence[Mapping[str, Any]]], curve: Mapping[int, Mapping[str, Any]],
              max_k: int, min_k: int = 1) -> int | None:
    """The next k the curve needs: the smallest k not run yet while the curve's top does not reach every
    policy's mean tokens and pages, or is below ``min_k`` (None: the curve covers them all, or ``max_k`` is
    reached). The means are compared on the questions each delta averages over: every finished question
    (support) and those with gold (recall); a policy that reads most on its questions with gold would
    otherwise sit beyond a curve that only covers its mean over all questions. ``min_k`` is for analyses of a
    subset of the questions (e.g. bridge questions only), whose policy means can lie beyond the curve the
    means over all questions need."""
    def mean(rows: Sequence[Mapping[str, Any]], key: str) -> float:
        vals = [row_values(r, key) for r in rows]
        vals = [v for v in vals if v is not None]
        return float(np.mean(vals)) if vals else 0.0

    targets: list[tuple[set[str], str, float]] = []  # (questions, cost, the policy's mean cost on them)
    for rows in policy_rows:
        done = [r for r in rows if not r.get("failed")]
        for subset in (done, [r for r in done if row_values(r, "evidence_page_recall") is not None]):
            ids = {str(r["episode_id"]) for r in subset}
            if ids:
                targets += [(ids, cost, mean(subset, cost)) for cost in ("tokens_rendered", "pages_rendered")]
    k = 1
    while k in curve:
        reached = all(mean([r for q, r in curve[k].items() if str(q) in ids], cost) >= want
                      for ids, cost, want in targets)
        if reached and k > 1 and k >= min_k:
            return None
        k += 1
    return k if k <= max_k else None


def policy_arrays(policy_rows: Sequence[Mapping[str, Any]], curve: Mapping[int, Mapping[str, Mapping[str, Any]]],
                  metric: str, cost: str) -> tuple[list[str], list[float], list[float], list[int], np.ndarray,
                                                   np.ndarray]:
    """``(question ids, policy metric, policy cost, ks, curve metric[k, q], curve cost[k, q])`` for one figure:
    the run's finished episodes where the metric applies (gold known; item gold for ``item_support``), paired
    with topk_page's rows on the same question ids (with the k = 0 floor)."""
    ok = [r for r in policy_rows if not r.get("failed") and row_values(r, metric) is not None
          and row_values(r, cost) is not None]
    qids = [str(r["episode_id"]) for r in ok]
    ks, cm, cc = curve_arrays({k: {str(q): {metric: row_values(r, metric), cost: row_values(r, cost)}
                                   for q, r in rows.items()} for k, rows in curve.items()}, qids, metric, cost)
    return qids, [row_values(r, metric) for r in ok], [row_values(r, cost) for r in ok], ks, cm, cc


def equal_cost_block(policy_rows: Sequence[Mapping[str, Any]], curve: Mapping[int, Mapping[str, Mapping[str, Any]]],
                     render_mode: str, n_boot: int = 1000, seed: int = 0, k: int | None = None) -> dict[str, Any]:
    """The ``equal_cost`` block of one run: every figure of :data:`COMPARISONS` against topk_page's curve.

    ``k``: the run's entry pages, whose topk_page point is the operating budget (``None``: no operating-budget
    figures, e.g. a curve without that k). Questions are the run's finished episodes where each metric applies;
    the curve is paired on the same question ids. ``operating_budget`` records ``k`` and topk_page's mean
    tokens there (over the questions with gold).
    """
    block: dict[str, Any] = {"baseline": BASELINE, "render_mode": render_mode, "ks": sorted(curve)}
    empty = {"mean": None, "lo": None, "hi": None, "n": 0, "interpretable": False}
    for key, metric, cost in COMPARISONS:
        qids, pm, pc, ks, cm, cc = policy_arrays(policy_rows, curve, metric, cost)
        if not ks or not qids:
            block[key] = {**empty, "n": len(qids)}
        elif key in {o[0] for o in OPERATING}:
            block[key] = (delta_at_operating_budget(pm, pc, cm, cc, ks, k, n_boot=n_boot, seed=seed)
                          if k is not None else {**empty, "n": len(qids)})
        elif key in {r[0] for r in RATIOS}:
            block[key] = cost_ratio_at_equal_evidence(pm, pc, cm, cc, n_boot=n_boot, seed=seed)
        else:
            block[key] = delta_at_equal_cost(pm, pc, cm, cc, n_boot=n_boot, seed=seed)
    budget = block["delta_recall_at_operating_budget"].get("budget_cost")
    block["operating_budget"] = {"k": k, "tokens": budget}
    return block


def validate_block(block: Any) -> None:
    """Raise ValueError unless ``block`` is an ``equal_cost`` block (used by the results validator).

    Blocks written before the operating-budget figures existed carry only :data:`DELTAS`; a block that has
    an ``operating_budget`` must carry every figure of :data:`COMPARISONS`.
    """
    if not isinstance(block, Mapping) or not {"baseline", "render_mode", "ks"} <= set(block):
        raise ValueError(f"equal_cost block lacks baseline/render_mode/ks: {block!r}")
    keys = COMPARISONS if "operating_budget" in block else DELTAS
    for key, _, _ in keys:
        d = block.get(key)
        if not isinstance(d, Mapping) or not {"mean", "lo", "hi", "n", "interpretable"} <= set(d):
            raise ValueError(f"equal_cost.{key} must hold mean, lo, hi, n, interpretable; got {d!r}")
