"""The reader interface: rendered evidence in, an answer out.

The environment calls a reader once per episode, at stop, with the rendered
working subgraph (:class:`RenderedInput`, produced by ``mage_gym.render``). A
reader never sees gold. Support for the reward is computed outside the reader:
from gold coverage for the ``oracle`` reader, or from
``mage_gym.scoring.score(answer, gold, ...)`` for answering readers.
"""
from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from PIL import Image


@dataclass(frozen=True)
class RenderedImage:
    """One image sent to the reader: a whole page or an element crop.

    ``node_id`` ties it to the graph; pixels are produced lazily by
    ``load()`` so traces can reference images without holding them.
    """

    node_id: str
    page: int
    bbox: tuple[float, float, float, float]  # normalised; (0,0,1,1) for a page
    kind: str  # "page" or "crop"
    width: int  # pixel size it will be sent at (used for token accounting)
    height: int
    _loader: object = field(default=None, repr=False, compare=False, hash=False)

    def load(self) -> "Image.Image":
        if self._loader is None:
            raise RuntimeError(f"no pixel loader attached to {self.node_id}")
        return self._loader()  # type: ignore[operator]


def image_data_uri(image: "Image.Image", image_format: str = "png", jpeg_quality: int = 90) -> str:
    """``image`` as a ``data:image/...;base64,...`` URI, the form OpenAI-compatible servers take images in.

    One encoder for every client that sends images (the OpenAI reader, the
    chat env's messages for a vision server), so both send the same bytes for
    the same page. Modes other than RGB and L (RGBA, P, CMYK) become RGB first:
    JPEG cannot hold them and some servers refuse them in PNG.
    """
    fmt = {"jpg": "jpeg"}.get(image_format.lower(), image_format.lower())
    if fmt not in ("png", "jpeg"):
        raise ValueError(f"image_format must be 'png' or 'jpeg' ('jpg'), got {image_format!r}")
    if image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    buf = io.BytesIO()
    if fmt == "jpeg":
        image.save(buf, format="JPEG", quality=jpeg_quality)
    else:
        image.save(buf, format="PNG")
    return f"data:image/{fmt};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


@dataclass(frozen=True)
class RenderedInput:
    """Structured reader input: XML text plus images, and what went into it."""

    question: str
    xml: str  # the structured evidence text (document text escaped)
    images: tuple[RenderedImage, ...] = ()
    mode: str = "visual"  # "visual" or "text"
    node_ids: tuple[str, ...] = ()  # nodes rendered in any form
    opened_ids: tuple[str, ...] = ()  # nodes rendered with full content
    page_image_ids: tuple[str, ...] = ()  # pages sent as images
    page_text_ids: tuple[str, ...] = ()  # pages sent with their whole text (text mode; never clipped ones)
    text_tokens: int = 0
    image_tokens: int = 0
    # Tokens attributable to each rendered node (its XML fragment plus its image),
    # as (node_id, tokens) pairs; the reward's noise term reads it. Wrapper tags and
    # the question are not attributed to any node. Added by the env (backward compatible).
    node_tokens: tuple[tuple[str, int], ...] = ()

    @property
    def tokens(self) -> int:
        return self.text_tokens + self.image_tokens


@dataclass(frozen=True)
class ReaderOutput:
    answer: str | None  # None for the oracle reader (it gives no answer text)
    raw: str = ""  # the model's raw output
    cached: bool = False
    seconds: float = 0.0
    error: str | None = None


@runtime_checkable
class Reader(Protocol):
    name: str
    answers: bool  # False for the oracle (support comes from gold coverage)

    def read(self, rendered: RenderedInput) -> ReaderOutput: ...
