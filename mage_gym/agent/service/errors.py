"""Typed errors of the chat-env service: one code per fault, an HTTP status, a message that says what to do.

Why codes in the message: OpenEnv's WebSocket loop answers any exception of an
environment as ``{"type": "error", "data": {"message": str(err), "code":
"EXECUTION_ERROR"}}``; only the message reaches the client. Every error here
renders as ``[CODE] explanation``, so :func:`error_from_message` (what
:class:`~mage_gym.agent.service.client.MageChatClient` uses) turns it back
into the same class on the client side, over WebSocket and HTTP alike.
"""
from __future__ import annotations

import re
from typing import Any

_CODE = re.compile(r"\[([A-Z][A-Z0-9_]+)\]")


class ServiceError(Exception):
    """Base of the service's typed errors; ``code`` names the fault, ``status`` is its HTTP status."""

    code = "SERVICE_ERROR"
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(f"[{self.code}] {message}")
        self.detail = message

    def to_json(self) -> dict[str, Any]:
        """The body of an HTTP error reply."""
        return {"error": str(self), "code": self.code, "status": self.status}


class InvalidRequest(ServiceError):
    """The request is not what the route takes: not JSON, a field missing or of the wrong type."""

    code, status = "INVALID_REQUEST", 400


class NoRoute(ServiceError):
    """No route has this path and method (404, or 405 for a known path with another method)."""

    code, status = "NO_ROUTE", 404


class InvalidTask(ServiceError):
    """A reset named a task, episode or option this server does not play."""

    code, status = "INVALID_TASK", 400


class SessionNotFound(ServiceError):
    """No live session has this id (never opened, closed, reaped, or opened in another worker or a server
    that has since restarted)."""

    code, status = "SESSION_NOT_FOUND", 404


class EpisodeOver(ServiceError):
    """A step after the episode ended; reset for a new one."""

    code, status = "EPISODE_OVER", 409


class SessionFailed(ServiceError):
    """An earlier call of this session failed or timed out; its env is not trusted any more."""

    code, status = "SESSION_FAILED", 409


class EpisodeTimeout(ServiceError):
    """The episode ran past ``episode_timeout``: it was finished (the reader read what was gathered)."""

    code, status = "EPISODE_TIMEOUT", 410


class RequestTooLarge(ServiceError):
    """A request body or an action over the server's limit."""

    code, status = "REQUEST_TOO_LARGE", 413


class ReaderFailed(ServiceError):
    """The reader (or another backend the step called) raised; the episode cannot be scored."""

    code, status = "READER_FAILED", 502


class AtCapacity(ServiceError):
    """``max_sessions`` live sessions, none idle long enough to reap."""

    code, status = "AT_CAPACITY", 503


class DocumentCapacity(ServiceError):
    """``max_documents`` documents are held by live sessions; a new one cannot be loaded now."""

    code, status = "DOCUMENT_CAPACITY", 503


class DocumentNotBuilt(ServiceError):
    """The episode's document has no graph in the cache and this server only serves pre-built graphs."""

    code, status = "DOCUMENT_NOT_BUILT", 503


class StepTimeout(ServiceError):
    """A call ran past ``step_timeout``; the session is marked failed."""

    code, status = "STEP_TIMEOUT", 504


class ServerUnavailable(ServiceError):
    """The client lost the server (killed, restarting, unreachable): nothing of the session survives."""

    code, status = "SERVER_UNAVAILABLE", 503


class InternalError(ServiceError):
    """An unexpected exception inside the env: a bug; the session is marked failed, the server runs on."""

    code, status = "INTERNAL_ERROR", 500


ERRORS: dict[str, type[ServiceError]] = {c.code: c for c in (
    InvalidRequest, NoRoute, InvalidTask, SessionNotFound, EpisodeOver, SessionFailed, EpisodeTimeout, RequestTooLarge,
    ReaderFailed, AtCapacity, DocumentCapacity, DocumentNotBuilt, StepTimeout, ServerUnavailable, InternalError)}


def error_from_message(message: str, default: type[ServiceError] = InternalError) -> ServiceError:
    """The typed error a ``[CODE] ...`` message names (``default`` when it names none we know)."""
    match = _CODE.search(message or "")
    cls = ERRORS.get(match.group(1), default) if match else default
    detail = message[match.end():].strip() if match and match.group(1) in ERRORS else message
    return cls(detail)


__all__ = ["ERRORS", "ServiceError", "error_from_message", *[c.__name__ for c in ERRORS.values()]]
