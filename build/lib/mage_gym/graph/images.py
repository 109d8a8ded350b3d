"""Lazy page and region pixels for PDF and image-folder documents.

Why lazy: graphs are cached without pixels (a 300-page filing rendered at
144 dpi would be ~1 GB); the reader and visual retrievers ask for a page or a
crop when they need it. Why capped: real PDFs contain absurd pages (a side of
14,400 pt is legal), and image folders may hold giant scans; a request is
scaled down so the output never exceeds :data:`MAX_RENDER_PIXELS`, and a
source image above :data:`MAX_SOURCE_PIXELS` is refused with a typed error
rather than exhausting memory.

Coordinates: for image sources one pixel of the stored image counts as one
point (LongDocURL's PNGs are 72-dpi renders, 612x792 for a Letter page), so
``dpi=72`` returns the native size and ``dpi=144`` doubles it, as for PDFs.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING

from mage_gym.graph.errors import UnsupportedSourceError
from mage_gym.graph.schema import BBox, DocumentSource

if TYPE_CHECKING:  # pragma: no cover
    import pymupdf
    from PIL import Image

#: Largest output image, in pixels (about 5,000 x 5,000).
MAX_RENDER_PIXELS = 25_000_000
#: Largest source image we agree to decode (PIL's own bomb limit is 2 x 89 M).
MAX_SOURCE_PIXELS = 150_000_000

_DOC_CACHE: "OrderedDict[str, pymupdf.Document]" = OrderedDict()
_DOC_CACHE_SIZE = 4


def _cached_pdf(source: DocumentSource) -> "pymupdf.Document":
    """A few open documents per process: crops of one graph hit the same PDF."""
    from mage_gym.graph.sources import open_pdf

    doc = _DOC_CACHE.pop(source.path, None)
    if doc is None or doc.is_closed:
        doc = open_pdf(source)
    _DOC_CACHE[source.path] = doc
    while len(_DOC_CACHE) > _DOC_CACHE_SIZE:
        _, old = _DOC_CACHE.popitem(last=False)
        old.close()
    return doc


def clear_cache() -> None:
    """Close cached documents (tests, or before a file is rewritten)."""
    while _DOC_CACHE:
        _, doc = _DOC_CACHE.popitem()
        doc.close()


def _capped_scale(width: float, height: float, scale: float, max_side: int | None) -> float:
    """Largest scale <= ``scale`` keeping the output within side and pixel caps."""
    width, height = max(width, 1e-6), max(height, 1e-6)
    if max_side is not None:
        scale = min(scale, max_side / max(width, height))
    if width * height * scale * scale > MAX_RENDER_PIXELS:
        scale = math.sqrt(MAX_RENDER_PIXELS / (width * height))
    return max(scale, 1e-3)


def _check_page(source: DocumentSource, page: int, n_pages: int) -> None:
    if not 0 <= page < n_pages:
        raise IndexError(f"page {page} out of range 0..{n_pages - 1} for {source.path}")


def _open_image(source: DocumentSource, page: int) -> "Image.Image":
    from PIL import Image

    _check_page(source, page, len(source.page_files))
    path = source.page_files[page]
    im = Image.open(path)
    if im.width * im.height > MAX_SOURCE_PIXELS:
        raise UnsupportedSourceError(path, f"page image too large ({im.width}x{im.height} px)")
    return im


def image_page_size(source: DocumentSource, page: int) -> tuple[int, int]:
    """(width, height) of an image page without decoding its pixels."""
    from PIL import Image

    _check_page(source, page, len(source.page_files))
    with Image.open(source.page_files[page]) as im:
        return im.width, im.height


def _pixmap_to_pil(pix: "pymupdf.Pixmap") -> "Image.Image":
    from PIL import Image

    mode = "RGB" if pix.n == 3 else ("L" if pix.n == 1 else None)
    if mode is None:  # CMYK or alpha: let PyMuPDF convert
        import pymupdf

        pix = pymupdf.Pixmap(pymupdf.csRGB, pix) if pix.alpha == 0 else pymupdf.Pixmap(pix, 0)
        mode = "RGB"
    return Image.frombytes(mode, (pix.width, pix.height), pix.samples).convert("RGB")


def render_page(source: DocumentSource, page: int, dpi: int = 72, max_side: int | None = None) -> "Image.Image":
    """The whole page as an RGB image at ``dpi`` (scaled down to the caps)."""
    if source.kind == "pdf":
        import pymupdf

        doc = _cached_pdf(source)
        _check_page(source, page, doc.page_count)
        pg = doc.load_page(page)
        scale = _capped_scale(pg.rect.width, pg.rect.height, dpi / 72.0, max_side)
        return _pixmap_to_pil(pg.get_pixmap(matrix=pymupdf.Matrix(scale, scale), alpha=False))
    with _open_image(source, page) as im:
        scale = _capped_scale(im.width, im.height, dpi / 72.0, max_side)
        size = (max(1, round(im.width * scale)), max(1, round(im.height * scale)))
        rgb = im.convert("RGB")
        return rgb if size == rgb.size else rgb.resize(size)


def _padded_box(bbox: BBox, pad: float) -> BBox:
    x0, y0, x1, y1 = (float(v) for v in bbox)
    if x1 < x0:
        x0, x1 = x1, x0
    if y1 < y0:
        y0, y1 = y1, y0
    return (max(0.0, x0 - pad), max(0.0, y0 - pad), min(1.0, x1 + pad), min(1.0, y1 + pad))


def render_region(
    source: DocumentSource, page: int, bbox_normalised: BBox, dpi: int = 144, pad: float = 0.01
) -> "Image.Image":
    """A crop of ``page`` around a [0, 1]-normalised box, padded by ``pad`` of the page.

    Degenerate boxes still yield at least a 1x1 image so callers never need a
    special case.
    """
    x0, y0, x1, y1 = _padded_box(bbox_normalised, pad)
    if source.kind == "pdf":
        import pymupdf

        doc = _cached_pdf(source)
        _check_page(source, page, doc.page_count)
        pg = doc.load_page(page)
        r = pg.rect
        clip = pymupdf.Rect(r.x0 + x0 * r.width, r.y0 + y0 * r.height, r.x0 + x1 * r.width, r.y0 + y1 * r.height)
        if clip.is_empty:
            clip = pymupdf.Rect(clip.x0, clip.y0, clip.x0 + 1, clip.y0 + 1)
        scale = _capped_scale(clip.width, clip.height, dpi / 72.0, None)
        return _pixmap_to_pil(pg.get_pixmap(matrix=pymupdf.Matrix(scale, scale), clip=clip, alpha=False))
    with _open_image(source, page) as im:
        w, h = im.width, im.height
        box = (int(x0 * w), int(y0 * h), max(int(x0 * w) + 1, math.ceil(x1 * w)), max(int(y0 * h) + 1, math.ceil(y1 * h)))
        crop = im.convert("RGB").crop(box)
    scale = _capped_scale(crop.width, crop.height, dpi / 72.0, None)
    size = (max(1, round(crop.width * scale)), max(1, round(crop.height * scale)))
    return crop if size == crop.size else crop.resize(size)


__all__ = ["render_page", "render_region", "image_page_size", "clear_cache", "MAX_RENDER_PIXELS", "MAX_SOURCE_PIXELS"]
