"""The build worker pool: parse, prepare and embed page chunks of one document in worker processes.

Why a process-wide pool: each worker loads the text encoder (~1-3 s) and
holds ``cores // workers`` torch and ONNX Runtime threads, so a corpus build
or a benchmark pays the load once per worker, not per document. Why the
worker also embeds its chunk: embedding is the most expensive stage, and
doing it where the text already is avoids shipping texts back and forth.

Chunks are contiguous page ranges of decreasing size (:func:`page_chunks`),
or a given number of near-equal ranges (:func:`even_chunks`); the calling
process assembles the document from the chunks' prepared pages and vectors
(:mod:`.assemble`). The chunks can also run elsewhere: any
``chunk_executor`` with ``submit(fn, *args) -> concurrent.futures.Future``
replaces the pool (a Ray cluster does, in
``mage_gym/bench/distributed/build.py``).

Ctrl-C: a ``KeyboardInterrupt`` in the calling process cancels the chunks not
yet started and terminates the workers (a chunk of layout pages would
otherwise run on for seconds), then propagates. Workers write nothing the
build reads back (the graph cache is written by the caller, after assembly,
and atomically), so an interrupted build leaves no partial entry.
"""
from __future__ import annotations

import atexit
import json
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from mage_gym.graph.prepare import EmbedConfig, PreparedPage, embed_pages, prepare_page, resolve_encoder
from mage_gym.graph.schema import DocumentSource

if TYPE_CHECKING:  # pragma: no cover - process pools are imported when first used
    from concurrent.futures import Future, ProcessPoolExecutor

log = logging.getLogger(__name__)

_WORKER_PARSERS: dict[str, Any] = {}
_POOL: "ProcessPoolExecutor | None" = None
_POOL_WORKERS = 0

#: Timing keys summed over chunks (``peak_rss_mib`` is a maximum instead).
_WORK_KEYS = ("parse", "embed", "parse_cpu", "embed_cpu")


@dataclass
class ChunkResult:
    """What one worker returns for its page chunk."""

    prepared: list[PreparedPage]
    warnings: list[str]
    page_vectors: np.ndarray
    element_vectors: np.ndarray
    #: wall and CPU seconds of parse and embed, peak RSS, the encoder's precision
    timings: dict[str, Any] = field(default_factory=dict)


