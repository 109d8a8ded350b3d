"""A corpus build on Ray: one task per document, each writing its graph into the shared cache.

Why tasks and the cache, not graphs shipped back: a graph is a pure function
of the file's bytes and the build settings, and the content-addressed cache
(:mod:`mage_gym.graph.store`, atomic rename, verified on load) is already the
place every later step reads it from. A task returns only the document's
record (counts, timings, ``graph_hash``); the driver never holds the graphs.

A task whose process dies (out of memory, a killed node) is retried by Ray up
to ``max_retries`` times; a document that fails inside the builder returns
its typed error record, as in the local build. Each task keeps its worker's
encoder loaded (``init_worker``), so later documents on that worker pay no
model load.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from experiments.common.distributed.cluster import apply_env, connect, maybe_die_once, pinned_env, ray_options

log = logging.getLogger("experiments.distributed")

_READY: set[int] = set()  # thread budgets this worker process was already set up for


class CodeVersionMismatch(RuntimeError):
    """A worker runs another graph builder (``GRAPH_VERSION``) than the driver: the nodes' code differs."""


def _build_task(path: str, cfg: Mapping[str, Any], env: Mapping[str, str], threads: int,
                graph_version: str) -> dict[str, Any]:
    """Runs in a Ray worker: the driver's pinned settings, then the local build of one document."""
    from mage_gym.graph.store import GRAPH_VERSION

    if GRAPH_VERSION != graph_version:  # e.g. a node with an older checkout: its graphs would differ
        raise CodeVersionMismatch(f"worker builds graph version {GRAPH_VERSION}, the driver {graph_version}; "
                                  "install the same code on every node")
    apply_env(env)
    if threads not in _READY:
        from mage_gym.graph.workers import init_worker

        init_worker(threads, True)
        _READY.add(threads)
    maybe_die_once(path)
    from experiments.common.corpus import build_one

    return build_one(path, cfg)


def build_on_ray(todo: Sequence[Path], cfg: Mapping[str, Any], executor: Mapping[str, Any],
                 bar: Any = None) -> dict[str, dict[str, Any]]:
    """The records of ``todo`` (documents not in the cache), built as Ray tasks; keyed by path.

    Records arrive as tasks finish (the progress bar moves with them). A task
    that exhausted its retries becomes an error record for its document, so
    the run still reports every document exactly once.
    """
    from experiments.common.corpus import _record

    from experiments.common.distributed.episodes import release_actors

    opts = ray_options(executor)
    ray = connect(opts)
    release_actors()  # idle benchmark actors would hold the CPUs these tasks need
    cpus = float(opts["cpus_per_task"])
    threads = max(1, int(cpus))
    task_cfg = {**dict(cfg), "executor": {"name": "local"}}
    remote = ray.remote(_build_task).options(num_cpus=cpus, max_retries=int(opts["max_retries"]),
                                             retry_exceptions=False)
    env = pinned_env(threads)
    from mage_gym.graph.store import GRAPH_VERSION

    pending = {remote.remote(str(p), task_cfg, env, threads, GRAPH_VERSION): p for p in todo}
    out: dict[str, dict[str, Any]] = {}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            p = pending.pop(ref)
            try:
                out[str(p)] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - retries exhausted (the worker kept dying), or other code
                log.error("ray task for %s failed after retries: %s", p, exc)
                cause = exc.cause if isinstance(getattr(exc, "cause", None), CodeVersionMismatch) else None
                out[str(p)] = _record(p, error=cause or RuntimeError(f"ray task failed after retries: {exc}"))
            if bar is not None:
                bar.update(1)
    return out
