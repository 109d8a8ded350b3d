"""The MiniLM encoder: precision choice and vector agreement between precisions."""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.graph import embed


def test_resolve_precision_explicit_and_env(monkeypatch):
    assert embed.resolve_precision("float32", "cpu") == "float32"
    assert embed.resolve_precision("bfloat16", "cpu") == "bfloat16"
    monkeypatch.setenv("MAGE_GYM_EMBED_PRECISION", "float32")
    assert embed.resolve_precision(None, "cpu") == "float32"
    with pytest.raises(ValueError, match="precision"):
        embed.resolve_precision("int4", "cpu")


def test_auto_precision_follows_cpu_flags(monkeypatch):
    monkeypatch.delenv("MAGE_GYM_EMBED_PRECISION", raising=False)
    monkeypatch.setattr(embed, "cpu_has_native_bf16", lambda: True)
    assert embed.resolve_precision(None, "cpu") == "bfloat16"
    monkeypatch.setattr(embed, "cpu_has_native_bf16", lambda: False)
    assert embed.resolve_precision("auto", "cpu") == "float32"
    assert embed.resolve_precision("auto", "mps") == "float32"


def test_bfloat16_vectors_agree_with_float32():
    """bfloat16 must keep the float32 geometry: same vectors up to rounding, same neighbours."""
    texts = ["Net revenue grew 12% in fiscal 2021.", "The board met four times.", "",
             "Revenue increased twelve percent this fiscal year.", "Figure 3: carbon emissions by region"]
    f32 = embed.TextEncoder(device="cpu", precision="float32").encode(texts)
    b16 = embed.TextEncoder(device="cpu", precision="bfloat16").encode(texts)
    assert f32.dtype == b16.dtype == np.float32 and f32.shape == (5, 384)
    assert not b16[2].any()  # empty text -> zero vector in both
    live = [0, 1, 3, 4]
    cos = (f32[live] * b16[live]).sum(1)
    assert cos.min() > 0.99, cos
    np.testing.assert_allclose(np.linalg.norm(b16[live], axis=1), 1.0, atol=1e-5)
    # nearest neighbour of the revenue sentence is its paraphrase in both precisions
    for v in (f32, b16):
        sims = v[live] @ v[0]
        assert live[int(np.argsort(-sims)[1])] == 3
