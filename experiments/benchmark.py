"""Benchmark controller policies side by side: same episodes, same budgets, same metrics.

Run (from the repo root):

    .venv/bin/python experiments/benchmark.py dataset=mmlongbench 'policies=[topk_page,heuristic,ppo]' \
        policy.checkpoint=outputs/train/<run>/checkpoint.zip
    .venv/bin/python experiments/benchmark.py dataset=synth dataset.root=data/synth/tiny \
        'budgets=[{k: 1}, {k: 3}, {k: 5}]' logger=none
    # the paper setting (conf/paper.yaml): Qwen3-VL-8B-Instruct behind vLLM as evaluator and reader
    .venv/bin/python experiments/benchmark.py --config-name paper dataset=mmlongbench budget=paper_mmlongbench \
        reader.base_url=http://127.0.0.1:8000/v1 policy.llm_evaluator.backend.base_url=http://127.0.0.1:8000/v1

``policies`` is a plain list looped in this one process (a Hydra group list
would merge the policies' configs); each name's options come from
``conf/policy/<name>.yaml``, overridden by ``policy.<name>.<key>=...``
(``policy.checkpoint=PATH`` is the learned policies' checkpoint; ``limit: N``
runs a policy on the first N episodes only and ``only_base_budget: true`` at
``env.budget`` only - both for the slow LLM evaluator). ``budgets`` is a list
of partial budgets merged onto ``env.budget`` (null: that budget alone). Hydra multirun sweeps anything else on top.

Writes into the Hydra run directory: ``results.json`` (documented shape, see
:mod:`experiments._common`), ``results.csv``, ``results.md``,
``breakdown.json`` (per evidence type and single/multi-page), ``episodes.jsonl``
(one row per episode) and plots ``budget_curve.png``,
``by_evidence_type.png``, ``single_vs_multi_page.png``.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

log = logging.getLogger("benchmark")
CONF = C.REPO / "conf"
LEARNED = ("ppo",)


def policy_options(name: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``conf/policy/<name>.yaml`` merged with ``policy.<name>.*`` and, for learned policies, ``policy.checkpoint``."""
    path = CONF / "policy" / f"{name}.yaml"
    base = OmegaConf.load(path) if path.is_file() else OmegaConf.create({})
    over = dict(overrides or {})
    opts = C.plain(OmegaConf.merge(base, OmegaConf.create(dict(over.get(name) or {}))))
    if name in LEARNED and over.get("checkpoint"):
        opts["checkpoint"] = over["checkpoint"]
    opts.pop("name", None)
    return opts


def budgets_of(cfg: Mapping[str, Any]) -> list[dict[str, int]]:
    base = C.budget_dict(C.plain(cfg["env"]).get("budget") or {})
    extra = C.plain(cfg.get("budgets")) or [{}]
    return [C.budget_dict({**base, **dict(b or {})}) for b in extra]


