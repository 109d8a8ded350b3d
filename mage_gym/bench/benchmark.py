"""Every policy x every budget on the same episodes, same reader, same metrics (benchmark.py and the main job).

Outputs in the run directory: ``results.json`` (:mod:`.results`),
``results.csv``, ``results.md``, ``breakdown.json`` (per evidence type and
single/multi-page, plus per-policy stats), ``episodes.jsonl`` (one row per
episode; ``checkpoint`` on learned-policy rows), the three plots of
:mod:`.plots`, and with ``traces: true`` one JSONL trace per policy and budget
under ``traces/`` (what ``experiments/report.py`` reads).

Episodes run in :func:`play_episodes`, the one loop over episodes: what to do
when one episode fails belongs there.

Backend failures (:mod:`mage_gym.readers.errors`) never end a run silently
nor hide behind a fallback:

- reader and evaluator options are checked, and servers asked whether they
  serve the model, before the first episode (a :class:`ConfigError`);
- a reader or evaluator error that outlives its retries (kinds ``request``,
  ``transient``, ``backend``) marks that episode failed in ``episodes.jsonl``
  (``failed: true`` with the error) and the run goes on; beyond
  ``max_failed_episodes`` (a count, or a share of the run's episodes;
  default 5 %, at least one) the run stops with :class:`RunStopped`, as it
  does on a configuration error mid-run or when the evaluator's transient
  failures pass their allowed share; the outputs of finished runs are
  written first;
- re-running in the same run directory (``hydra.run.dir=<dir>``) resumes:
  successful ``episodes.jsonl`` rows of the same policy, budget and
  configuration are kept and only the other episodes are played.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from mage_gym.bench.config import ConfigError, check_parser, plain, section
from mage_gym.bench.envs import build_reader, make_env
from mage_gym.bench.episodes import episode_of, load_episodes, prepare_graphs
from mage_gym.bench.metrics import breakdown, metric_counts, summarise
from mage_gym.bench.plots import save_plots
from mage_gym.bench.play import play_episodes
from mage_gym.bench.policy_options import (BENCHMARK_OPTIONS, check_policies, checkpoint_of, limited,
                                          policy_kwargs, policy_options)
from mage_gym.bench.protocol import PolicyRegistry
from mage_gym.bench.results import (TABLE_COLUMNS, budget_dict, budget_label, fmt, make_run, markdown_table,
                                        table_rows, write_csv, write_json, write_results)
from mage_gym.jsonio import json_default

log = logging.getLogger("experiments.benchmark")

#: default ``max_failed_episodes``: a share of the run's planned episodes (at least one failure is tolerated)
DEFAULT_MAX_FAILED = 0.05
#: options that change how a backend is reached, not what it answers (left out of the resume key)
_TRANSPORT_KEYS = frozenset({"base_url", "timeout", "max_retries", "backoff", "backoff_max", "max_concurrency",
                             "api_key_env", "cache", "limit", "only_base_budget"})


class RunStopped(RuntimeError):
    """The benchmark stopped early (too many failed episodes, a backend down, a bad setup found mid-run).

    Raised after the outputs of every finished policy x budget were written;
    ``episodes.jsonl`` keeps every episode played, so re-running in the same
    directory resumes.
    """


def budgets_of(cfg: Mapping[str, Any]) -> list[dict[str, int]]:
    """``budgets`` (partial budgets) merged onto ``env.budget``; just ``env.budget`` when ``budgets`` is null.

    Two entries that merge into the same budget are played once (first order kept): a duplicate would play
    every episode twice and count each question twice in the run's rows.
    """
    base = budget_dict(section(cfg, "env").get("budget") or {})
    extra = plain(cfg.get("budgets")) or [{}]
    out: list[dict[str, int]] = []
    for b in extra:
        merged = budget_dict({**base, **dict(b or {})})
        if merged not in out:
            out.append(merged)
    return out


def run_policy(name: str, opts: Mapping[str, Any], episodes: Sequence[Any], cfg: Mapping[str, Any],
               budget: Mapping[str, int], reader: Any, seed: int = 0, progress: bool = True,
               policy: Any = None, out: Path | None = None, *, registry: PolicyRegistry,
               **play: Any) -> tuple[list[Any], dict[str, Any]]:
    """One policy on ``episodes`` under ``budget``; returns (episode results, policy stats).

    ``opts`` may carry ``limit`` (first N episodes only, e.g. for the slow LLM
    evaluator); the rest go to ``registry.make``. With ``out`` (and
    ``traces: true`` in the config) every episode's JSONL trace goes to
    ``out/traces/<policy>/<budget>.jsonl``. ``play`` goes to
    :func:`play_episodes` (``skip``, ``on_result``, ``on_failure``).
    """
    eps = limited(episodes, opts)
    env_cfg = section(cfg, "env")
    env_cfg["budget"] = dict(budget)
    if out is not None and cfg.get("traces", True):
        from mage_gym.bench.results import trace_path

        path = trace_path(out, name, budget)
        path.parent.mkdir(parents=True, exist_ok=True)
        env_cfg["trace_path"] = str(path)
    executor = dict(cfg.get("executor") or {})
    if executor.get("name", "local") == "ray":  # same episodes and seeds on Ray actors (mage_gym/bench/distributed)
        from mage_gym.bench.distributed.episodes import play_on_ray
        from mage_gym.env.env import effective_render_mode

        try:
            results, stats = play_on_ray(name, opts, eps, {**dict(cfg), "env": env_cfg}, executor, policy=policy,
                                         seed=seed, trace_path=env_cfg.get("trace_path"), registry=registry, **play)
            asked = (policy.render_mode if policy is not None else opts.get("render_mode")) or \
                env_cfg.get("render_mode", "visual")
            return results, {**stats, "render_mode": effective_render_mode(reader, asked)}
        finally:
            if policy is not None:
                policy.close()
    if policy is None:
        policy = registry.make(name, **policy_kwargs(opts))
    privileged = bool(getattr(policy, "privileged", False))
    if privileged:  # the oracle: its env hands out the privileged view, and the policy reads it from there
        env_cfg["privileged"] = True
    env = make_env(eps, {**dict(cfg), "env": env_cfg}, render_mode=policy.render_mode, reader=reader, max_graphs=8)
    if privileged:
        policy.bind(env)
    mode = env.get_wrapper_attr("render_mode")  # what the reader really got (text when it takes no images)
    try:
        results = play_episodes(env, policy, eps, seed=seed, desc=f"{name} {budget_label(budget)}",
                                progress=progress, **play)
    finally:
        env.close()
        policy.close()
    return results, {**dict(policy.stats), "render_mode": mode}


def is_privileged(name: str, registry: PolicyRegistry) -> bool:
    """Whether the registered policy ``name`` reads gold (its class says ``privileged = True``)."""
    return bool(getattr(registry.policy_class(name), "privileged", False))


def check_config(cfg: Mapping[str, Any], registry: PolicyRegistry) -> list[str]:
    """The policies to run, after checking every option that would otherwise fail late (one error, no work done)."""
    names = [str(p) for p in plain(cfg["policies"])]
    check_policies(cfg, names, registry)
    check_parser(section(cfg, "env").get("parser", "layout"))
    return names


def benchmark_episodes(cfg: Mapping[str, Any]) -> list[Any]:
    """The ``dataset`` node's episodes whose graphs build (a :class:`ConfigError` when none are left)."""
    ds, env = section(cfg, "dataset"), section(cfg, "env")
    episodes = load_episodes(ds)
    episodes = prepare_graphs(episodes, parser=env.get("parser", "layout"), workers=int(cfg.get("graph_workers", 1)),
                              graph_kwargs=env.get("graph_kwargs"))
    if not episodes:
        raise ConfigError(f"no episodes for dataset {ds['name']!r} split {ds.get('split')!r} (root {ds.get('root')!r})")
    return episodes


