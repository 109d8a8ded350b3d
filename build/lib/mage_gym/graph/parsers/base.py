"""The parser interface and the page loop every parser shares.

Why a base class: page selection (``pages`` for splitting a document across
worker processes, ``max_pages`` for truncation), the routing of image-only
pages to OCR, guards against absurd pages and per-page failure isolation are
the same for every parser; a parser only says how to turn one PDF page with a
text layer into elements. One broken page must cost that page (an empty
:class:`ParsedPage` with a warning), never the document.
"""
from __future__ import annotations

import logging
import os
import warnings
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Sequence

from mage_gym.graph.errors import PageLimitWarning
from mage_gym.graph.schema import DocumentSource, PageFailure, ParsedDocument, ParsedPage

if TYPE_CHECKING:  # pragma: no cover
    import pymupdf

log = logging.getLogger(__name__)

#: A page side beyond this (in points) is "absurd" (PDF's own limit is 14,400):
#: layout models and OCR get a downscaled render or the fast path instead.
MAX_PAGE_SIDE_PT = 14_400.0
#: Fewer non-space characters than this, with images covering the page, means
#: the text layer is missing (a scan or a slide saved as a picture).
MIN_TEXT_CHARS = 12
#: Share of the page that images must cover for a near-textless page to be OCR'd.
MIN_IMAGE_COVER = 0.3


def select_pages(
    n_total: int, pages: Sequence[int] | None, max_pages: int | None, path: str = ""
) -> tuple[list[int], list[str]]:
    """Pages to parse, in order, and the truncation warnings (also emitted).

    ``max_pages`` keeps the document's first ``max_pages`` pages; ``pages`` (a
    worker's share) is intersected with them. Out-of-range entries of
    ``pages`` are an error: the builder computed them from the page count.
    """
    msgs: list[str] = []
    if pages is None:
        chosen = list(range(n_total))
    else:
        chosen = sorted({int(p) for p in pages})
        bad = [p for p in chosen if not 0 <= p < n_total]
        if bad:
            raise IndexError(f"pages {bad[:5]} out of range 0..{n_total - 1} for {path}")
    if max_pages is not None and max_pages >= 0 and n_total > max_pages:
        kept = [p for p in chosen if p < max_pages]
        if pages is None or len(kept) < len(chosen) or 0 in chosen:
            msg = f"document has {n_total} pages; truncated to the first {max_pages} (max_pages)"
            msgs.append(msg)
            warnings.warn(f"{msg}: {path}", PageLimitWarning, stacklevel=3)
        chosen = kept
    return chosen, msgs


def text_char_count(page: "pymupdf.Page") -> int:
    return sum(1 for ch in page.get_text("text") if not ch.isspace())


def image_cover(page: "pymupdf.Page") -> float:
    """Share of the page area covered by the largest placed image (0..1)."""
    area = max(page.rect.width * page.rect.height, 1e-6)
    best = 0.0
    for info in page.get_image_info():
        r = page.rect & info["bbox"]  # clip to the page
        if not r.is_empty:
            best = max(best, r.width * r.height / area)
    return best


def needs_ocr(page: "pymupdf.Page") -> bool:
    """No usable text layer but pixels that may hold text.

    Rule: fewer than :data:`MIN_TEXT_CHARS` characters and an image covering at
    least :data:`MIN_IMAGE_COVER` of the page. A page with neither text nor
    images is simply empty (nothing to OCR).
    """
    return text_char_count(page) < MIN_TEXT_CHARS and image_cover(page) >= MIN_IMAGE_COVER


def failed_page(doc: "pymupdf.Document", pno: int, exc: Exception) -> ParsedPage:
    """An empty page carrying the error: one broken page never fails the document."""
    try:
        r = doc.load_page(pno).rect
        w, h = r.width, r.height
    except Exception:  # noqa: BLE001
        w = h = 0.0
    return page_with_failure(PageFailure.from_exception(pno, "parse", exc), w, h)


def page_with_failure(failure: PageFailure, width: float = 0.0, height: float = 0.0,
                      image_only: bool = False) -> ParsedPage:
    """The empty stand-in of a failed page: the record for code, its warning for people."""
    return ParsedPage(index=failure.page, width=width, height=height, image_only=image_only,
                      warnings=[failure.warning()], failure=failure)


def is_absurd(width: float, height: float) -> bool:
    return max(width, height) > MAX_PAGE_SIDE_PT or min(width, height) <= 1.0


