"""Typed reader failures.

Why a dedicated hierarchy: the environment, the LLM evaluator and benchmark
runners must tell apart failures that call for different reactions, and must
never score a broken call as a wrong answer or a fallback as a decision:

- :class:`ReaderConfigError`: the configuration is wrong (unknown option, a
  missing model directory, a server that refuses our credentials or does not
  serve the model, a text-only server sent images). Retrying cannot help:
  stop the run and fix the config.
- :class:`ReaderRequestError`: the server refused *this* request (HTTP 4xx
  other than 408/429, e.g. a prompt longer than the model's context). Other
  requests may succeed; the episode that sent it has failed.
- :class:`ReaderUnavailableError`: the backend could not be reached or was
  overloaded (timeouts, connection refused, HTTP 5xx, 429) and stayed so
  through every retry. Transient: a later call or a resumed run may succeed.
- :class:`BackendFailureRateError`: transient failures were tolerated
  (counted, with a fallback) until their share of calls passed a limit; the
  backend is considered down and the run should stop.

Plain :class:`ReaderError` is any other backend failure (a local model that
raised, a malformed reply). :func:`error_kind` names the class of any
exception for loops that decide what to do with it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # pragma: no cover
    from mage_gym.readers.base import ReaderOutput, RenderedInput


class ReaderError(RuntimeError):
    """A reader backend failed to produce an answer.

    ``url`` is set for remote backends, ``attempts`` counts the calls made
    (including retries) and ``cause`` is a one-line description of the last
    failure.
    """

    kind = "backend"

    def __init__(self, message: str, *, url: str | None = None, attempts: int = 0,
                 cause: str | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts
        self.cause = cause


class ReaderConfigError(ReaderError, ValueError):
    """Bad reader configuration (unknown backend or option, missing model, server refusing the setup)."""

    kind = "config"


class ReaderRequestError(ReaderError):
    """The server rejected one request (HTTP 4xx other than 408/429); ``status`` is the HTTP code."""

    kind = "request"

    def __init__(self, message: str, *, status: int | None = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.status = status


class ReaderUnavailableError(ReaderError):
    """Transient failure (timeout, connection error, HTTP 5xx/429) that outlived every retry."""

    kind = "transient"


class BackendFailureRateError(ReaderError):
    """Too many transient backend failures: ``errors`` of ``attempts`` calls (limit ``max_share``)."""

    kind = "rate"

    def __init__(self, message: str, *, backend: str, errors: int, attempts: int, max_share: float,
                 last_error: str | None = None) -> None:
        super().__init__(message, cause=last_error)
        self.backend = backend
        self.errors = errors
        self.max_share = max_share
        self.attempts = attempts
        self.last_error = last_error


#: What :func:`error_kind` returns, from "stop the run" to "try again later".
ERROR_KINDS = ("config", "rate", "request", "transient", "backend")


def error_kind(err: BaseException) -> str | None:
    """``config``, ``rate``, ``request``, ``transient`` or ``backend`` for backend failures, else None.

    Standard-library connection and timeout errors (raised by user-supplied
    backends) count as ``transient``; anything else that is not a
    :class:`ReaderError` is a programming error (None) and must propagate.
    """
    if isinstance(err, ReaderError):
        return err.kind
    if isinstance(err, (ConnectionError, TimeoutError)):
        return "transient"
    return None


def read_or_error(read: "Callable[[RenderedInput], ReaderOutput]", inp: "RenderedInput",
                  return_errors: bool) -> "ReaderOutput":
    """One read for batch loops: with ``return_errors`` a ReaderError becomes an output with ``error`` set.

    Configuration errors and an exceeded failure rate still raise: they would
    fail every other input the same way.
    """
    from mage_gym.readers.base import ReaderOutput

    try:
        return read(inp)
    except ReaderError as err:
        if not return_errors or err.kind in ("config", "rate"):
            raise
        return ReaderOutput(answer=None, raw="", error=str(err))
