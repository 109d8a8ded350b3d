"""A corpus build on Ray: one task per document, or page-chunk tasks for a long one, graphs into the shared cache.

Why tasks and the cache, not graphs shipped back: a graph is a pure function
of the file's bytes and the build settings, and the content-addressed cache
(:mod:`mage_gym.graph.store`, atomic rename, verified on load) is already the
place every later step reads it from. A task returns only the document's
record (counts, timings, ``graph_hash``); the driver never holds the graphs.

Why page chunks for long documents: one task per document leaves a 500-page
filing on one CPU while the rest of the cluster idles, and holds all its
pages in one worker's memory. A document with more than
``executor.chunk_pages`` pages is built the way ``build_graph(workers>1)``
builds locally, with the cluster in place of the process pool: Ray tasks
parse and embed near-equal contiguous page ranges (:class:`RayChunks`), and
the driver assembles the graph (ids, edges, sections need the whole
document) and writes it to the cache. Only those documents' prepared pages
and vectors come back to the driver, at most :data:`_ASSEMBLERS` at a time.

A task whose process dies (out of memory, a killed node) is retried by Ray up
to ``max_retries`` times, document and chunk tasks alike; a document that
fails inside the builder, or whose chunk exhausted its retries, gets its
error record, as in the local build. Every task takes the driver's pinned
settings first (embedding precision, cache root, threads: :func:`_prepare`)
and keeps its worker's encoder loaded (``init_worker``), so later tasks on
that worker pay no model load.
"""
from __future__ import annotations

import logging
import math
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from mage_gym.bench.distributed.cluster import apply_env, connect, maybe_die_once, pinned_env, ray_options

log = logging.getLogger("experiments.distributed")

_READY: set[int] = set()  # thread budgets this worker process was already set up for
#: long documents assembled on the driver at once: each holds its pages and vectors there until written,
#: and two keep the cluster busy (one's chunks run while the other assembles)
_ASSEMBLERS = 2


class CodeVersionMismatch(RuntimeError):
    """A worker runs another graph builder (``GRAPH_VERSION``) than the driver: the nodes' code differs."""


def _prepare(env: Mapping[str, str], threads: int, graph_version: str) -> None:
    """In a worker, before any build work: same builder code as the driver, its pinned settings, encoder loaded."""
    from mage_gym.graph.store import GRAPH_VERSION

    if GRAPH_VERSION != graph_version:  # e.g. a node with an older checkout: its graphs would differ
        raise CodeVersionMismatch(f"worker builds graph version {GRAPH_VERSION}, the driver {graph_version}; "
                                  "install the same code on every node")
    apply_env(env)
    if threads not in _READY:
        from mage_gym.graph.workers import init_worker

        init_worker(threads, True)
        _READY.add(threads)


def _build_task(path: str, cfg: Mapping[str, Any], env: Mapping[str, str], threads: int,
                graph_version: str) -> dict[str, Any]:
    """Runs in a Ray worker: the driver's pinned settings, then the local build of one document."""
    _prepare(env, threads, graph_version)
    maybe_die_once(path)
    from mage_gym.bench.graph_jobs import build_one

    return build_one(path, cfg)


def _chunk_task(fn: Callable[..., Any], args: tuple[Any, ...], env: Mapping[str, str], threads: int,
                graph_version: str, item: str) -> Any:
    """Runs in a Ray worker: the driver's pinned settings, then one call of the builder (a page chunk)."""
    _prepare(env, threads, graph_version)
    maybe_die_once(item)
    return fn(*args)


class RayChunks:
    """``build_graph``'s ``chunk_executor`` on Ray: each ``submit`` is one Ray task, its result a Future.

    ``label`` names the document; call ``i`` of this executor is the item
    ``<label>#<i>`` for the test-only kill hook (call 0 counts the pages).
    """

    def __init__(self, remote: Any, env: Mapping[str, str], threads: int, graph_version: str, label: str) -> None:
        self.remote, self.env, self.threads, self.graph_version, self.label = remote, env, threads, graph_version, label
        self.calls = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        item = f"{self.label}#{self.calls}"
        self.calls += 1
        return self.remote.remote(fn, args, self.env, self.threads, self.graph_version, item).future()


