"""Open a document: a PDF file, or a folder of page images.

Why a separate module: the builder, the parsers and the lazy renderers all
need the same answers to "what is this path, how many pages, in what order,
and what are its bytes" (the cache key is a digest of the bytes). Bad input is
reported with the typed errors of :mod:`mage_gym.graph.errors` here, once,
before any worker process is spawned.

Image folders: LongDocURL ships pages as ``<doc_no>_<i>.png`` with ``i`` the
0-based page, so ``_10`` must sort after ``_9``; we sort by the trailing
integer when every file has one, otherwise by a natural (digit-aware) name
order. A single image file is accepted as a one-page document, and a glob
pattern over one folder (``<folder>/4127644_*.png``) selects one document's
pages from a folder that holds several (LongDocURL folders are named by the
first four digits of the document number, so two documents can share one).
"""
from __future__ import annotations

import glob as globlib
import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from mage_gym.graph.errors import (
    CorruptDocumentError,
    EmptyDocumentError,
    EncryptedDocumentError,
    MissingDocumentError,
    UnsupportedSourceError,
)
from mage_gym.graph.schema import DocumentSource

if TYPE_CHECKING:  # pragma: no cover
    import pymupdf

IMAGE_SUFFIXES: frozenset[str] = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp", ".gif"})
_TRAILING_INT = re.compile(r"^(.*?)(\d+)$")
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9._\-]+")
_MAX_ID_LEN = 96


def _natural_key(name: str) -> list[object]:
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name)]


def _sorted_page_files(files: list[Path]) -> list[Path]:
    """Order page images: by trailing page number when all have one, else naturally."""
    matches = [_TRAILING_INT.match(f.stem) for f in files]
    if files and all(matches):
        return [f for _, f in sorted(zip(matches, files), key=lambda mf: (int(mf[0].group(2)), mf[1].name))]
    return sorted(files, key=lambda f: _natural_key(f.name))


def _looks_like_pdf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024)
    except OSError:
        return False
    return b"%PDF-" in head


def open_source(path: str | os.PathLike[str], validate: bool = True) -> DocumentSource:
    """Classify ``path`` and return its :class:`DocumentSource`.

    With ``validate`` (default) a PDF is opened once so that encrypted,
    corrupt or empty files fail here with a typed error rather than inside a
    worker; opening is lazy in PyMuPDF, so this costs milliseconds.
    """
    p = Path(path)
    if is_glob(p):
        return _open_image_glob(p)
    if not p.exists():
        raise MissingDocumentError(str(p), "no such file or folder")
    if p.is_dir():
        files = [f for f in p.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES]
        if not files:
            raise UnsupportedSourceError(str(p), "folder holds no page images")
        ordered = _sorted_page_files(files)
        return DocumentSource("images", str(p.resolve()), tuple(str(f.resolve()) for f in ordered))
    if p.suffix.lower() in IMAGE_SUFFIXES:
        return DocumentSource("images", str(p.resolve().parent), (str(p.resolve()),))
    if p.suffix.lower() == ".pdf" or _looks_like_pdf(p):
        src = DocumentSource("pdf", str(p.resolve()))
        if validate:
            open_pdf(src).close()
        return src
    raise UnsupportedSourceError(str(p), "neither a PDF nor an image folder")


def is_glob(path: str | os.PathLike[str]) -> bool:
    """True when the last part of ``path`` is a glob pattern (``*``, ``?`` or ``[...]``)."""
    return globlib.has_magic(Path(path).name)


def _glob_files(pattern: Path) -> list[Path]:
    return [Path(f) for f in globlib.glob(str(pattern)) if Path(f).is_file() and Path(f).suffix.lower() in IMAGE_SUFFIXES]


def _open_image_glob(pattern: Path) -> DocumentSource:
    """The page images matching ``<folder>/<pattern>``, in page order; the folder is the source path."""
    if globlib.has_magic(str(pattern.parent)):
        raise UnsupportedSourceError(str(pattern), "only the file name may be a glob pattern, not the folder")
    if not pattern.parent.is_dir():
        raise MissingDocumentError(str(pattern), "no such folder")
    files = _glob_files(pattern)
    if not files:
        raise UnsupportedSourceError(str(pattern), "the pattern matches no page images")
    ordered = _sorted_page_files(files)
    return DocumentSource("images", str(pattern.parent.resolve()), tuple(str(f.resolve()) for f in ordered))


def _as_source(source: DocumentSource | str | os.PathLike[str]) -> DocumentSource:
    return source if isinstance(source, DocumentSource) else open_source(source, validate=False)


