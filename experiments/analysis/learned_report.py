"""Issue 14's report on one test set: every controller against topk_page at equal cost, learned ones over seeds.

Why one table: a learned controller comes in several training recipes
(imitation of the oracle; imitation then MaskablePPO), each trained with
several seeds and each benchmarked in its own run folder, where it is always
called ``ppo``. This script reads those folders, names each recipe (an
*arm*), and writes one ``results.json`` in which every row is a controller on
one question subset: topk_page, the rule policies and the oracle as the
benchmark played them, and each arm as the mean over its seeds. Each delta
against topk_page is recomputed from the runs' own per-question rows, in the
render mode the policy was played in and against topk_page's curve in the
mode it is compared in (its own; whole page images for ``elements``), as the
mean over seeds of each seed's delta with one 95 % interval over questions
(:func:`mage_gym.bench.equal_cost.delta_over_seeds`). With ``--episodes``
the rows are also split by hop count (``bridge``: two-hop questions;
``single_hop``: the rest), read from the dataset's episodes file, which no
policy sees.

Writes ``results.json`` and ``frontier.png`` (:mod:`mage_gym.bench.frontier`: every row's
page recall and tokens against topk_page's curve). Run (from the repo root), after one
benchmark per seed and arm on the same test episodes::

    .venv/bin/python -m experiments.analysis.learned_report --out outputs/report/mmlongbench \\
        --arm imitation=<run s0>,<run s1>,<run s2> --arm imitation+ppo=<run s0>,<run s1>,<run s2>

Rows' ``metrics``: means over seeds of ``reward``, ``support``,
``evidence_page_recall``, ``evidence_all_covered``, ``item_support``,
``gold_pages_by_any_element``, ``tokens_rendered``, ``pages_rendered``
(recall on questions with gold, item support on those with item gold), and
for every key of :data:`~mage_gym.bench.equal_cost.COMPARISONS` (at the
operating budget, the run's k; cost ratio at equal evidence; at equal cost)
a ``{"mean", "lo", "hi", "n", "interpretable"}`` cell; each row also keeps
the per-seed figures under ``per_seed`` and the checkpoints it played.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from mage_gym.bench.equal_cost import (BASELINE, COMPARISONS, OPERATING, RATIOS, baseline_mode, compare_over_seeds,
                                       cost_ratio_over_seeds, curve_arrays, equal_cost_rule,
                                       operating_budget_over_seeds, row_values)
from mage_gym.bench.results import budget_label
from mage_gym.data.io import load_episodes

#: per-episode means reported for every row (recall-type metrics over questions with gold only)
MEAN_METRICS = ("reward", "support", "evidence_page_recall", "evidence_all_covered", "item_support",
                "gold_pages_by_any_element", "tokens_rendered", "pages_rendered")
LEARNED = "ppo"  # the registered name the benchmark gives every learned checkpoint
OPERATING_KEYS = frozenset(key for key, _, _ in OPERATING)
RATIO_KEYS = frozenset(key for key, _, _ in RATIOS)
SUBSETS: dict[str, int] = {"single_hop": 1, "bridge": 2}  # subset name -> hops of its questions


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def hops_by_question(episodes_path: Path) -> dict[str, int]:
    """Question id -> number of hops (1, or 2 for a bridge question); single-question episodes only."""
    return {str(ep.episode_id): int(ep.n_hops) for ep in load_episodes(episodes_path) if hasattr(ep, "n_hops")}


@dataclass
class SeedRun:
    """One benchmark run folder: its results.json runs and its per-episode rows."""

    path: Path
    runs: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    curve_rows: list[dict[str, Any]] = field(default_factory=list)
    modes: dict[str, str] = field(default_factory=dict)  # "<policy> | <budget label>" -> render mode played

    @classmethod
    def load(cls, path: Path) -> "SeedRun":
        for name in ("results.json", "episodes.jsonl", "breakdown.json"):
            if not (path / name).is_file():
                raise FileNotFoundError(f"{path / name} is missing: is {path} a benchmark run folder?")
        curve = path / "topk_curve.jsonl"
        stats = json.loads((path / "breakdown.json").read_text()).get("policy_stats") or {}
        return cls(path, json.loads((path / "results.json").read_text())["runs"], read_rows(path / "episodes.jsonl"),
                   read_rows(curve) if curve.is_file() else [],
                   {label: str(st.get("render_mode") or "visual") for label, st in stats.items()})

    def mode_of(self, policy: str, budget: Mapping[str, Any]) -> str | None:
        """The render mode ``policy`` was played in under ``budget`` (the benchmark's policy stats)."""
        return self.modes.get(f"{policy} | {budget_label(budget)}")

    def run_of(self, policy: str, budget: str) -> Mapping[str, Any] | None:
        return next((r for r in self.runs if r["policy"] == policy and budget_key(r["budget"]) == budget), None)

    def policy_rows(self, policy: str, budget: str, keep: set[str] | None) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["policy"] == policy and budget_key(r["budget"]) == budget
                and not r.get("failed") and (keep is None or str(r["episode_id"]) in keep)]

    def curve(self, budget: str, mode: str) -> dict[int, dict[str, dict[str, Any]]]:
        """topk_page's rows per k and question in ``mode`` for the budget's other settings: the played plan's own
        topk_page runs (episodes.jsonl) and the k the equal-cost curve added (topk_curve.jsonl)."""
        others = {k: v for k, v in json.loads(budget).items() if k != "k"}
        out: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
        for r in self.rows + self.curve_rows:
            b = r["budget"]
            if r["policy"] != BASELINE or r.get("failed") or {k: v for k, v in b.items() if k != "k"} != others:
                continue
            row_mode = r.get("render_mode") or self.mode_of(BASELINE, b)
            if row_mode == mode:
                out[int(b["k"])][str(r["episode_id"])] = r
        return dict(out)


