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
or the backend fails transiently (timeouts, connection errors, HTTP 5xx/429
after the reader's retries), a logged fallback runs instead:
``top_candidates`` opens the activated elements shown in the state and
activates the first ``m`` candidates (the frontier is relevance-ordered), or
``stop`` ends the episode.

With ``protocol: tools`` the same backends drive ``MageRAG-Chat-v0`` instead
(``level = "chat"``, :func:`mage_gym.bench.play.run_chat_episode`): the whole
conversation goes to the model each turn (:func:`mage_gym.agent.clients.chat_reply`),
its reply - tool calls, as text or structured - is one step of the chat env,
and an unusable reply (no valid call) falls back the same way, written as
tool calls. The reply cache, counters and failure rules are shared.

A failing backend is never masked:

- the backend is built (and its options checked) in the constructor, and
  :meth:`LLMEvaluatorPolicy.validate` asks a server whether it serves the
  model, so a configuration error stops a benchmark before its first episode;
- configuration errors, rejected requests (HTTP 4xx) and programming errors
  raise at once; only transient failures fall back, and every one is counted;
- past ``max_backend_error_share`` of backend calls (after
  ``backend_error_grace`` failures) the policy raises
  :class:`~mage_gym.readers.errors.BackendFailureRateError`, naming the
  backend and the last error;
- ``stats`` has fixed keys (:data:`STATS_KEYS`); ``evaluator_calls`` counts
  replies actually received from the model, not rounds.
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

from mage_gym.agent.rollout import TRAINED_CHAT
from mage_gym.env import RoundDecision
from mage_gym.readers.base import ReaderOutput
from mage_gym.readers.errors import BackendFailureRateError, ReaderConfigError, error_kind
from mage_gym.readers.prompt import ReaderPrompt
from mage_gym.bench.protocol import EnvInfo
from policies.base import BasePolicy
from policies.llm_decision import parse_decision
from policies.llm_prompt import EVALUATOR_PROMPT_VERSION, PromptConfig, build_evaluator_prompt

log = logging.getLogger(__name__)
FALLBACKS = ("top_candidates", "stop")
PROTOCOLS = ("xml", "tools")
#: The policy's ``stats`` keys, always present. Invariants (checked by the tests):
#: ``rounds = calls + cache_hits + backend_errors = strict + lenient + fallback`` and
#: ``fallback = unusable + backend_errors``.
STATS_KEYS = (
    "evaluator_rounds",          # rounds decided by this policy (evaluator prompts built)
    "evaluator_calls",           # replies received from the model backend in this run
    "evaluator_cache_hits",      # replies answered from the sqlite cache (no model call)
    "evaluator_requests",        # requests sent to the backend, retries included (HTTP attempts for openai)
    "evaluator_backend_errors",  # rounds whose backend call failed transiently -> fallback
    "evaluator_strict",          # replies parsed by the strict XML parser
    "evaluator_lenient",         # replies parsed by the lenient parser only
    "evaluator_unusable",        # replies with no usable decision -> fallback
    "evaluator_fallback",        # rounds decided by the fallback (unusable replies + backend errors)
    "evaluator_model_seconds",   # wall time spent waiting for the model
)
_CANDIDATE = re.compile(r'<candidate n="(\d+)"')
_ACTIVATED_NODE = re.compile(r'<node id="([^"]+)" type="[^"]*" state="activated"')
_OPENS_LEFT = re.compile(r'opens_left="(\d+)"')


class ReaderBackend:
    """Chat completions through a reader backend's ``generate`` (hf / openai).

    The reader is built here, so unknown or misplaced options fail now with a
    :class:`ReaderConfigError` (``max_new_tokens`` under an openai backend is
    translated to ``max_tokens``, see :mod:`mage_gym.readers.options`); model
    weights still load on the first call.
    """

    def __init__(self, reader: str | None = None, **cfg: Any) -> None:
        from mage_gym.readers import get_reader
        from mage_gym.readers.options import canonical_backend

        name = reader or cfg.pop("name", None) or "hf"
        cfg.pop("name", None)
        self.reader_name = canonical_backend(str(name))
        if self.reader_name == "oracle":
            raise ReaderConfigError("the oracle reader has no language model; use backend.reader=hf or openai")
        cfg.pop("cache", None)  # our own cache wraps generate(), not read()
        self.cfg = dict(cfg)
        self.reader: Any = get_reader(str(name), **cfg)

    def identity(self) -> dict[str, Any]:
        r = self.reader
        ident = dict(r.cache_identity()) if hasattr(r, "cache_identity") else {"backend": self.reader_name}
        ident.pop("prompt_version", None)
        return ident

    def describe(self) -> str:
        url = getattr(self.reader, "base_url", None)
        model = getattr(self.reader, "model_id", "") or getattr(self.reader, "model", "")
        return f"{self.reader_name} evaluator backend (model {model}" + (f" at {url})" if url else ")")

    def requests(self) -> int | None:
        """Requests sent so far, retries included, where the backend counts them (openai: HTTP attempts)."""
        calls = getattr(self.reader, "calls", None)
        return int(calls) if isinstance(calls, int) else None

    def validate(self) -> None:
        check = getattr(self.reader, "validate", None)
        if callable(check):
            check()

    def complete(self, prompt: ReaderPrompt) -> str:
        return str(self.reader.generate(prompt))


class CallableBackend:
    """A plain function ``(system, user) -> reply`` (tests, scripted experiments)."""

    def __init__(self, fn: Callable[[str, str], str], name: str = "callable") -> None:
        self.fn = fn
        self.name = name

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name}

    def describe(self) -> str:
        return f"{self.name} evaluator backend"

    def complete(self, prompt: ReaderPrompt) -> str:
        return str(self.fn(prompt.system, prompt.user_text()))


