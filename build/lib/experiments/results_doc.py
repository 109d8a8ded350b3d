"""Publish a run's results.json under docs/results/ and regenerate docs/RESULTS.md from all of them.

Run (from the repo root):

    # after any experiment: copy its results.json (+ figures) with command, date and commit
    .venv/bin/python -m experiments.results_doc publish outputs/benchmark/<run> benchmark_mmlongbench \
        --command ".venv/bin/python experiments/benchmark.py dataset=mmlongbench"
    # rebuild docs/RESULTS.md (no number in it is typed by hand)
    .venv/bin/python -m experiments.results_doc render

A plain argparse tool, not Hydra: it has no experiment settings, only paths.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from experiments.common.published import publish, render

REPO = Path(__file__).resolve().parent.parent
RENDER_COMMAND = ".venv/bin/python -m experiments.results_doc render"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("publish", help="copy RUN_DIR/results.json to docs/results/NAME/ with provenance")
    p.add_argument("run_dir", type=Path)
    p.add_argument("name")
    p.add_argument("--command", required=True, help="the exact command that produced the run")
    p.add_argument("--commit", default=None, help="the commit that produced the run (default: the checkout's)")
    p.add_argument("--results-root", type=Path, default=REPO / "docs" / "results")
    r = sub.add_parser("render", help="write docs/RESULTS.md from docs/results/*/")
    r.add_argument("--results-root", type=Path, default=REPO / "docs" / "results")
    r.add_argument("--out", type=Path, default=REPO / "docs" / "RESULTS.md")
    args = ap.parse_args(argv)
    if args.cmd == "publish":
        dest = publish(args.run_dir, args.name, args.command, args.results_root, REPO, commit=args.commit)
        print(f"published {dest}")
    else:
        args.out.write_text(render(args.results_root, RENDER_COMMAND))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
