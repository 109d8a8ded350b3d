"""Compare a policy with top-k pages at equal cost: the same mean tokens (or pages) read, not the same k.

Why: a controller that reads more than top-k will usually find more gold;
the question is whether it finds more than top-k would with the same reading
budget. topk_page is run at every integer k of a curve (in the policy's own
render mode and reader); its mean recall is interpolated linearly between
the two neighbouring k whose mean cost brackets the policy's mean cost, and
never extrapolated (``None`` outside the curve). The curve starts at k = 0:
reading nothing gets no gold at no cost (the floor
:mod:`mage_gym.bench.headroom_sources` uses too), so a policy that reads less
than one page - elements instead of pages - is compared with the mix of
zero and one page that costs what it reads, not dropped. The interval is a paired
bootstrap over question ids: each resample recomputes the policy's mean cost
and metric *and* the whole top-k curve on the same questions.

Inputs are plain per-question arrays so the arithmetic is testable on its own:
``policy_metric[q]``, ``policy_cost[q]``, and for the curve ``curve_metric[j, q]``,
``curve_cost[j, q]`` at ``ks[j]`` (questions in the same order everywhere).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

#: below this many questions a delta is reported but marked not interpretable
MIN_QUESTIONS = 30


def interpolate_at(cost: float, curve_cost: np.ndarray, curve_metric: np.ndarray) -> float | None:
    """The curve's metric at ``cost`` by linear interpolation between neighbouring points; None outside it.

    ``curve_cost`` / ``curve_metric`` are means per k, in increasing k. The
    cost is assumed to grow with k (more pages, more tokens); a point whose
    cost does not exceed every earlier point's is skipped rather than guessed
    (so a flat stretch keeps its first point, and the curve stays continuous).
    """
    c = np.asarray(curve_cost, dtype=float)
    m = np.asarray(curve_metric, dtype=float)
    if c.size == 0 or not np.isfinite(cost) or cost < c[0] - 1e-9 or cost > c.max() + 1e-9:
        return None
    grows = np.ones(len(c), dtype=bool)
    grows[1:] = c[1:] > np.maximum.accumulate(c)[:-1]
    return float(np.interp(cost, c[grows], m[grows]))


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


def delta_over_seeds(per_seed: Sequence[tuple[Sequence[float], Sequence[float], np.ndarray, np.ndarray]],
                     n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The mean over training seeds of each seed's delta at equal cost, with one 95 % interval over questions.

    Why: a learned controller is reported as the mean over its seeds, and
    its interval should be over questions for that mean, not one interval per
    seed. ``per_seed`` holds, per seed, ``(policy_metric[q], policy_cost[q],
    curve_metric[k, q], curve_cost[k, q])`` on the same questions in the same
    order; each bootstrap resample draws one set of questions and recomputes
    every seed's delta on it (its policy means and its whole top-k curve),
    then averages over seeds. With one seed this is exactly
    :func:`delta_at_equal_cost`. Returns ``{"mean", "lo", "hi", "n",
    "interpretable", "seeds", "costs", "topk_at_costs"}``; ``mean`` is None
    when any seed's cost lies outside its curve.
    """
    arrays = [tuple(np.asarray(a, dtype=float) for a in s) for s in per_seed]
    if not arrays:
        raise ValueError("no seeds given")
    n = len(arrays[0][0])
    for pm, pc, cm, cc in arrays:
        if cm.ndim != 2 or cm.shape != cc.shape or cm.shape[1] != n or len(pm) != n or len(pc) != n:
            raise ValueError(f"shapes differ: policy {pm.shape}/{pc.shape}, curve {cm.shape}/{cc.shape}, "
                             f"{n} questions")
    out: dict[str, Any] = {"mean": None, "lo": None, "hi": None, "n": n, "interpretable": n >= MIN_QUESTIONS,
                           "seeds": len(arrays), "costs": [float(pc.mean()) if n else None for _, pc, _, _ in arrays],
                           "topk_at_costs": [None] * len(arrays)}
    if n == 0:
        return out
    bases = [interpolate_at(float(pc.mean()), cc.mean(axis=1), cm.mean(axis=1)) for _, pc, cm, cc in arrays]
    out["topk_at_costs"] = bases
    if any(b is None for b in bases):
        return out
    out["mean"] = float(np.mean([pm.mean() - b for (pm, _, _, _), b in zip(arrays, bases)]))
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    boot = np.mean([_bootstrap_deltas(pm, pc, cm, cc, idx) for pm, pc, cm, cc in arrays], axis=0)
    kept = boot[np.isfinite(boot)]
    if len(kept) >= n_boot / 2:
        out["lo"], out["hi"] = (float(x) for x in np.percentile(kept, [2.5, 97.5]))
    return out


