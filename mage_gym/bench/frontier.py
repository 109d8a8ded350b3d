"""The recall-token frontier of a benchmark run: every policy's points against topk_page's curve.

Why a figure beside the numbers: a controller can beat topk_page "at equal
tokens" by reading less, or by finding more within the same budget, and the
two look alike in a table. On the frontier they do not: topk_page's curve
(one point per k), the operating budget (topk_page's mean tokens at the run's
k, a vertical line), each policy's points across its knob (the run's budgets:
entry pages k, reader tokens, ...) joined in order of cost, and the privileged
oracle as stars. A point above the curve and left of the line finds more
evidence within the budget; a point on the curve but further left only reads
less. The right panel repeats it for item-level support (questions with
region or snippet gold), which means the same for page images and opened
elements.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from mage_gym.bench.equal_cost import BASELINE, row_values

#: (metric, panel title) of the two panels
PANELS: tuple[tuple[str, str], ...] = (("evidence_page_recall", "evidence page recall"),
                                       ("item_support", "item support (questions with item gold)"))


def curve_points(curve: Mapping[int, Mapping[str, Mapping[str, Any]]], metric: str) -> list[tuple[int, float, float]]:
    """``(k, mean tokens, mean metric)`` per k of topk_page's curve, over the questions where ``metric`` applies,
    from the k = 0 floor (nothing read: no gold, no tokens) that the comparisons use too."""
    out = [(0, 0.0, 0.0)] if curve else []
    for k in sorted(curve):
        rows = [r for r in curve[k].values() if row_values(r, metric) is not None]
        if rows and k > 0:
            out.append((k, float(np.mean([row_values(r, "tokens_rendered") or 0.0 for r in rows])),
                        float(np.mean([row_values(r, metric) for r in rows]))))
    return out if len(out) > 1 else []


def policy_points(runs: Sequence[Mapping[str, Any]], metric: str) -> dict[tuple[str, bool], list[tuple[float, float,
                                                                                                    str]]]:
    """Per (policy, privileged): ``(mean tokens, mean metric, budget label)`` of each of its runs, by tokens."""
    from mage_gym.bench.results import budget_label

    out: dict[tuple[str, bool], list[tuple[float, float, str]]] = {}
    for run in runs:
        m = run.get("metrics") or {}
        if run["policy"] == BASELINE or m.get("tokens_rendered") is None or m.get(metric) is None:
            continue
        key = (str(run["policy"]), bool(run.get("privileged")))
        out.setdefault(key, []).append((float(m["tokens_rendered"]), float(m[metric]), budget_label(run["budget"])))
    return {k: sorted(v) for k, v in out.items()}


def plot_frontier(runs: Sequence[Mapping[str, Any]], curves: Mapping[str, Mapping[int, Mapping[str, Any]]],
                  path: Path, title: str = "", operating_k: int | None = None) -> Path:
    """Write ``path`` (PNG): the frontier panels of :data:`PANELS` (a panel no run has data for is left out).

    ``curves``: topk_page's rows per render mode, then k, then question id (the benchmark's curves);
    ``operating_k``: the k whose topk_page tokens are drawn as the operating budget.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(metric, name) for metric, name in PANELS
              if policy_points(runs, metric) or any(curve_points(c, metric) for c in curves.values())]
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(6.5 * max(1, len(panels)), 4.6), squeeze=False)
    for ax, (metric, name) in zip(axes[0], panels):
        for mode, curve in sorted(curves.items()):
            pts = curve_points(curve, metric)
            if not pts:
                continue
            ax.plot([t for _, t, _ in pts], [v for _, _, v in pts], "-o", ms=3, color="0.35",
                    label=f"{BASELINE} k={pts[0][0]}..{pts[-1][0]} ({mode})")
            at = next((t for k, t, _ in pts if k == operating_k), None)
            if at is not None:
                ax.axvline(at, ls="--", lw=1, color="0.5")
                ax.annotate(f"operating budget ({BASELINE} k={operating_k}, {mode})", (at, 0.98), fontsize=7,
                            rotation=90, va="top", xycoords=("data", "axes fraction"), xytext=(3, 0),
                            textcoords="offset points")
        for (policy, privileged), pts in policy_points(runs, metric).items():
            style = "*" if privileged else "s-"
            line, = ax.plot([t for t, _, _ in pts], [v for _, v, _ in pts], style, ms=9 if privileged else 5,
                            label=f"{policy} (privileged)" if privileged else policy)
            for t, v, label in pts if len(pts) > 1 else []:
                ax.annotate(label.split(" ")[0], (t, v), fontsize=6, xytext=(3, -8), textcoords="offset points",
                            color=line.get_color())
        ax.set_xlabel("mean reader tokens")
        ax.set_ylabel(name)
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
    fig.suptitle(title or "Recall-token frontier against top-k pages (* privileged)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def frontier_title(runs: Sequence[Mapping[str, Any]]) -> str:
    """"<dataset> <split>: policies against topk_page" for the figure's title."""
    data = " · ".join(dict.fromkeys(f"{r.get('dataset')} {r.get('split')}" for r in runs))
    return f"{data}: recall-token frontier against {BASELINE} (* privileged)"


__all__ = ["PANELS", "curve_points", "frontier_title", "plot_frontier", "policy_points"]
