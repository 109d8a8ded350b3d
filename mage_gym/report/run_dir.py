"""A benchmark run directory -> traces, episodes and graphs for the report.

What a run directory holds (``experiments/benchmark.py``, Hydra's run dir):

- ``results.json`` (``{"runs": [...]}``, means per policy and budget) - shown as run info;
- ``.hydra/config.yaml`` - the run's config: ``dataset`` (name, root) tells
  where the episodes' gold comes from, ``env.parser`` / ``env.graph_kwargs``
  which cached graphs the episodes ran on;
- ``traces/**/*.jsonl`` - the environment's JSONL traces
  (:class:`mage_gym.trace.TraceRecorder`), one file per policy and budget:
  ``traces/<policy>/<k5_m4_M24_T6_B16>.jsonl`` or ``traces/<policy>.jsonl``.
  The policy is the first path component under ``traces/`` (file stem at the
  top level): trace records do not name their policy, so one file must never
  mix policies. The budget comes from each episode's reset record; a policy
  run under several budgets is labelled ``policy [k5 m4 M24 T6 B16]``.

Everything the run's config says can be overridden (``dataset``, ``parser``,
``graph_kwargs``), for runs whose config was not saved.
"""
from __future__ import annotations

import inspect
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from mage_gym.report.data import ReportData, build_report_data
from mage_gym.report.records import TraceEpisode, read_trace_file

if TYPE_CHECKING:  # pragma: no cover
    from mage_gym.data.composite import AnyEpisode, CompositeEpisode
    from mage_gym.data.episode import Episode
    from mage_gym.graph.graph import EvidenceGraph

log = logging.getLogger(__name__)
BUDGET_KEYS = ("k", "m", "M", "T", "B")


class RunDirError(FileNotFoundError):
    """The run directory does not exist or holds no trace."""


@dataclass
class RunDir:
    path: Path
    results: dict[str, Any] | None
    config: dict[str, Any]
    trace_files: list[tuple[str, Path]] = field(default_factory=list)  # (policy, file)


def _load_config(path: Path) -> dict[str, Any]:
    for cand in (path / ".hydra" / "config.yaml", path / "config.yaml"):
        if cand.is_file():
            from omegaconf import OmegaConf

            try:
                obj = OmegaConf.to_container(OmegaConf.load(cand), resolve=False)
            except Exception as exc:  # noqa: BLE001 - a broken config only loses gold/graph lookups
                log.warning("cannot read %s: %s", cand, exc)
                continue
            return dict(obj) if isinstance(obj, dict) else {}
    return {}