#: the evaluator's backend when none is given: the embedded SmolLM2 with a short reply (a decision, not an answer);
#: conf/policy/llm_evaluator.yaml repeats it (tests/test_config_defaults.py keeps them equal)
DEFAULT_BACKEND: dict[str, Any] = {"reader": "hf", "model": "smollm2", "max_new_tokens": 96}


#: LLM controllers shipped with the repository (LoRA adapters on the embedded SmolLM2): ``backend.model=<name>``
SHIPPED_CONTROLLERS: dict[str, Path] = {
    "smollm2-controller": Path(__file__).resolve().parent / "checkpoints" / "llm_controller_smollm2",
    # the same with two more SFT stages on the oracle's token-room transcripts: for runs under env.budget.tokens
    "smollm2-controller-tokens": Path(__file__).resolve().parent / "checkpoints" / "llm_controller_smollm2_tokens",
}


def default_cache_path() -> Path:
    from mage_gym.readers.gguf_cache import cache_root

    return cache_root() / "evaluator" / "responses.sqlite"


class LLMEvaluatorPolicy(BasePolicy):
    """Round-level policy. Options (``conf/policy/llm_evaluator.yaml``):

    ``backend``: mapping for :class:`ReaderBackend` (``reader: hf|openai`` plus
    the reader's options) or a backend object; ``cache``: True (default path),
    a path, or False; ``max_rounds``: rounds to run before stopping (None =
    the budget's T); ``fallback``: ``top_candidates`` or ``stop``; ``prompt``:
    :class:`~policies.llm_prompt.PromptConfig` fields;
    ``max_backend_error_share``: the share of backend calls allowed to fail
    transiently (default 0.05) once more than ``backend_error_grace`` (default
    2) have failed; beyond it :class:`BackendFailureRateError` is raised.
    """

    name = "llm_evaluator"
    level = "round"
    uses_text_view = True
    default_backend: dict[str, Any] = DEFAULT_BACKEND

    def __init__(self, backend: Mapping[str, Any] | Any = None, cache: bool | str = True,
                 max_rounds: int | None = None, fallback: str = "top_candidates",
                 prompt: Mapping[str, Any] | None = None, render_mode: str | None = None,
                 max_backend_error_share: float = 0.05, backend_error_grace: int = 2, protocol: str = "xml",
                 chat: Mapping[str, Any] | None = None, **kw: Any) -> None:
        super().__init__(render_mode=render_mode, **kw)
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        self.protocol = protocol
        chat = dict(chat or {})
        #: tools protocol: the server parses tool calls itself (``tools=`` in the request), extra request fields
        self.native_tools = bool(chat.pop("native_tools", False))
        self.request_extra = dict(chat.pop("request", None) or {})
        #: tools protocol: send text replies as structured tool calls, so results come back as ``tool`` turns, as
        #: in the transcripts and GRPO rollouts a trained controller learned from (mage_gym.agent.rollout)
        self.structured_replies = bool(chat.pop("structured_replies", False))
        self.chat_options = chat  # MageChatEnv settings (max_candidates, tools_in_prompt, ...)
        if protocol == "tools":
            self.level = "chat"
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        if max_rounds is not None and max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1 or null, got {max_rounds}")
        if not 0.0 <= float(max_backend_error_share) <= 1.0:
            raise ValueError(f"max_backend_error_share must be in [0, 1], got {max_backend_error_share}")
        if int(backend_error_grace) < 0:
            raise ValueError(f"backend_error_grace must be >= 0, got {backend_error_grace}")
        if backend is None or isinstance(backend, Mapping):
            cfg = dict(backend or self.default_backend)
            if cfg.get("model") is not None:
                cfg["model"] = self.shipped_model(cfg["model"])
            self.backend: Any = ReaderBackend(**cfg)
        else:
            self.backend = backend
        self.cache_path = None if cache is False else (default_cache_path() if cache in (True, None)
                                                       else Path(str(cache)))
        self._cache: Any = None
        self.max_rounds = max_rounds
        self.fallback = fallback
        self.prompt_cfg = PromptConfig(**dict(prompt or {}))
        self.max_backend_error_share = float(max_backend_error_share)
        self.backend_error_grace = int(backend_error_grace)
        self.last_raw: str | None = None
        self.last_backend_error: str | None = None
        self._rounds = 0
        for key in STATS_KEYS:
            self.stats[key] = 0

    def validate(self) -> None:
        """Check the backend before the first episode (a server must serve the model); raises ReaderConfigError."""
        check = getattr(self.backend, "validate", None)
        if callable(check):
            check()

    def describe_backend(self) -> str:
        describe = getattr(self.backend, "describe", None)
        return describe() if callable(describe) else type(self.backend).__name__

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

    def _timed_call(self, call: Callable[[], Any]) -> tuple[Any, float]:
        """``call()``'s result and seconds; model seconds and server requests are counted even when it raises.

        A backend that counts its own HTTP requests (``requests()``) is read
        before and after, so retries inside one call are counted; others count 1.
        """
        requests = getattr(self.backend, "requests", None)
        before = requests() if callable(requests) else None
        t0 = time.perf_counter()
        try:
            result = call()
        finally:
            seconds = time.perf_counter() - t0
            self.count("evaluator_model_seconds", seconds)
            after = requests() if callable(requests) else None
            self.count("evaluator_requests", (after - before) if before is not None and after is not None else 1)
        return result, seconds

    def complete(self, prompt: ReaderPrompt) -> str:
        """One evaluator reply: from the cache when the same prompt was seen, else from the backend.

        Backend failures propagate (typed, see :mod:`mage_gym.readers.errors`);
        :meth:`act` decides which ones fall back.
        """
        db = self._cache_db()
        key = self._key(prompt) if db is not None else ""
        if db is not None:
            row = db.get(key)
            if row is not None:
                self.count("evaluator_cache_hits")
                return row[1]
        raw, seconds = self._timed_call(lambda: self.backend.complete(prompt))
        self.count("evaluator_calls")
        if db is not None:
            ident = {**self.backend.identity(), "prompt_version": EVALUATOR_PROMPT_VERSION}
            db.put(key, ident, ReaderOutput(answer=None, raw=raw, seconds=seconds))
        return raw

    def _backend_failed(self, err: BaseException) -> None:
        """Count one transient failure; raise once failures pass the allowed share of backend calls."""
        self.count("evaluator_backend_errors")
        self.last_backend_error = f"{type(err).__name__}: {err}"
        errors = int(self.stats["evaluator_backend_errors"])
        attempts = errors + int(self.stats["evaluator_calls"])
        if errors > self.backend_error_grace and errors > self.max_backend_error_share * attempts:
            raise BackendFailureRateError(
                f"{self.describe_backend()} failed on {errors} of {attempts} calls, more than the allowed share "
                f"max_backend_error_share={self.max_backend_error_share:g} (after backend_error_grace="
                f"{self.backend_error_grace}); last error: {self.last_backend_error}",
                backend=self.describe_backend(), errors=errors, attempts=attempts,
                max_share=self.max_backend_error_share, last_error=self.last_backend_error) from err
        log.warning("%s failed (%s); round decided by fallback %r [%d backend error(s) in %d calls]",
                    self.describe_backend(), self.last_backend_error, self.fallback, errors, attempts)

    # --- policy -------------------------------------------------------------------------

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)
        self._rounds = 0
        self.last_raw = None

    @staticmethod
    def shipped_model(name: str) -> str:
        """The folder of a controller shipped in ``policies/checkpoints`` (:data:`SHIPPED_CONTROLLERS`), or ``name``."""
        folder = SHIPPED_CONTROLLERS.get(str(name))
        return str(folder) if folder is not None else str(name)

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
        self.count("evaluator_rounds")
        prompt = build_evaluator_prompt(text_view, m, self.prompt_cfg)
        try:
            raw = self.complete(prompt)
        except Exception as err:
            if error_kind(err) not in ("transient", "backend"):
                raise  # configuration, rejected request, rate limit passed or a bug: never masked
            self._backend_failed(err)  # transient: fall back, counted (raises past the allowed share)
            self.last_raw = ""
            self.count("evaluator_fallback")
            return self._fallback(text_view, m)
        self.last_raw = raw
        parsed = parse_decision(raw)
        if parsed.decision is None:
            self.count("evaluator_unusable")
            self.count("evaluator_fallback")
            log.info("evaluator reply unusable (%s); fallback %r. Reply head: %r", parsed.error, self.fallback,
                     raw[:200])
            return self._fallback(text_view, m)
        self.count(f"evaluator_{parsed.mode}")
        d = parsed.decision
        if len(d.activate) > m:
            d = RoundDecision(activate=d.activate[:m], open=d.open, search=d.search, prune=d.prune, stop=d.stop)
        return d

    # --- the tools protocol (MageRAG-Chat-v0) ---------------------------------------------------

    def complete_chat(self, messages: list[dict[str, Any]]) -> Any:
        """One reply to a conversation: from the cache when the same conversation was seen, else the backend."""
        from mage_gym.agent.chat_env import text_of
        from mage_gym.agent.clients import chat_reply

        db = self._cache_db()
        key = ""
        if db is not None:
            ident = {**self.backend.identity(), "evaluator_prompt": "chat", "native_tools": self.native_tools,
                     "request": self.request_extra}
            h = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode())
            h.update(json.dumps([{"role": m["role"], "content": text_of([m]), "calls": m.get("tool_calls")}
                                 for m in messages], sort_keys=True, default=str).encode())
            key = h.hexdigest()
            row = db.get(key)
            if row is not None:
                self.count("evaluator_cache_hits")
                return json.loads(row[1])
        def call() -> Any:
            if hasattr(self.backend, "chat"):
                return self.backend.chat(messages)
            return chat_reply(self.backend.reader, messages, native_tools=self.native_tools,
                              extra=self.request_extra)

        reply, seconds = self._timed_call(call)
        self.count("evaluator_calls")
        if db is not None:
            ident = {**self.backend.identity(), "prompt_version": "chat"}
            db.put(key, ident, ReaderOutput(answer=None, raw=json.dumps(reply), seconds=seconds))
        return reply

    def act_chat(self, messages: list[dict[str, Any]], info: Mapping[str, Any]) -> Any:
        """The next assistant message for MageRAG-Chat-v0, or None to end the episode without a model call."""
        from mage_gym.agent.parse import parse_message

        budget = self.env_info.budget if self.env_info else None
        limit = self.max_rounds or (2 * budget.T + 2 if budget else 14)
        if self._rounds >= limit:
            self.last_raw = None
            return None
        self._rounds += 1
        self.count("evaluator_rounds")
        try:
            reply = self.complete_chat(messages)
        except Exception as err:
            if error_kind(err) not in ("transient", "backend"):
                raise
            self._backend_failed(err)
            self.last_raw = ""
            self.count("evaluator_fallback")
            return self._chat_fallback(messages, budget.m if budget else 4)
        self.last_raw = reply if isinstance(reply, str) else json.dumps(reply)
        parsed = parse_message(reply)
        if not parsed.valid:
            self.count("evaluator_unusable")
            self.count("evaluator_fallback")
            log.info("evaluator reply has no valid tool call (%s); fallback %r", parsed.errors[:1], self.fallback)
            return self._chat_fallback(messages, budget.m if budget else 4)
        self.count("evaluator_lenient" if parsed.errors else "evaluator_strict")
        if self.structured_replies:
            from mage_gym.agent.rollout import as_structured

            return as_structured(reply, self._rounds)
        return reply

    def _chat_fallback(self, messages: list[dict[str, Any]], m: int) -> dict[str, Any]:
        """Stop, or activate the first ``m`` candidates the last observation listed (as tool calls)."""
        from mage_gym.agent.chat_env import text_of

        listed = [int(n) for n in re.findall(r'<c n="(\d+)"', text_of(messages[-1:]))]
        if self.fallback == "stop" or not listed:
            return {"name": "stop", "arguments": {}}
        return {"name": "activate", "arguments": {"candidates": listed[:m]}}

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


