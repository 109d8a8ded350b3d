"""Configure every ONNX Runtime session a graph-build worker creates.

Why: the layout model (``pymupdf.layout``) and RapidOCR create their own
``onnxruntime.InferenceSession`` objects, and neither library takes session
options from us. Two of their defaults are costly in a build worker:

* **threads**: default sessions start one busy-spinning thread per core. Two
  build workers on two cores then run four spinning threads, and each
  worker's inference slows down far more than 2x. We use ``threads`` intra-op
  threads and no spinning.
* **memory arena**: ``pymupdf.layout`` turns ONNX Runtime's CPU memory arena
  off (so a long-lived process gives memory back). Its image model then
  allocates and frees its large feature maps on every page; with the arena on
  it runs in 116 ms instead of 174 ms a page on this CPU (median of 10 runs,
  one thread). The model's input has a fixed size (300x300), so the arena
  stops growing after the first page; a worker's peak memory is measured by
  ``experiments/perf/perf_graph.py``.

So a worker process (which we own: see :func:`mage_gym.graph.workers.get_pool`)
wraps the session constructor once at start-up. Sessions created with
explicit thread options are left alone. Only worker processes call
:func:`cap_onnx_threads`; a user's own process is never patched.
"""
from __future__ import annotations

from typing import Any

_CAPPED: int | None = None
_ARENA: bool = True


def cap_onnx_threads(threads: int, memory_arena: bool = True) -> bool:
    """Make new default ONNX Runtime sessions use ``threads`` non-spinning threads (and the arena).

    ``memory_arena=False`` keeps whatever arena setting the caller chose.
    Returns False when onnxruntime is not installed. Idempotent; the latest
    call's settings apply to sessions created afterwards.
    """
    global _CAPPED, _ARENA
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - onnxruntime is a dependency
        return False
    already_wrapped = _CAPPED is not None
    _CAPPED, _ARENA = threads, memory_arena
    if already_wrapped:
        return True
    original = ort.InferenceSession.__init__

    def __init__(self: Any, path_or_bytes: Any, sess_options: Any = None, *args: Any, **kwargs: Any) -> None:
        so = sess_options if sess_options is not None else ort.SessionOptions()
        if so.intra_op_num_threads == 0:  # 0 = "one per core": a library default, which we replace
            so.intra_op_num_threads = _CAPPED or 1
            so.inter_op_num_threads = 1
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if _ARENA:
                so.enable_cpu_mem_arena = True
        original(self, path_or_bytes, so, *args, **kwargs)

    ort.InferenceSession.__init__ = __init__  # type: ignore[method-assign]
    return True


__all__ = ["cap_onnx_threads"]
