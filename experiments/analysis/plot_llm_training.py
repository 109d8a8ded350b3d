"""Plot the per-step curves of LLM-controller training runs (experiments/train_llm.py), e.g. SFT then GRPO.

Why: each ``train_llm.py`` run writes its curves into its own
``results.json``; a warm start followed by RL is two runs, and the docs
need both on one figure with the points themselves beside it. Panels: the
training loss (SFT and GRPO), the env's reward per GRPO step (mean over the
step's rollouts), the format-error rate (unparseable replies per rollout),
the refused calls (well-formed calls the env refused) and the tokens read
(what the reader would be shown per rollout). Steps are counted across the
runs in the order given (a dotted line where the next run starts).

Run::

    .venv/bin/python experiments/analysis/plot_llm_training.py outputs/train_llm/<sft run> outputs/train_llm/<grpo run> \
        --out outputs/llm_training/<name>

Writes ``results.json`` (each run's settings, steps, seconds and curves) and
``llm_training_curves.png`` into ``--out``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

#: (curve key in train_llm.py's results.json, panel title); the first found of a tuple of keys is used
PANELS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("loss",), "training loss"),
    (("rewards/MageToolEnv/mean", "reward"), "env reward (mean of the step's rollouts)"),
    (("env/format_errors",), "format errors per rollout"),
    (("env/invalid_calls",), "refused calls per rollout"),
    (("env/tokens_read",), "tokens read per rollout"),
)
#: summary keys copied from each run's results.json
RUN_KEYS = ("algo", "model", "dataset", "budget", "chat", "steps", "global_step", "settings", "load_s", "train_s",
            "model_dir")


def load_run(run: Path) -> dict[str, Any]:
    path = Path(run) / "results.json"
    if not path.is_file():
        raise SystemExit(f"no results.json in {run}")
    res = json.loads(path.read_text())
    if res.get("kind") != "train_llm":
        raise SystemExit(f"{path} is not a train_llm.py result (kind={res.get('kind')!r})")
    row = {"run": Path(run).name, **{k: res.get(k) for k in RUN_KEYS}, "curves": res.get("curves") or {}}
    return row


def series(run: dict[str, Any], keys: tuple[str, ...]) -> tuple[str | None, list[int], list[float]]:
    """(key used, steps, values) of the first of ``keys`` the run logged (points without a value dropped)."""
    curves = run["curves"]
    for key in keys:
        if key in curves:
            pts = [(s, v) for s, v in zip(curves.get("step", []), curves[key]) if v is not None]
            return key, [s for s, _ in pts], [v for _, v in pts]
    return None, [], []


def plot(runs: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.4))
    offsets, start = [], 0
    for run in runs:
        offsets.append(start)
        start += int(run.get("global_step") or max(run["curves"].get("step") or [0]))
    for ax, (keys, title) in zip(axes, PANELS):
        for i, (run, off) in enumerate(zip(runs, offsets)):
            key, steps, values = series(run, keys)
            if key is None:
                continue
            ax.plot([s + off for s in steps], values, marker="o", ms=3, color=f"C{i}",
                    label=f"{run['algo']} ({run['run'][:24]})")
        for off in offsets[1:]:
            ax.axvline(off + 0.5, ls=":", color="grey")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("optimizer step (runs in order)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="train_llm.py run directories, in training order")
    ap.add_argument("--out", type=Path, required=True, help="folder for results.json and the figure")
    args = ap.parse_args(argv)
    runs = [load_run(r) for r in args.runs]
    args.out.mkdir(parents=True, exist_ok=True)
    fig = plot(runs, args.out / "llm_training_curves.png")
    results = {"kind": "llm_training", "runs": runs, "figure": fig.name}
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {args.out / 'results.json'} and {fig}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