def init_worker(threads: int, load_encoder: bool) -> None:
    """Runs once in each worker: share the cores, load the encoder up front."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from mage_gym.graph.onnx_threads import cap_onnx_threads

    cap_onnx_threads(threads)  # the layout model and OCR would otherwise spin one thread per core each
    if load_encoder:
        import torch

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        from mage_gym.graph.embed import get_encoder

        get_encoder()


def _worker_parser(name: str, cfg: Mapping[str, Any]) -> Any:
    from mage_gym.graph.parsers import get_parser

    key = f"{name}:{json.dumps(dict(cfg), sort_keys=True, default=str)}"
    if key not in _WORKER_PARSERS:
        _WORKER_PARSERS[key] = get_parser(name, **dict(cfg))
    return _WORKER_PARSERS[key]


def parse_and_embed_chunk(source: DocumentSource, parser: str, parser_cfg: Mapping[str, Any],
                          pages: Sequence[int] | None, max_pages: int | None, embed_cfg: Mapping[str, Any],
                          caption_gap: float, encode: bool = True) -> ChunkResult:
    """Worker task: parse a contiguous page range, prepare and embed it (plus stage timings and precision)."""
    mcfg = EmbedConfig.from_dict(embed_cfg)
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # truncation is reported through the returned warnings
        parsed = _worker_parser(parser, parser_cfg).parse(source, pages=pages, max_pages=max_pages)
    prepared = [prepare_page(p, mcfg, caption_gap) for p in parsed.pages]
    t1, c1 = time.perf_counter(), time.process_time()
    enc = resolve_encoder("default") if encode else None
    page_vecs, el_vecs = embed_pages(prepared, enc, mcfg)
    t2, c2 = time.perf_counter(), time.process_time()
    timings = {"parse": t1 - t0, "embed": t2 - t1, "parse_cpu": c1 - c0, "embed_cpu": c2 - c1,
               "peak_rss_mib": _peak_rss_mib(), "embed_precision": getattr(enc, "precision", None)}
    return ChunkResult(prepared, list(parsed.warnings), page_vecs, el_vecs, timings)


def _peak_rss_mib() -> float:
    """Peak resident memory of this process (workers report theirs: they are not our children)."""
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    except (ImportError, OSError):  # pragma: no cover - non-POSIX
        return 0.0


# --- the pool -----------------------------------------------------------------------------------


def get_pool(workers: int) -> "ProcessPoolExecutor":
    """The process-wide worker pool (created on first use, resized on demand).

    Workers are started with ``forkserver`` (never ``fork``: a parent that
    already ran torch may hold OpenMP threads that a forked child deadlocks on).
    """
    global _POOL, _POOL_WORKERS
    if _POOL is not None and _POOL_WORKERS == workers:
        return _POOL
    shutdown_pool()
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    threads = max(1, (os.cpu_count() or 1) // workers)
    ctx = mp.get_context("forkserver")
    _POOL = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=init_worker,
                                initargs=(threads, True))
    _POOL_WORKERS = workers
    return _POOL


def warm_pool(workers: int) -> None:
    """Start every worker (each loads the encoder) before timing anything."""
    pool = get_pool(workers)
    futs = [pool.submit(time.sleep, 0.5) for _ in range(workers)]
    for f in futs:
        f.result()


def shutdown_pool() -> None:
    """Stop the pool after its running tasks finish (normal end of a program)."""
    global _POOL, _POOL_WORKERS
    if _POOL is not None:
        _POOL.shutdown(wait=True, cancel_futures=True)
    _POOL, _POOL_WORKERS = None, 0


def terminate_pool() -> None:
    """Stop the pool now: cancel queued tasks and terminate the workers mid-task (after Ctrl-C)."""
    global _POOL, _POOL_WORKERS
    pool, _POOL, _POOL_WORKERS = _POOL, None, 0
    if pool is not None:
        terminate_executor(pool)


def terminate_executor(pool: "ProcessPoolExecutor") -> None:
    """Cancel what has not started and terminate the worker processes of ``pool``."""
    # Python 3.14 has a public terminate_workers(); before that the processes are only reachable
    # through the executor's _processes mapping (present since 3.2).
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=10)


atexit.register(shutdown_pool)


def page_chunks(n: int, workers: int, min_pages: int = 4, max_pages: int = 32) -> list[list[int]]:
    """Contiguous page ranges of decreasing size (guided scheduling).

    Each chunk is about ``1 / (2 * workers)`` of the pages still left, kept
    between ``min_pages`` and ``max_pages`` (the cap bounds a worker's memory
    on 500-page filings). Why decreasing: with equal chunks, the worker that
    draws the last one works alone while the other idles; small chunks at the
    end let both finish together (measured by ``experiments/perf/perf_graph.py``),
    and large ones at the start keep the per-call overhead low.
    """
    out: list[list[int]] = []
    lo = 0
    while lo < n:
        size = min(max_pages, max(min_pages, math.ceil((n - lo) / (2 * workers))))
        out.append(list(range(lo, min(n, lo + size))))
        lo += size
    return out


def even_chunks(n: int, chunks: int) -> list[list[int]]:
    """``chunks`` contiguous page ranges of near-equal size (the first ones a page longer), none empty.

    Why beside :func:`page_chunks`: a caller that sends chunks to a cluster
    decides how many tasks a document becomes (pages per task), and equal
    ranges bound each task's work and memory the same way.
    """
    if chunks < 1:
        raise ValueError(f"chunks must be >= 1, got {chunks}")
    k = min(chunks, n)
    out: list[list[int]] = []
    lo = 0
    for i in range(k):
        size = n // k + (1 if i < n % k else 0)
        out.append(list(range(lo, lo + size)))
        lo += size
    return out


def wait_all(futures: Sequence["Future"], on_done: Callable[["Future"], None] | None = None,
             on_interrupt: Callable[[], None] = terminate_pool) -> list[Any]:
    """Results of ``futures`` in submission order, calling ``on_done`` as each one finishes.

    A ``KeyboardInterrupt`` while waiting (or raised by ``on_done``) cancels
    the futures that have not started, calls ``on_interrupt`` (by default:
    terminate the pool) and propagates. Why cancel here and not leave it to
    ``shutdown(cancel_futures=True)``: the executor cancels in its manager
    thread, and when the terminated workers reach that thread first it marks
    the queued futures broken instead, so whether they were cancelled was a
    race (seen on a loaded machine).
    """
    from concurrent.futures import FIRST_COMPLETED, wait

    try:
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                if on_done is not None and f.exception() is None:
                    on_done(f)
        return [f.result() for f in futures]
    except KeyboardInterrupt:
        log.warning("interrupted: stopping the graph build workers")
        for f in futures:
            f.cancel()  # a no-op for running and finished ones
        on_interrupt()
        raise


def parse_and_embed_parallel(src: DocumentSource, parser: str, pcfg: Mapping[str, Any], n: int,
                             max_pages: int | None, mcfg: EmbedConfig, caption_gap: float, workers: int,
                             progress: bool = False, chunk_executor: Any = None, chunks: int | None = None,
                             ) -> tuple[list[PreparedPage], list[str], np.ndarray, np.ndarray, dict[str, Any]]:
    """Parse and embed the first ``n`` pages in ``workers`` processes; the chunks' results joined.

    ``chunk_executor`` (anything with ``submit(fn, *args)`` returning a
    ``concurrent.futures.Future``) runs the chunks instead of the process
    pool; ``chunks`` splits the pages into that many near-equal ranges
    instead of :func:`page_chunks`' schedule for ``workers``.

    Returns (prepared pages, document warnings, page vectors, element vectors,
    work: summed stage timings, peak worker RSS, embedding precision).
    """
    from concurrent.futures.process import BrokenProcessPool

    from mage_gym.progress import progress_bar

    runner = get_pool(workers) if chunk_executor is None else chunk_executor
    ranges = page_chunks(n, workers) if chunks is None else even_chunks(n, chunks)
    futs = [runner.submit(parse_and_embed_chunk, src, parser, dict(pcfg), chunk, max_pages, mcfg.to_dict(),
                          caption_gap) for chunk in ranges]

    def cancel_queued() -> None:  # Ctrl-C with another executor: its chunks not yet started never start
        for f in futs:
            f.cancel()

    stop = terminate_pool if chunk_executor is None else cancel_queued
    try:
        with progress_bar(total=n, desc=f"parse+embed {Path(src.path).name[:30]}", unit="page", leave=False,
                  disable=None if progress and n >= 20 else True) as bar:
            results: list[ChunkResult] = wait_all(futs, on_done=lambda f: bar.update(len(f.result().prepared)),
                                                  on_interrupt=stop)
    except BrokenProcessPool as err:
        if chunk_executor is not None:
            raise
        shutdown_pool()
        raise RuntimeError(
            f"a graph worker process died while building {src.path}: out of memory, or the calling script "
            "starts workers at import time (worker processes re-import the main script, so a script calling "
            "build_graph(workers>1) needs an `if __name__ == '__main__':` guard)") from err
    prepared: list[PreparedPage] = []
    doc_warnings: list[str] = []
    work: dict[str, Any] = {k: 0.0 for k in _WORK_KEYS}
    work["peak_rss_mib"] = 0.0
    for r in results:
        prepared.extend(r.prepared)
        doc_warnings.extend(x for x in r.warnings if x not in doc_warnings)
        for k in _WORK_KEYS:
            work[k] += r.timings[k]
        work["peak_rss_mib"] = max(work["peak_rss_mib"], r.timings["peak_rss_mib"])
    work["embed_precision"] = results[0].timings.get("embed_precision")  # workers resolve it the same way
    page_vecs = np.concatenate([r.page_vectors for r in results])
    el_vecs = np.concatenate([r.element_vectors for r in results])
    return prepared, doc_warnings, page_vecs, el_vecs, work


__all__ = ["ChunkResult", "init_worker", "parse_and_embed_chunk", "get_pool", "warm_pool", "shutdown_pool",
           "terminate_pool", "terminate_executor", "page_chunks", "even_chunks", "wait_all", "parse_and_embed_parallel"]
