"""The MiniLM encoder: precision choice and vector agreement between precisions."""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.graph import embed


def test_resolve_precision_explicit_and_env(monkeypatch):
    assert embed.resolve_precision("float32", "cpu") == "float32"
    assert embed.resolve_precision("bfloat16", "cpu") == "bfloat16"
    assert embed.resolve_precision("int8", "cpu") == "int8"
    monkeypatch.setenv("MAGE_GYM_EMBED_PRECISION", "float32")
    assert embed.resolve_precision(None, "cpu") == "float32"
    with pytest.raises(ValueError, match="precision"):
        embed.resolve_precision("int4", "cpu")


def test_auto_precision_follows_cpu_flags(monkeypatch):
    from mage_gym.graph import embed_int8

    monkeypatch.delenv("MAGE_GYM_EMBED_PRECISION", raising=False)
    monkeypatch.setattr(embed_int8, "cpu_has_vnni", lambda: True)
    assert embed.resolve_precision(None, "cpu") == "int8"
    assert embed.resolve_precision(None, "mps") == "float32"
    monkeypatch.setattr(embed_int8, "cpu_has_vnni", lambda: False)
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


TEXTS = ["Net revenue grew 12% in fiscal 2021.", "The board met four times.", "",
         "Revenue increased twelve percent this fiscal year.", "Figure 3: carbon emissions by region"]


@pytest.fixture(scope="module")
def int8_encoder():
    return embed.TextEncoder(device="cpu", precision="int8")


def test_int8_vectors_agree_with_float32(int8_encoder):
    """int8 weights keep MiniLM's geometry: vectors close to float32, same nearest neighbour."""
    f32 = embed.TextEncoder(device="cpu", precision="float32").encode(TEXTS)
    i8 = int8_encoder.encode(TEXTS)
    assert i8.dtype == np.float32 and i8.shape == (5, 384)
    assert not i8[2].any()
    live = [0, 1, 3, 4]
    cos = (f32[live] * i8[live]).sum(1)
    assert cos.min() > 0.95, cos
    np.testing.assert_allclose(np.linalg.norm(i8[live], axis=1), 1.0, atol=1e-5)
    sims = i8[live] @ i8[0]
    assert live[int(np.argsort(-sims)[1])] == 3


def test_int8_vector_does_not_depend_on_the_other_texts(int8_encoder):
    """Activations are quantised per run, so each text runs alone: the same vector in any company."""
    together = int8_encoder.encode(TEXTS)
    alone = np.stack([int8_encoder.encode([t])[0] for t in TEXTS])
    reordered = int8_encoder.encode(TEXTS[::-1])[::-1]
    np.testing.assert_allclose(alone, together, atol=1e-6)
    np.testing.assert_allclose(reordered, together, atol=1e-6)


def test_int8_needs_the_cpu():
    with pytest.raises(ValueError, match="CPU"):
        embed.TextEncoder(device="cuda", precision="int8")


def test_int8_model_file_is_made_once_and_reused(tmp_path, monkeypatch):
    from mage_gym.graph import embed_int8

    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"w" * 10)
    (weights / "config.json").write_text("{}")
    made = []

    def fake_make(model_path, target):
        made.append(target)
        target.write_bytes(b"onnx")

    monkeypatch.setattr(embed_int8, "_make_int8_model", fake_make)
    first = embed_int8.int8_model_file(weights, tmp_path / "models")
    again = embed_int8.int8_model_file(weights, tmp_path / "models")
    assert first == again and first.read_bytes() == b"onnx" and len(made) == 1
    assert first.name.startswith(embed_int8.RECIPE)
    (weights / "model.safetensors").write_bytes(b"other weights")  # new weights -> a new file
    assert embed_int8.int8_model_file(weights, tmp_path / "models") != first and len(made) == 2


def test_making_the_int8_model_without_onnx_says_what_to_install(tmp_path, monkeypatch):
    import sys

    from mage_gym.graph import embed_int8

    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx -> ImportError
    with pytest.raises(ImportError, match="pip install onnx"):
        embed_int8._make_int8_model(tmp_path, tmp_path / "m.onnx")


def test_auto_int8_falls_back_to_torch_when_the_model_cannot_be_made(monkeypatch, caplog):
    """An automatic int8 choice that fails (say, onnx missing) embeds in a torch precision with a warning."""
    from mage_gym.graph import embed_int8

    def broken(*args, **kwargs):
        raise ImportError("no onnx here")

    monkeypatch.delenv("MAGE_GYM_EMBED_PRECISION", raising=False)
    monkeypatch.setattr(embed_int8, "cpu_has_vnni", lambda: True)
    monkeypatch.setattr(embed_int8, "Int8Runner", broken)
    enc = embed.TextEncoder(device="cpu")
    assert enc.precision in ("bfloat16", "float32") and enc.int8 is None and enc.model is not None
    assert "int8 MiniLM unavailable" in caplog.text
    assert enc.encode(["revenue"]).shape == (1, 384)
    with pytest.raises(ImportError, match="no onnx"):
        embed.TextEncoder(device="cpu", precision="int8")  # asked for explicitly: no silent fallback
