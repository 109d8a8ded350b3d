"""Mean over seeds of benchmark runs: one row per policy, budget and dataset, with each seed's figures beside.

Run (from the repo root), after one benchmark per training seed on the same episodes:

    .venv/bin/python -m experiments.analysis.aggregate_seeds outputs/benchmark/<seed0> outputs/benchmark/<seed1> \
        outputs/benchmark/<seed2> --out outputs/aggregate/mmlongbench_test

Writes ``<out>/results.json``: ``{"runs": [{"policy", "budget", "dataset", "split", "seeds", "metrics":
{<metric>: mean over seeds, "<figure key>": mean of the figures' means, "<figure key>_per_seed": [...],
"<figure key>_ci_per_seed": [[lo, hi], ...]}}]}`` for every figure of the runs' ``equal_cost`` blocks (at the
operating budget, cost ratio at equal evidence, at equal cost; mage_gym/bench/equal_cost.py). A policy absent from a run (e.g. the oracle, run with one
seed only) is averaged over the runs that have it; ``seeds`` says how many.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from mage_gym.bench.equal_cost import COMPARISONS

MEAN_METRICS = ("reward", "support", "evidence_page_recall", "evidence_all_covered", "item_support",
                "tokens_rendered", "pages_rendered")


def aggregate(run_dirs: list[Path]) -> dict[str, Any]:
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for d in run_dirs:
        for r in json.loads((Path(d) / "results.json").read_text())["runs"]:
            key = (r["policy"], json.dumps(r["budget"], sort_keys=True), r["dataset"], r["split"])
            groups[key].append(r)
    out = []
    for (policy, budget, dataset, split), runs in groups.items():
        m: dict[str, Any] = {}
        for k in MEAN_METRICS:
            vals = [r["metrics"].get(k) for r in runs if r["metrics"].get(k) is not None]
            m[k] = float(np.mean(vals)) if vals else None
        m["episodes"] = runs[0]["metrics"].get("episodes")
        for key, _, _ in COMPARISONS:
            ds = [(r.get("equal_cost") or {}).get(key) or {} for r in runs]
            means = [d.get("mean") for d in ds]
            m[key] = float(np.mean(means)) if means and all(v is not None for v in means) else None
            m[f"{key}_per_seed"] = means
            m[f"{key}_ci_per_seed"] = [[d.get("lo"), d.get("hi")] for d in ds]
        row = {"policy": policy, "budget": json.loads(budget), "dataset": dataset, "split": split,
               "seeds": len(runs), "metrics": m}
        if any(r.get("privileged") for r in runs):
            row["privileged"] = True
        out.append(row)
    return {"runs": out, "sources": [str(d) for d in run_dirs]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    res = aggregate(args.runs)
    (args.out / "results.json").write_text(json.dumps(res, indent=1))
    for r in res["runs"]:
        m = r["metrics"]
        print(f"{r['policy']:>15} {r['dataset']}/{r['split']} seeds={r['seeds']} recall={m['evidence_page_recall']} "
              f"tokens={m['tokens_rendered']} d_recall@budget={m['delta_recall_at_operating_budget']} "
              f"d_recall@tokens={m['delta_recall_at_equal_tokens']}")
    print(f"results: {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
