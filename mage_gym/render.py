"""Working subgraph -> reader input (structured XML text plus lazy images).

Why at stop only: rendering is what the reader pays for, so it happens once
per episode, and pixels are never produced here: each :class:`RenderedImage`
carries a loader that calls ``graph.page_image`` / ``graph.crop`` when a
reader actually wants the image (the oracle reader never does).

Modes:
- ``visual`` (the paper's reader input): every non-pruned activated page as
  its summary plus the page image; activated elements as summaries; opened
  elements with their full text (table markdown for tables) plus a crop for
  figures, charts and tables;
- ``text`` (what a reader that takes no images gets): no images; an
  activated page is sent as its own text instead of its summary (clipped at
  ``max_opened_chars``, the reader's raw-text limit, like an opened element),
  so page-level retrieval means the same in both modes. A page whose whole
  text was sent is listed in ``page_text_ids``: for coverage it counts as a
  page image would (:mod:`mage_gym.coverage`); a clipped or empty page text
  is not listed, since the reader may not have received the evidence;
- ``elements`` (element granularity: no page is ever sent whole): an activated
  page is sent as its summary only; opened elements carry the content, with
  crops for figures, charts and tables as in ``visual``. What a controller
  that reads regions instead of pages sends (``topk_elements``); no page
  counts as whole for coverage, so gold is reached through opened elements.

Pruned nodes never appear. Document text is XML-escaped, so a document cannot
forge markup. Images are referenced in the XML with ``<image ref="node_id"/>``
tags (the reader prompt places the pixels there).

Token rule (documented in README): text tokens = ceil(characters / 4) for the
XML and for the question; an image costs ``min(max_image_tokens,
ceil(w / 28) * ceil(h / 28))`` tokens at the size it is sent (Qwen2-VL style:
14-px patches merged 2x2). Pages are sent at ``page_dpi`` with the long side
capped at ``page_max_side`` px; crops at ``crop_dpi``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any
from xml.sax.saxutils import escape as _xml_escape

import numpy as np

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import VISUAL_TYPES, Element, Page
from mage_gym.graph.union import page_label
from mage_gym.readers.base import RenderedImage, RenderedInput

RENDER_MODES: tuple[str, ...] = ("visual", "text", "elements")
_ACTIVATED, _OPENED = 1, 2
_PAGE_CLOSE = "</page>\n"
_EVIDENCE_CLOSE = "</evidence>"
_ESC = {'"': "&quot;"}


def esc(text: Any) -> str:
    """Escape text for XML content and attribute values."""
    return _xml_escape(str(text), _ESC)


@dataclass(frozen=True)
class RenderConfig:
    page_dpi: int = 144
    page_max_side: int = 1024
    crop_dpi: int = 144
    crop_pad: float = 0.01
    patch: int = 28
    max_image_tokens: int = 1280
    min_image_tokens: int = 4
    max_opened_chars: int = 8192  # the reference reader's raw-text limit
    max_summary_chars: int = 400

    @classmethod
    def coerce(cls, value: "RenderConfig | dict | None") -> "RenderConfig":
        """A record from a mapping; unknown keys: a TypeError naming the valid ones."""
        if value is None:
            return cls()
        if isinstance(value, RenderConfig):
            return value
        data = dict(value)
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(valid))
        if unknown:
            raise TypeError(f"unknown render setting(s) {unknown}; valid: {', '.join(valid)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def image_tokens(width: int, height: int, cfg: RenderConfig = RenderConfig()) -> int:
    t = math.ceil(max(1, width) / cfg.patch) * math.ceil(max(1, height) / cfg.patch)
    return int(min(cfg.max_image_tokens, max(cfg.min_image_tokens, t)))


def _page_size_px(page: Page, cfg: RenderConfig) -> tuple[int, int]:
    w, h = max(float(page.width), 1.0), max(float(page.height), 1.0)
    scale = min(cfg.page_dpi / 72.0, cfg.page_max_side / max(w, h))
    return max(1, round(w * scale)), max(1, round(h * scale))


def _crop_size_px(page: Page, el: Element, cfg: RenderConfig) -> tuple[int, int]:
    x0, y0, x1, y1 = el.bbox
    bw = (min(1.0, max(x0, x1) + cfg.crop_pad) - max(0.0, min(x0, x1) - cfg.crop_pad)) * float(page.width)
    bh = (min(1.0, max(y0, y1) + cfg.crop_pad) - max(0.0, min(y0, y1) - cfg.crop_pad)) * float(page.height)
    scale = cfg.crop_dpi / 72.0
    return max(1, round(bw * scale)), max(1, round(bh * scale))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " [truncated]"


def _node_states(state: Any) -> np.ndarray:
    arr = getattr(state, "node_state", state)
    return np.asarray(arr)


@dataclass(frozen=True)
class _Fragment:
    """A node's XML fragment and its image, rendered once per (graph, config, variant)."""

    text: str
    tokens: int  # text tokens of the fragment plus its image tokens
    image: RenderedImage | None = None
    image_tokens: int = 0
    node_id: str = ""
    whole_text: bool = False  # an activated page whose whole text is in ``text`` (text mode)


