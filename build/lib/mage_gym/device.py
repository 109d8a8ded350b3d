"""The one helper that chooses a torch device: CUDA, then Apple MPS, then CPU.

``MAGE_GYM_DEVICE`` overrides the choice (e.g. ``cpu`` to keep a GPU free).
:func:`cpu_flags` tells the encoder which fast CPU number formats exist.
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
