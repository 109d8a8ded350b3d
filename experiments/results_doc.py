"""Publish a run's results.json under docs/results/ and regenerate the results docs from all of them.

Run (from the repo root):

    # after any experiment: copy its results.json (+ figures) with command, date and commit
    .venv/bin/python -m experiments.results_doc publish outputs/benchmark/<run> benchmark_mmlongbench \
        --command ".venv/bin/python experiments/benchmark.py dataset=mmlongbench" \
        --title "topk_page and the heuristic on MMLongBench test"
    # when a later run replaces an earlier one: mark it (it moves to the index's superseded list)
    .venv/bin/python -m experiments.results_doc supersede <old name> --by <new name> --because "..."
    # rebuild docs/RESULTS.md (the index) and docs/results/<name>/README.md (one page per result);
    # no number in them is typed by hand
    .venv/bin/python -m experiments.results_doc render

A plain argparse tool, not Hydra: it has no experiment settings, only paths.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from mage_gym.bench.published import publish, supersede
from mage_gym.bench.results_index import INDEX_LIMIT_BYTES, write_docs

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
    p.add_argument("--title", default=None, help="one line saying what the run measures (shown in the index)")
    p.add_argument("--results-root", type=Path, default=REPO / "docs" / "results")
    s = sub.add_parser("supersede", help="mark published result NAME as replaced by another one")
    s.add_argument("name")
    s.add_argument("--by", required=True, help="the published result that replaces it")
    s.add_argument("--because", required=True, help="why (shown on its page)")
    s.add_argument("--results-root", type=Path, default=REPO / "docs" / "results")
    r = sub.add_parser("render", help="write docs/RESULTS.md and docs/results/*/README.md from docs/results/*/")
    r.add_argument("--results-root", type=Path, default=REPO / "docs" / "results")
    r.add_argument("--out", type=Path, default=REPO / "docs" / "RESULTS.md", help="the index file")
    args = ap.parse_args(argv)
    if args.cmd == "publish":
        dest = publish(args.run_dir, args.name, args.command, args.results_root, REPO, commit=args.commit,
                       title=args.title)
        print(f"published {dest}; now run: {RENDER_COMMAND}")
    elif args.cmd == "supersede":
        folder = supersede(args.results_root, args.name, args.by, args.because)
        print(f"marked {folder} as superseded by {args.by}; now run: {RENDER_COMMAND}")
    else:
        docs = write_docs(args.results_root.resolve(), args.out.resolve(), RENDER_COMMAND)
        size = len(docs[args.out.resolve()].encode("utf-8"))
        print(f"wrote {args.out} ({size:,} bytes) and {len(docs) - 1} result pages under {args.results_root}")
        if size > INDEX_LIMIT_BYTES:
            print(f"warning: the index is over {INDEX_LIMIT_BYTES:,} bytes; mark superseded runs "
                  "(supersede) or delete them")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