def _fragment_memo(memo: dict | None, mode: str, cfg: RenderConfig) -> tuple[dict, dict]:
    """The (pages, elements) fragment dicts of ``memo`` for (mode, config); fresh ones when there is no memo.

    Keyed by ``2 * index + state bit`` (activated / opened): int keys, so a
    render does not hash the config once per node.
    """
    if memo is None:
        return {}, {}
    pair = memo.get((mode, cfg))
    if pair is None:
        pair = memo.setdefault((mode, cfg), ({}, {}))
    return pair


def _page_fragment(graph: EvidenceGraph, p: int, activated: bool, mode: str, cfg: RenderConfig) -> _Fragment:
    page = graph.pages[p]
    number, doc = page_label(graph, p)  # a union of documents: the page's own number and its document
    doc_attr = "" if doc is None else f' doc="{esc(doc)}"'
    frag = [f'<page id="{esc(page.node_id)}" index="{p}" number="{number}"{doc_attr}>\n']
    image, img_tok = None, 0
    visual = mode == "visual"
    if activated and mode == "text":
        frag.append(f"<text>{esc(_clip(page.text, cfg.max_opened_chars))}</text>\n")
    elif activated:
        frag.append(f"<summary>{esc(_clip(page.summary or page.text, cfg.max_summary_chars))}</summary>\n")
        if visual:
            w, h = _page_size_px(page, cfg)
            img_tok = image_tokens(w, h, cfg)
            image = RenderedImage(node_id=page.node_id, page=p, bbox=(0.0, 0.0, 1.0, 1.0), kind="page",
                                  width=w, height=h, _loader=_page_loader(graph, p, cfg))
            frag.append(f'<image ref="{esc(page.node_id)}" kind="page" width="{w}" height="{h}"/>\n')
    text = "".join(frag)
    whole_text = activated and mode == "text" and page_text_whole(page, cfg)
    # the page's own share of tokens includes its closing tag
    return _Fragment(text, math.ceil((len(text) + len(_PAGE_CLOSE)) / 4) + img_tok, image, img_tok, page.node_id,
                     whole_text)


def page_text_whole(page: Page, cfg: RenderConfig) -> bool:
    """Does an activated page in ``text`` mode send its whole text (non-empty, within ``max_opened_chars``)?"""
    return 0 < len(page.text) <= cfg.max_opened_chars


def whole_text_pages(graph: EvidenceGraph, config: RenderConfig | dict | None = None,
                     mode: str = "text") -> np.ndarray:
    """bool [n_pages]: pages whose whole text an activated page node sends in ``text`` mode (``elements``
    mode: none, an activated page sends its summary only).

    What :func:`mage_gym.coverage.state_masks` needs to apply the coverage
    rule to a node-state table without rendering it (oracle, shaping).
    """
    cfg = RenderConfig.coerce(config)
    if mode == "elements":
        return np.zeros(graph.n_pages, dtype=bool)
    return np.fromiter((page_text_whole(p, cfg) for p in graph.pages), dtype=bool, count=graph.n_pages)


