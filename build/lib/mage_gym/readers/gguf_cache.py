"""Load a GGUF causal LM through transformers, caching the dequantised weights.

Why: transformers dequantises a GGUF file tensor by tensor on every load
(about 15 s for SmolLM2-135M on 2 CPU cores). The result is an ordinary float
model, so we save it once with ``save_pretrained`` (safetensors) under
``$MAGE_GYM_CACHE/readers/gguf-<sha256 prefix>/`` and load that folder on
later runs (well under a second). The key is the GGUF file's content hash, so
a different or updated file never reuses a stale cache; the hash itself is
memoised by (path, size, mtime) to avoid re-reading 100 MB on every load.
A ``mage_gguf.json`` marker is written last: a folder without it is an
interrupted save and is rebuilt. Concurrent processes each write to a private
temporary folder and the first rename wins.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mage_gym.paths import cache_root

MARKER = "mage_gguf.json"


@dataclass(frozen=True)
class GGUFLoadInfo:
    """How a GGUF model was loaded: ``source`` is ``"gguf"`` (dequantised now) or ``"cache"``."""

    source: str
    path: Path  # the folder the weights were read from
    gguf_file: Path
    sha256: str
    seconds: float


def file_sha256(path: Path, memo_dir: Path | None = None) -> str:
    """sha256 of a file, memoised on disk by (resolved path, size, mtime_ns)."""
    path = Path(path).resolve()
    st = path.stat()
    memo_key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    memo_file = (memo_dir or cache_root() / "readers") / "file_sha256.json"
    try:
        memo = json.loads(memo_file.read_text())
    except (OSError, ValueError):
        memo = {}
    if memo_key in memo:
        return memo[memo_key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    memo[memo_key] = digest
    try:
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(memo))
        os.replace(tmp, memo_file)
    except OSError:
        pass  # the memo is an optimisation only
    return digest


def dequantised_dir(gguf_file: Path, root: Path | None = None) -> Path:
    """Folder that holds (or will hold) the dequantised copy of ``gguf_file``."""
    base = Path(root) if root is not None else cache_root()
    sha = file_sha256(gguf_file, memo_dir=base / "readers")
    return base / "readers" / f"gguf-{sha[:24]}"


def load_gguf_causal_lm(gguf_file: str | Path, *, root: Path | None = None, device: str = "cpu",
                        dtype: Any = None) -> tuple[Any, Any, GGUFLoadInfo]:
    """(model, tokenizer, info) for a GGUF causal LM, using the dequantised cache."""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_file = Path(gguf_file)
    if not gguf_file.is_file():
        from mage_gym.readers.errors import ReaderConfigError

        raise ReaderConfigError(f"GGUF file not found: {gguf_file}")
    start = time.perf_counter()
    target = dequantised_dir(gguf_file, root)
    sha = target.name.removeprefix("gguf-")
    kwargs: dict[str, Any] = {"local_files_only": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if (target / MARKER).is_file():
        tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(target, **kwargs)
        source = "cache"
    else:
        tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, **kwargs)
        _save_dequantised(model, tokenizer, gguf_file, target)
        source = "gguf"
    model.to(device).eval()
    info = GGUFLoadInfo(source=source, path=target if source == "cache" else gguf_file.parent,
                        gguf_file=gguf_file, sha256=sha, seconds=time.perf_counter() - start)
    return model, tokenizer, info


def _save_dequantised(model: Any, tokenizer: Any, gguf_file: Path, target: Path) -> None:
    """Write the float model to ``target`` atomically (temp folder + rename)."""
    # The GGUF quantizer only dequantises on load; the weights are plain floats
    # afterwards, but transformers refuses to save while the quantizer is attached.
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    for attr in ("is_quantized", "quantization_method"):
        if attr in model.__dict__:
            model.__dict__.pop(attr, None)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / MARKER).write_text(json.dumps({"gguf_file": str(gguf_file), "saved": time.time()}))
        try:
            os.rename(tmp, target)
        except OSError:
            if (target / MARKER).is_file():
                return  # another process won the race; its copy is identical
            shutil.rmtree(target, ignore_errors=True)  # an interrupted earlier save
            os.rename(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