def _bootstrap_deltas(pm: np.ndarray, pc: np.ndarray, cm: np.ndarray, cc: np.ndarray,
                      idx: np.ndarray) -> np.ndarray:
    """One delta per resample (rows of ``idx``); NaN where the resampled cost falls outside the curve."""
    p_mean, p_cost = pm[idx].mean(axis=1), pc[idx].mean(axis=1)
    c_mean = cm[:, idx].mean(axis=2)  # [k, boot]
    c_cost = cc[:, idx].mean(axis=2)
    deltas = np.full(len(idx), np.nan)
    for b in range(len(idx)):
        v = interpolate_at(float(p_cost[b]), c_cost[:, b], c_mean[:, b])
        if v is not None:
            deltas[b] = p_mean[b] - v
    return deltas


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

#: (metric, cost) pairs reported; keys are ``delta_<metric short>_at_equal_<cost short>``
DELTAS: tuple[tuple[str, str, str], ...] = (
    ("delta_recall_at_equal_tokens", "evidence_page_recall", "tokens_rendered"),
    ("delta_recall_at_equal_pages", "evidence_page_recall", "pages_rendered"),
    ("delta_support_at_equal_tokens", "support", "tokens_rendered"),
    ("delta_support_at_equal_pages", "support", "pages_rendered"),
)
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


def equal_cost_block(policy_rows: Sequence[Mapping[str, Any]], curve: Mapping[int, Mapping[str, Mapping[str, Any]]],
                     render_mode: str, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The ``equal_cost`` block of one run: each delta of :data:`DELTAS` against topk_page's curve.

    Questions are the run's finished episodes with gold (page recall defined);
    the curve is paired on the same question ids.
    """
    block: dict[str, Any] = {"baseline": BASELINE, "render_mode": render_mode, "ks": sorted(curve)}
    for key, metric, cost in DELTAS:
        ok = [r for r in policy_rows if not r.get("failed") and row_values(r, metric) is not None
              and row_values(r, cost) is not None]
        qids = [str(r["episode_id"]) for r in ok]
        ks, cm, cc = curve_arrays({k: {q: {metric: row_values(r, metric), cost: row_values(r, cost)}
                                       for q, r in rows.items()} for k, rows in curve.items()}, qids, metric, cost)
        if not ks or not qids:
            block[key] = {"mean": None, "lo": None, "hi": None, "n": len(qids), "interpretable": False}
            continue
        block[key] = delta_at_equal_cost([row_values(r, metric) for r in ok], [row_values(r, cost) for r in ok],
                                         cm, cc, n_boot=n_boot, seed=seed)
    return block


def validate_block(block: Any) -> None:
    """Raise ValueError unless ``block`` is an ``equal_cost`` block (used by the results validator)."""
    if not isinstance(block, Mapping) or not {"baseline", "render_mode", "ks"} <= set(block):
        raise ValueError(f"equal_cost block lacks baseline/render_mode/ks: {block!r}")
    for key, _, _ in DELTAS:
        d = block.get(key)
        if not isinstance(d, Mapping) or not {"mean", "lo", "hi", "n", "interpretable"} <= set(d):
            raise ValueError(f"equal_cost.{key} must hold mean, lo, hi, n, interpretable; got {d!r}")


def plot_equal_cost(runs: Sequence[Mapping[str, Any]], curves: Mapping[str, Mapping[int, Mapping[str, Any]]],
                    path: Any) -> Any:
    """Page recall against mean tokens: topk_page's curve per render mode, each run a labelled point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, curve in sorted(curves.items()):
        ks = sorted(curve)
        if not ks:
            continue
        tok = [np.mean([row_values(r, "tokens_rendered") or 0.0 for r in curve[k].values()]) for k in ks]
        rec = [np.nanmean([v if (v := row_values(r, "evidence_page_recall")) is not None else np.nan
                           for r in curve[k].values()] or [np.nan]) for k in ks]
        ax.plot(tok, rec, "-o", ms=3, label=f"{BASELINE} k={ks[0]}..{ks[-1]} ({mode})")
    for run in runs:
        m = run["metrics"]
        if run["policy"] == BASELINE or m.get("tokens_rendered") is None or m.get("evidence_page_recall") is None:
            continue
        marker = "*" if run.get("privileged") else "s"
        ax.plot(m["tokens_rendered"], m["evidence_page_recall"], marker, ms=8)
        ax.annotate(f"{run['policy']} k={run['budget']['k']}", (m["tokens_rendered"], m["evidence_page_recall"]),
                    fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("mean tokens rendered")
    ax.set_ylabel("evidence page recall")
    ax.set_title("Policies against top-k pages at equal tokens (* = privileged)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
