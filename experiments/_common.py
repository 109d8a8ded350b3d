"""Shared pieces of the experiment entry points: episodes, graphs, envs, metrics, results.json, W&B.

Why one module: ``train.py``, ``benchmark.py`` and ``main.py`` must build
environments, aggregate episode metrics and write ``results.json`` the same
way, or their numbers would not be comparable. Each entry point stays
readable top to bottom (CleanRL style) and calls into here for the plumbing.

``results.json`` (the documented shape other tools read)::

    {"runs": [{"policy": str, "budget": {"k","m","M","T","B"}, "dataset": str, "split": str,
               "metrics": {<METRIC_KEYS>}}]}

Metrics are means over episodes; ``null`` where a metric does not apply
(accuracy/F1 with the oracle reader, evidence metrics without gold).
``wall_s`` is the mean wall-clock seconds per episode.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

log = logging.getLogger("experiments")

def quiet_libraries() -> None:
    """bm25s sets its own logger to DEBUG when imported (one line per index build): import it, then raise it."""
    try:
        import bm25s  # noqa: F401
    except ImportError:  # pragma: no cover
        pass
    for name in ("bm25s", "httpx", "urllib3", "matplotlib", "PIL"):
        logging.getLogger(name).setLevel(logging.WARNING)


quiet_libraries()
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python experiments/x.py` puts only experiments/ on the path
    sys.path.insert(0, str(REPO))

from mage_gym.data.episode import Episode  # noqa: E402
from policies.runner import EpisodeResult, mean_or_none  # noqa: E402

METRIC_KEYS: tuple[str, ...] = (
    "episodes", "reward", "support", "noise", "cost", "accuracy", "f1", "evidence_page_recall",
    "evidence_all_covered", "element_recall", "element_precision", "pages_rendered", "elements_rendered",
    "images_rendered", "tokens_rendered", "operations", "reader_calls", "evaluator_calls", "wall_s",
)
RUN_KEYS: tuple[str, ...] = ("policy", "budget", "dataset", "split", "metrics")
BUDGET_KEYS: tuple[str, ...] = ("k", "m", "M", "T", "B")
#: evidence source labels of the benchmarks -> the five evidence types of the plots
EVIDENCE_TYPES: dict[str, str] = {
    "pure-text (plain-text)": "text", "text": "text", "plain-text": "text", "paragraph": "text",
    "table": "table", "chart": "chart", "figure": "figure", "image": "figure",
    "generalized-text (layout)": "layout", "layout": "layout",
}
ENV_KEYS = ("budget", "K", "render_mode", "reward", "final_open_pass", "render_config", "parser", "max_graphs",
            "graph_kwargs", "text_view_in_info", "query_fn", "trace_path")


# --- config and threads ----------------------------------------------------------------

def plain(cfg: Any) -> Any:
    """An OmegaConf node (or anything) as plain Python containers, interpolations resolved."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(cfg, (DictConfig, ListConfig)):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return cfg


def set_threads(n: int | None) -> None:
    """Cap torch's intra-op threads. One thread is much faster for PPO's tiny matrices on a shared machine."""
    if n:
        import torch

        torch.set_num_threads(int(n))


