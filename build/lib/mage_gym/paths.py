"""Where the project keeps its caches: one answer for every cache.

``$MAGE_GYM_CACHE`` (default ``~/.cache/mage_gym``) is the root; each cache
lives in its own sub-folder (``graphs``, ``ocr``, ``readers``, ``evaluator``,
``synth``). No heavy imports: the graph loader calls this.
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$MAGE_GYM_CACHE`` (``~`` expanded), default ``~/.cache/mage_gym``."""
    root = os.environ.get("MAGE_GYM_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "mage_gym"


__all__ = ["cache_root"]
