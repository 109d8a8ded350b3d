"""Typed errors for documents that cannot be parsed.

Why typed: a corpus build runs over thousands of third-party files, some of
which are encrypted, truncated or not documents at all. The builder must skip
such a file with a clear reason (and count the reasons) instead of crashing on
an arbitrary library exception; tests and callers catch these classes, never
PyMuPDF internals. Every error carries the offending ``path``.
"""
from __future__ import annotations


class DocumentError(ValueError):
    """A document could not be opened or parsed. ``path`` says which one."""

    def __init__(self, path: str, message: str) -> None:
        self.path = str(path)
        self.message = message
        super().__init__(f"{message}: {self.path}")

    def __reduce__(self):  # picklable across worker processes
        return (type(self), (self.path, self.message))


class EncryptedDocumentError(DocumentError):
    """The PDF needs a password we were not given (or the one given is wrong)."""


class CorruptDocumentError(DocumentError):
    """Truncated, garbage or otherwise unreadable bytes."""


class EmptyDocumentError(DocumentError):
    """The file is a valid container with zero pages."""


class UnsupportedSourceError(DocumentError):
    """Neither a PDF file nor a folder (or file) of page images."""


class MissingDocumentError(DocumentError, FileNotFoundError):
    """The path does not exist (also a ``FileNotFoundError`` for plain callers)."""


class PageLimitWarning(UserWarning):
    """A document was truncated to ``max_pages``; later pages are not in the graph."""


__all__ = [
    "DocumentError",
    "EncryptedDocumentError",
    "CorruptDocumentError",
    "EmptyDocumentError",
    "UnsupportedSourceError",
    "MissingDocumentError",
    "PageLimitWarning",
]
