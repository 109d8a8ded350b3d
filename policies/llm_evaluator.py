"""``llm_evaluator``: the paper's controller - an LLM reads the text view and decides each round.

Why: MAGE-RAG's controller is an LLM "evaluator" prompted with the evidence
state; this policy reproduces that loop on the environment's round interface:
text view in, one ``<agent_decision>`` out (:mod:`policies.llm_decision`),
submitted with ``env.submit_round``. Backends are the readers' backends
(:func:`mage_gym.readers.get_reader`): SmolLM2 embedded (default, CPU), any
local HF model, or any OpenAI-compatible server (Qwen3-VL-8B-Instruct on vLLM
as in the paper). Replies are cached in sqlite like reader replies (key: the
backend identity, :data:`~policies.llm_prompt.EVALUATOR_PROMPT_VERSION` and
the exact prompt), so a repeated benchmark costs no model calls.

When the reply has no usable decision (strict and lenient parsing both fail)
or the backend errors, a logged fallback runs instead: ``top_candidates``
opens the activated elements shown in the state and activates the first
``m`` candidates (the frontier is relevance-ordered), or ``stop`` ends the
episode. ``stats`` counts calls, cache hits and parse modes.
"""
from __future__ import annotations

import hashlib
import html
import json
import logging
import re
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from mage_gym.env import RoundDecision
from mage_gym.readers.base import ReaderOutput
from mage_gym.readers.prompt import ReaderPrompt
from policies.base import BasePolicy, EnvInfo
from policies.llm_decision import parse_decision
from policies.llm_prompt import EVALUATOR_PROMPT_VERSION, PromptConfig, build_evaluator_prompt

log = logging.getLogger(__name__)
FALLBACKS = ("top_candidates", "stop")
_CANDIDATE = re.compile(r'<candidate n="(\d+)"')
_ACTIVATED_NODE = re.compile(r'<node id="([^"]+)" type="[^"]*" state="activated"')
_OPENS_LEFT = re.compile(r'opens_left="(\d+)"')


class ReaderBackend:
    """Chat completions through a reader backend's ``generate`` (hf / openai), built lazily."""

    def __init__(self, reader: str = "hf", **cfg: Any) -> None:
        if reader == "oracle":
            raise ValueError("the oracle reader has no language model; use backend.reader=hf or openai")
        self.reader_name = reader
        self.cfg = dict(cfg)
        self._reader: Any = None

    @property
    def reader(self) -> Any:
        if self._reader is None:
            from mage_gym.readers import get_reader

            cfg = dict(self.cfg)
            cfg.pop("cache", None)  # our own cache wraps generate(), not read()
            self._reader = get_reader(self.reader_name, **cfg)
        return self._reader

    def identity(self) -> dict[str, Any]:
        r = self.reader
        ident = dict(r.cache_identity()) if hasattr(r, "cache_identity") else {"backend": self.reader_name}
        ident.pop("prompt_version", None)
        return ident

    def complete(self, prompt: ReaderPrompt) -> str:
        return str(self.reader.generate(prompt))


class CallableBackend:
    """A plain function ``(system, user) -> reply`` (tests, scripted experiments)."""

    def __init__(self, fn: Callable[[str, str], str], name: str = "callable") -> None:
        self.fn = fn
        self.name = name

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name}

    def complete(self, prompt: ReaderPrompt) -> str:
        return str(self.fn(prompt.system, prompt.user_text()))


def default_cache_path() -> Path:
    from mage_gym.readers.gguf_cache import cache_root

    return cache_root() / "evaluator" / "responses.sqlite"


