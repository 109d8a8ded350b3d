"""The build worker pool: chunking, and Ctrl-C stopping the workers instead of waiting for them."""
from __future__ import annotations

import multiprocessing as mp
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from mage_gym.graph import workers


def _pool(n: int = 2) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("forkserver"))


def test_wait_all_returns_results_in_submission_order():
    """Tasks that finish in another order than submitted (the first sleeps longest) come back as submitted."""
    pool = _pool()
    try:
        futs = [pool.submit(subprocess.getoutput, f"sleep {d}; echo {i}") for i, d in enumerate((0.8, 0.0, 0.3))]
        seen = []
        assert workers.wait_all(futs, on_done=seen.append) == ["0", "1", "2"]
        assert sorted(map(id, seen)) == sorted(map(id, futs))
    finally:
        pool.shutdown()


def test_interrupt_terminates_running_workers_and_cancels_the_rest():
    pool = _pool()
    futs = [pool.submit(time.sleep, 0.0)] + [pool.submit(time.sleep, 60) for _ in range(12)]
    futs[0].result()  # the workers exist now
    procs = list(pool._processes.values())
    assert procs and all(p.is_alive() for p in procs)

    def ctrl_c(_f):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        workers.wait_all(futs, on_done=ctrl_c, on_interrupt=lambda: workers.terminate_executor(pool))
    assert not any(p.is_alive() for p in procs)  # not left to finish their 60 s tasks
    assert any(f.cancelled() for f in futs[1:])  # queued chunks never start


def test_terminate_pool_forgets_the_process_wide_pool(monkeypatch):
    pool = _pool(1)
    pool.submit(time.sleep, 0.0).result()
    procs = list(pool._processes.values())
    monkeypatch.setattr(workers, "_POOL", pool)
    monkeypatch.setattr(workers, "_POOL_WORKERS", 1)
    workers.terminate_pool()
    assert workers._POOL is None and workers._POOL_WORKERS == 0
    assert not any(p.is_alive() for p in procs)


def test_page_chunks_are_contiguous_and_cover():
    for n, w in [(1, 2), (7, 2), (100, 2), (33, 3), (5, 1), (503, 2)]:
        ch = workers.page_chunks(n, w)
        assert [p for c in ch for p in c] == list(range(n))
        assert all(len(c) <= 32 for c in ch)
        assert n < 4 * w or len(ch) >= min(2 * w, n // 4)
        sizes = [len(c) for c in ch]
        assert all(a >= b for a, b in zip(sizes[:-1], sizes[1:])), sizes  # big first, small last
        assert n < 8 or sizes[-1] <= 4