#: the shipped controller's backend and chat settings (the ones it was trained with: conf/train_llm.yaml's chat)
CONTROLLER_BACKEND: dict[str, Any] = {"reader": "hf", "model": "smollm2-controller", "max_new_tokens": 64}
CONTROLLER_CHAT: dict[str, Any] = {**TRAINED_CHAT, "structured_replies": True}


class LLMControllerPolicy(LLMEvaluatorPolicy):
    """``llm_controller``: the trained SmolLM2 controller shipped as a LoRA adapter, playing MageRAG-Chat-v0.

    ``llm_evaluator`` with ``protocol=tools``, the adapter
    (``policies/checkpoints/llm_controller_smollm2``, on the embedded SmolLM2)
    as backend and the chat settings it was trained with; no reply cache by
    default (a benchmark measures the model, not the cache). Trained by the
    commands in docs/LLM_TRAINING.md.
    """

    name = "llm_controller"
    default_backend = CONTROLLER_BACKEND

    def __init__(self, backend: Mapping[str, Any] | Any = None, cache: bool | str = False,
                 protocol: str = "tools", chat: Mapping[str, Any] | None = None, fallback: str = "stop",
                 **kw: Any) -> None:
        super().__init__(backend=backend, cache=cache, protocol=protocol, fallback=fallback,
                         chat={**CONTROLLER_CHAT, **dict(chat or {})}, **kw)
        if getattr(self.backend, "reader_name", None) == "hf":  # in process: replies reuse the conversation's cache
            self.backend.chat = self._local_chat
        self._local: Any = None

    def _local_chat(self, messages: list[dict[str, Any]]) -> str:
        """A reply from the local model, the prompt rendered as in training (the tool template, tools listed)."""
        from mage_gym.agent.chat_template import CHATML_TOOLS_TEMPLATE
        from mage_gym.agent.rollout import LocalChatModel

        if self._local is None:
            loaded = self.backend.reader.load()
            own = getattr(loaded.tokenizer, "chat_template", None) or ""
            self._local = LocalChatModel(loaded.model, loaded.tokenizer,
                                         max_new_tokens=int(self.backend.reader.max_new_tokens),
                                         template=None if "tool_calls" in own else CHATML_TOOLS_TEMPLATE)
        with self.backend.reader.load().lock:
            return self._local.reply(messages)