def open_pdf(source: DocumentSource | str | os.PathLike[str], password: str | None = None) -> "pymupdf.Document":
    """Open a PDF with PyMuPDF, translating its failures into typed errors.

    Truncated files that MuPDF can repair are opened (``doc.is_repaired`` is
    then True and the parser records a warning); files it cannot make sense of
    raise :class:`CorruptDocumentError`.
    """
    import pymupdf

    src = _as_source(source)
    if src.kind != "pdf":
        raise UnsupportedSourceError(src.path, "not a PDF source")
    try:
        doc = pymupdf.open(src.path, filetype="pdf")
    except pymupdf.FileNotFoundError as exc:  # type: ignore[attr-defined]
        raise MissingDocumentError(src.path, "no such file") from exc
    except (pymupdf.FileDataError, RuntimeError, ValueError) as exc:
        raise CorruptDocumentError(src.path, f"unreadable PDF ({exc.__class__.__name__}: {exc})") from exc
    if doc.needs_pass:
        if password is None or not doc.authenticate(password):
            doc.close()
            raise EncryptedDocumentError(
                src.path, "PDF is encrypted" + (" and the password is wrong" if password else " and needs a password")
            )
    try:
        n_pages = doc.page_count
    except Exception as exc:  # noqa: BLE001 - MuPDF raises plain RuntimeErrors on broken page trees
        doc.close()
        raise CorruptDocumentError(src.path, f"broken page tree ({exc})") from exc
    if n_pages == 0:
        doc.close()
        raise EmptyDocumentError(src.path, "document has zero pages")
    return doc


def page_count(source: DocumentSource) -> int:
    """Number of pages without parsing anything."""
    if source.kind == "images":
        return len(source.page_files)
    doc = open_pdf(source)
    try:
        return doc.page_count
    finally:
        doc.close()


def doc_id_for(path: str | os.PathLike[str] | DocumentSource) -> str:
    """A stable document id from the file/folder name, safe inside node ids.

    Node ids are ``{doc}:p{page}``, so ':' and whitespace are replaced. For an
    image folder whose files are ``<prefix>_<i>.<ext>`` with one shared prefix
    (LongDocURL's ``4127644_0.png``), the prefix is the id (it is the
    benchmark's document number); otherwise the folder name is used. Long names
    are shortened with a hash suffix so distinct names stay distinct.
    """
    if isinstance(path, DocumentSource):
        kind, src_path, files = path.kind, Path(path.path), [Path(f) for f in path.page_files]
    else:
        src_path = Path(path)
        if is_glob(src_path):
            kind, files = "images", _glob_files(src_path)
        elif src_path.is_dir():
            kind, files = "images", [f for f in src_path.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES]
        elif src_path.suffix.lower() in IMAGE_SUFFIXES:
            kind, files = "images", [src_path]
        else:
            kind, files = "pdf", []
    if kind == "pdf":
        name = src_path.stem if src_path.suffix.lower() == ".pdf" else src_path.name
    else:
        matches = [_TRAILING_INT.match(f.stem) for f in files]
        prefixes = {m.group(1).rstrip("_- ") for m in matches if m}
        if files and all(matches) and len(prefixes) == 1 and next(iter(prefixes)):
            name = prefixes.pop()
        elif len(files) == 1:
            name = files[0].stem
        else:
            name = src_path.name
    safe = _UNSAFE_ID_CHARS.sub("_", name.strip()).strip("_") or "doc"
    if len(safe) > _MAX_ID_LEN:
        digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:10]
        safe = f"{safe[: _MAX_ID_LEN - 11]}_{digest}"
    return safe


def file_digest(source: DocumentSource | str | os.PathLike[str]) -> str:
    """sha256 of the document's bytes: the PDF, or every page image in page order.

    Page-image digests also hash each file's position so that reordering pages
    changes the digest. Streamed in 1 MiB chunks (large filings are 10+ MB).
    """
    src = _as_source(source)
    h = hashlib.sha256()
    files = [src.path] if src.kind == "pdf" else list(src.page_files)
    for i, f in enumerate(files):
        if src.kind == "images":
            h.update(f"\x00page{i}\x00".encode())
        try:
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except FileNotFoundError as exc:
            raise MissingDocumentError(f, "page file vanished") from exc
    return h.hexdigest()


__all__ = ["open_source", "open_pdf", "doc_id_for", "file_digest", "page_count", "IMAGE_SUFFIXES"]
