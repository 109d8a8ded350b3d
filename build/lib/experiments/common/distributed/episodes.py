"""Benchmark episodes on Ray actors: each actor holds one env and one policy and plays the episodes it is sent.

Why actors (not a task per episode): building the env and policy costs far
more than one episode (imports, retriever indexes, models), so each actor
builds them once. Why it matches a local run: episode ``i`` of the list is
reset with ``seed + i`` wherever it runs, exactly as
:func:`experiments.common.benchmarking.play_episodes` does, so a deterministic
policy gives the same records on any number of actors.

The driver keeps every actor busy with one episode at a time and calls
``on_result`` / ``on_failure`` as each episode comes back, so the
benchmark's ``episodes.jsonl`` grows as episodes finish and a crash loses
nothing finished. Each actor's env writes its trace to a file of its own;
the actor sends each episode's lines back and the driver writes them, in
episode order, to the one trace file a local run writes. An actor whose
process dies is restarted and its episode retried (``max_retries``); an
episode is reported once, whatever happened. Actors are kept between policy
x budget runs of one driver (:func:`release_actors` frees them).

With ``executor.servers``, actor ``i`` sends its OpenAI-compatible requests
to ``servers[i % n]`` under a cluster-wide limit per server
(:mod:`.servers`). An LLM evaluator's reply cache (``cache: true``), like
the reader's, lives on the node's own disk.
"""
from __future__ import annotations

import json
import logging
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Mapping, Sequence

from experiments.common.distributed.cluster import (apply_env, connect, maybe_die_once, node_evaluator_cache,
                                                    node_reader_cache, pinned_env, ray_options)

log = logging.getLogger("experiments.distributed")


class EpisodeWorker:
    """One env + one policy in a Ray actor (the class is wrapped with ``ray.remote`` by the driver).

    The actor outlives one policy x budget: :func:`play_on_ray` keeps a pool
    of them per driver (process start and imports are what an actor costs),
    and each call of :meth:`play` names the setup it needs (``key``) with a
    reference to its description. An actor that has another setup, or none
    (it was just restarted after its process died), builds that one first.
    """

    def __init__(self, env_vars: Mapping[str, str], threads: int, index: int = 0) -> None:
        apply_env(env_vars)
        import torch

        torch.set_num_threads(threads)
        self.index = index  # position in the driver's pool: picks this actor's model server
        self.limited: list[str] = []  # server URLs whose requests take slots from the run's ServerSlots
        self.key: str | None = None
        self.env: Any = None
        self.policy: Any = None
        self.trace_file: Path | None = None
        self.trace_offset = 0

    def _setup(self, key: str, spec: Mapping[str, Any]) -> None:
        """Build the env and policy ``spec`` describes (name, opts, episodes, cfg, policy, trace, caches, servers)."""
        from experiments.common.benchmarking import policy_kwargs
        from experiments.common.envs import build_reader, make_env
        from policies import get_policy

        self.finish()
        cfg = dict(spec["cfg"])
        reader_cfg, opts = self._use_servers(spec.get("servers"), dict(cfg.get("reader") or {}), dict(spec["opts"]))
        if opts.get("cache") is True:  # the LLM evaluator's sqlite reply cache: the node's own disk as well
            opts["cache"] = spec["evaluator_cache"]
        policy = spec["policy"]
        self.policy = policy if policy is not None else get_policy(spec["name"], **policy_kwargs(opts))
        if reader_cfg.get("cache") is True:  # the node's own sqlite file, never one on the shared folder
            reader_cfg["cache"] = spec["reader_cache"]
        reader = build_reader({**cfg, "reader": reader_cfg})  # one per actor, like a local run's one
        if spec["trace"]:  # the env's own trace writer, into a file of this actor: records exactly as locally
            self.trace_file = Path(tempfile.mkdtemp(prefix="mage_trace_")) / "trace.jsonl"
            cfg = {**cfg, "env": {**dict(cfg["env"]), "trace_path": str(self.trace_file)}}
        self.trace_offset = 0
        self.env = make_env(spec["episodes"], cfg, render_mode=self.policy.render_mode, reader=reader, max_graphs=8)
        self.key = key

    def _use_servers(self, servers: Mapping[str, Any] | None, reader_cfg: dict, opts: dict) -> tuple[dict, dict]:
        """Point the reader and evaluator backends at this actor's server, its slots taken cluster-wide.

        Limiters of an earlier setup are removed first (their run's slot
        actor is gone). Registering frees slots a dead predecessor of this
        actor's process still held.
        """
        import os

        import ray

        from experiments.common.distributed.servers import ClusterSlot, point_at
        from mage_gym.readers.openai_compat import set_server_limiter

        for url in self.limited:
            set_server_limiter(url, None)
        self.limited = []
        if not servers:
            return reader_cfg, opts
        urls = list(servers["urls"])
        url = urls[self.index % len(urls)]
        me, pid = ray.get_runtime_context().get_actor_id(), os.getpid()
        ray.get(servers["slots"].register.remote(me, pid))
        set_server_limiter(url, ClusterSlot(servers["slots"], url, me, pid))
        self.limited = [url]
        return point_at(url, reader_cfg, opts)

    def play(self, key: str, spec_box: list, i: int, episode_id: str, seed: int) -> tuple:
        """Episode ``i``: ``("ok", i, result, stats, trace)`` or ``("failed", i, episode_id, error, stats, trace)``.

        ``spec_box`` holds the setup's object reference (in a list, so Ray
        does not fetch it unless this actor needs to build). Errors of the
        kinds the benchmark records per episode come back as values; anything
        else is raised (and ends the run, as locally).
        """
        import ray

        from experiments.common.benchmarking import EPISODE_ERROR_KINDS, _stat_delta, _stat_snapshot
        from mage_gym.readers.errors import error_kind
        from policies.runner import run_episode

        if self.key != key:
            self._setup(key, ray.get(spec_box[0]))
        maybe_die_once(episode_id)
        before = _stat_snapshot(self.policy)
        try:
            r = run_episode(self.env, self.policy, episode_id, seed=seed)
        except Exception as err:
            if error_kind(err) not in EPISODE_ERROR_KINDS:
                raise
            return ("failed", i, episode_id, err, _stat_delta(before, _stat_snapshot(self.policy)), self._trace())
        return ("ok", i, r, _stat_delta(before, _stat_snapshot(self.policy)), self._trace())

    def _trace(self) -> list[str]:
        """The trace lines written since the last call (empty without traces)."""
        if self.trace_file is None or not self.trace_file.exists():
            return []
        with open(self.trace_file, "rb") as f:
            f.seek(self.trace_offset)
            data = f.read()
        self.trace_offset += len(data)
        return data.decode("utf-8").splitlines()

    def finish(self, key: str | None = None) -> dict[str, Any]:
        """Close the current setup (only if it is ``key``, when given); its policy's stats, or {}."""
        if self.key is None or (key is not None and key != self.key):
            return {}
        stats = dict(getattr(self.policy, "stats", {}) or {})
        self.env.close()
        self.policy.close()
        if self.trace_file is not None:
            shutil.rmtree(self.trace_file.parent, ignore_errors=True)
        self.key, self.env, self.policy, self.trace_file = None, None, None, None
        return stats


