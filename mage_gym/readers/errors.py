"""Typed reader failures.

Why a dedicated type: the environment and benchmark runners must tell "the
reader backend could not be reached / failed" apart from programming errors,
so they can stop a run cleanly (and resume later from the response cache)
instead of scoring a broken call as a wrong answer.
"""
from __future__ import annotations


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
