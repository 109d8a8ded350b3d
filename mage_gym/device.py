"""The one helper that chooses a torch device: CUDA, then Apple MPS, then CPU.

``MAGE_GYM_DEVICE`` overrides the choice (e.g. ``cpu`` to keep a GPU free).
"""
from __future__ import annotations

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