class LLMEvaluatorPolicy(BasePolicy):
    """Round-level policy. Options (``conf/policy/llm_evaluator.yaml``):

    ``backend``: mapping for :class:`ReaderBackend` (``reader: hf|openai`` plus
    the reader's options) or a backend object; ``cache``: True (default path),
    a path, or False; ``max_rounds``: rounds to run before stopping (None =
    the budget's T); ``fallback``: ``top_candidates`` or ``stop``; ``prompt``:
    :class:`~policies.llm_prompt.PromptConfig` fields.
    """

    name = "llm_evaluator"
    level = "round"
    uses_text_view = True

    def __init__(self, backend: Mapping[str, Any] | Any = None, cache: bool | str = True,
                 max_rounds: int | None = None, fallback: str = "top_candidates",
                 prompt: Mapping[str, Any] | None = None, render_mode: str | None = None, **kw: Any) -> None:
        super().__init__(render_mode=render_mode, **kw)
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        if max_rounds is not None and max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1 or null, got {max_rounds}")
        if backend is None or isinstance(backend, Mapping):
            cfg = dict(backend or {"reader": "hf", "model": "smollm2"})
            self.backend: Any = ReaderBackend(**cfg)
        else:
            self.backend = backend
        self.cache_path = None if cache is False else (default_cache_path() if cache in (True, None)
                                                       else Path(str(cache)))
        self._cache: Any = None
        self.max_rounds = max_rounds
        self.fallback = fallback
        self.prompt_cfg = PromptConfig(**dict(prompt or {}))
        self.last_raw: str | None = None
        self._rounds = 0
        for key in ("calls", "cache_hits", "model_calls", "strict", "lenient", "fallback", "backend_errors",
                    "model_seconds"):
            self.stats[key] = 0

    # --- cache ------------------------------------------------------------------------

    def _cache_db(self) -> Any:
        if self._cache is None and self.cache_path is not None:
            from mage_gym.readers.cache import ResponseCache

            self._cache = ResponseCache(self.cache_path)
        return self._cache

    def _key(self, prompt: ReaderPrompt) -> str:
        ident = {**self.backend.identity(), "evaluator_prompt": EVALUATOR_PROMPT_VERSION}
        h = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode())
        h.update(b"\x00system\x00" + prompt.system.encode() + b"\x00user\x00" + prompt.user_text().encode()
                 + b"\x00prefix\x00" + prompt.response_prefix.encode())
        return h.hexdigest()

    def complete(self, prompt: ReaderPrompt) -> str:
        """One evaluator call, answered from the cache when the same prompt was seen."""
        self.count("calls")
        db = self._cache_db()
        key = self._key(prompt) if db is not None else ""
        if db is not None:
            row = db.get(key)
            if row is not None:
                self.count("cache_hits")
                return row[1]
        t0 = time.perf_counter()
        raw = self.backend.complete(prompt)
        seconds = time.perf_counter() - t0
        self.count("model_calls")
        self.count("model_seconds", seconds)
        if db is not None:
            ident = {**self.backend.identity(), "prompt_version": EVALUATOR_PROMPT_VERSION}
            db.put(key, ident, ReaderOutput(answer=None, raw=raw, seconds=seconds))
        return raw

    # --- policy -------------------------------------------------------------------------

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)
        self._rounds = 0
        self.last_raw = None

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> RoundDecision | int:
        if text_view is None:
            raise ValueError("llm_evaluator needs the text view (policy.uses_text_view is True)")
        budget = self.env_info.budget if self.env_info else None
        m = budget.m if budget else 4
        limit = self.max_rounds or (budget.T if budget else None)
        if limit is not None and self._rounds >= limit:
            self.last_raw = None
            return 0  # a plain Stop step: no evaluator call happens, so none is counted
        self._rounds += 1
        prompt = build_evaluator_prompt(text_view, m, self.prompt_cfg)
        try:
            raw = self.complete(prompt)
        except Exception as err:  # a dead server must not kill a benchmark: fall back, loudly
            self.count("backend_errors")
            log.warning("evaluator backend failed (%s: %s); using fallback %r", type(err).__name__, err,
                        self.fallback)
            raw = ""
        self.last_raw = raw
        parsed = parse_decision(raw)
        self.count(parsed.mode)
        if parsed.decision is None:
            log.info("evaluator reply unusable (%s); fallback %r. Reply head: %r", parsed.error, self.fallback,
                     raw[:200])
            return self._fallback(text_view, m)
        d = parsed.decision
        if len(d.activate) > m:
            d = RoundDecision(activate=d.activate[:m], open=d.open, search=d.search, prune=d.prune, stop=d.stop)
        return d

    def _fallback(self, text_view: str, m: int) -> RoundDecision:
        """Stop, or the default pipeline step: open activated elements, activate the top candidates."""
        n_cands = len(_CANDIDATE.findall(text_view))
        opens_left = _OPENS_LEFT.search(text_view)
        can_open = int(opens_left.group(1)) if opens_left else 0
        to_open = tuple(html.unescape(i) for i in _ACTIVATED_NODE.findall(text_view))[: min(m, can_open)]
        if self.fallback == "stop" or (n_cands == 0 and not to_open):
            return RoundDecision(stop=True)
        return RoundDecision(activate=tuple(range(1, min(m, n_cands) + 1)), open=to_open)

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
            self._cache = None
