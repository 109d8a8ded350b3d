"""Gold evidence resolved onto graph nodes: :func:`resolve_gold`.

``GoldEvidence`` is what the reward and end-of-episode metrics consume; it is
computed from an Episode and its graph, and never shown to a policy.

How gold becomes items (one item = one piece of evidence; any node of the
item covers it):

- **Unanswerable** episodes have no gold: level ``"none"``, no items.
- **Regions** (MMDocIR boxes, LongDocURL boxes): the elements of the region's
  page that overlap it by *containment either way* form one item: an element
  at least half inside the region (the region spans several elements, e.g. a
  table and its caption), or a region at least half inside an element (the
  region is a line of a long paragraph the parser kept whole). Containment,
  not IoU, because annotators and parsers cut pages at different
  granularities and IoU punishes both mismatches. A region covering most of
  the page (>= 80% of its area) says no more than the page: page item. A
  region no element overlaps falls back to the page node (counted).
- **Generator regions** (benchmark ``synth``) are exact element boxes with an
  element type: an element matches with IoU >= 0.5 and a compatible type
  (same family: text-like, table, or picture-like), else page fallback.
- **Text snippets** (FinanceBench ``evidence_text``): the elements of the
  snippet's page whose word tokens are mostly found in the snippet (>= 80% of
  the element's tokens, at least 3 tokens) or that contain most of the
  snippet (>= 80% of its tokens) form one item, provided together they cover
  at least half of the snippet's tokens; a snippet covering >= 80% of the
  page's tokens is the whole page (page item); otherwise page fallback.
- **Gold node ids** (generator, when it gives no regions) map one id to one item.
- **Pages** with no item from the above become page-level items (page node).

Pages outside the graph (a truncated parse) or outside the episode's
``page_window`` (LongDocURL) are dropped, with their regions and snippets.
:func:`resolve_gold_detailed` also returns :class:`GoldStats` so callers can
count fallbacks across a dataset.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from mage_gym.graph.schema import bbox_inside_fraction, bbox_iou

if TYPE_CHECKING:  # pragma: no cover
    from mage_gym.data.episode import Episode, Region
    from mage_gym.graph.graph import EvidenceGraph
    from mage_gym.graph.schema import Element
    from mage_gym.graph.union import UnionGraph


@dataclass(frozen=True)
class GoldEvidence:
    """Gold items of one episode, as graph node indices.

    ``items`` is a list of gold *items*; each item is a tuple of node indices
    any of which covers it (an element region may be split into several
    parsed elements; a page-level item is the page node). ``level`` says how
    precise the gold is: "element", "page", or "none" (unanswerable / no gold).
    """

    items: tuple[tuple[int, ...], ...] = ()
    pages: tuple[int, ...] = ()  # gold page numbers (0-based)
    item_pages: tuple[int, ...] = ()  # page of each item
    item_is_page: tuple[bool, ...] = ()  # True where the item is page-level
    level: str = "none"
    gold_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # union of items


# --- thresholds (see module docstring for why) ---------------------------------

ELEMENT_IN_REGION = 0.5  # share of an element's area inside the region
REGION_IN_ELEMENT = 0.5  # share of the region's area inside an element
WHOLE_PAGE_AREA = 0.8  # a region this large is the page
SYNTH_IOU = 0.5
TEXT_ELEMENT_IN_SNIPPET = 0.8
TEXT_SNIPPET_IN_ELEMENT = 0.8
TEXT_MIN_TOKENS = 3
TEXT_SNIPPET_COVERAGE = 0.5
TEXT_WHOLE_PAGE = 0.8

#: Element-type families for generator regions: a parser may call a caption a
#: paragraph, or a chart a figure, but never a table a paragraph.
_TYPE_FAMILY: dict[str, str] = {
    "title": "text", "paragraph": "text", "list": "text", "caption": "text", "footnote": "text",
    "formula": "text", "table": "table", "figure": "picture", "chart": "picture",
}
_TOKEN = re.compile(r"[a-z0-9]+")


@dataclass
class GoldStats:
    """How each gold item of one episode (or, summed, a dataset) was obtained."""

    region_items: int = 0  # regions mapped to elements
    region_page_fallback: int = 0  # regions with no overlapping element -> page node
    region_whole_page: int = 0  # regions covering the page -> page node
    text_items: int = 0  # snippets mapped to elements
    text_page_fallback: int = 0
    text_whole_page: int = 0
    node_id_items: int = 0
    node_ids_missing: int = 0  # gold ids not in this graph
    page_items: int = 0  # gold pages with nothing finer
    dropped_pages: int = 0  # outside the graph or the page window
    dropped_regions: int = 0

    def __iadd__(self, other: "GoldStats") -> "GoldStats":
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(other, k))
        return self

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# --- matching ------------------------------------------------------------------


def _tokens(text: str) -> Counter:
    return Counter(_TOKEN.findall(text.lower()))


def _contained(part: Counter, whole: Counter) -> float:
    """Share of ``part``'s tokens (with multiplicity) also found in ``whole``."""
    n = sum(part.values())
    return sum(min(c, whole[t]) for t, c in part.items()) / n if n else 0.0