def run_dir() -> Path:
    """Hydra's output directory for this run (the working directory outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir)
    except Exception:  # noqa: BLE001 - not under Hydra
        return Path.cwd()


# --- episodes and graphs -------------------------------------------------------------------

def episode_of(item: Any) -> Episode:
    """The Episode of an Episode or of a pre-built (Episode, graph) pair (``EnvEpisode``)."""
    return item if isinstance(item, Episode) else item.episode


def load_episodes(ds: Mapping[str, Any], split: str | None = None, limit: int | None | str = "cfg",
                  usable_only: bool = False) -> list[Episode]:
    """Episodes of a ``dataset`` config node (name, root, split, limit, seed), with optional overrides."""
    from mage_gym.data.registry import load_dataset

    eps = load_dataset(ds["name"], root=ds.get("root"), split=split or ds.get("split", "all"),
                       limit=ds.get("limit") if limit == "cfg" else limit, seed=int(ds.get("seed", 0)))
    if usable_only:
        eps = [e for e in eps if e.usable_for_training]
    return eps


def prepare_graphs(episodes: Sequence[Episode], parser: str = "layout", workers: int = 1,
                   graph_kwargs: Mapping[str, Any] | None = None) -> list[Episode]:
    """Build (or find cached) the graph of every document; drop episodes whose document fails.

    Uses ``experiments/build_graphs.py``'s parallel, cached builder when
    available; a serial ``build_graph`` loop otherwise.
    """
    if any(not isinstance(e, Episode) for e in episodes):
        return list(episodes)  # pre-built pairs carry their graphs
    sources = sorted({e.source for e in episodes})
    if not sources:
        return []
    kw = dict(graph_kwargs or {})
    failed: set[str] = set()
    try:
        from build_graphs import run as build_run  # experiments/ is on sys.path for scripts

        cfg = {"files": sources, "input": None, "parser": parser, "parser_cfg": kw.get("parser_cfg") or {},
               "edge_cfg": kw.get("edge_cfg") or {}, "embed_cfg": kw.get("embed_cfg") or {},
               "max_pages": kw.get("max_pages"), "workers": int(workers), "limit": None, "cache": True,
               "cache_dir": kw.get("cache_dir")}
        res = build_run(cfg)
        failed = {d["path"] for d in res["documents"] if d.get("error")}
        for d in res["documents"]:
            if d.get("error"):
                log.warning("graph of %s failed: %s", d["path"], d["error"])
    except ImportError:
        from tqdm import tqdm

        from mage_gym.graph import build_graph

        for src in tqdm(sources, desc="graphs", unit="doc"):
            try:
                build_graph(src, parser=parser, **kw)
            except Exception as err:  # noqa: BLE001 - one bad document must not stop an experiment
                log.warning("graph of %s failed: %s", src, err)
                failed.add(src)
    return [e for e in episodes if e.source not in failed]


# --- environments ---------------------------------------------------------------------------

def env_kwargs(cfg: Mapping[str, Any], render_mode: str | None = None, reader: Any = None) -> dict[str, Any]:
    """Keyword arguments for ``MageRAGEnv`` from the ``env``, ``retriever`` and ``reader`` config nodes."""
    env_cfg = dict(plain(cfg.get("env")) or {})
    kw = {k: env_cfg[k] for k in ENV_KEYS if k in env_cfg and env_cfg[k] is not None}
    if render_mode:
        kw["render_mode"] = render_mode
    ret = dict(plain(cfg.get("retriever")) or {"name": "hybrid"})
    kw["retriever"] = ret.pop("name", "hybrid")
    kw["retriever_cfg"] = ret
    if reader is None:
        rd = dict(plain(cfg.get("reader")) or {"name": "oracle"})
        reader = rd.pop("name", "oracle")
        kw["reader_cfg"] = rd or None
    kw["reader"] = reader
    return kw


def make_env(episodes: Sequence[Episode], cfg: Mapping[str, Any], render_mode: str | None = None,
             reader: Any = None, max_graphs: int | None = None) -> Any:
    """``gymnasium.make("MageRAG-v0")`` on ``episodes`` (graphs from the cache, lazily)."""
    import gymnasium as gym

    import mage_gym.env  # noqa: F401 - registers MageRAG-v0

    kw = env_kwargs(cfg, render_mode, reader)
    if max_graphs is not None:
        kw["max_graphs"] = max_graphs
    return gym.make("MageRAG-v0", episodes=list(episodes), **kw)


def build_reader(cfg: Mapping[str, Any]) -> Any:
    """One reader object from the ``reader`` node, shared by all envs of a run (one model load)."""
    rd = dict(plain(cfg.get("reader")) or {"name": "oracle"})
    name = rd.pop("name", "oracle")
    from mage_gym.readers import get_reader

    return get_reader(name, **rd)


# --- metrics ----------------------------------------------------------------------------------

def evidence_types(ep: Episode) -> list[str]:
    """The episode's evidence types among text/table/chart/figure/layout (from its source labels)."""
    labels = list(ep.evidence_sources) or [r.type for r in ep.evidence_regions]
    out = []
    for lab in labels:
        t = EVIDENCE_TYPES.get(str(lab).strip().lower())
        if t and t not in out:
            out.append(t)
    return out


