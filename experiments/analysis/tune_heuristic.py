"""Choose the heuristic's options on train/val splits: a small grid scored at equal tokens against topk_page.

Run (from the repo root; dev graphs must be in the cache, this script never tunes on test):

    .venv/bin/python experiments/analysis/tune_heuristic.py env.parser=fast logger=none
    .venv/bin/python experiments/analysis/tune_heuristic.py 'datasets=[synth]' dataset.root=data_out/synth/train6_seed0 \
        env.parser=fast '~grid.page_best_min_rel' 'grid.cue_bonus=[0.0,0.05]'

Why equal tokens: the heuristic reads more pages than top-k at the same k, so
any option that reads more looks better at equal k. The score of a grid point
is ``delta_recall_at_equal_tokens`` (page recall minus topk_page's recall
interpolated at the same mean tokens; :mod:`mage_gym.bench.equal_cost`),
with the benchmark's paired-bootstrap interval. Each (dataset, split) plays
topk_page's curve once and every grid point against it, all in the
heuristic's render mode and with the configured reader. The chosen point has
the best question-weighted mean score over ``datasets`` on
``select_split``; ``fit_split`` is
reported beside it (a point that only wins on one split is noise).

Writes ``results.json`` in the run directory::

    {"score", "select_split", "fit_split", "datasets", "budget",
     "grid": [{"options": {...}, "select_score": float | null,
               "scores": {dataset: {split: {"mean", "lo", "hi", "n", "interpretable",
                                            "page_recall", "tokens_rendered", "pages_rendered"}}}}],
     "chosen": {...options}, "chosen_index": int}
"""
from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path
from typing import Any, Mapping

import hydra
import numpy as np
from omegaconf import DictConfig

from mage_gym.bench.benchmark import benchmark_episodes, episode_row, run_policy
from policies import REGISTRY
from mage_gym.bench.config import ConfigError, exit_on_config_error, plain, quiet_libraries, run_dir, section
from mage_gym.bench.envs import build_reader
from mage_gym.bench.equal_cost import DELTAS, equal_cost_block, needed_ks, row_values
from mage_gym.bench.policy_options import BENCHMARK_OPTIONS, policy_options
from mage_gym.bench.results import budget_dict, write_json

log = logging.getLogger(__name__)
_CONF = Path(__file__).resolve().parents[2] / "conf"


