"""Equal-cost deltas against topk_page split by question kind: two-hop bridge questions vs the rest.

Why: a synthetic test corpus mixes ordinary and bridge questions (a third are
bridge questions), and a benchmark's equal-cost block averages over all of
them; graph navigation is meant to pay off on the bridge questions, so they
are reported apart. The deltas are recomputed from the benchmark runs' own
``episodes.jsonl`` and ``topk_curve.jsonl`` (paired on question ids, the same
bootstrap as :mod:`experiments.common.equal_cost`); the hop count of each
question comes from the dataset's episodes file (``Episode.n_hops``), which
the policies never saw.

Run (from the repo root), after one benchmark per training seed on the same episodes::

    .venv/bin/python -m experiments.equal_cost_by_hops --episodes data_out/synth/bridge_test_s99/episodes.jsonl \\
        --out outputs/aggregate/synth_s99_by_hops <run dir seed 0> <run dir seed 1> <run dir seed 2>

Writes ``<out>/results.json``: ``{"runs": [{"policy", "budget", "dataset", "split", "subset", "seeds",
"metrics": {"episodes", "evidence_page_recall", "tokens_rendered", "<delta key>": mean over seeds,
"<delta key>_per_seed", "<delta key>_ci_per_seed"}}]}`` with ``subset`` ``bridge`` (2 hops) or ``single_hop``.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from experiments.common.equal_cost import BASELINE, DELTAS, equal_cost_block, row_values
from mage_gym.data.io import load_episodes

SUBSETS: dict[str, int] = {"single_hop": 1, "bridge": 2}


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def hops_by_question(episodes_path: Path) -> dict[str, int]:
    """Question id -> number of hops (1, or 2 for a bridge question); single-question episodes only."""
    return {str(ep.episode_id): int(ep.n_hops) for ep in load_episodes(episodes_path) if hasattr(ep, "n_hops")}


def budget_key(row: Mapping[str, Any]) -> str:
    return json.dumps(row["budget"], sort_keys=True)


def subset_blocks(run_dir: Path, hops: Mapping[str, int]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(policy, budget, subset) -> the equal-cost block and means of one benchmark run, per subset."""
    rows = read_rows(run_dir / "episodes.jsonl")
    curve_rows = read_rows(run_dir / "topk_curve.jsonl")
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for subset, n_hops in SUBSETS.items():
        keep = {q for q, h in hops.items() if h == n_hops}
        curve: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
        for r in curve_rows:
            if str(r["episode_id"]) in keep:
                curve[int(r["budget"]["k"])][str(r["episode_id"])] = r
        groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            if str(r["episode_id"]) in keep and not r.get("failed"):
                groups[(str(r["policy"]), budget_key(r))].append(r)
        for (policy, budget), prow in groups.items():
            with_gold = [r for r in prow if row_values(r, "evidence_page_recall") is not None]
            block = equal_cost_block(with_gold, curve, render_mode="visual")
            block["episodes"] = len(with_gold)
            for key in ("evidence_page_recall", "tokens_rendered", "pages_rendered"):
                vals = [row_values(r, key) for r in with_gold]
                block[key] = float(np.mean(vals)) if vals else None
            out[(policy, budget, subset)] = block
    return out


def aggregate(run_dirs: Iterable[Path], hops: Mapping[str, int], dataset: str) -> dict[str, Any]:
    per_run = [subset_blocks(Path(d), hops) for d in run_dirs]
    keys = sorted({k for blocks in per_run for k in blocks})
    runs = []
    for policy, budget, subset in keys:
        blocks = [b[(policy, budget, subset)] for b in per_run if (policy, budget, subset) in b]
        m: dict[str, Any] = {"episodes": blocks[0]["episodes"]}
        for key in ("evidence_page_recall", "tokens_rendered", "pages_rendered"):
            vals = [b[key] for b in blocks if b[key] is not None]
            m[key] = float(np.mean(vals)) if vals else None
        for key, _, _ in DELTAS:
            means = [b[key]["mean"] for b in blocks]
            m[key] = None if policy == BASELINE or any(v is None for v in means) else float(np.mean(means))
            m[f"{key}_per_seed"] = None if policy == BASELINE else means
            m[f"{key}_ci_per_seed"] = None if policy == BASELINE else [[b[key]["lo"], b[key]["hi"]] for b in blocks]
        runs.append({"policy": policy, "budget": json.loads(budget), "dataset": dataset, "split": "all",
                     "subset": subset, "seeds": len(blocks), "metrics": m})
    return {"runs": runs, "subsets": {s: sum(1 for h in hops.values() if h == n) for s, n in SUBSETS.items()}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="benchmark run folders (one per seed, same episodes)")
    ap.add_argument("--episodes", type=Path, required=True, help="the dataset's episodes.jsonl (hop counts)")
    ap.add_argument("--dataset", default="synth")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    for d in args.runs:
        for name in ("episodes.jsonl", "topk_curve.jsonl"):
            if not (d / name).is_file():
                raise SystemExit(f"{d / name} is missing: is {d} a benchmark run folder?")
    result = aggregate(args.runs, hops_by_question(args.episodes), args.dataset)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    for r in result["runs"]:
        m = r["metrics"]
        d = m["delta_recall_at_equal_tokens"]
        print(f"{r['subset']:>10} {r['policy']:>15} n={m['episodes']:3d} recall={m['evidence_page_recall']:.3f} "
              f"tokens={m['tokens_rendered']:.0f} delta@tokens={'-' if d is None else f'{d:+.3f}'} "
              f"per seed={m['delta_recall_at_equal_tokens_per_seed']}")
    print(f"wrote {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