def _region_elements(graph: "EvidenceGraph", region: "Region", synth: bool) -> list[int]:
    out: list[int] = []
    family = _TYPE_FAMILY.get(region.type)
    for idx, el in zip(graph.element_indices_of_page(region.page), graph.elements_of_page(region.page)):
        if el.area <= 0:
            continue
        if synth:
            if family is not None and _TYPE_FAMILY.get(el.type) != family:
                continue
            if bbox_iou(el.bbox, region.bbox) >= SYNTH_IOU:
                out.append(idx)
        elif (bbox_inside_fraction(el.bbox, region.bbox) >= ELEMENT_IN_REGION
              or bbox_inside_fraction(region.bbox, el.bbox) >= REGION_IN_ELEMENT):
            out.append(idx)
    return out


def _snippet_match(graph: "EvidenceGraph", page: int, snippet: Counter) -> tuple[list[int], float, bool]:
    """(matched element indices, share of the snippet they cover, snippet is the whole page)."""
    elements: list[tuple[int, "Element", Counter]] = [
        (i, e, _tokens(e.text)) for i, e in zip(graph.element_indices_of_page(page), graph.elements_of_page(page))
    ]
    page_tokens: Counter = Counter()
    for _, _, t in elements:
        page_tokens.update(t)
    if not page_tokens or not snippet:
        return [], 0.0, False
    if _contained(page_tokens, snippet) >= TEXT_WHOLE_PAGE:
        return [], 1.0, True
    matched: list[int] = []
    union: Counter = Counter()
    for i, _, toks in elements:
        if sum(toks.values()) < TEXT_MIN_TOKENS:
            continue
        if _contained(toks, snippet) >= TEXT_ELEMENT_IN_SNIPPET or _contained(snippet, toks) >= TEXT_SNIPPET_IN_ELEMENT:
            matched.append(i)
            union |= toks
    return matched, _contained(snippet, union), False


def _snippet_pages(episode: "Episode") -> list[int | None]:
    pages = episode.extra.get("evidence_text_pages") if isinstance(episode.extra, dict) else None
    if isinstance(pages, (list, tuple)) and len(pages) == len(episode.evidence_text):
        return [int(p) for p in pages]
    return [None] * len(episode.evidence_text)


# --- resolution ----------------------------------------------------------------