def grid_points(grid: Mapping[str, list[Any]], fixed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every combination of ``grid``'s values (in key order), each with ``fixed`` merged in."""
    keys = list(grid)
    for k in keys:
        if not isinstance(grid[k], (list, tuple)) or not grid[k]:
            raise ConfigError(f"grid.{k} must be a non-empty list, got {grid[k]!r}")
    return [{**dict(fixed), **dict(zip(keys, values))} for values in itertools.product(*(grid[k] for k in keys))]


def dataset_node(cfg: Mapping[str, Any], name: str, split: str) -> dict[str, Any]:
    """The ``dataset`` group's ``<name>`` node, composed by Hydra under ``dataset_nodes.<name>``, with the split set.

    The ``dataset`` node's root/limit/seed apply to its own name.
    """
    composed = section(cfg, "dataset_nodes")
    if name not in composed:
        raise ConfigError(f"dataset {name!r} is not composed: add `- dataset@dataset_nodes.{name}: {name}` to the "
                          f"defaults of conf/tune_heuristic.yaml (composed: {sorted(composed)})")
    node = dict(composed[name])
    given = section(cfg, "dataset")
    if given.get("name") == name:
        node.update({k: given[k] for k in ("root", "limit", "seed") if k in given})
    if split == "test":
        raise ConfigError("tune_heuristic never runs on a test split")
    node["split"] = split
    return node


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [v for r in rows if (v := row_values(r, key)) is not None]
    return float(np.mean(vals)) if vals else None


def tune_split(cfg: Mapping[str, Any], dataset: Mapping[str, Any], points: list[dict[str, Any]],
               score: str) -> list[dict[str, Any]]:
    """Play every grid point and topk_page's curve on one (dataset, split); one score block per point."""
    run_cfg = {**dict(cfg), "dataset": dict(dataset)}
    episodes = benchmark_episodes(run_cfg)
    reader = build_reader(run_cfg)
    budget = budget_dict(section(cfg, "env").get("budget") or {})
    seed = int(cfg.get("seed", 0))
    ec = dict(cfg.get("equal_cost") or {})
    base = {k: v for k, v in policy_options(cfg, "heuristic").items() if k not in BENCHMARK_OPTIONS}
    played: list[tuple[list[dict[str, Any]], str]] = []
    for i, point in enumerate(points):
        results, stats = run_policy("heuristic", {**base, **point}, episodes, run_cfg, budget, reader, seed=seed,
                                    progress=False, registry=REGISTRY)
        rows = [episode_row("heuristic", budget, r, None) for r in results]
        played.append((rows, str(stats.get("render_mode") or "visual")))
        log.info("%s/%s point %d/%d %s: recall %.3f tokens %.0f", dataset["name"], dataset["split"], i + 1,
                 len(points), point, _mean(rows, "evidence_page_recall") or 0.0, _mean(rows, "tokens_rendered") or 0.0)
    curves: dict[str, dict[int, dict[str, dict[str, Any]]]] = {}
    topk_opts = {k: v for k, v in policy_options(cfg, "topk_page").items() if k not in BENCHMARK_OPTIONS}
    for mode in sorted({m for _, m in played}):
        curve = curves.setdefault(mode, {})
        mine = [rows for rows, m in played if m == mode]
        while (k := needed_ks(mine, curve, int(ec.get("max_k", 12)))) is not None:
            kb = budget_dict({**budget, "k": k})
            results, _ = run_policy("topk_page", {**topk_opts, "render_mode": mode}, episodes, run_cfg, kb, reader,
                                    seed=seed, progress=False, registry=REGISTRY)
            curve[k] = {r.episode_id: episode_row("topk_page", kb, r, None) for r in results}
    out = []
    for rows, mode in played:
        block = equal_cost_block(rows, curves[mode], mode, n_boot=int(ec.get("n_boot", 500)), seed=seed)
        d = block[score]
        out.append({**{k: d.get(k) for k in ("mean", "lo", "hi", "n", "interpretable")},
                    "page_recall": _mean(rows, "evidence_page_recall"),
                    "tokens_rendered": _mean(rows, "tokens_rendered"), "pages_rendered": _mean(rows, "pages_rendered"),
                    "curve_ks": sorted(curves[mode])})
    return out


def choose(grid: list[dict[str, Any]], datasets: list[str], split: str) -> int:
    """Index of the grid point with the best score on ``split`` (ties: first point).

    The score is the datasets' deltas weighted by their question counts (the
    pooled mean): a dev split of a dozen questions must not outvote one of
    sixty.
    """
    best, best_i = -np.inf, 0
    for i, g in enumerate(grid):
        cells = [g["scores"][d][split] for d in datasets]
        ok = all(c["mean"] is not None for c in cells) and sum(c["n"] for c in cells) > 0
        g["select_score"] = (float(sum(c["mean"] * c["n"] for c in cells) / sum(c["n"] for c in cells))
                             if ok else None)
        if g["select_score"] is not None and g["select_score"] > best + 1e-12:
            best, best_i = g["select_score"], i
    return best_i


@hydra.main(version_base=None, config_path="../../conf", config_name="tune_heuristic")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    quiet_libraries()
    c = plain(cfg)
    score = str(c.get("score", "delta_recall_at_equal_tokens"))
    if score not in {k for k, _, _ in DELTAS}:
        raise ConfigError(f"score must be one of {[k for k, _, _ in DELTAS]}, got {score!r}")
    datasets = [str(d) for d in c.get("datasets") or []]
    if not datasets:
        raise ConfigError("datasets must name at least one dataset")
    splits = [str(c.get("select_split", "val")), str(c.get("fit_split", "train"))]
    points = grid_points(dict(c.get("grid") or {}), dict(c.get("fixed") or {}))
    out = run_dir()
    grid = [{"options": p, "scores": {d: {} for d in datasets}} for p in points]
    for d in datasets:
        for split in dict.fromkeys(splits):
            for g, s in zip(grid, tune_split(c, dataset_node(c, d, split), points, score)):
                g["scores"][d][split] = s
    i = choose(grid, datasets, splits[0])
    res = {"score": score, "select_split": splits[0], "fit_split": splits[1], "datasets": datasets,
           "budget": budget_dict(section(c, "env").get("budget") or {}), "grid": grid,
           "chosen": grid[i]["options"], "chosen_index": i}
    write_json(out / "results.json", res)
    for g in grid:
        cells = "  ".join(f"{d}/{sp} {fmt(g['scores'][d][sp])}" for d in datasets for sp in dict.fromkeys(splits))
        print(f"{json.dumps(g['options'])}  {cells}")
    print(f"\nchosen: {json.dumps(grid[i]['options'])}\nresults: {out / 'results.json'}")


def fmt(s: Mapping[str, Any]) -> str:
    m = s.get("mean")
    if m is None:
        return "n/a"
    lo, hi = s.get("lo"), s.get("hi")
    ci = f" [{lo:+.3f}, {hi:+.3f}]" if lo is not None and hi is not None else ""
    return f"{m:+.3f}{ci}"


if __name__ == "__main__":
    main()
