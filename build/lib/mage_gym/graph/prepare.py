"""Stage 1 of a graph build, per page: normalise a parsed page, choose what to embed, embed it.

Why its own module: these steps need only one page (or one chunk of pages),
so they run wherever the page was parsed, in the calling process or in a
build worker (:mod:`.workers`), while assembly (:mod:`.assemble`) needs the
whole document. Figures and tables embed their caption with their own text;
identical texts are encoded once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol, Sequence

import numpy as np

from mage_gym.graph.edges import EdgeConfig, caption_pairs
from mage_gym.graph.schema import VISUAL_TYPES, BBox, PageFailure, ParsedElement, ParsedPage
from mage_gym.graph.settings import Settings
from mage_gym.graph.summarize import clean


class Encoder(Protocol):
    """What the builder needs from a text encoder (tests inject a fake one)."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class EmbedConfig(Settings):
    """How texts become vectors (part of the cache key).

    Why truncate: MiniLM costs about the same per *token* at any length, so a
    long paragraph costs many times a short one, while its first sentence
    already carries what dense retrieval uses (BM25 and the reader still see
    the whole text). ``page_vectors="mean"`` pools a page's element vectors
    (weighted by their text length) instead of encoding the page text again:
    it covers the whole page (the encoder would cut a page at 256 tokens) and
    costs nothing; ``"text"`` encodes the page text itself.

    The defaults (80 characters, ``"mean"``) scored best on page recall@5 of
    question vectors among the lengths and poolings compared with
    ``experiments/embed_precision.py``; figures live in results files and
    ``docs/RESULTS.md``, never in code, so each is measured in one place.
    """

    kind: ClassVar[str] = "embed"

    element_max_chars: int = 80
    page_max_chars: int = 1500
    page_vectors: str = "mean"  # "mean" | "text"
    dtype: str = "float32"  # "float32" | "float16" (halves cache size and load time)

    def __post_init__(self) -> None:
        if self.page_vectors not in ("mean", "text"):
            raise ValueError(f"page_vectors must be 'mean' or 'text', got {self.page_vectors!r}")
        if self.dtype not in ("float32", "float16"):
            raise ValueError(f"dtype must be 'float32' or 'float16', got {self.dtype!r}")


@dataclass
class PreparedPage:
    """One parsed page made ready for assembly: kept elements with normalised boxes."""

    index: int
    width: float
    height: float
    elements: list[ParsedElement]
    boxes: list[BBox]
    captions: dict[int, list[int]]  # visual position -> caption/header positions
    embed_texts: list[str]  # what each element's vector encodes
    header_text: str = ""
    footer_text: str = ""
    image_only: bool = False
    warnings: list[str] = field(default_factory=list)
    dropped: int = 0
    failure: PageFailure | None = None

    @property
    def text(self) -> str:
        """All element text in reading order (tables: their text, else markdown)."""
        return "\n".join(t for t in (element_text(e) for e in self.elements) if t)


def element_text(e: ParsedElement) -> str:
    return (e.text or "").strip() or (e.table_markdown or "").strip()


def _normalise(bbox: Sequence[float], w: float, h: float) -> BBox:
    x0, y0, x1, y1 = (float(v) for v in bbox)
    if x1 < x0:
        x0, x1 = x1, x0
    if y1 < y0:
        y0, y1 = y1, y0
    c = lambda v: min(1.0, max(0.0, v))  # noqa: E731
    return (c(x0 / w), c(y0 / h), c(x1 / w), c(y1 / h))


def _markdown_for_embedding(md: str) -> str:
    """Table markdown without the ``|---|`` rule and with single spaces (fewer tokens)."""
    lines = [ln for ln in md.splitlines() if ln.strip() and not set(ln.strip()) <= set("|-: ")]
    return clean(" ".join(lines).replace("|", " | "))


