"""Plot the validation curves of several training runs side by side (e.g. the seeds of a multirun).

Why: ``train.py`` writes one ``learning_curve.json`` per run; comparing seeds
needs them on one figure. Each point is an evaluation on the val split
(reward, evidence page recall, rendered tokens) at a number of PPO steps;
step 0 is the behaviour-cloning start.

Run::

    .venv/bin/python experiments/plot_learning_curves.py outputs/ppo_3seeds_v3/*/ --out docs/results/ppo_learning_curves.png
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

PANELS = (("val_reward", "val reward"), ("val_evidence_page_recall", "val evidence page recall"),
          ("val_tokens_rendered", "val rendered tokens"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders holding learning_curve.json")
    ap.add_argument("--out", default="outputs/learning_curves.png")
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.6))
    for run in args.runs:
        path = Path(run) / "learning_curve.json"
        if not path.exists():
            raise SystemExit(f"no learning_curve.json in {run}")
        points = json.loads(path.read_text())
        steps = [p["timesteps"] for p in points]
        for ax, (key, _) in zip(axes, PANELS):
            ax.plot(steps, [p.get(key) for p in points], marker="o", label=Path(run).name)
    for ax, (_, title) in zip(axes, PANELS):
        ax.set_title(title)
        ax.set_xlabel("PPO steps (0 = behaviour-cloning start)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