def _element_fragment(graph: EvidenceGraph, j: int, opened: bool, mode: str, cfg: RenderConfig) -> _Fragment:
    el = graph.elements[j]
    head = f'<element id="{esc(el.node_id)}" type="{esc(el.type)}" state="{"opened" if opened else "activated"}">'
    image, img_tok = None, 0
    if opened:
        body = el.table_markdown if (el.type == "table" and el.table_markdown) else el.text
        inner = f"<content>{esc(_clip(body, cfg.max_opened_chars))}</content>"
        if mode != "text" and el.type in VISUAL_TYPES:
            page = graph.pages[el.page]
            w, h = _crop_size_px(page, el, cfg)
            img_tok = image_tokens(w, h, cfg)
            image = RenderedImage(node_id=el.node_id, page=el.page, bbox=tuple(el.bbox), kind="crop", width=w,
                                  height=h, _loader=_crop_loader(graph, graph.n_pages + j, cfg))
            inner += f'<image ref="{esc(el.node_id)}" kind="crop" width="{w}" height="{h}"/>'
    else:
        inner = f"<summary>{esc(_clip(el.summary or el.text, cfg.max_summary_chars))}</summary>"
    text = f"{head}{inner}</element>\n"
    return _Fragment(text, text_tokens(text) + img_tok, image, img_tok, el.node_id)


def _evidence_open(graph: EvidenceGraph, mode: str) -> str:
    return f'<evidence doc="{esc(graph.doc_id)}" pages="{graph.n_pages}" mode="{mode}">\n'


def frame_chars(graph: EvidenceGraph, mode: str) -> int:
    """XML characters of an empty render (the ``<evidence>`` wrapper): the floor every render starts from."""
    return len(_evidence_open(graph, mode)) + len(_EVIDENCE_CLOSE)


def node_share(graph: EvidenceGraph, v: int, opened: bool, mode: str, config: RenderConfig,
               memo: dict | None = None) -> tuple[int, int]:
    """``(xml characters, image tokens)`` node ``v`` adds to a render when ACTIVATED (``opened``: OPENED).

    Why exact: a render's XML is the wrapper plus, per rendered page, its
    fragment, its rendered elements' fragments and ``</page>``; a page holding
    rendered elements is an activated one in every env state (an element is
    only visible on an activated page), so the page's share is its activated
    fragment plus its closing tag, and ``render(...).tokens`` is
    ``ceil((frame_chars + sum of shares) / 4) + question tokens + sum of image
    tokens``. :mod:`mage_gym.env.token_budget` keeps that sum per state
    without rendering. ``memo``: :func:`render`'s (the same fragments, built once).
    """
    page_memo, el_memo = _fragment_memo(memo, mode, config)
    n_pages = graph.n_pages
    if v < n_pages:
        frag = page_memo.get(2 * v + 1)
        if frag is None:
            frag = page_memo[2 * v + 1] = _page_fragment(graph, v, True, mode, config)
        return len(frag.text) + len(_PAGE_CLOSE), frag.image_tokens
    j = v - n_pages
    frag = el_memo.get(2 * j + opened)
    if frag is None:
        frag = el_memo[2 * j + opened] = _element_fragment(graph, j, opened, mode, config)
    return len(frag.text), frag.image_tokens


