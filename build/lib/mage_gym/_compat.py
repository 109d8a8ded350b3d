"""The one place that works around a broken torchvision install.

Why this exists: PyPI's torchvision wheels are CUDA builds. Installed beside a
CPU-only torch (as on the reference machine, where ``torch==2.13.0`` is a CPU
wheel), ``import torchvision`` fails with ``RuntimeError: operator
torchvision::nms does not exist`` because its compiled extension cannot load
and the Python layer then registers fake kernels for operators that were never
defined. transformers imports torchvision opportunistically, so after that
failure *every* transformers model class fails to import, and colpali-engine
(which needs torchvision) does too.

The fix: if the first import fails that way, define the two operator schemas
the Python layer expects (``torchvision::nms`` and ``torchvision::qnms``) in a
``torch.library`` fragment, drop the half-imported modules, and import again.
The pure-Python parts (transforms, image ops used by processors) then work;
compiled ops such as ``nms`` stay unavailable (nothing here needs them).

Where torchvision imports fine (a matching CPU or CUDA build) or is not
installed at all, this does nothing. Call :func:`ensure_torchvision` before the
first transformers / colpali_engine import; every backend that imports those
calls it first.
"""
from __future__ import annotations

import sys

_DONE = False
_STATUS = "unchecked"
_LIB = None  # keep the torch.library fragment alive for the process lifetime


def ensure_torchvision() -> str:
    """Make ``import torchvision`` safe; return what happened.

    Returns one of ``"ok"`` (imported normally), ``"absent"`` (not installed),
    ``"patched"`` (broken CUDA build, pure-Python parts made importable) or
    ``"broken: <error>"`` (could not be repaired; transformers then still
    works only if torchvision is uninstalled).
    """
    global _DONE, _STATUS, _LIB
    if _DONE:
        return _STATUS
    _DONE = True
    try:
        import torchvision  # noqa: F401

        _STATUS = "ok"
        return _STATUS
    except ModuleNotFoundError:
        _STATUS = "absent"
        return _STATUS
    except RuntimeError as err:
        if "torchvision::" not in str(err):
            _STATUS = f"broken: {err}"
            return _STATUS
    import torch

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    try:
        _LIB = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            try:
                _LIB.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            except RuntimeError:
                pass  # already defined by a partially loaded extension
        import torchvision  # noqa: F401,F811

        _STATUS = "patched"
    except Exception as err:  # pragma: no cover - depends on the install
        _STATUS = f"broken: {err}"
    return _STATUS