class Parser(ABC):
    """Turns a :class:`DocumentSource` into a :class:`ParsedDocument`.

    Subclasses implement :meth:`parse_text_page` (one PDF page with a text
    layer) and may override :meth:`parse_pdf_pages` to batch pages. Image
    sources and image-only PDF pages go through OCR (:mod:`.ocr`).
    """

    name: str = "base"

    def __init__(self, ocr: bool = True, ocr_dpi: int = 144, **cfg: Any) -> None:
        self.ocr_enabled = ocr
        self.ocr_dpi = ocr_dpi
        self.cfg = cfg
        #: the current document's statistics (see :meth:`document_stats`), set while it is parsed
        self.stats: Any = None
        self._stats_memo: tuple[Any, Any] = (None, None)
        #: called with the number of pages just finished, while a document is parsed
        self._progress: Callable[[int], Any] | None = None

    # --- public ---------------------------------------------------------------

    def parse(
        self, source: DocumentSource, pages: Sequence[int] | None = None, max_pages: int | None = None,
        progress: Callable[[int], Any] | None = None,
    ) -> ParsedDocument:
        """Parse the chosen pages; ``progress(n)`` is called as each run of ``n`` pages is done."""
        from mage_gym.graph.sources import _as_source

        source = _as_source(source)
        self._progress = progress
        try:
            if source.kind == "images":
                return self._parse_images(source, pages, max_pages)
            from mage_gym.graph.sources import open_pdf

            doc = open_pdf(source)
            try:
                chosen, doc_warnings = select_pages(doc.page_count, pages, max_pages, source.path)
                if doc.is_repaired:
                    doc_warnings.append("PDF was damaged and repaired by MuPDF; some pages may be incomplete")
                self.stats = self._memo_stats(source, doc, max_pages)
                parsed = self.parse_pdf_pages(doc, chosen)
            finally:
                self.stats = None
                doc.close()
        finally:
            self._progress = None
        self.postprocess(parsed)
        return ParsedDocument(pages=parsed, parser=self.name, warnings=doc_warnings)

    def pages_done(self, n: int = 1) -> None:
        """Report ``n`` more pages parsed (to the ``progress`` callback of :meth:`parse`, if any)."""
        if self._progress is not None and n > 0:
            self._progress(n)

    def _memo_stats(self, source: DocumentSource, doc: "pymupdf.Document", max_pages: int | None) -> Any:
        """:meth:`document_stats` of the whole document (up to ``max_pages``), computed once.

        Why whole-document and memoized: a parallel build parses a document in
        page chunks, one :meth:`parse` call each. Statistics taken from a
        chunk's own pages made the graph depend on the number of workers
        (heading levels differed between ``workers=1`` and ``workers=2``).
        A worker parses consecutive chunks of one document, so one memo entry
        is enough.
        """
        n = doc.page_count if max_pages is None or max_pages < 0 else min(doc.page_count, max_pages)
        scope = list(range(n))
        try:
            st = os.stat(source.path)
            key: Any = (str(source.path), st.st_size, st.st_mtime_ns, len(scope))
        except OSError:
            key = None  # not a file on disk: compute every time
        if key is not None and self._stats_memo[0] == key:
            return self._stats_memo[1]
        stats = self.document_stats(doc, scope)
        self._stats_memo = (key, stats)
        return stats

    # --- hooks ------------------------------------------------------------------

    def document_stats(self, doc: "pymupdf.Document", scope: list[int]) -> Any:
        """Document-level statistics the parser needs on every page (e.g. font sizes).

        ``scope`` is every page of the document being built, whichever pages
        this call parses. Default: none.
        """
        return None

    def parse_pdf_pages(self, doc: "pymupdf.Document", page_numbers: list[int]) -> list[ParsedPage]:
        """Default loop: OCR image-only pages, :meth:`parse_text_page` the rest."""
        out: list[ParsedPage] = []
        for pno in page_numbers:
            out.append(self.parse_one_pdf_page(doc, pno))
            self.pages_done(1)
        return out

    def parse_one_pdf_page(self, doc: "pymupdf.Document", pno: int) -> ParsedPage:
        """One page with failure isolation: routing, absurd-size guard, errors."""
        try:
            page = doc.load_page(pno)
            w, h = page.rect.width, page.rect.height
            if self.ocr_enabled and needs_ocr(page):
                return self.parse_image_only_pdf_page(page)
            if is_absurd(w, h):
                return self.parse_absurd_page(page)
            return self.parse_text_page(page)
        except Exception as exc:  # noqa: BLE001 - isolate one bad page
            log.warning("page %d of %s failed: %s", pno, doc.name, exc)
            return failed_page(doc, pno, exc)

    @abstractmethod
    def parse_text_page(self, page: "pymupdf.Page") -> ParsedPage:
        """Elements of one PDF page that has a text layer."""

    def parse_absurd_page(self, page: "pymupdf.Page") -> ParsedPage:
        """Pages with an absurd size: parsers that can cope override; default as usual."""
        return self.parse_text_page(page)

    def parse_image_only_pdf_page(self, page: "pymupdf.Page") -> ParsedPage:
        from mage_gym.graph.parsers.ocr import ocr_pdf_page

        return ocr_pdf_page(page, dpi=self.ocr_dpi)

    def parse_image_page(self, source: DocumentSource, index: int) -> ParsedPage:
        from mage_gym.graph.parsers.ocr import ocr_image_file

        return ocr_image_file(source.page_files[index], index, enabled=self.ocr_enabled)

    def postprocess(self, pages: list[ParsedPage]) -> None:
        """Cross-page passes (e.g. repeated headers). Default: nothing."""

    # --- images -----------------------------------------------------------------

    def _parse_images(
        self, source: DocumentSource, pages: Sequence[int] | None, max_pages: int | None
    ) -> ParsedDocument:
        chosen, doc_warnings = select_pages(len(source.page_files), pages, max_pages, source.path)
        out: list[ParsedPage] = []
        for i in chosen:
            try:
                out.append(self.parse_image_page(source, i))
            except Exception as exc:  # noqa: BLE001 - one unreadable image costs one page
                log.warning("image page %d of %s failed: %s", i, source.path, exc)
                out.append(page_with_failure(PageFailure.from_exception(i, "image", exc), image_only=True))
            self.pages_done(1)
        self.postprocess(out)
        return ParsedDocument(pages=out, parser=self.name, warnings=doc_warnings)


__all__ = ["Parser", "select_pages", "needs_ocr", "is_absurd", "MAX_PAGE_SIDE_PT",
           "failed_page", "page_with_failure"]