def render(graph: EvidenceGraph, state: Any, mode: str = "visual", question: str = "",
           config: RenderConfig | dict | None = None, memo: dict | None = None) -> RenderedInput:
    """Render the working subgraph of ``state`` (an ``EvidenceState`` or its node-state array).

    ``memo``: a dict the caller keeps for ``graph`` (and only for it), where
    node fragments are remembered across renders. Node text is static, so a
    fragment is a pure function of (graph, node, state bit, mode, config):
    a memo saves work and never changes the output. The env passes one kept
    on its graph index; without one, every fragment is built afresh.
    """
    if mode not in RENDER_MODES:
        raise ValueError(f"unknown render mode {mode!r}; expected one of {RENDER_MODES}")
    cfg = RenderConfig.coerce(config)
    st = _node_states(state)
    if st.shape != (graph.n_nodes,):
        raise ValueError(f"node-state table has shape {st.shape}; graph has {graph.n_nodes} nodes")
    n_pages = graph.n_pages
    page_memo, el_memo = _fragment_memo(memo, mode, cfg)
    page_on = st[:n_pages] == _ACTIVATED
    el_idx = ((st[n_pages:] == _ACTIVATED) | (st[n_pages:] == _OPENED)).nonzero()[0]
    el_page = graph.node_page[el_idx + n_pages]
    shown = page_on.copy()  # pages rendered: activated ones and those holding a rendered element (ascending)
    shown[el_page] = True
    pages = shown.nonzero()[0].tolist()
    cuts = np.searchsorted(el_page, pages, side="left").tolist() + [len(el_idx)]
    el_idx_l = el_idx.tolist()
    el_opened = (st[el_idx + n_pages] == _OPENED).tolist()
    page_on_l = page_on.tolist()

    # One pass collects the XML pieces and the rendered nodes' fragments in XML order; the per-node lists of
    # the RenderedInput are then read off the fragments (node ids, tokens and images travel with them).
    parts: list[str] = [_evidence_open(graph, mode)]
    shown_frags: list[_Fragment] = []
    opened_ids: list[str] = []
    page_image_ids: list[str] = []
    page_text_ids: list[str] = []
    for k, p in enumerate(pages):
        on = page_on_l[p]
        frag = page_memo.get(2 * p + on)
        if frag is None:
            frag = page_memo[2 * p + on] = _page_fragment(graph, p, on, mode, cfg)
        parts.append(frag.text)
        if on:  # a page shown only as the container of its rendered elements is not a rendered node
            shown_frags.append(frag)
            if frag.image is not None:
                page_image_ids.append(frag.node_id)
            elif frag.whole_text:
                page_text_ids.append(frag.node_id)
        for i in range(cuts[k], cuts[k + 1]):
            j, opened = el_idx_l[i], el_opened[i]
            ef = el_memo.get(2 * j + opened)
            if ef is None:
                ef = el_memo[2 * j + opened] = _element_fragment(graph, j, opened, mode, cfg)
            parts.append(ef.text)
            shown_frags.append(ef)
            if opened:
                opened_ids.append(ef.node_id)
        parts.append(_PAGE_CLOSE)
    parts.append(_EVIDENCE_CLOSE)
    node_ids = tuple([f.node_id for f in shown_frags])
    node_tokens = tuple([(f.node_id, f.tokens) for f in shown_frags])
    images = tuple([f.image for f in shown_frags if f.image is not None])
    image_total = sum([f.image_tokens for f in shown_frags])
    xml = "".join(parts)
    return RenderedInput(
        question=question, xml=xml, images=images, mode=mode, node_ids=node_ids,
        opened_ids=tuple(opened_ids), page_image_ids=tuple(page_image_ids), page_text_ids=tuple(page_text_ids),
        text_tokens=text_tokens(xml) + text_tokens(question), image_tokens=image_total,
        node_tokens=node_tokens,
    )


def _page_loader(graph: EvidenceGraph, page: int, cfg: RenderConfig):
    return lambda: graph.page_image(page, dpi=cfg.page_dpi, max_side=cfg.page_max_side)


def _crop_loader(graph: EvidenceGraph, node: int, cfg: RenderConfig):
    return lambda: graph.crop(node, dpi=cfg.crop_dpi, pad=cfg.crop_pad)


def rendered_summary(rendered: RenderedInput) -> dict[str, Any]:
    """JSON-ready description of a rendered input (traces): XML and image references, no pixels."""
    return {
        "mode": rendered.mode,
        "xml": rendered.xml,
        "images": [{"node_id": im.node_id, "page": im.page, "kind": im.kind, "bbox": list(im.bbox),
                    "width": im.width, "height": im.height} for im in rendered.images],
        "text_tokens": rendered.text_tokens,
        "image_tokens": rendered.image_tokens,
    }