def budget_key(budget: Mapping[str, Any]) -> str:
    return json.dumps(dict(budget), sort_keys=True)


def parse_arm(spec: str) -> tuple[str, list[Path]]:
    """``LABEL=DIR[,DIR...]`` -> (label, run folders)."""
    label, sep, dirs = spec.partition("=")
    paths = [Path(d) for d in dirs.split(",") if d]
    if not sep or not label or not paths:
        raise ValueError(f"bad --arm {spec!r}: use LABEL=RUN_DIR[,RUN_DIR...], e.g. imitation=runs/s0,runs/s1")
    return label, paths


def controller_row(label: str, policy: str, seeds: Sequence[SeedRun], budget: str, keep: set[str] | None,
                   n_boot: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """One report row: ``policy`` as played in ``seeds`` (renamed ``label``), on the questions in ``keep``."""
    played = [(s, s.run_of(policy, budget)) for s in seeds]
    played = [(s, run) for s, run in played if run is not None]
    if not played:
        return None
    per_seed_rows = [s.policy_rows(policy, budget, keep) for s, _ in played]
    metrics: dict[str, Any] = {"episodes": len(per_seed_rows[0])}
    per_seed: dict[str, list[Any]] = {}
    for key in MEAN_METRICS:
        means = [float(np.mean(v)) if (v := [x for r in rows if (x := row_metric(r, key)) is not None]) else None
                 for rows in per_seed_rows]
        per_seed[key] = means
        metrics[key] = float(np.mean(means)) if all(m is not None for m in means) else None
    modes = {s.mode_of(policy, json.loads(budget)) for s, _ in played}
    mode = next(iter(modes)) if len(modes) == 1 else None
    if policy != BASELINE:
        if None in modes:
            raise ValueError(f"{label}: a run's breakdown.json does not say which render mode {policy} was played "
                             f"in ({', '.join(str(s.path) for s, _ in played)})")
        if len(modes) > 1:
            raise ValueError(f"{label}: its seeds were played in different render modes ({sorted(modes)}); "
                             "compare like with like")
        # topk_page's curve in the mode it is compared in (whole page images for elements); curve_arrays
        # picks each delta's questions
        curves = [s.curve(budget, baseline_mode(mode)) for s, _ in played]
        by_q = [{str(r["episode_id"]): r for r in rows} for rows in per_seed_rows]
        k_op = int(json.loads(budget)["k"])
        for key, metric, cost in COMPARISONS:
            qids = sorted(set.intersection(*({str(r["episode_id"]) for r in rows if row_values(r, metric) is not None
                                              and row_values(r, cost) is not None} for rows in per_seed_rows)))
            arrays, ks_per_seed = [], []
            for curve, rows_q in zip(curves, by_q):
                ks, cm, cc = curve_arrays({k: {q: {metric: row_values(r, metric), cost: row_values(r, cost)}
                                               for q, r in rows_k.items()} for k, rows_k in curve.items()},
                                          qids, metric, cost)
                if not ks:
                    arrays = []
                    break
                arrays.append(([row_values(rows_q[q], metric) for q in qids],
                               [row_values(rows_q[q], cost) for q in qids], cm, cc))
                ks_per_seed.append(ks)
            if not (arrays and qids):
                metrics[key] = {"mean": None, "lo": None, "hi": None, "n": len(qids), "interpretable": False}
                per_seed[key] = []
                continue
            if key in OPERATING_KEYS:
                d = operating_budget_over_seeds(arrays, ks_per_seed, k_op, n_boot=n_boot, seed=seed)
            elif key in RATIO_KEYS:
                d = cost_ratio_over_seeds(arrays, n_boot=n_boot, seed=seed)
            else:
                d = compare_over_seeds(arrays, equal_cost_rule, n_boot=n_boot, seed=seed)
            metrics[key] = {k: d[k] for k in ("mean", "lo", "hi", "n", "interpretable")}
            per_seed[key] = d["values"]
    row: dict[str, Any] = {"policy": label, "budget": json.loads(budget), "dataset": played[0][1]["dataset"],
                           "split": played[0][1]["split"], "render_mode": mode or "mixed", "seeds": len(played),
                           "metrics": metrics, "per_seed": per_seed}
    checkpoints = [(run.get("checkpoint") or {}).get("sha256") for _, run in played]
    if any(checkpoints):
        row["checkpoints"] = checkpoints
    if any(run.get("privileged") for _, run in played):
        row["privileged"] = True
    return row


def row_metric(row: Mapping[str, Any], key: str) -> float | None:
    """An episode row's value of a reported metric (``reward`` sits at the top, ``support`` in the components)."""
    if key == "reward":
        return float(row["reward"]) if row.get("reward") is not None else None
    v = row_values(row, key)
    if key in ("evidence_page_recall", "evidence_all_covered") and not (row.get("metrics") or {}).get("gold_known",
                                                                                                        True):
        return None
    return None if v is None else float(v)


def report(arms: Sequence[tuple[str, Sequence[Path]]], hops: Mapping[str, int] | None = None,
           learned: str = LEARNED, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The report's ``{"runs": [...], "arms": {...}}``: rule policies and the oracle from the first arm that played
    them, each arm's learned policy under its label; one row per subset (``all``, and with ``hops`` also
    ``bridge`` / ``single_hop``)."""
    loaded = [(label, [SeedRun.load(Path(p)) for p in paths]) for label, paths in arms]
    subsets: list[tuple[str, set[str] | None]] = [("all", None)]
    if hops:
        subsets += [(name, {q for q, h in hops.items() if h == n}) for name, n in SUBSETS.items()]
    budgets = list(dict.fromkeys(budget_key(r["budget"]) for _, seeds in loaded for s in seeds for r in s.runs))
    others = list(dict.fromkeys(r["policy"] for _, seeds in loaded for s in seeds for r in s.runs
                                if r["policy"] != learned))
    privileged = {r["policy"] for _, seeds in loaded for s in seeds for r in s.runs if r.get("privileged")}
    others.sort(key=lambda p: (p != BASELINE, p in privileged))  # topk_page, rule policies, then the oracle
    out = []
    for subset, keep in subsets:
        for budget in budgets:
            rows = []
            for policy in others:
                seeds = next((seeds for _, seeds in loaded if any(s.run_of(policy, budget) for s in seeds)), [])
                rows.append((policy in privileged, controller_row(policy, policy, seeds, budget, keep, n_boot, seed)))
            rows += [(False, controller_row(label, learned, seeds, budget, keep, n_boot, seed))
                     for label, seeds in loaded]
            rows.sort(key=lambda x: x[0])  # stable: the learned arms before privileged rows
            out += [{**r, "subset": subset} for _, r in rows if r is not None]
    return {"runs": out, "arms": {label: [str(p) for p in paths] for label, paths in arms},
            **({"subsets": {name: sum(1 for h in hops.values() if h == n) for name, n in SUBSETS.items()}}
               if hops else {})}


def plot_report_frontier(arms: Sequence[tuple[str, Sequence[Path]]], res: Mapping[str, Any], path: Path) -> Path:
    """The report's recall-token frontier (``frontier.png``): each row of the ``all`` subset (arms as their mean
    over seeds) against topk_page's curve of the first seed that played it, in every mode compared."""
    from mage_gym.bench.frontier import frontier_title, plot_frontier

    rows = [r for r in res["runs"] if r.get("subset", "all") == "all"]
    first = SeedRun.load(Path(arms[0][1][0]))
    budgets = list(dict.fromkeys(budget_key(r["budget"]) for r in rows))
    modes = {baseline_mode(r["render_mode"]) for r in rows if r.get("render_mode") not in (None, "mixed")}
    curves = {mode: first.curve(budgets[0], mode) for mode in sorted(modes or {"visual"})}
    return plot_frontier(rows, curves, path, frontier_title(rows), operating_k=int(json.loads(budgets[0])["k"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", action="append", required=True, metavar="LABEL=DIR[,DIR...]",
                    help="a learned recipe and its benchmark run folders, one per training seed (repeatable)")
    ap.add_argument("--episodes", type=Path, help="the dataset's episodes.jsonl: adds bridge / single_hop rows")
    ap.add_argument("--learned", default=LEARNED, help="the policy name the runs give the learned checkpoint")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        arms = [parse_arm(a) for a in args.arm]
        res = report(arms, hops_by_question(args.episodes) if args.episodes else None, args.learned, args.n_boot)
    except (ValueError, FileNotFoundError) as err:
        ap.error(str(err))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(res, indent=1))
    plot_report_frontier(arms, res, args.out / "frontier.png")
    for r in res["runs"]:
        m = r["metrics"]
        cells = {name: m.get(key) or {} for name, key in (("budget", "delta_recall_at_operating_budget"),
                                                           ("ratio", "cost_ratio_recall_at_equal_evidence"),
                                                           ("tokens", "delta_recall_at_equal_tokens"))}
        delta = {name: "n/a" if d.get("mean") is None else f"{d['mean']:+.3f} [{_f(d['lo'])}, {_f(d['hi'])}]"
                 for name, d in cells.items()}
        print(f"{r['subset']:>10} {r['policy']:>15} seeds={r['seeds']} n={m['episodes']:3d} "
              f"recall={_f(m['evidence_page_recall'], '.3f')} tokens={_f(m['tokens_rendered'], '.0f')} "
              f"d_recall@budget={delta['budget']} topk_tokens_ratio={delta['ratio']} "
              f"d_recall@tokens={delta['tokens']} ({r['render_mode']})")
    print(f"wrote {args.out / 'results.json'}")
    return 0


def _f(v: float | None, spec: str = "+.3f") -> str:
    return "n/a" if v is None else format(v, spec)


if __name__ == "__main__":
    raise SystemExit(main())