def episode_row(policy: str, budget: Mapping[str, int], r: Any, checkpoint: Mapping[str, str] | None,
                run_key: str | None = None, stats: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One row of ``episodes.jsonl`` (``evaluator``: the evaluator counters this episode added)."""
    row = {"policy": policy, "budget": budget, "episode_id": r.episode_id, "reward": r.reward, "answer": r.answer,
           "components": r.components, "metrics": r.metrics, "decisions": r.decisions, "invalid": r.invalid,
           "wall_s": r.wall_s}
    if checkpoint:
        row["checkpoint"] = dict(checkpoint)
    return _tag(row, run_key, stats)


def failed_row(policy: str, budget: Mapping[str, int], episode_id: str, err: BaseException,
               checkpoint: Mapping[str, str] | None, run_key: str | None = None,
               stats: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The ``episodes.jsonl`` row of an episode whose reader or evaluator failed past its retries."""
    from mage_gym.readers.errors import error_kind

    row: dict[str, Any] = {"policy": policy, "budget": budget, "episode_id": episode_id, "failed": True,
                           "error": f"{type(err).__name__}: {err}", "error_kind": error_kind(err)}
    if checkpoint:
        row["checkpoint"] = dict(checkpoint)
    return _tag(row, run_key, stats)


def _tag(row: dict[str, Any], run_key: str | None, stats: Mapping[str, float] | None) -> dict[str, Any]:
    if stats:
        row["evaluator"] = {k.removeprefix("evaluator_"): (round(v, 3) if isinstance(v, float) else v)
                            for k, v in stats.items()}
    if run_key:
        row["run_key"] = run_key
    return row


def result_of_row(row: Mapping[str, Any]) -> Any:
    """The EpisodeResult a successful ``episodes.jsonl`` row was written from (a resumed run's finished episodes)."""
    from mage_gym.bench.play import EpisodeResult

    return EpisodeResult(episode_id=row["episode_id"], reward=float(row["reward"]), components=dict(row["components"]),
                         metrics=dict(row["metrics"]), answer=row["answer"], decisions=int(row["decisions"]),
                         invalid=int(row["invalid"]), wall_s=float(row["wall_s"]))


def run_key(cfg: Mapping[str, Any], name: str, opts: Mapping[str, Any], budget: Mapping[str, int]) -> str:
    """What a policy x budget's episode results depend on, hashed: rows are reused on resume only under the same key.

    Transport options (server URL, timeouts, retries, caches) are left out: a
    restarted server on another port answers the same.
    """
    def strip(x: Any) -> Any:
        if isinstance(x, Mapping):
            return {str(k): strip(v) for k, v in x.items() if k not in _TRANSPORT_KEYS}
        if isinstance(x, (list, tuple)):
            return [strip(v) for v in x]
        if callable(x):
            return getattr(x, "__qualname__", type(x).__name__)
        return x

    env = {k: v for k, v in section(cfg, "env").items() if k not in ("budget", "trace_path")}
    what = {"policy": name, "options": opts, "budget": dict(budget), "env": env, "reader": section(cfg, "reader"),
            "retriever": section(cfg, "retriever"), "dataset": section(cfg, "dataset"), "seed": cfg.get("seed", 0)}
    text = json.dumps(strip(what), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def failure_limit(cfg: Mapping[str, Any], planned: int) -> int:
    """``max_failed_episodes`` as a count: a value below 1 is a share of ``planned`` (at least one), 0 none, null all."""
    value = cfg.get("max_failed_episodes", DEFAULT_MAX_FAILED)
    if value is None:
        return planned
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = -1.0
    if v < 0:
        raise ConfigError(f"max_failed_episodes={value!r}: need a count (>= 1), a share in (0, 1), 0 or null")
    if v == 0:
        return 0
    return max(1, math.floor(v * planned)) if v < 1 else int(v)


def previous_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of an earlier ``episodes.jsonl`` in this run directory (a torn last line is ignored)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def check_backends(cfg: Mapping[str, Any], names: Sequence[str], reader: Any, registry: PolicyRegistry) -> None:
    """Ask the reader and every model-backed policy whether their backend works, before any episode.

    A policy class with a ``validate`` method (the LLM evaluator) is built
    once (its backend options are checked in its constructor) and validated
    (a server must serve the model). Any failure is one :class:`ConfigError`.
    """
    from mage_gym.readers.errors import ReaderError

    def check(what: str, fn: Any) -> None:
        try:
            fn()
        except (ReaderError, ValueError) as err:
            hint = " (is the server running at that URL?)" if "unreachable" in str(err) else ""
            raise ConfigError(f"{what}: {err}{hint}") from err

    check_reader = getattr(reader, "validate", None)
    if callable(check_reader):
        check("reader", check_reader)
    for name in names:
        if not callable(getattr(registry.policy_class(name), "validate", None)):
            continue

        def build_and_validate(name: str = name) -> None:
            policy = registry.make(name, **policy_kwargs(policy_options(cfg, name)))
            try:
                policy.validate()
            finally:
                policy.close()

        check(f"policy.{name}", build_and_validate)


def evaluator_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, int] | None:
    """The evaluator counters summed over a run's rows (None when the policy has none)."""
    blocks = [r["evaluator"] for r in rows if r.get("evaluator")]
    if not blocks:
        return None
    from mage_gym.bench.results import EVALUATOR_KEYS

    return {k: int(round(sum(b.get(k, 0) for b in blocks))) for k in EVALUATOR_KEYS}


def benchmark(cfg: Mapping[str, Any], out: Path, episodes: Sequence[Any] | None = None,
              policy_objects: Mapping[str, Any] | None = None, logger: Any = None, *,
              registry: PolicyRegistry) -> dict[str, Any]:
    """The whole benchmark: every policy x budget on the same episodes; writes every output into ``out``.

    ``cfg`` is the composed benchmark config as plain containers (``policies``,
    ``policy.<name>``, ``env``, ``budgets``, ``dataset``, ``reader``,
    ``max_failed_episodes``, ...). ``episodes`` replaces the dataset's;
    ``policy_objects`` replaces built policies by name (tests); ``registry``
    builds the others (``policies.REGISTRY`` for the project's). Raises
    :class:`RunStopped` (after writing what finished) when the run cannot go
    on; see the module docstring for failures and resuming.
    """
    from mage_gym.readers.errors import ReaderConfigError, ReaderError, error_kind

    names = check_config(cfg, registry)
    ds = section(cfg, "dataset")
    if episodes is None:
        episodes = benchmark_episodes(cfg)
    if not episodes:
        raise ConfigError(f"no episodes for dataset {ds.get('name')!r} split {ds.get('split')!r}")
    by_id = {episode_of(e).episode_id: episode_of(e) for e in episodes}
    try:
        reader = build_reader(cfg)
    except ReaderConfigError as err:
        raise ConfigError(f"reader: {err}") from err
    check_backends(cfg, [n for n in names if n not in (policy_objects or {})], reader, registry)
    answers = bool(getattr(reader, "answers", False))
    base = budget_dict(section(cfg, "env").get("budget") or {})
    plan = [(name, budget, policy_options(cfg, name)) for budget in budgets_of(cfg) for name in names
            if not (policy_options(cfg, name).get("only_base_budget") and budget != base)]
    limit = failure_limit(cfg, sum(len(limited(episodes, opts)) for _, _, opts in plan))
    rows_path = out / "episodes.jsonl"
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    old = previous_rows(rows_path)  # a re-run in the same directory resumes
    all_rows: list[dict[str, Any]] = list(old)
    runs, breakdowns, stats = [], {}, {}
    run_rows: list[tuple[list[dict[str, Any]], str]] = []  # per run: its episode rows and render mode
    failed_total = 0
    seed = int(cfg.get("seed", 0))
    with open(rows_path, "a") as rows_file:

        def emit(row: dict[str, Any]) -> None:
            all_rows.append(row)
            rows_file.write(json.dumps(row, default=json_default) + "\n")
            rows_file.flush()

        try:
            for name, budget, opts in plan:
                checkpoint = None if name in (policy_objects or {}) else checkpoint_of(name, opts, registry)  # an object: no file
                key = run_key(cfg, name, opts, budget)
                eps = limited(episodes, opts)
                done = {r["episode_id"]: r for r in old if r.get("run_key") == key and not r.get("failed")
                        and r.get("policy") == name and r.get("budget") == budget}
                done = {e: r for e, r in done.items() if e in {episode_of(x).episode_id for x in eps}}
                if done:
                    log.info("%s %s: resuming, %d of %d episodes already done", name, budget_label(budget),
                             len(done), len(eps))
                new_rows: dict[str, dict[str, Any]] = {}

                def on_result(i: int, r: Any, st: Mapping[str, float], name: str = name, budget: Any = budget,
                              checkpoint: Any = checkpoint, key: str = key, new_rows: dict = new_rows) -> None:
                    row = episode_row(name, budget, r, checkpoint, key, st)
                    new_rows[r.episode_id] = row
                    emit(row)

                def on_failure(i: int, episode_id: str, err: BaseException, st: Mapping[str, float],
                               name: str = name, budget: Any = budget, checkpoint: Any = checkpoint, key: str = key,
                               new_rows: dict = new_rows) -> None:
                    nonlocal failed_total
                    row = failed_row(name, budget, episode_id, err, checkpoint, key, st)
                    new_rows[episode_id] = row
                    emit(row)
                    failed_total += 1
                    if failed_total > limit:
                        raise RunStopped(
                            f"{failed_total} episodes failed, more than max_failed_episodes allows ({limit}); last: "
                            f"{name} {budget_label(budget)} episode {episode_id}: {row['error']}")

                t0 = time.perf_counter()
                results, pstats = run_policy(name, opts, episodes, cfg, budget, reader, seed=seed,
                                             policy=(policy_objects or {}).get(name), out=out, skip=set(done),
                                             on_result=on_result, on_failure=on_failure, registry=registry)
                played = {r.episode_id: r for r in results}
                ordered_rows, ok = [], []
                for e in eps:
                    eid = episode_of(e).episode_id
                    row = new_rows.get(eid) or done.get(eid)
                    if row is None:
                        continue
                    ordered_rows.append(row)
                    if not row.get("failed"):
                        ok.append(played.get(eid) or result_of_row(row))
                failed_ids = [r["episode_id"] for r in ordered_rows if r.get("failed")]
                metrics = summarise(ok, by_id, answers)
                counts = metric_counts(ok, answers)
                totals = evaluator_totals(ordered_rows)
                if totals is not None and ok:  # replies (model or cache) per finished episode, not rounds tried
                    replies = sum(r["evaluator"].get("calls", 0) + r["evaluator"].get("cache_hits", 0)
                                  for r in ordered_rows if not r.get("failed") and r.get("evaluator"))
                    metrics["evaluator_calls"] = replies / len(ok)
                runs.append(make_run(name, budget, ds["name"], ds.get("split", "all"), metrics, checkpoint,
                                     failed=failed_ids, evaluator=totals, counts=counts,
                                     privileged=is_privileged(name, registry)))
                run_rows.append((ordered_rows, pstats.get("render_mode") or "visual"))
                label = f"{name} | {budget_label(budget)}"
                breakdowns[label] = breakdown(ok, by_id)
                stats[label] = {**pstats, "seconds": time.perf_counter() - t0,
                                "invalid_actions": sum(r.invalid for r in ok), "failed_episodes": len(failed_ids),
                                "resumed_episodes": len(done)}
                log.info("%s: %s", label, {k: fmt(v) for k, v in metrics.items()})
                if failed_ids:
                    log.warning("%s: %d episode(s) failed: %s (re-run in this directory to retry them)", label,
                                len(failed_ids), ", ".join(failed_ids))
                if logger is not None:
                    logger.log({f"{name}/{k}": v for k, v in metrics.items() if isinstance(v, (int, float))})
        except (RunStopped, ReaderError) as err:
            rows_file.close()
            _compact_rows(rows_path, all_rows, cfg, plan, episodes)
            _write_outputs(runs, breakdowns, stats, out, logger)
            resume = f"; outputs of finished runs are in {out}; fix the cause and re-run with hydra.run.dir={out} " \
                     "to resume"
            if isinstance(err, RunStopped):
                raise RunStopped(f"{err}{resume}") from None
            if isinstance(err, ReaderConfigError):
                raise ConfigError(f"{err}{resume}") from err
            if error_kind(err) == "rate":
                raise RunStopped(f"{err}{resume}") from err
            raise
    _compact_rows(rows_path, all_rows, cfg, plan, episodes)
    attach_equal_cost(cfg, out, episodes, reader, runs, run_rows, seed, registry)
    return _write_outputs(runs, breakdowns, stats, out, logger)


#: ``equal_cost`` defaults (conf/benchmark.yaml documents them)
EQUAL_COST_DEFAULTS: dict[str, Any] = {"enabled": True, "min_k": 1, "max_k": 20, "n_boot": 1000, "operating_k": None}


def attach_equal_cost(cfg: Mapping[str, Any], out: Path, episodes: Sequence[Any], reader: Any,
                      runs: list[dict[str, Any]], run_rows: Sequence[tuple[list[dict[str, Any]], str]],
                      seed: int, registry: PolicyRegistry) -> None:
    """Run topk_page's curve in every render mode the runs used (an ``elements`` run is compared with the
    ``visual`` curve: :data:`.equal_cost.BASELINE_MODE`), add each run's ``equal_cost`` block (at its
    operating budget, cost at equal evidence, at equal cost: :mod:`.equal_cost`) and draw ``frontier.png``
    (:mod:`.frontier`).

    The curve reuses topk_page rows the plan already played (same render mode,
    base budget up to k) and plays the missing integer k itself until it holds
    every compared run's k and its mean tokens and pages reach every run's (or
    ``max_k``); its rows go to ``topk_curve.jsonl``, apart from ``episodes.jsonl``.
    """
    from mage_gym.bench.equal_cost import BASELINE, baseline_mode, equal_cost_block, needed_ks
    from mage_gym.bench.frontier import frontier_title, plot_frontier

    ec = {**EQUAL_COST_DEFAULTS, **dict(cfg.get("equal_cost") or {})}
    if not ec["enabled"] or not runs:
        return
    # topk_page's curve is never token-capped: a cap is a setting of the policies compared with it
    base = {k: v for k, v in budget_dict(section(cfg, "env").get("budget") or {}).items() if k != "tokens"}
    opts = {k: v for k, v in policy_options(cfg, BASELINE).items() if k not in BENCHMARK_OPTIONS}
    compared = [(run, rows, mode) for run, (rows, mode) in zip(runs, run_rows)
                if run["policy"] != BASELINE or run["budget"].get("tokens") is not None]
    if not compared:
        return
    curves: dict[str, dict[int, dict[str, dict[str, Any]]]] = {}
    same_but_k = {k: v for k, v in base.items() if k != "k"}
    for run, (rows, mode) in zip(runs, run_rows):
        if run["policy"] == BASELINE and {k: v for k, v in run["budget"].items() if k != "k"} == same_but_k:
            curves.setdefault(mode, {})[int(run["budget"]["k"])] = {r["episode_id"]: r for r in rows
                                                                     if not r.get("failed")}
    # the curve reaches every compared run's operating k: topk_page's point there is that run's operating budget
    # (its own k, or ``equal_cost.operating_k`` when k is a knob of the policies compared, e.g. entry pages
    # read under a token budget)
    def operating_k(run: Mapping[str, Any]) -> int:
        return int(ec["operating_k"]) if ec.get("operating_k") is not None else int(run["budget"]["k"])

    min_k = max(int(ec["min_k"]), *(operating_k(run) for run, _, _ in compared))
    with open(out / "topk_curve.jsonl", "w") as f:
        for mode in sorted({baseline_mode(m) for _, _, m in compared}):
            curve = curves.setdefault(mode, {})
            mine = [rows for _, rows, m in compared if baseline_mode(m) == mode]
            while (k := needed_ks(mine, curve, int(ec["max_k"]), min_k)) is not None:
                budget = budget_dict({**base, "k": k})
                results, _ = run_policy(BASELINE, {**opts, "render_mode": mode}, episodes, cfg, budget, reader,
                                        seed=seed, progress=False, registry=registry)
                curve[k] = {r.episode_id: episode_row(BASELINE, budget, r, None) for r in results}
                for row in curve[k].values():
                    f.write(json.dumps({**row, "render_mode": mode}, default=json_default) + "\n")
    for run, rows, mode in compared:
        run["equal_cost"] = equal_cost_block(rows, curves[baseline_mode(mode)], baseline_mode(mode),
                                             n_boot=int(ec["n_boot"]), seed=seed, k=operating_k(run))
    plot_frontier(runs, curves, out / "frontier.png", frontier_title(runs),
                  operating_k=operating_k({"budget": base}))


def _compact_rows(path: Path, rows: Sequence[Mapping[str, Any]], cfg: Mapping[str, Any],
                  plan: Sequence[tuple[str, Mapping[str, int], Mapping[str, Any]]], episodes: Sequence[Any]) -> None:
    """Rewrite ``episodes.jsonl`` in plan order: per policy x budget and episode, the last row written.

    Rows are appended while the run goes (nothing is lost if it dies); this
    leaves one row per episode, the same file a run without failures writes.
    """
    latest: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for r in rows:
        latest[(str(r.get("run_key")), str(r.get("policy")), str(r.get("episode_id")))] = r
    lines = []
    for name, budget, opts in plan:
        key = run_key(cfg, name, opts, budget)
        for e in limited(episodes, opts):
            row = latest.get((key, name, episode_of(e).episode_id))
            if row is not None:
                lines.append(json.dumps(row, default=json_default) + "\n")
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(lines))
    tmp.replace(path)


def _write_outputs(runs: list[dict[str, Any]], breakdowns: dict[str, Any], stats: dict[str, Any], out: Path,
                   logger: Any) -> dict[str, Any]:
    write_results(out / "results.json", runs)
    write_csv(out / "results.csv", runs)
    table = markdown_table(runs)
    (out / "results.md").write_text(table + "\n")
    write_json(out / "breakdown.json", {"breakdown": breakdowns, "policy_stats": stats})
    plots = save_plots(runs, breakdowns, out) if runs else []  # a run stopped before its first policy finished
    if logger is not None:
        logger.table("results", list(TABLE_COLUMNS), table_rows(runs))
        logger.images({p.stem: p for p in plots})
    return {"runs": runs, "breakdown": breakdowns, "stats": stats, "table": table, "plots": plots}
