"""Page renders and reader-input crops, downscaled and written beside the report's HTML.

Why files and not data URIs: a report of many episodes over 300-page filings
would otherwise be one huge HTML file the browser parses before showing
anything; separate JPEGs with ``loading="lazy"`` are fetched only when they
scroll into view. Each image is written once per report folder (documents
shared by episodes and policies reuse it), and a re-run skips existing files.

Toy and synthetic graphs (source ``<toy>``) and documents whose file is gone
have no pixels: the writer returns None and the page is drawn as a blank
placeholder of the right aspect ratio.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from mage_gym.report.data import DocView, slug

if TYPE_CHECKING:  # pragma: no cover
    from PIL import Image

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImageOptions:
    page_max_side: int = 720  # pages the episode touched (shown with element boxes)
    thumb_max_side: int = 160  # every other page (the lazily built "all pages" strip)
    reader_max_side: int = 900  # images of the reader input (pages and crops)
    quality: int = 80  # JPEG quality
    other_pages: bool = True  # write thumbnails of pages the episode never touched

    def __post_init__(self) -> None:
        for name in ("page_max_side", "thumb_max_side", "reader_max_side"):
            if int(getattr(self, name)) < 16:
                raise ValueError(f"{name} must be >= 16 px, got {getattr(self, name)}")
        if not 1 <= int(self.quality) <= 95:
            raise ValueError(f"quality must be in 1..95, got {self.quality}")

    @classmethod
    def coerce(cls, value: "ImageOptions | Mapping[str, Any] | None") -> "ImageOptions":
        if value is None:
            return cls()
        if isinstance(value, ImageOptions):
            return value
        return cls(**dict(value))


@dataclass
class ImageWriter:
    """Writes images under ``<out>/img/<doc_key>/`` and returns paths relative to ``out``."""

    out: Path
    options: ImageOptions = field(default_factory=ImageOptions)
    written: int = 0
    reused: int = 0
    failures: list[str] = field(default_factory=list)

    def _save(self, rel: str, make: Any) -> str | None:
        path = self.out / rel
        if path.is_file():
            self.reused += 1
            return rel
        try:
            im: "Image.Image" = make()
        except Exception as exc:  # noqa: BLE001 - one unreadable page must not stop the report
            self.failures.append(f"{rel}: {type(exc).__name__}: {exc}")
            log.warning("could not render %s: %s", rel, exc)
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        im.convert("RGB").save(tmp, "JPEG", quality=int(self.options.quality), optimize=True)
        tmp.replace(path)
        self.written += 1
        return rel

    def page(self, doc: DocView, page: int, thumb: bool = False) -> str | None:
        """A page render (``thumb``: the small size), or None when the document has no pixels."""
        if not doc.has_pixels or not 0 <= page < doc.n_pages:
            return None
        side = self.options.thumb_max_side if thumb else self.options.page_max_side
        rel = f"img/{doc.doc_key}/{'thumb' if thumb else 'page'}-{page:04d}.jpg"
        graph = doc.graph
        assert graph is not None
        return self._save(rel, lambda: graph.page_image(page, dpi=144, max_side=side))

    def reader_image(self, doc: DocView, image: Mapping[str, Any]) -> str | None:
        """An image of the reader input (a page or an element crop), as sent, downscaled."""
        if not doc.has_pixels:
            return None
        graph = doc.graph
        assert graph is not None
        node_id = str(image["node_id"])
        sent = max(int(image.get("width") or 0), int(image.get("height") or 0)) or self.options.reader_max_side
        side = min(sent, self.options.reader_max_side)
        rel = f"img/{doc.doc_key}/reader-{slug(node_id, 32)}-{side}.jpg"
        if image.get("kind") == "page":
            page = int(image["page"])
            return self._save(rel, lambda: graph.page_image(page, dpi=144, max_side=side))

        def crop() -> "Image.Image":
            im = graph.crop(node_id, dpi=144)
            im.thumbnail((side, side))
            return im

        return self._save(rel, crop)
