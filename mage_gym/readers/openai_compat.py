"""Reader backed by any OpenAI-compatible chat-completions server.

Why: this is how the paper's setting is reproduced at scale: Qwen3-VL-8B-
Instruct served by vLLM or SGLang on GPUs (or a GGUF model by llama.cpp's
server), with the environment and controllers running elsewhere. Only the
standard library is used for HTTP (no SDK dependency): one blocking POST per
read, run from a thread pool for throughput.

Robustness rules:
- images travel as base64 ``data:`` URIs (PNG by default) in ``image_url``
  content parts, interleaved with the XML as in the local reader;
- ``vision=False`` sends every message as one plain string (never a list of
  content parts), which text-only servers such as llama.cpp's require;
- every request has a timeout; connection errors, timeouts, HTTP 408, 429 and
  5xx are retried with exponential backoff (``Retry-After`` honoured,
  capped), at most ``max_retries`` times, then raise
  :class:`ReaderUnavailableError` naming the URL, the number of attempts and
  the cause;
- other HTTP errors fail at once: 401/403/404 (credentials, URL, model) and a
  server that rejects image parts (the error says to set ``vision=false``) as
  :class:`ReaderConfigError`, the rest as :class:`ReaderRequestError`;
- concurrent requests to one server are limited by a semaphore shared by the
  whole process (``max_concurrency``), however many readers point at it;
- the API key is read from an environment variable only (``api_key_env``),
  never from config files or arguments, and is not needed for local servers.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from mage_gym.readers.base import RenderedImage, RenderedInput, ReaderOutput, image_data_uri
from mage_gym.readers.errors import (ReaderConfigError, ReaderError, ReaderRequestError, ReaderUnavailableError,
                                     read_or_error)
from mage_gym.readers.generative import GenerativeReader
from mage_gym.readers.prompt import ReaderPrompt

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})  # and every other 5xx
CONFIG_STATUS = frozenset({401, 403, 404})
#: An error body that says the server cannot take image / list content (llama.cpp's text-only chat
#: templates fail with "can only concatenate str (not "list") to str").
_IMAGE_REJECTION = re.compile(r"image|multi-?modal|vision|content.?part|mmproj|clip|\blist\b", re.I)
VISION_HINT = ("the request carried images as content parts and this server looks text-only: "
               "set vision=false for this reader/evaluator backend")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

_SEMAPHORES: dict[str, Any] = {}  # a BoundedSemaphore per server, or a limiter from set_server_limiter
_SEM_LOCK = threading.Lock()


def server_semaphore(base_url: str, max_concurrency: int) -> threading.BoundedSemaphore:
    """The process-wide request limiter for one server (first reader's limit wins)."""
    key = base_url.rstrip("/")
    with _SEM_LOCK:
        sem = _SEMAPHORES.get(key)
        if sem is None:
            sem = _SEMAPHORES[key] = threading.BoundedSemaphore(max_concurrency)
        return sem


def set_server_limiter(base_url: str, limiter: Any | None) -> None:
    """Make readers built later in this process take their request slots for ``base_url`` from ``limiter``.

    Why: on a cluster the per-server limit must hold across processes and
    machines, which a thread semaphore cannot do; the Ray executor installs a
    cluster-wide limiter here (any context manager that blocks until a slot is
    free, :mod:`mage_gym.bench.distributed.servers`). ``None`` removes it:
    the next reader gets a fresh process-wide semaphore again.
    """
    key = base_url.rstrip("/")
    with _SEM_LOCK:
        if limiter is None:
            _SEMAPHORES.pop(key, None)
        else:
            _SEMAPHORES[key] = limiter


class _Retryable(Exception):
    def __init__(self, cause: str, retry_after: float | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.retry_after = retry_after


class OpenAIReader(GenerativeReader):
    """Reads through ``POST {base_url}/chat/completions``.

    ``vision=False`` drops images and sends plain-string messages (text-only
    models such as a GGUF served by llama.cpp without a projector). ``calls``
    counts HTTP attempts made by this reader, retries included.
    """

    name = "openai"

    def __init__(self, model: str = "default", base_url: str | None = None, *,
                 api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0, max_retries: int = 3,
                 backoff: float = 0.5, backoff_max: float = 8.0, max_concurrency: int = 4,
                 max_tokens: int = 256, temperature: float = 0.0, vision: bool = True,
                 image_format: str = "png", llm_extract: bool = False,
                 extra_body: dict[str, Any] | None = None, prefill: bool = False,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        parsed = urllib.parse.urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ReaderConfigError(f"base_url must be an http(s) URL, got {base_url!r}")
        if image_format.lower() not in ("png", "jpeg", "jpg"):
            raise ReaderConfigError(f"image_format must be png or jpeg, got {image_format!r}")
        if max_retries < 0 or max_concurrency < 1 or timeout <= 0:
            raise ReaderConfigError("need max_retries >= 0, max_concurrency >= 1 and timeout > 0")
        self.model = model
        self.model_id = model
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.backoff_max = float(backoff_max)
        self.max_concurrency = int(max_concurrency)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.uses_images = bool(vision)
        self.image_format = "jpeg" if image_format.lower() == "jpg" else image_format.lower()
        self.llm_extract = bool(llm_extract)
        self.extra_body = dict(extra_body or {})
        # Continue a partial assistant message (ReaderPrompt.response_prefix). Off by default: the
        # request fields are vLLM's (continue_final_message / add_generation_prompt); other servers
        # may reject them.
        self.prefill = bool(prefill)
        self._sleep = sleep
        self.calls = 0
        self._connect()

    def _connect(self) -> None:
        """Process-local transport state (rebuilt after unpickling: locks and openers do not pickle)."""
        self._semaphore = server_semaphore(self.base_url, self.max_concurrency)
        host = (urllib.parse.urlparse(self.base_url).hostname or "").lower()
        # Loopback servers must not go through an http_proxy from the environment.
        handlers = [urllib.request.ProxyHandler({})] if host in _LOOPBACK else []
        self._opener = urllib.request.build_opener(*handlers)
        self._calls_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_semaphore", "_opener", "_calls_lock"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._connect()

    def generation_params(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "temperature": self.temperature,
                "image_format": self.image_format, "extra_body": self.extra_body, "prefill": self.prefill}

    # --- request building ---------------------------------------------------

    def messages(self, prompt: ReaderPrompt) -> list[dict[str, Any]]:
        """Chat messages for one prompt (images as data URIs in content parts; text-only: strings)."""
        if not prompt.images or not self.uses_images:
            user: Any = prompt.user_text()
        else:
            user = []
            for part in prompt.parts:
                if isinstance(part, str):
                    user.append({"type": "text", "text": part})
                else:
                    user.append({"type": "image_url", "image_url": {"url": self.data_uri(part)}})
        messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": user}]
        if self.prefill and prompt.response_prefix:
            messages.append({"role": "assistant", "content": prompt.response_prefix})
        return messages

    def data_uri(self, image: RenderedImage) -> str:
        return image_data_uri(image.load(), self.image_format)

    # --- transport ------------------------------------------------------------

    def generate(self, prompt: ReaderPrompt) -> str:
        payload = {"model": self.model, "messages": self.messages(prompt), "max_tokens": self.max_tokens,
                   "temperature": self.temperature, "stream": False, **self.extra_body}
        prefix = prompt.response_prefix if self.prefill else ""
        if prefix:
            payload.update(continue_final_message=True, add_generation_prompt=False)
        has_images = any(isinstance(part, dict) and part.get("type") == "image_url"
                         for m in payload["messages"] if isinstance(m["content"], list) for part in m["content"])
        body = self._post_with_retries(json.dumps(payload).encode("utf-8"), has_images)
        try:
            message = body["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as err:
            raise ReaderError(f"reader server {self.url} returned no choices: {str(body)[:200]}",
                              url=self.url, attempts=1, cause="malformed response") from err
        content = message.get("content") or ""
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return (prefix + str(content)).strip()

    def complete_chat(self, messages: Sequence[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """One chat completion of a whole conversation; returns the assistant message (``content``, ``tool_calls``).

        For multi-turn controllers (:mod:`mage_gym.agent`): the same transport,
        retries and error types as :meth:`generate`; ``extra`` goes into the
        request body (``tools``, ``response_format``, ...).
        """
        payload = {"model": self.model, "messages": list(messages), "max_tokens": self.max_tokens,
                   "temperature": self.temperature, "stream": False, **self.extra_body, **extra}
        has_images = any(isinstance(part, dict) and part.get("type") == "image_url"
                         for m in payload["messages"] if isinstance(m.get("content"), list) for part in m["content"])
        body = self._post_with_retries(json.dumps(payload).encode("utf-8"), has_images)
        try:
            return dict(body["choices"][0]["message"])
        except (KeyError, IndexError, TypeError) as err:
            raise ReaderError(f"reader server {self.url} returned no choices: {str(body)[:200]}",
                              url=self.url, attempts=1, cause="malformed response") from err

    def _post_with_retries(self, data: bytes, has_images: bool = False) -> dict[str, Any]:
        attempts = 0
        cause = ""
        for attempt in range(self.max_retries + 1):
            attempts += 1
            try:
                with self._semaphore:
                    return self._post_once(data, has_images)
            except _Retryable as err:
                cause = err.cause
                if attempt < self.max_retries:
                    delay = min(self.backoff_max, self.backoff * (2 ** attempt))
                    if err.retry_after is not None:
                        delay = min(self.backoff_max, max(delay, err.retry_after))
                    self._sleep(delay)
        hint = f" ({VISION_HINT} if it cannot read images)" if has_images and "HTTP 5" in cause else ""
        raise ReaderUnavailableError(f"reader server {self.url} failed after {attempts} attempt(s): {cause}{hint}",
                                     url=self.url, attempts=attempts, cause=cause)

    def _post_once(self, data: bytes, has_images: bool = False) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        with self._calls_lock:
            self.calls += 1
        try:
            with self._opener.open(request, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise self._http_error(err, has_images) from err
        except urllib.error.URLError as err:
            raise _Retryable(f"connection error: {err.reason}") from err
        except (socket.timeout, TimeoutError) as err:
            raise _Retryable(f"timeout after {self.timeout:g} s") from err
        except (ConnectionError, http.client.HTTPException, OSError) as err:
            raise _Retryable(f"connection error: {type(err).__name__}: {err}") from err
        try:
            return json.loads(raw)
        except ValueError as err:
            raise ReaderError(f"reader server {self.url} returned non-JSON: {raw[:200]!r}",
                              url=self.url, attempts=1, cause="non-JSON response") from err

    def _http_error(self, err: urllib.error.HTTPError, has_images: bool) -> Exception:
        """The typed exception for an HTTP error status (``_Retryable`` for transient ones)."""
        detail = _error_detail(err)
        code = err.code
        what = f"reader server {self.url} rejected the request: HTTP {code}: {detail}"
        if has_images and code in (400, 415, 422, 500) and _IMAGE_REJECTION.search(detail):
            return ReaderConfigError(f"{what} - {VISION_HINT}", url=self.url, attempts=1, cause=f"HTTP {code}")
        if code in RETRY_STATUS or code >= 500:
            return _Retryable(f"HTTP {code}: {detail}", _retry_after(err))
        if code in CONFIG_STATUS:
            why = {401: "check the API key (api_key_env)", 403: "check the API key (api_key_env)",
                   404: f"check base_url and that the server serves model {self.model!r}"}[code]
            return ReaderConfigError(f"{what} - {why}", url=self.url, attempts=1, cause=f"HTTP {code}")
        return ReaderRequestError(what, status=code, url=self.url, attempts=1, cause=f"HTTP {code}")

    def validate(self) -> None:
        """Ask the server which models it serves (``GET {base_url}/models``) before the first episode.

        ReaderConfigError when the server lists models and ours is not among
        them, or refuses the key; ReaderUnavailableError when it cannot be
        reached. A server without the endpoint passes (nothing to check).
        ``model="default"`` means "whatever the server serves" and is not checked.
        """
        url = self.base_url + "/models"
        headers = {"Accept": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            with self._opener.open(urllib.request.Request(url, headers=headers), timeout=min(self.timeout, 30.0)) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as err:
            if err.code in (401, 403):
                raise ReaderConfigError(f"reader server {url} refused the API key (HTTP {err.code}); check "
                                        f"api_key_env={self.api_key_env!r}", url=url, cause=f"HTTP {err.code}") from err
            return
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise ReaderUnavailableError(f"reader server {url} unreachable: {reason}", url=url, attempts=1,
                                         cause=f"connection error: {reason}") from err
        except ValueError:
            return
        listed = body.get("data") if isinstance(body, dict) else None
        models = [m.get("id") for m in listed or [] if isinstance(m, dict)]
        if models and self.model != "default" and self.model not in models:
            raise ReaderConfigError(f"reader server {self.base_url} does not serve model {self.model!r}; it serves "
                                    f"{models}", url=url, cause="model not served")

    # --- batches ----------------------------------------------------------------

    def read_many(self, inputs: Sequence[RenderedInput], *, return_errors: bool = False,
                  progress: bool = False) -> list[ReaderOutput]:
        """Read many inputs concurrently (at most ``max_concurrency`` in flight), in order.

        With ``return_errors=True`` a failed read becomes a ``ReaderOutput``
        with ``error`` set instead of raising (for benchmark loops that log
        and continue).
        """
        def one(inp: RenderedInput) -> ReaderOutput:
            return read_or_error(self.read, inp, return_errors)

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            results = pool.map(one, inputs)
            if progress:
                from mage_gym.progress import progress_bar

                results = progress_bar(results, total=len(inputs), desc="reader")
            return list(results)


def _retry_after(err: urllib.error.HTTPError) -> float | None:
    value = err.headers.get("Retry-After") if err.headers else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _error_detail(err: urllib.error.HTTPError) -> str:
    try:
        return err.read()[:300].decode("utf-8", "replace").strip() or err.reason
    except Exception:  # pragma: no cover - body unreadable
        return str(err.reason)