def prepare_page(page: ParsedPage, cfg: EmbedConfig = EmbedConfig(),
                 caption_gap: float = EdgeConfig.caption_max_gap) -> PreparedPage:
    """Normalise one parsed page; decide each element's embedding text.

    Text regions with no text are dropped (they would be nodes with nothing to
    read or match); visuals are kept even when empty (their pixels matter).
    Figures and tables embed their caption together with their own text so
    a question about "the chart of revenue by region" can find the chart.
    """
    w, h = float(page.width), float(page.height)
    warns = list(page.warnings)
    if w <= 0 or h <= 0:
        # a page the parser could not measure: fall back to the elements' extent
        w = max([e.bbox[2] for e in page.elements] + [1.0])
        h = max([e.bbox[3] for e in page.elements] + [1.0])
        if page.elements:
            warns.append("page size unknown; boxes normalised to the elements' extent")
    kept = [e for e in page.elements if e.type in VISUAL_TYPES or (e.text or "").strip()]
    boxes = [_normalise(e.bbox, w, h) for e in kept]
    texts = [element_text(e) for e in kept]
    caps = caption_pairs([e.type for e in kept], boxes, texts, caption_gap)
    embed: list[str] = []
    for i, e in enumerate(kept):
        if e.type == "table":
            body = (e.text or "").strip() or _markdown_for_embedding(e.table_markdown or "")
        else:
            body = (e.text or "").strip()
        if i in caps:
            body = " ".join([*(clean(texts[c]) for c in caps[i]), body]).strip()
        embed.append(clean(body)[: cfg.element_max_chars])
    return PreparedPage(
        index=page.index, width=float(page.width), height=float(page.height), elements=kept, boxes=boxes,
        captions=caps, embed_texts=embed, header_text=page.header_text, footer_text=page.footer_text,
        image_only=page.image_only, warnings=warns, dropped=len(page.elements) - len(kept), failure=page.failure,
    )


def _encode(encoder: Encoder, texts: list[str], progress: bool, block: int = 512) -> np.ndarray:
    """Encode, in length-sorted blocks under a progress bar when there are many texts."""
    if not progress or len(texts) <= 2 * block:
        return np.asarray(encoder.encode(texts), dtype=np.float32)
    from mage_gym.progress import progress_bar

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), encoder.dim), np.float32)
    for lo in progress_bar(range(0, len(order), block), desc="embed", unit="block", disable=None, leave=False):
        idx = order[lo : lo + block]
        out[idx] = encoder.encode([texts[i] for i in idx])
    return out


def embed_pages(prepared: Sequence[PreparedPage], encoder: Encoder | None,
                cfg: EmbedConfig = EmbedConfig(), progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(page vectors, element vectors) of prepared pages, float32, L2-normalised.

    Identical texts (repeated boilerplate, page furniture) are encoded once.
    With ``encoder=None`` the vectors are zeros (a graph without semantics,
    e.g. for a parse-only benchmark).
    """
    el_texts = [t for p in prepared for t in p.embed_texts]
    page_texts = [clean(p.text)[: cfg.page_max_chars] for p in prepared] if cfg.page_vectors == "text" else []
    dim = encoder.dim if encoder is not None else 0
    if encoder is None:
        return np.zeros((len(prepared), 0), np.float32), np.zeros((len(el_texts), 0), np.float32)
    uniq = list(dict.fromkeys(t for t in el_texts + page_texts if t))
    vecs = _encode(encoder, uniq, progress) if uniq else np.zeros((0, dim), np.float32)
    row = {t: i for i, t in enumerate(uniq)}

    def lookup(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), dim), np.float32)
        for i, t in enumerate(texts):
            if t:
                out[i] = vecs[row[t]]
        return out

    el_vecs = lookup(el_texts)
    if cfg.page_vectors == "text":
        page_vecs = lookup(page_texts)
    else:
        page_vecs = np.zeros((len(prepared), dim), np.float32)
        lo = 0
        for i, p in enumerate(prepared):
            n = len(p.embed_texts)
            if n:
                wts = np.asarray([len(t) for t in p.embed_texts], np.float32)
                page_vecs[i] = wts @ el_vecs[lo : lo + n]
            lo += n
        norms = np.linalg.norm(page_vecs, axis=1, keepdims=True)
        page_vecs = np.divide(page_vecs, norms, out=np.zeros_like(page_vecs), where=norms > 0)
    return page_vecs, el_vecs


# --- encoders ---------------------------------------------------------------------


def resolve_encoder(encoder: Encoder | None | str) -> Encoder | None:
    if isinstance(encoder, str):
        if encoder != "default":
            raise ValueError(f"encoder must be an Encoder, None or 'default', got {encoder!r}")
        from mage_gym.graph.embed import get_encoder

        return get_encoder()
    return encoder


def encoder_name(encoder: Encoder | None | str) -> str:
    if isinstance(encoder, str):
        from mage_gym.graph.embed import TextEncoder  # no torch import: the class is not instantiated

        return TextEncoder.name
    return "none" if encoder is None else str(encoder.name)
