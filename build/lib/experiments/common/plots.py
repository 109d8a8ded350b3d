"""The benchmark's figures (budget curves, per evidence type, single- vs multi-page) and the learning curve.

matplotlib with the Agg backend (files only, no display). Figures use
constrained layout with short panel titles and the shared part (grouping,
budget) in the figure title, so long budget labels never overlap or get cut.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from experiments.common.results import BUDGET_KEYS, budget_label


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _budget_axis(budgets: list[dict[str, int]]) -> tuple[list[Any], str]:
    """x values and label: the one budget key that varies, else the budget's position."""
    varying = [k for k in BUDGET_KEYS if len({b[k] for b in budgets}) > 1]
    if len(varying) == 1:
        return [b[varying[0]] for b in budgets], f"budget {varying[0]}"
    return list(range(len(budgets))), "budget (" + "; ".join(budget_label(b) for b in budgets) + ")"


def save_plots(runs: Sequence[Mapping[str, Any]], breakdowns: Mapping[str, Any], out: Path) -> list[Path]:
    """``budget_curve.png``, ``by_evidence_type.png`` and ``single_vs_multi_page.png`` in ``out``."""
    plt = _pyplot()
    paths: list[Path] = []
    policies = list(dict.fromkeys(r["policy"] for r in runs))
    budgets = [dict(t) for t in dict.fromkeys(tuple(sorted(r["budget"].items())) for r in runs)]
    xs, xlabel = _budget_axis(budgets)
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for ax, metric, title in zip(axes, ("evidence_page_recall", "support", "element_recall", "reward"),
                                 ("evidence page recall", "support (gold coverage with the oracle)",
                                  "element recall", "reward")):
        for p in policies:
            ys = []
            for b in budgets:
                m = next((r["metrics"] for r in runs if r["policy"] == p and r["budget"] == b), {})
                ys.append(m.get(metric))
            pts = sorted((x, y) for x, y in zip(xs, ys) if y is not None)
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=p)
        ax.set_title(title, fontsize=10)
        ax.set_xticks(xs)
        if len(xs) == 1 or not isinstance(xs[0], (int, float)) or xlabel.startswith("budget ("):
            ax.set_xticklabels([budget_label(b) for b in budgets], fontsize=7, rotation=15)
            ax.set_xlabel("budget")
        else:
            ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    paths.append(_save(fig, out / "budget_curve.png"))

    last = budget_label(budgets[-1])
    for fname, by_type, title in (("by_evidence_type.png", True, "By evidence type"),
                                  ("single_vs_multi_page.png", False, "Single- vs multi-page questions")):
        groups = sorted({g for p in policies for g in breakdowns.get(f"{p} | {last}", {})
                         if (g.startswith("type:") if by_type else g in ("single_page", "multi_page"))})
        width_in = max(10.0, 2.4 * len(groups) * max(1, len(policies)) / 3)
        fig, axes = plt.subplots(1, 2, figsize=(width_in, 4.4), layout="constrained")
        width = 0.8 / max(1, len(policies))
        for ax, metric, label in zip(axes, ("evidence_page_recall", "support"),
                                     ("evidence page recall", "support (gold coverage)")):
            for i, p in enumerate(policies):
                bd = breakdowns.get(f"{p} | {last}", {})
                vals = [(bd.get(g) or {}).get(metric) for g in groups]
                ax.bar([j + i * width for j in range(len(groups))], [v if v is not None else 0.0 for v in vals],
                       width=width, label=p)
            ax.set_xticks([j + width * (len(policies) - 1) / 2 for j in range(len(groups))])
            ax.set_xticklabels([f"{g.removeprefix('type:').replace('_', '-')}\n(n={_n(breakdowns, policies, last, g)})"
                                for g in groups])
            ax.set_ylim(0, 1.05)
            ax.set_title(label, fontsize=10)
            ax.grid(axis="y", alpha=0.3)
        fig.suptitle(f"{title}, budget {last}", fontsize=11)
        fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=max(1, len(policies)),
                   fontsize=8, frameon=False)
        paths.append(_save(fig, out / fname))
    return paths


def _n(breakdowns: Mapping[str, Any], policies: Sequence[str], budget: str, group: str) -> int:
    for p in policies:
        g = breakdowns.get(f"{p} | {budget}", {}).get(group)
        if g:
            return int(g["episodes"])
    return 0


def save_curve(curve: list[dict[str, Any]], path: Path) -> Path | None:
    """Training reward and validation reward / evidence recall over environment steps (None without points)."""
    if not curve:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
    x = [r["timesteps"] for r in curve]
    for key, label in (("train_reward", "train (rolling)"), ("val_reward", "validation")):
        pts = [(a, r.get(key)) for a, r in zip(x, curve) if r.get(key) is not None]
        if pts:
            ax[0].plot(*zip(*pts), marker="o", label=label)
    pts = [(a, r.get("val_evidence_page_recall")) for a, r in zip(x, curve) if r.get("val_evidence_page_recall") is not None]
    if pts:
        ax[1].plot(*zip(*pts), marker="o", label="val evidence page recall")
    pts = [(a, r.get("val_element_recall")) for a, r in zip(x, curve) if r.get("val_element_recall") is not None]
    if pts:
        ax[1].plot(*zip(*pts), marker="s", label="val element recall")
    for a, t in zip(ax, ("reward", "evidence")):
        a.set_xlabel("environment steps")
        a.set_title(t)
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
