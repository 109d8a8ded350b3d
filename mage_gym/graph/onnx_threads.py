"""Cap the threads of every ONNX Runtime session a graph-build worker creates.

Why: the layout model (``pymupdf.layout``) and RapidOCR create their own
``onnxruntime.InferenceSession`` objects with default options, which start
one busy-spinning thread per core. Two build workers on two cores then run
four spinning threads, and each worker's inference slows down far more than
2x. Neither library takes a thread count, so a worker process (which we own:
see :func:`mage_gym.graph.build.get_pool`) wraps the session constructor once
at start-up. Sessions created with explicit thread options are left alone.

Only worker processes call :func:`cap_onnx_threads`; a user's own process is
never patched.
"""
from __future__ import annotations

from typing import Any

_CAPPED: int | None = None


def cap_onnx_threads(threads: int) -> bool:
    """Make new ONNX Runtime sessions use ``threads`` intra-op threads and no spinning.

    Returns False when onnxruntime is not installed. Idempotent.
    """
    global _CAPPED
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - onnxruntime is a dependency
        return False
    already_wrapped = _CAPPED is not None
    _CAPPED = threads
    if already_wrapped:
        return True
    original = ort.InferenceSession.__init__

    def __init__(self: Any, path_or_bytes: Any, sess_options: Any = None, *args: Any, **kwargs: Any) -> None:
        so = sess_options if sess_options is not None else ort.SessionOptions()
        if so.intra_op_num_threads == 0:  # 0 = "one per core", the default we replace
            so.intra_op_num_threads = _CAPPED or 1
            so.inter_op_num_threads = 1
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        original(self, path_or_bytes, so, *args, **kwargs)

    ort.InferenceSession.__init__ = __init__  # type: ignore[method-assign]
    return True


__all__ = ["cap_onnx_threads"]