#: the driver's idle episode actors, by (CPUs per actor, pinned environment); see :func:`release_actors`
_POOL: dict[tuple, list[Any]] = {}


def _actors(ray: Any, n: int, cpus: float, env_vars: Mapping[str, str], retries: int) -> list[Any]:
    """``n`` episode actors from the pool (started when missing)."""
    ctx = ray.get_runtime_context()  # a new connection (another cluster or job) never sees old handles
    key = (ctx.get_session_name(), ctx.get_job_id(), cpus, retries, json.dumps(dict(env_vars), sort_keys=True))
    for other in [k for k in _POOL if k != key]:  # another configuration: free its CPUs first
        for a in _POOL.pop(other):
            _kill(ray, a)
    pool = _POOL.setdefault(key, [])
    Worker = ray.remote(EpisodeWorker).options(num_cpus=cpus, max_restarts=retries, max_task_retries=retries)
    while len(pool) < n:
        pool.append(Worker.remote(dict(env_vars), max(1, int(cpus)), len(pool)))
    return pool[:n]


def release_actors() -> None:
    """Kill the pooled episode actors (their CPUs go back to the cluster; graph builds call this first)."""
    if not _POOL:
        return
    import ray

    for actors in _POOL.values():
        for a in actors:
            if ray.is_initialized():
                _kill(ray, a)
    _POOL.clear()


def _kill(ray: Any, actor: Any) -> None:
    try:
        ray.kill(actor)
    except Exception:  # noqa: BLE001 - already gone with its cluster
        pass