def run_policy(name: str, opts: Mapping[str, Any], episodes: Sequence[Any], cfg: Mapping[str, Any],
               budget: Mapping[str, int], reader: Any, seed: int = 0, progress: bool = True,
               policy: Any = None, out: Path | None = None) -> tuple[list[Any], dict[str, Any]]:
    """Run one policy on ``episodes`` under ``budget``; returns (episode results, policy stats).

    ``opts`` may carry ``limit`` (first N episodes only, e.g. for the slow LLM
    evaluator); the rest go to :func:`policies.get_policy`. With ``out`` (and
    ``traces: true`` in the config) every episode's JSONL trace goes to
    ``out/traces/<policy>/<budget>.jsonl``, where ``experiments/report.py`` finds it.
    """
    from tqdm import tqdm

    from policies import get_policy
    from policies.runner import run_episode

    opts = dict(opts)
    limit = opts.pop("limit", None)
    eps = list(episodes)[: int(limit)] if limit else list(episodes)
    if policy is None:
        policy = get_policy(name, **opts)
    env_cfg = dict(C.plain(cfg["env"]))
    env_cfg["budget"] = dict(budget)
    if out is not None and cfg.get("traces", True):
        from mage_gym.report import trace_path

        path = trace_path(out, name, budget)
        path.parent.mkdir(parents=True, exist_ok=True)
        env_cfg["trace_path"] = str(path)
    env = C.make_env(eps, {**dict(cfg), "env": env_cfg}, render_mode=policy.render_mode, reader=reader,
                     max_graphs=8)
    results = []
    bar = tqdm(eps, desc=f"{name} {C.budget_label(budget)}", unit="ep", disable=not progress, leave=False)
    try:
        for i, ep in enumerate(bar):
            r = run_episode(env, policy, C.episode_of(ep).episode_id, seed=seed + i)
            results.append(r)
            bar.set_postfix(reward=f"{sum(x.reward for x in results) / len(results):.3f}")
    finally:
        env.close()
        policy.close()
    return results, dict(policy.stats)


def benchmark(cfg: Mapping[str, Any], out: Path, episodes: Sequence[Any] | None = None,
              policy_objects: Mapping[str, Any] | None = None, logger: Any = None) -> dict[str, Any]:
    """The whole benchmark: every policy x budget on the same episodes; writes every output into ``out``."""
    ds = C.plain(cfg["dataset"])
    if episodes is None:
        episodes = C.load_episodes(ds)
        episodes = C.prepare_graphs(episodes, parser=C.plain(cfg["env"]).get("parser", "layout"),
                                    workers=int(cfg.get("graph_workers", 1)),
                                    graph_kwargs=C.plain(cfg["env"]).get("graph_kwargs"))
    if not episodes:
        raise ValueError(f"no episodes for dataset {ds['name']!r} split {ds.get('split')!r}")
    by_id = {C.episode_of(e).episode_id: C.episode_of(e) for e in episodes}
    reader = C.build_reader(cfg)
    answers = bool(getattr(reader, "answers", False))
    names = [str(p) for p in C.plain(cfg["policies"])]
    overrides = C.plain(cfg.get("policy")) or {}
    runs, breakdowns, stats = [], {}, {}
    rows_path = out / "episodes.jsonl"
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    with open(rows_path, "w") as rows:
        base = C.budget_dict(C.plain(cfg["env"]).get("budget") or {})
        for budget in budgets_of(cfg):
            for name in names:
                opts = policy_options(name, overrides)
                if opts.pop("only_base_budget", False) and budget != base:
                    continue  # e.g. the slow LLM evaluator: run at env.budget only
                t0 = time.perf_counter()
                results, pstats = run_policy(name, opts, episodes, cfg, budget, reader, seed=int(cfg.get("seed", 0)),
                                             policy=(policy_objects or {}).get(name), out=out)
                metrics = C.summarise(results, by_id, answers)
                run = C.make_run(name, budget, ds["name"], ds.get("split", "all"), metrics)
                runs.append(run)
                key = f"{name} | {C.budget_label(budget)}"
                breakdowns[key] = C.breakdown(results, by_id)
                stats[key] = {**pstats, "seconds": time.perf_counter() - t0,
                              "invalid_actions": sum(r.invalid for r in results)}
                log.info("%s: %s", key, {k: C.fmt(v) for k, v in metrics.items()})
                for r in results:
                    rows.write(json.dumps({"policy": name, "budget": budget, "episode_id": r.episode_id,
                                           "reward": r.reward, "answer": r.answer, "components": r.components,
                                           "metrics": r.metrics, "decisions": r.decisions, "invalid": r.invalid,
                                           "wall_s": r.wall_s}, default=C._json_default) + "\n")
                if logger is not None:
                    logger.log({f"{name}/{k}": v for k, v in metrics.items() if isinstance(v, (int, float))})
    C.write_results(out / "results.json", runs)
    C.write_csv(out / "results.csv", runs)
    table = C.markdown_table(runs)
    (out / "results.md").write_text(table + "\n")
    C.write_json(out / "breakdown.json", {"breakdown": breakdowns, "policy_stats": stats})
    plots = save_plots(runs, breakdowns, out)
    if logger is not None:
        logger.table("results", list(C.TABLE_COLUMNS), C.table_rows(runs))
        logger.images({p.stem: p for p in plots})
    return {"runs": runs, "breakdown": breakdowns, "stats": stats, "table": table, "plots": plots}