def resolve_gold_detailed(episode: "Episode", graph: "EvidenceGraph") -> tuple[GoldEvidence, GoldStats]:
    """:func:`resolve_gold` plus the per-episode :class:`GoldStats`."""
    stats = GoldStats()
    if not episode.answerable:
        return GoldEvidence(), stats
    lo, hi = 0, graph.n_pages - 1
    if episode.page_window is not None:
        lo, hi = max(lo, episode.page_window[0]), min(hi, episode.page_window[1])

    def allowed(p: int) -> bool:
        return lo <= p <= hi

    gold_pages = sorted({p for p in episode.evidence_pages if allowed(p)})
    stats.dropped_pages = len({p for p in episode.evidence_pages if not allowed(p)})
    items: list[tuple[tuple[int, ...], int, bool]] = []  # (nodes, page, is_page)
    synth = episode.benchmark == "synth"

    for region in episode.evidence_regions:
        if not allowed(region.page):
            stats.dropped_regions += 1
            continue
        x0, y0, x1, y1 = region.bbox
        if max(0.0, x1 - x0) * max(0.0, y1 - y0) >= WHOLE_PAGE_AREA and not synth:
            stats.region_whole_page += 1
            items.append(((region.page,), region.page, True))
            continue
        nodes = _region_elements(graph, region, synth)
        if nodes:
            stats.region_items += 1
            items.append((tuple(sorted(nodes)), region.page, False))
        else:
            stats.region_page_fallback += 1
            items.append(((region.page,), region.page, True))

    for text, page in zip(episode.evidence_text, _snippet_pages(episode)):
        snippet = _tokens(text)
        candidates = [page] if page is not None else gold_pages
        candidates = [p for p in candidates if allowed(p)]
        if not candidates:
            continue
        best: tuple[float, int, list[int], bool] | None = None
        for p in candidates:
            nodes, cover, whole = _snippet_match(graph, p, snippet)
            if best is None or cover > best[0]:
                best = (cover, p, nodes, whole)
        assert best is not None
        cover, p, nodes, whole = best
        if whole:
            stats.text_whole_page += 1
            items.append(((p,), p, True))
        elif nodes and cover >= TEXT_SNIPPET_COVERAGE:
            stats.text_items += 1
            items.append((tuple(sorted(nodes)), p, False))
        else:
            stats.text_page_fallback += 1
            items.append(((p,), p, True))

    if not episode.evidence_regions:
        for nid in episode.gold_node_ids:
            idx = graph.index_of.get(nid)
            if idx is None:
                stats.node_ids_missing += 1
                continue
            p = int(graph.node_page[idx])
            if allowed(p):
                stats.node_id_items += 1
                items.append(((idx,), p, idx < graph.n_pages))

    covered = {p for _, p, _ in items}
    for p in gold_pages:
        if p not in covered:
            stats.page_items += 1
            items.append(((p,), p, True))
    return _assemble(items), stats


def _assemble(items: Iterable[tuple[tuple[int, ...], int, bool]]) -> GoldEvidence:
    unique: dict[tuple[int, ...], tuple[int, bool]] = {}
    for nodes, page, is_page in items:
        unique.setdefault(nodes, (page, is_page))
    ordered = sorted(unique.items(), key=lambda kv: (kv[1][0], not kv[1][1], kv[0]))
    if not ordered:
        return GoldEvidence()
    nodes_list = tuple(n for n, _ in ordered)
    item_pages = tuple(p for _, (p, _) in ordered)
    is_page = tuple(b for _, (_, b) in ordered)
    union = np.unique(np.fromiter((i for n in nodes_list for i in n), dtype=np.int32))
    return GoldEvidence(items=nodes_list, pages=tuple(sorted(set(item_pages))), item_pages=item_pages,
                        item_is_page=is_page, level="page" if all(is_page) else "element", gold_nodes=union)


#: Items ``(nodes, page, is_page)`` -> :class:`GoldEvidence` (deduplicated, ordered by page), public for
#: callers that build gold from parts: the union graph maps and merges per-document gold with it.
assemble_gold = _assemble


def resolve_gold(episode: "Episode", graph: "EvidenceGraph") -> GoldEvidence:
    """Map an episode's gold (pages, regions, snippets, node ids) onto ``graph``'s nodes."""
    return resolve_gold_detailed(episode, graph)[0]




def remap_gold(union: "UnionGraph", doc: int | str, gold: GoldEvidence) -> GoldEvidence:
    """A document's gold, resolved on its own graph, moved onto the union's node indices and page numbers."""
    if not gold.items:
        return GoldEvidence()
    d = union.span(doc)
    nmap = union.node_map(doc)
    n_member = d.n_pages + d.n_elements
    items = []
    for nodes, page, is_page in zip(gold.items, gold.item_pages, gold.item_is_page):
        if any(not 0 <= int(v) < n_member for v in nodes):
            raise ValueError(f"gold node out of range for {d.doc_id!r} ({n_member} nodes): {nodes}")
        items.append((tuple(int(nmap[v]) for v in nodes), d.page_offset + int(page), bool(is_page)))
    return assemble_gold(items)


def merge_gold(golds: Sequence[GoldEvidence]) -> GoldEvidence:
    """One gold from several golds on the same graph (e.g. each document's, from :func:`remap_gold`)."""
    return assemble_gold((nodes, page, is_page) for g in golds
                         for nodes, page, is_page in zip(g.items, g.item_pages, g.item_is_page))


__all__ = ["GoldEvidence", "GoldStats", "assemble_gold", "resolve_gold", "resolve_gold_detailed", "remap_gold", "merge_gold"]
