"""The one helper that chooses a torch device: CUDA, then Apple MPS, then CPU.

``MAGE_GYM_DEVICE`` overrides the choice (e.g. ``cpu`` to keep a GPU free).
:func:`cpu_flags` tells the encoder which fast CPU number formats exist;
:func:`faster_compute_dtype` times bf16 against fp32 where flags cannot tell.
"""
from __future__ import annotations

import functools
import os


def pick_device(preferred: str | None = None) -> str:
    choice = preferred or os.environ.get("MAGE_GYM_DEVICE")
    if choice:
        return choice
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where there is none, e.g. macOS)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@functools.lru_cache(maxsize=None)
def matmul_rates(device: str = "cpu", size: int = 1024, repeats: int = 5) -> dict[str, float]:
    """GFLOP/s of a ``size`` x ``size`` matmul in float32 and in bfloat16 on ``device`` (medians, after a warm-up).

    Why: whether bf16 is the fast path cannot be read from the CPU's flags.
    Two machines of one kind here both list AVX512-BF16; on one bf16 matmuls
    ran several times faster than fp32, on the other at about half its speed
    (experiments/perf/perf_llm_loop.py: the whole model followed the matmul).
    A tenth of a second of timing decides instead. Cached per process.
    """
    import statistics
    import time

    import torch

    flops = 2.0 * size**3
    rates: dict[str, float] = {}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a = torch.randn(size, size, device=device).to(dtype)
        b = torch.randn(size, size, device=device).to(dtype)
        a @ b  # warm-up: kernel choice and allocation
        times = []
        for _ in range(repeats):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            a @ b
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        rates[name] = flops / max(statistics.median(times), 1e-12) / 1e9
    return rates


def faster_compute_dtype(device: str = "cpu") -> str:
    """``"bfloat16"`` where its matmuls measure faster than float32's on ``device`` (:func:`matmul_rates`), else
    ``"float32"``: the rule behind ``autocast=auto`` in experiments/train_llm.py."""
    rates = matmul_rates(device)
    return "bfloat16" if rates["bfloat16"] > rates["float32"] else "float32"