def _merge_stats(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Policy stats of all actors: numbers summed, anything else from the first actor that has it."""
    out: dict[str, Any] = {}
    for st in parts:
        for k, v in st.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(out.get(k, 0), (int, float)):
                out[k] = out.get(k, 0) + v
            else:
                out.setdefault(k, v)
    return out


def _server_slots(ray: Any, ex: Mapping[str, Any], name: str, reader_cfg: Mapping[str, Any],
                  opts: Mapping[str, Any]) -> Any:
    """The run's per-server request slots (a :class:`~.servers.ServerSlots` actor), or None without servers.

    None too when this policy x budget calls no OpenAI-compatible backend
    (e.g. a heuristic policy with the oracle reader). Every server is checked
    (``GET /models``) first, so a wrong URL fails before any episode.
    """
    if not ex["servers"]:
        return None
    from experiments.common.distributed.servers import check_servers, default_limit, openai_nodes, start_slots

    if not openai_nodes(reader_cfg, opts):
        log.info("%s: no OpenAI-compatible backend; executor.servers not used", name)
        return None
    urls = [str(u).rstrip("/") for u in ex["servers"]]
    check_servers(urls, reader_cfg, opts)
    return start_slots(ray, urls, int(ex["server_concurrency"] or default_limit(reader_cfg, opts)))


def play_on_ray(name: str, opts: Mapping[str, Any], episodes: Sequence[Any], cfg: Mapping[str, Any],
                executor: Mapping[str, Any], policy: Any = None, seed: int = 0, trace_path: Any = None, *,
                skip: Any = (), on_result: Any = None, on_failure: Any = None) -> tuple[list[Any], dict[str, Any]]:
    """The Ray counterpart of ``play_episodes`` + policy stats: (results in episode order, merged stats).

    ``cfg`` is the benchmark config with the run's ``env`` block (budget
    set); ``policy`` (an object, e.g. from a test) is copied into every actor,
    otherwise each actor builds it from ``opts``. ``on_failure`` may raise to
    stop the run: the actors are torn down and the error propagates.
    """
    from experiments.common.episodes import episode_of
    from mage_gym.trace import dumps

    ex = ray_options(executor)
    ray = connect(ex)
    todo = [(i, episode_of(e).episode_id) for i, e in enumerate(episodes) if episode_of(e).episode_id not in skip]
    if not todo:
        return [], {}
    cpus = float(ex["cpus_per_task"])
    n_actors = int(ex["actors"] or max(1, int(ray.cluster_resources().get("CPU", 1) // cpus)))
    env_cfg = {k: v for k, v in dict(cfg["env"]).items() if k != "trace_path"}
    spec = {"name": name, "opts": dict(opts), "episodes": list(episodes), "cfg": {**dict(cfg), "env": env_cfg},
            "policy": policy, "trace": trace_path is not None, "reader_cache": node_reader_cache(ex),
            "evaluator_cache": node_evaluator_cache(ex), "servers": None}
    slots = _server_slots(ray, ex, name, dict(cfg.get("reader") or {}), opts)
    if slots is not None:
        spec["servers"] = {"urls": [str(u).rstrip("/") for u in ex["servers"]], "slots": slots}
    setup_key = uuid.uuid4().hex
    spec_box = [ray.put(spec)]
    actors = _actors(ray, n_actors, cpus, pinned_env(max(1, int(cpus))), int(ex["max_retries"]))
    actors = actors[: max(1, min(len(actors), len(todo)))]
    results: dict[int, Any] = {}
    traces: dict[int, list[str]] = {}
    order = [i for i, _ in todo]
    written = n_traced = 0
    queue = list(todo)
    busy: dict[Any, Any] = {}

    def submit(actor: Any) -> None:
        i, eid = queue.pop(0)
        busy[actor.play.remote(setup_key, spec_box, i, eid, seed + i)] = actor

    def flush_traces() -> None:  # in episode order, as far as episodes have finished
        nonlocal written, n_traced
        while written < len(order) and order[written] in traces:
            lines = traces.pop(order[written])
            if lines:  # "episode" counts the env's resets: locally one env played them all, in this order
                recs = [json.loads(x) for x in lines]
                recs = [{**r, "episode": n_traced} if "episode" in r else r for r in recs]
                with open(trace_path, "a", encoding="utf-8") as f:
                    f.write("".join(dumps(r) + "\n" for r in recs))
                n_traced += 1
            written += 1

    try:
        for actor in actors:
            if queue:
                submit(actor)
        while busy:
            ready, _ = ray.wait(list(busy), num_returns=1)
            ref = ready[0]
            actor = busy.pop(ref)
            out = ray.get(ref)
            if queue:
                submit(actor)
            if out[0] == "ok":
                _, i, r, st, trace = out
                results[i] = r
                traces[i] = trace
                if on_result is not None:
                    on_result(i, r, st)
            else:
                _, i, eid, err, st, trace = out
                traces[i] = trace
                if on_failure is None:
                    raise err
                log.warning("episode %s failed: %s: %s", eid, type(err).__name__, err)
                on_failure(i, eid, err, st)
            if trace_path is not None:
                flush_traces()
        stats = _merge_stats(ray.get([a.finish.remote(setup_key) for a in actors]))
        if slots is not None:
            log.info("model servers (requests, peak in flight, limit): %s", ray.get(slots.stats.remote()))
    except BaseException:
        release_actors()  # actors may be mid-episode: start clean next time
        raise
    finally:
        if slots is not None:
            _kill(ray, slots)
    return [results[i] for i in sorted(results)], stats
