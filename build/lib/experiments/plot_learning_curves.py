"""Plot the validation curves of several training runs side by side (e.g. the seeds of a multirun).

Why: ``train.py`` writes one ``learning_curve.json`` per run; comparing seeds
needs them on one figure, and the docs need the points themselves, not only a
picture. Each point is an evaluation on the val split (reward, evidence page
recall, rendered tokens; unshaped, oracle reader) after a number of
environment steps. The x axis counts every environment step of the run, as
train.py does: DAgger's rollouts first (square markers), then PPO's (circles);
a point at step 0 is the start (behaviour cloning or ``train.init``). A dotted
line marks where PPO fine-tuning starts in a ``dagger_ppo`` run.

Run::

    .venv/bin/python experiments/plot_learning_curves.py outputs/ppo_3seeds_v3/*/ --out docs/results/ppo_learning_curves.png
    # with the points as a publishable results.json beside the figure:
    .venv/bin/python experiments/plot_learning_curves.py RUN... --out outputs/curves/learning_curves.png \
        --results outputs/curves/results.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

PANELS = (("val_reward", "val reward"), ("val_evidence_page_recall", "val evidence page recall"),
          ("val_tokens_rendered", "val rendered tokens"))
#: the fields a published point keeps (the rest of a curve row is training bookkeeping)
POINT_KEYS = ("timesteps", "stage", *(k for k, _ in PANELS), "val_evidence_all_covered")
MARKERS = {"dagger": "s", "start": "D", "ppo": "o"}


def load_run(run: Path) -> dict[str, Any]:
    """A run's curve plus what identifies it (recipe, seed, dataset from train_summary.json when present)."""
    path = run / "learning_curve.json"
    if not path.exists():
        raise SystemExit(f"no learning_curve.json in {run}")
    summary_path = run / "train_summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return {"name": run.name, "points": json.loads(path.read_text()), "recipe": summary.get("recipe"),
            "seed": summary.get("seed"), "shaping": summary.get("shaping"),
            "init": (summary.get("training") or {}).get("init"),
            "selected_timesteps": summary.get("selected_timesteps"), "best_val_reward": summary.get("best_val_reward"),
            "rollout": rollout_of(run, summary)}


def rollout_of(run: Path, summary: dict[str, Any]) -> str | None:
    """``"<n_envs> envs x <n_steps> steps"`` of a PPO run (None without PPO, or when not recorded).

    Older runs' summaries lack ``n_steps``; it is then read from the run's Hydra config.
    """
    training = summary.get("training") or {}
    n_envs, n_steps = training.get("n_envs"), training.get("n_steps")
    if not n_envs:
        return None
    if n_steps is None:
        config = run / ".hydra" / "config.yaml"
        if config.exists():
            import yaml

            node: Any = yaml.safe_load(config.read_text()) or {}
            for key in ("policy", "ppo", "train", "hparams", "n_steps"):
                node = node.get(key) if isinstance(node, dict) else None
            n_steps = node
    return f"{n_envs} envs x {n_steps} steps" if n_steps is not None else f"{n_envs} envs"


def label_of(r: dict[str, Any], with_rollout: bool = False) -> str:
    """``recipe [from init] seed S``; ``with_rollout`` adds the PPO rollout shape (when runs differ in it)."""
    if r["recipe"] is None:
        return r["name"]
    recipe = f"{r['recipe']} from {Path(str(r['init'])).stem}" if r.get("init") else str(r["recipe"])
    label = f"{recipe} seed {r['seed']}" if r["seed"] is not None else recipe
    return f"{label}, {r['rollout']}" if with_rollout and r.get("rollout") else label


def rollouts_differ(runs: list[dict[str, Any]]) -> bool:
    return len({r.get("rollout") for r in runs}) > 1


def plot(runs: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.6))
    with_rollout = rollouts_differ(runs)
    for r in runs:
        points = r["points"]
        color = None
        for ax, (key, _) in zip(axes, PANELS):
            pts = [(p["timesteps"], p.get(key), p.get("stage", "ppo")) for p in points if p.get(key) is not None]
            if not pts:
                continue
            line, = ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], color=color,
                            label=label_of(r, with_rollout))
            color = line.get_color()
            for stage, marker in MARKERS.items():
                sel = [(x, y) for x, y, s in pts if s == stage]
                if sel:
                    ax.scatter(*zip(*sel), marker=marker, color=color, zorder=3)
            ppo = [x for x, _, s in pts if s == "ppo"]
            before = [x for x, _, s in pts if s != "ppo"]
            if ppo and before:
                ax.axvline(max(before), color=color, linestyle=":", alpha=0.6)
    for ax, (_, title) in zip(axes, PANELS):
        ax.set_title(title)
        ax.set_xlabel("environment steps (diamond: start, squares: DAgger, circles: PPO)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def results_of(runs: list[dict[str, Any]], dataset: str | None) -> dict[str, Any]:
    """``{"runs": [...]}``: one row per training run, its validation points as a list of records."""
    rows = []
    with_rollout = rollouts_differ(runs)
    for r in runs:
        points = [{k: p.get(k) for k in POINT_KEYS} for p in r["points"]]
        rows.append({"policy": f"ppo ({label_of(r, with_rollout)})", "dataset": dataset, "split": "val",
                     "metrics": {"points": len(points), "best_val_reward": r["best_val_reward"],
                                 "selected_timesteps": r["selected_timesteps"], "curve": points},
                     "training": {"recipe": r["recipe"], "seed": r["seed"], "shaping": r["shaping"],
                                  "init": r.get("init"), "rollout": r.get("rollout"),
                                  "reported_reward": "unshaped (plain terminal reward)",
                                  "run": r["name"]}})
    return {"schema_version": 2, "runs": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders holding learning_curve.json")
    ap.add_argument("--out", default="outputs/learning_curves.png")
    ap.add_argument("--results", default=None, help="also write the points here as a results.json")
    ap.add_argument("--dataset", default=None, help="the training data's name for the results.json rows")
    args = ap.parse_args()

    runs = [load_run(Path(r)) for r in args.runs]
    out = Path(args.out)
    plot(runs, out)
    print(f"wrote {out}")
    if args.results:
        path = Path(args.results)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results_of(runs, args.dataset), indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
