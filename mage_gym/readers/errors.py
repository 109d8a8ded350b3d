"""Typed reader failures.

Why a dedicated type: the environment and benchmark runners must tell "the
reader backend could not be reached / failed" apart from programming errors,
so they can stop a run cleanly (and resume later from the response cache)
instead of scoring a broken call as a wrong answer.
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

    def __init__(self, message: str, *, url: str | None = None, attempts: int = 0,
                 cause: str | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts
        self.cause = cause


class ReaderConfigError(ReaderError, ValueError):
    """Bad reader configuration (unknown backend, missing model directory...)."""


def read_or_error(read: "Callable[[RenderedInput], ReaderOutput]", inp: "RenderedInput",
                  return_errors: bool) -> "ReaderOutput":
    """One read for batch loops: with ``return_errors`` a ReaderError becomes an output with ``error`` set."""
    from mage_gym.readers.base import ReaderOutput

    try:
        return read(inp)
    except ReaderError as err:
        if not return_errors:
            raise
        return ReaderOutput(answer=None, raw="", error=str(err))