def _chunk_counts(todo: Sequence[Path], cfg: Mapping[str, Any], chunk_pages: int | None) -> dict[Path, int]:
    """Documents of ``todo`` longer than ``chunk_pages`` pages (after ``max_pages``) -> their chunk count.

    Counted on the driver (it opens each PDF's page table, no parsing); a
    file that cannot be opened stays a document task, which records its
    typed error as locally.
    """
    if chunk_pages is None:
        return {}
    from mage_gym.graph.sources import open_source, page_count

    out: dict[Path, int] = {}
    cap = cfg.get("max_pages")
    for p in todo:
        try:
            n = page_count(open_source(p, validate=False))
        except Exception:  # noqa: BLE001 - the document task reports it
            continue
        if cap is not None and int(cap) >= 0:
            n = min(n, int(cap))
        if n > chunk_pages:
            out[p] = math.ceil(n / chunk_pages)
    return out


def _build_chunked(path: Path, cfg: Mapping[str, Any], chunks: int, runner: RayChunks) -> dict[str, Any]:
    """On the driver: one long document, its page chunks on Ray; every failure becomes its record."""
    from mage_gym.bench.graph_jobs import build_kwargs, document_record
    from mage_gym.graph.build import build_graph
    from mage_gym.graph.errors import DocumentError

    t0 = time.perf_counter()
    try:
        g = build_graph(str(path), workers=1, cache=cfg["cache"], progress=False, chunk_executor=runner,
                        chunks=chunks, **build_kwargs(cfg))
        return document_record(path, g, time.perf_counter() - t0, cached=bool(g.meta.get("cache_hit")))
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop a corpus build
        cause = getattr(exc, "cause", None)
        if isinstance(cause, (CodeVersionMismatch, DocumentError)):
            err: BaseException = cause
        elif isinstance(exc, DocumentError):
            err = exc
        else:
            log.error("ray chunk task for %s failed after retries: %s", path, exc)
            err = RuntimeError(f"ray chunk task failed after retries: {exc}")
        return document_record(path, seconds=time.perf_counter() - t0, error=err)


def build_on_ray(todo: Sequence[Path], cfg: Mapping[str, Any], executor: Mapping[str, Any],
                 bar: Any = None) -> dict[str, dict[str, Any]]:
    """The records of ``todo`` (documents not in the cache), built on Ray; keyed by path.

    Documents of at most ``chunk_pages`` pages are one task each; longer ones
    are assembled on the driver from page-chunk tasks. Records arrive as
    documents finish (the progress bar moves with them). A task that
    exhausted its retries becomes an error record for its document, so the
    run still reports every document exactly once.
    """
    from mage_gym.bench.graph_jobs import document_record
    from mage_gym.bench.distributed.episodes import release_actors
    from mage_gym.graph.store import GRAPH_VERSION

    opts = ray_options(executor)
    ray = connect(opts)
    release_actors()  # idle benchmark actors would hold the CPUs these tasks need
    cpus = float(opts["cpus_per_task"])
    threads = max(1, int(cpus))
    retry = dict(num_cpus=cpus, max_retries=int(opts["max_retries"]), retry_exceptions=False)
    env = pinned_env(threads)
    task_cfg = {**dict(cfg), "executor": {"name": "local"}}
    chunk_pages = opts["chunk_pages"]
    long_docs = _chunk_counts(todo, cfg, None if chunk_pages is None else int(chunk_pages))

    remote = ray.remote(_build_task).options(**retry)
    pending: dict[Future, Path] = {remote.remote(str(p), task_cfg, env, threads, GRAPH_VERSION).future(): p
                                   for p in todo if p not in long_docs}
    assemblers = ThreadPoolExecutor(max_workers=_ASSEMBLERS, thread_name_prefix="assemble") if long_docs else None
    if assemblers is not None:
        chunk_remote = ray.remote(_chunk_task).options(**retry)
        for p, k in long_docs.items():
            runner = RayChunks(chunk_remote, env, threads, GRAPH_VERSION, str(p))
            pending[assemblers.submit(_build_chunked, p, task_cfg, k, runner)] = p
    out: dict[str, dict[str, Any]] = {}
    try:
        while pending:
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in done:
                p = pending.pop(fut)
                try:
                    out[str(p)] = fut.result()
                except Exception as exc:  # noqa: BLE001 - retries exhausted (the worker kept dying), or other code
                    log.error("ray task for %s failed after retries: %s", p, exc)
                    cause = exc.cause if isinstance(getattr(exc, "cause", None), CodeVersionMismatch) else None
                    out[str(p)] = document_record(p, error=cause or RuntimeError(f"ray task failed after retries: {exc}"))
                if bar is not None:
                    bar.update(1)
    finally:
        if assemblers is not None:  # all done, or Ctrl-C: drop the long documents not yet started
            assemblers.shutdown(wait=False, cancel_futures=True)
    return out