def summarise(results: Sequence[EpisodeResult], episodes: Mapping[str, Episode], answers: bool) -> dict[str, Any]:
    """Mean metrics over episodes in the documented shape (``answers``: the reader gives answer text)."""
    n = len(results)
    m = [r.metrics for r in results]
    c = [r.components for r in results]
    out: dict[str, Any] = {"episodes": n}
    out["reward"] = mean_or_none([r.reward for r in results])
    for key in ("support", "noise", "cost"):
        out[key] = mean_or_none([x.get(key) for x in c])
    if answers and n:
        from mage_gym.scoring import run_metrics

        recs = []
        for r in results:
            ep = episodes[r.episode_id]
            bench = ep.benchmark if ep.benchmark in ("mmlongbench", "longdocurl", "financebench", "synth") \
                else "mmlongbench"
            recs.append({"pred": r.answer, "gold": ep.answer, "answer_format": ep.answer_format, "benchmark": bench})
        rm = run_metrics(recs)
        out["accuracy"], out["f1"] = rm["accuracy"], rm["f1"]
    else:
        out["accuracy"] = out["f1"] = None
    for key in ("evidence_page_recall", "evidence_all_covered", "element_recall", "element_precision",
                "pages_rendered", "elements_rendered", "images_rendered", "tokens_rendered", "operations",
                "reader_calls", "evaluator_calls"):
        out[key] = mean_or_none([x.get(key) for x in m])
    out["wall_s"] = mean_or_none([r.wall_s for r in results])
    return {k: out.get(k) for k in METRIC_KEYS}


def breakdown(results: Sequence[EpisodeResult], episodes: Mapping[str, Episode]) -> dict[str, dict[str, Any]]:
    """Evidence recall and reward per evidence type and for single- vs multi-page questions."""
    groups: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        ep = episodes[r.episode_id]
        if not ep.answerable:
            groups["unanswerable"].append(r)
            continue
        for t in evidence_types(ep):
            groups[f"type:{t}"].append(r)
        groups["multi_page" if ep.multi_page else "single_page"].append(r)
    return {g: {"episodes": len(rs),
                "support": mean_or_none([r.components.get("support") for r in rs]),
                "evidence_page_recall": mean_or_none([r.metrics.get("evidence_page_recall") for r in rs]),
                "evidence_all_covered": mean_or_none([r.metrics.get("evidence_all_covered") for r in rs]),
                "element_recall": mean_or_none([r.metrics.get("element_recall") for r in rs]),
                "reward": mean_or_none([r.reward for r in rs]),
                "tokens_rendered": mean_or_none([r.metrics.get("tokens_rendered") for r in rs])}
            for g, rs in sorted(groups.items())}


def budget_dict(budget: Any) -> dict[str, int]:
    from mage_gym.env import Budget

    return Budget.coerce(plain(budget)).to_dict()


def make_run(policy: str, budget: Any, dataset: str, split: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {"policy": policy, "budget": budget_dict(budget), "dataset": dataset, "split": split,
            "metrics": {k: metrics.get(k) for k in METRIC_KEYS}}


def validate_results(obj: Mapping[str, Any]) -> None:
    """Raise ValueError unless ``obj`` has exactly the documented results.json shape."""
    if set(obj) != {"runs"} or not isinstance(obj["runs"], list):
        raise ValueError("results.json must be {'runs': [...]}")
    for run in obj["runs"]:
        if tuple(sorted(run)) != tuple(sorted(RUN_KEYS)):
            raise ValueError(f"run keys {sorted(run)} != {sorted(RUN_KEYS)}")
        if set(run["budget"]) != set(BUDGET_KEYS):
            raise ValueError(f"budget keys {sorted(run['budget'])} != {sorted(BUDGET_KEYS)}")
        if set(run["metrics"]) != set(METRIC_KEYS):
            raise ValueError(f"metric keys differ: {sorted(set(run['metrics']) ^ set(METRIC_KEYS))}")
        for k, v in run["metrics"].items():
            if v is not None and not isinstance(v, (int, float)):
                raise ValueError(f"metric {k} must be a number or null, got {v!r}")


def write_json(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_json_default))
    os.replace(tmp, path)
    return path


def write_results(path: Path, runs: Sequence[Mapping[str, Any]]) -> Path:
    obj = {"runs": [dict(r) for r in runs]}
    validate_results(obj)
    return write_json(path, obj)


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