def discover(run_dir: str | Path, traces_glob: str = "traces/**/*.jsonl") -> RunDir:
    path = Path(run_dir)
    if not path.is_dir():
        raise RunDirError(f"run directory not found: {path}")
    results = None
    if (path / "results.json").is_file():
        try:
            results = json.loads((path / "results.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            log.warning("results.json is not JSON (%s); ignored", exc)
    files = sorted(p for p in path.glob(traces_glob) if p.is_file())
    trace_files = []
    for f in files:
        rel = f.relative_to(path)
        parts = rel.parts[1:] if rel.parts and rel.parts[0] == "traces" else rel.parts
        policy = parts[0] if len(parts) > 1 else Path(parts[0]).stem
        trace_files.append((policy, f))
    if not trace_files:
        raise RunDirError(
            f"no trace files under {path} (looked for {traces_glob}); run the benchmark with trace writing on "
            "(each policy's env needs trace_path=<run_dir>/traces/<policy>/<budget>.jsonl)")
    return RunDir(path, results, _load_config(path), trace_files)


def budget_label(budget: Mapping[str, Any] | None) -> str:
    if not budget:
        return "?"
    label = " ".join(f"{k}{budget[k]}" for k in BUDGET_KEYS if k in budget)
    return label if budget.get("tokens") is None else f"{label} tok{budget['tokens']}"


def read_traces(rd: RunDir) -> list[TraceEpisode]:
    """Every episode of every trace file, labelled by policy (and budget when a policy ran several)."""
    traces: list[TraceEpisode] = []
    for policy, f in rd.trace_files:
        traces.extend(read_trace_file(f, policy))
    budgets: dict[str, set[str]] = {}
    for t in traces:
        budgets.setdefault(t.policy, set()).add(budget_label(t.reset.get("budget")))
    return [replace(t, policy=f"{t.policy} [{budget_label(t.reset.get('budget'))}]") if len(budgets[t.policy]) > 1
            else t for t in traces]


def episode_lookup(dataset: Mapping[str, Any] | None, warnings: list[str]
                   ) -> Callable[[str], "Episode | CompositeEpisode | None"]:
    """episode id -> Episode (or CompositeEpisode, for conversations and document sets) from the run's
    dataset (all splits), loaded once."""
    if not dataset or not dataset.get("name"):
        warnings.append("the run's dataset is unknown (no .hydra/config.yaml; pass dataset.name=...): "
                        "no gold answers or gold evidence in the report")
        return lambda eid: None
    from mage_gym.data.registry import load_dataset

    try:
        eps = load_dataset(str(dataset["name"]), root=dataset.get("root"), split="all")
    except Exception as exc:  # noqa: BLE001 - the report still shows what the traces say
        warnings.append(f"cannot load dataset {dataset.get('name')!r}: {type(exc).__name__}: {exc}")
        return lambda eid: None
    by_id = {e.episode_id: e for e in eps}
    return by_id.get


def graph_lookup(parser: str, graph_kwargs: Mapping[str, Any] | None, build_missing: bool = True
                 ) -> Callable[["AnyEpisode | None", str], "EvidenceGraph | list[EvidenceGraph] | None"]:
    """(episode, doc_id) -> the cached graph the run used (built when missing and allowed).

    A composite episode gets its documents' graphs, in its ``documents``
    order; :func:`mage_gym.report.data.build_report_data` joins them into the
    union the environment played on.
    """
    from mage_gym.graph.build import build_graph, load_graph
    from mage_gym.graph.store import GraphNotBuiltError

    kw = dict(graph_kwargs or {})
    load_kw = {k: v for k, v in kw.items() if k in inspect.signature(load_graph).parameters}
    memo: dict[str, Any] = {}

    def one(src: str) -> "EvidenceGraph":
        if src not in memo:
            try:
                memo[src] = load_graph(src, parser=parser, **load_kw)
            except GraphNotBuiltError:
                if not build_missing:
                    raise
                memo[src] = build_graph(src, parser=parser, **kw)
        return memo[src]

    def lookup(episode: "AnyEpisode | None", doc_id: str) -> "EvidenceGraph | list[EvidenceGraph] | None":
        if episode is None:
            return None
        from mage_gym.data.composite import CompositeEpisode

        if isinstance(episode, CompositeEpisode):
            return [one(str(s)) for s in episode.sources]
        return one(str(episode.source))

    return lookup


def report_data_from_run_dir(run_dir: str | Path, dataset: Mapping[str, Any] | None = None, parser: str | None = None,
                             graph_kwargs: Mapping[str, Any] | None = None, build_missing: bool = True,
                             title: str | None = None, traces_glob: str = "traces/**/*.jsonl",
                             max_episodes: int | None = None) -> ReportData:
    """Everything :func:`mage_gym.report.html.write_report` needs, from a benchmark run directory.

    ``dataset`` / ``parser`` / ``graph_kwargs`` override the run's config;
    ``max_episodes`` keeps the first N episodes (in trace order).
    """
    rd = discover(run_dir, traces_glob)
    cfg = rd.config
    env_cfg = dict(cfg.get("env") or {})
    ds = {**dict(cfg.get("dataset") or {}), **{k: v for k, v in dict(dataset or {}).items() if v is not None}}
    parser = parser or env_cfg.get("parser") or "layout"
    gkw = dict(env_cfg.get("graph_kwargs") or {}) if graph_kwargs is None else dict(graph_kwargs)
    warnings: list[str] = []
    traces = read_traces(rd)
    if max_episodes:
        keep = list(dict.fromkeys(t.episode_id for t in traces))[: int(max_episodes)]
        traces = [t for t in traces if t.episode_id in set(keep)]
    episodes = episode_lookup(ds, warnings)
    graphs = graph_lookup(parser, gkw, build_missing)
    run_info = {"run_dir": str(rd.path), "dataset": ds.get("name"), "parser": parser,
                "trace_files": [str(f.relative_to(rd.path)) for _, f in rd.trace_files],
                "results": (rd.results or {}).get("runs") if isinstance(rd.results, dict) else None}
    data = build_report_data(traces, episodes, graphs, title=title or f"mage-gym report: {rd.path.name}",
                             run_info=run_info)
    data.warnings[:0] = warnings
    return data
