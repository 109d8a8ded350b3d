"""Shared pytest setup.

The torchvision guard runs first so that any test importing transformers or
colpali-engine works beside a CPU-only torch (see mage_gym/_compat.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MAGE_GYM_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_root() -> Path:
    """Root of the real benchmark data; tests using it skip when it is absent."""
    if not DATA.is_dir():
        pytest.skip(f"real benchmark data not found at {DATA} (set MAGE_GYM_DATA)")
    return DATA


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep test graph/reader caches out of the user's cache unless one is set."""
    if "MAGE_GYM_CACHE" not in os.environ:
        os.environ["MAGE_GYM_CACHE"] = str(tmp_path_factory.mktemp("mage_cache"))