# --- plots -----------------------------------------------------------------------------------------

def _budget_axis(budgets: list[dict[str, int]]) -> tuple[list[Any], str]:
    """x values and label: the one budget key that varies, else the budget's position."""
    varying = [k for k in C.BUDGET_KEYS if len({b[k] for b in budgets}) > 1]
    if len(varying) == 1:
        return [b[varying[0]] for b in budgets], f"budget {varying[0]}"
    return list(range(len(budgets))), "budget (" + "; ".join(C.budget_label(b) for b in budgets) + ")"


def save_plots(runs: Sequence[Mapping[str, Any]], breakdowns: Mapping[str, Any], out: Path) -> list[Path]:
    """Budget-performance curves, per evidence type bars and single/multi-page bars (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
            ax.set_xticklabels([C.budget_label(b) for b in budgets], fontsize=7, rotation=15)
            ax.set_xlabel("budget")
        else:
            ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    paths.append(_save(fig, out / "budget_curve.png"))

    last = C.budget_label(budgets[-1])
    for fname, by_type, title in (("by_evidence_type.png", True, "by evidence type"),
                                  ("single_vs_multi_page.png", False, "single- vs multi-page questions")):
        groups = sorted({g for p in policies for g in breakdowns.get(f"{p} | {last}", {})
                         if (g.startswith("type:") if by_type else g in ("single_page", "multi_page"))})
        fig, axes = plt.subplots(1, 2, figsize=(max(10, 2.4 * len(groups) * max(1, len(policies)) / 3), 4))
        width = 0.8 / max(1, len(policies))
        for ax, metric, label in zip(axes, ("evidence_page_recall", "support"),
                                     ("evidence page recall", "support (gold coverage)")):
            for i, p in enumerate(policies):
                bd = breakdowns.get(f"{p} | {last}", {})
                vals = [(bd.get(g) or {}).get(metric) for g in groups]
                ax.bar([j + i * width for j in range(len(groups))], [v if v is not None else 0.0 for v in vals],
                       width=width, label=p)
            ax.set_xticks([j + width * (len(policies) - 1) / 2 for j in range(len(groups))])
            ax.set_xticklabels([f"{g.removeprefix('type:')}\n(n={_n(breakdowns, policies, last, g)})"
                                for g in groups])
            ax.set_ylim(0, 1.05)
            ax.set_title(f"{label} {title} [{last}]", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        paths.append(_save(fig, out / fname))
    return paths


def _n(breakdowns: Mapping[str, Any], policies: Sequence[str], budget: str, group: str) -> int:
    for p in policies:
        g = breakdowns.get(f"{p} | {budget}", {}).get(group)
        if g:
            return int(g["episodes"])
    return 0


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@hydra.main(version_base=None, config_path="../conf", config_name="benchmark")
def main(cfg: DictConfig) -> None:
    C.set_threads(cfg.get("torch_threads"))
    out = C.run_dir()
    ds = cfg.dataset
    logger = C.make_logger(cfg, C.run_name(ds.name, "benchmark", cfg.get("seed", 0)), "benchmark", out)
    try:
        res = benchmark(C.plain(cfg), out, logger=logger)
    finally:
        logger.finish()
    print(res["table"])
    print(f"\nresults: {out / 'results.json'}")


if __name__ == "__main__":
    main()
