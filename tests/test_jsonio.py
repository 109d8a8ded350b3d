"""The one numpy-aware JSON hook."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mage_gym.jsonio import dumps, json_default


def test_numpy_sets_and_paths_become_json():
    obj = {"i": np.int64(3), "f": np.float32(0.5), "b": np.bool_(True), "a": np.arange(3, dtype=np.int16),
           "s": {3, 1, 2}, "p": Path("/x/y.pdf")}
    assert json.loads(dumps(obj)) == {"i": 3, "f": 0.5, "b": True, "a": [0, 1, 2], "s": [1, 2, 3], "p": "/x/y.pdf"}
    assert json.loads(dumps({"mixed": {1, "a"}}))["mixed"] in ([1, "a"], ["a", 1])


def test_unknown_objects_fail_where_written():
    with pytest.raises(TypeError, match="object"):
        json_default(object())
