"""A disk cache of RapidOCR results, keyed by the exact pixels OCR saw.

Why: OCR is by far the most expensive step of a graph build (5-10 s a page
on this CPU against milliseconds for a text layer), and a graph is rebuilt
whenever its parser, edge or embedding settings change. The OCR lines of a
page image do not depend on any of those, so they are stored once under
``$MAGE_GYM_CACHE/ocr/`` and reused by every later build.

The key is the sha256 of the RGB array (shape and bytes) plus the engine's
identity (package version and the line-score threshold), so a different
render, upscaling or engine version never reuses a stale entry. Entries are
small JSON files written atomically (temporary file, then rename); an entry
that does not parse is ignored and rewritten. ``MAGE_GYM_OCR_CACHE=0`` turns
the cache off.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

#: Raw OCR output kept per line: (x0, y0, x1, y1) in array pixels, text, score.
RawLine = tuple[tuple[float, float, float, float], str, float]


def enabled() -> bool:
    return os.environ.get("MAGE_GYM_OCR_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    from mage_gym.paths import cache_root

    return cache_root() / "ocr"


def image_key(rgb: "np.ndarray", engine_id: str) -> str:
    h = hashlib.sha256(f"{engine_id}\x00{rgb.shape}\x00{rgb.dtype}\x00".encode())
    h.update(memoryview(rgb).cast("B") if rgb.flags["C_CONTIGUOUS"] else rgb.tobytes())
    return h.hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / key[:2] / f"{key}.json"


def load(key: str) -> list[RawLine] | None:
    """The cached lines for ``key``, or None (missing, unreadable or malformed)."""
    try:
        data: Any = json.loads(_path(key).read_text())
        return [((float(b[0]), float(b[1]), float(b[2]), float(b[3])), str(t), float(s)) for b, t, s in data["lines"]]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def save(key: str, lines: list[RawLine]) -> None:
    """Write atomically; a failure to write only costs the reuse, never the build."""
    path = _path(key)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as fh:
            tmp = Path(fh.name)
            json.dump({"lines": [[list(b), t, s] for b, t, s in lines]}, fh)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


__all__ = ["RawLine", "enabled", "cache_dir", "image_key", "load", "save"]
