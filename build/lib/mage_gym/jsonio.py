"""JSON for records that hold numpy values: one ``default=`` hook for the whole project.

Why one: graph meta, traces and experiment results all carry numpy scalars
and arrays (counts, timings, vectors), sets and paths. Each writer used to
carry its own converter, and they drifted (one turned unknown objects into
their ``str``, hiding a bug in the written file). This one converts what has
an exact JSON form and raises ``TypeError`` on anything else, so a wrong
object fails where it is written, not where the file is read.
"""
from __future__ import annotations

import json
from pathlib import PurePath
from typing import Any

import numpy as np


def json_default(obj: Any) -> Any:
    """``default=`` hook for :func:`json.dumps`: numpy scalars and arrays, sets, paths.

    numpy integers, floats and booleans become Python numbers and booleans;
    arrays become (nested) lists; sets and frozensets become sorted lists;
    paths become strings. Anything else raises ``TypeError`` naming its type.
    """
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        try:
            return sorted(obj)  # a stable file for the same set
        except TypeError:  # items that do not order among themselves
            return list(obj)
    if isinstance(obj, PurePath):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def dumps(obj: Any, **kwargs: Any) -> str:
    """:func:`json.dumps` with :func:`json_default` (other keyword arguments pass through)."""
    kwargs.setdefault("default", json_default)
    return json.dumps(obj, **kwargs)


__all__ = ["json_default", "dumps"]
