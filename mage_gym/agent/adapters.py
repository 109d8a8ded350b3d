"""Trained controllers as small LoRA adapters: saving them against their base, and stacking two into one.

Why adapters: a controller fine-tuned from the embedded SmolLM2 differs from
it by a low-rank update per linear layer; storing only that update (a few
MB in bf16) keeps the repository light and says exactly which base it needs
(``base_model_name_or_path: smollm2``, which :mod:`mage_gym.readers.hf` and
:func:`mage_gym.agent.models.load_model` resolve to the embedded GGUF, never a
download).

Why stacking: GRPO starts from the SFT controller with the SFT adapter
merged into the weights and trains a fresh adapter on top, so its KL term is
measured against the SFT start. The result is two low-rank updates on one
base; their sum is itself a LoRA of rank ``r1 + r2`` (A stacked, B side by
side, each scaled by its own ``alpha / r``), so one adapter file ships.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: which adapters a stacked one was built from, beside (not inside) ``adapter_config.json``: peft's config
#: loader warns "upgrade PEFT" at every load about keys it does not know
LINEAGE = "lineage.json"
#: the marker ``load_model`` leaves on a model built from an adapter (the adapter's folder)
SOURCE_ATTR = "_mage_adapter_source"


def is_adapter(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def read_config(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / ADAPTER_CONFIG).read_text())


def _scaled_weights(path: Path) -> tuple[dict[str, Any], int]:
    """(module -> (A, B * alpha/r)) of an adapter, and its rank."""
    from safetensors.torch import load_file

    cfg = read_config(path)
    r, alpha = int(cfg["r"]), float(cfg.get("lora_alpha", cfg["r"]))
    tensors = load_file(str(path / ADAPTER_WEIGHTS))
    out: dict[str, Any] = {}
    for key, t in tensors.items():
        if ".lora_A." in key:
            module = key.split(".lora_A.")[0]
            out.setdefault(module, {})["A"] = t.float()
        elif ".lora_B." in key:
            module = key.split(".lora_B.")[0]
            out.setdefault(module, {})["B"] = t.float() * (alpha / r)
    return out, r


def stack(first: str | Path, second: str | Path, out: str | Path, dtype: str = "bfloat16") -> Path:
    """Write the adapter equal to applying ``first`` then ``second`` (trained on the merged first) to ``out``.

    The two must target the same modules; the result has rank ``r1 + r2``
    and ``lora_alpha`` equal to its rank (the scales are folded into B).
    """
    import torch
    from safetensors.torch import save_file

    first, second, out = Path(first), Path(second), Path(out)
    w1, r1 = _scaled_weights(first)
    w2, r2 = _scaled_weights(second)
    if set(w1) != set(w2):
        raise ValueError(f"adapters {first} and {second} target different modules; they cannot be stacked")
    tensors = {}
    for module in w1:
        tensors[f"{module}.lora_A.weight"] = torch.cat([w1[module]["A"], w2[module]["A"]], dim=0)
        tensors[f"{module}.lora_B.weight"] = torch.cat([w1[module]["B"], w2[module]["B"]], dim=1)
    cast = getattr(torch, dtype)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(cast).contiguous() for k, v in tensors.items()}, str(out / ADAPTER_WEIGHTS))
    cfg = read_config(first)
    cfg.update(r=r1 + r2, lora_alpha=r1 + r2, lora_dropout=0.0)
    (out / ADAPTER_CONFIG).write_text(json.dumps(cfg, indent=1))
    return out


def save_trained(model: Any, tokenizer: Any, folder: str | Path, base: str, dtype: str = "bfloat16") -> Path:
    """Save what training produced: a LoRA adapter (weights in ``dtype``, base named portably) or a whole model.

    ``base`` is the run's ``model`` setting: ``smollm2``, a folder, or an
    adapter folder (GRPO from an SFT adapter: the new adapter is stacked on
    it, so the saved one applies to the original base).
    """
    folder = Path(folder)
    if not hasattr(model, "peft_config"):
        model.save_pretrained(str(folder))
        tokenizer.save_pretrained(str(folder))
        return folder
    import torch
    from safetensors.torch import load_file, save_file

    model.save_pretrained(str(folder))
    weights = folder / ADAPTER_WEIGHTS
    cast = getattr(torch, dtype)
    save_file({k: v.to(cast).contiguous() for k, v in load_file(str(weights)).items()}, str(weights))
    cfg = read_config(folder)
    source = getattr(model, SOURCE_ATTR, None) or (base if is_adapter(base) else None)
    if source:
        own = folder.parent / (folder.name + "_own")
        if own.exists():
            import shutil

            shutil.rmtree(own)
        folder.rename(own)
        stack(source, own, folder, dtype=dtype)
        cfg = read_config(folder)
        cfg["base_model_name_or_path"] = read_config(source)["base_model_name_or_path"]
        (folder / LINEAGE).write_text(json.dumps({"stacked_from": [str(source), str(own)]}, indent=1) + "\n")
    else:
        cfg["base_model_name_or_path"] = base if base.lower() == "smollm2" else str(Path(base).resolve())
    (folder / ADAPTER_CONFIG).write_text(json.dumps(cfg, indent=1))
    return folder


def size_bytes(folder: str | Path) -> int:
    """Bytes of an adapter's weight file (what a repository stores)."""
    return (Path(folder) / ADAPTER_WEIGHTS).stat().st_size