# --- tables -------------------------------------------------------------------------------------

TABLE_COLUMNS = ("policy", "budget", "dataset", "split", "episodes", "reward", "evidence_page_recall",
                 "evidence_all_covered", "element_recall", "element_precision", "tokens_rendered", "pages_rendered",
                 "accuracy", "f1", "evaluator_calls", "wall_s")


def budget_label(b: Mapping[str, int]) -> str:
    return f"k{b['k']} m{b['m']} M{b['M']} T{b['T']} B{b['B']}"


def fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and float(v).is_integer() and abs(v) >= 100):
        return f"{int(v)}"
    if isinstance(v, float):
        return f"{v:.{nd}f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def table_rows(runs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for r in runs:
        m = r["metrics"]
        rows.append([r["policy"], budget_label(r["budget"]), r["dataset"], r["split"]]
                    + [fmt(m.get(c)) for c in TABLE_COLUMNS[4:]])
    return rows


def markdown_table(runs: Sequence[Mapping[str, Any]]) -> str:
    head = "| " + " | ".join(TABLE_COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in TABLE_COLUMNS) + "|"
    return "\n".join([head, sep] + ["| " + " | ".join(row) + " |" for row in table_rows(runs)])


def write_csv(path: Path, runs: Sequence[Mapping[str, Any]]) -> Path:
    import csv

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "dataset", "split", *BUDGET_KEYS, *METRIC_KEYS])
        for r in runs:
            w.writerow([r["policy"], r["dataset"], r["split"], *(r["budget"][k] for k in BUDGET_KEYS),
                        *("" if r["metrics"][k] is None else r["metrics"][k] for k in METRIC_KEYS)])
    return path


# --- logging: Weights & Biases or nothing -----------------------------------------------------

class NullLogger:
    """``logger=none``: every call is a no-op."""

    def log(self, data: Mapping[str, Any], step: int | None = None) -> None: ...

    def table(self, name: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None: ...

    def images(self, paths: Mapping[str, Path]) -> None: ...

    def summary(self, data: Mapping[str, Any]) -> None: ...

    def finish(self) -> None: ...


class WandbLogger(NullLogger):
    """Weights & Biases, offline unless ``WANDB_MODE`` says otherwise (no account or network needed)."""

    def __init__(self, project: str, name: str, config: Mapping[str, Any], run_dir: Path, job_type: str,
                 mode: str | None = None, tags: Sequence[str] = ()) -> None:
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, name=name, config=dict(config), dir=str(run_dir), job_type=job_type,
                              mode=mode or os.environ.get("WANDB_MODE", "offline"), tags=list(tags),
                              reinit="finish_previous")

    def log(self, data: Mapping[str, Any], step: int | None = None) -> None:
        self.run.log({k: v for k, v in data.items() if v is not None}, step=step)

    def table(self, name: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        self.run.log({name: self.wandb.Table(columns=list(columns), data=[list(r) for r in rows])})

    def images(self, paths: Mapping[str, Path]) -> None:
        self.run.log({k: self.wandb.Image(str(p)) for k, p in paths.items() if Path(p).is_file()})

    def summary(self, data: Mapping[str, Any]) -> None:
        for k, v in data.items():
            if v is not None:
                self.run.summary[k] = v

    def finish(self) -> None:
        self.run.finish()


def make_logger(cfg: Mapping[str, Any], name: str, job_type: str, out: Path) -> NullLogger:
    lg = dict(plain(cfg.get("logger")) or {"name": "none"})
    if lg.get("name", "none") in ("none", None, False):
        return NullLogger()
    try:
        return WandbLogger(project=lg.get("project", "mage-gym"), name=name, config=plain(cfg), run_dir=out,
                           job_type=job_type, mode=lg.get("mode"), tags=lg.get("tags") or ())
    except Exception as err:  # noqa: BLE001 - logging must never stop an experiment
        log.warning("W&B logging disabled: %s: %s", type(err).__name__, err)
        return NullLogger()


def run_name(*parts: Any) -> str:
    """CleanRL-style ``env__policy__seed__time``."""
    return "__".join(str(p) for p in parts) + "__" + time.strftime("%Y%m%d-%H%M%S")
