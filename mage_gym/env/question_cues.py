"""Question-aware, per-episode candidate columns: what a question asks for, beyond word overlap.

Why: the relevance percentiles say how much a node's words resemble the
question. They do not say that "the chart on page 12" wants a chart, or the
page whose footer prints 12, or that a page whose best element is highly
relevant is worth its image even when the page's own score is middling. These
columns give a controller (rule or learned) those signals. All are constant
over an episode, so they are computed once per (graph, question) at reset and
cached with the rest of the episode table (observation.node_table).

Columns (:data:`QUESTION_FEATURES`, each in [0, 1]):

- ``page_best_element_rel``: the best fused element percentile on the node's
  page (for a page node, its own elements; 0 for a page without elements);
- ``cue_type_match``: 1 when the node's type is one the question cues (chart,
  graph, plot, diagram -> chart/figure; figure, image, picture, photo, ... ->
  figure/chart; table -> table; a counting question, "how many" / "number
  of", -> list/table, where enumerations live); a page matches when it holds
  such an element;
- ``cue_page_label``: 1 on the pages (and their elements) whose header or
  footer prints a page number the question names ("page 12", "p. 12",
  "pages 3-5", "slide 7"). Printed labels, never PDF indices: a report's
  "page 12" is rarely its 12th PDF page. The label map is the reference
  relation's (mage_gym.graph.references), so one rule decides what a printed
  label is.
"""
from __future__ import annotations

import re

import numpy as np

from mage_gym.env.graph_index import GraphIndex
from mage_gym.graph.schema import NODE_TYPES

QUESTION_FEATURES: tuple[str, ...] = ("page_best_element_rel", "cue_type_match", "cue_page_label")

#: (pattern in the question, element types it asks for)
_TYPE_CUES: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"\b(?:charts?|graphs?|plots?|diagrams?|histograms?|infographics?)\b", re.I), ("chart", "figure")),
    (re.compile(r"\b(?:figures?|figs?|images?|pictures?|photos?|photographs?|illustrations?|screenshots?|logos?"
                r"|icons?|maps?)\b", re.I), ("figure", "chart")),
    (re.compile(r"\b(?:tables?|tabular)\b", re.I), ("table",)),
    (re.compile(r"\bhow\s+many\b|\bnumber\s+of\b|\bcount\b", re.I), ("list", "table")),
)
#: "page 12", "pages 3-5", "p. 12", "pp. 3 and 4", "slide 7": the printed numbers a question names
_PAGE_MENTION_RE = re.compile(
    r"\b(?:pages?|pp?\.|slides?)\s*(\d{1,4})(?:\s*(?:-|–|to|and|&|or|,)\s*(\d{1,4}))?", re.I)
_MAX_RANGE = 10  # a wider "pages 3-40" names its two ends only

_TYPE_INDEX = {t: i for i, t in enumerate(NODE_TYPES)}


def cued_types(question: str) -> frozenset[str]:
    """Element types the question's wording asks for (empty: no type cue)."""
    out: set[str] = set()
    for pattern, types in _TYPE_CUES:
        if pattern.search(question):
            out.update(types)
    return frozenset(out)


def page_mentions(question: str) -> tuple[str, ...]:
    """Printed page numbers the question names, as label keys (no leading zeros), in order of mention."""
    out: list[str] = []
    for m in _PAGE_MENTION_RE.finditer(question):
        a = int(m.group(1))
        nums = [a]
        if m.group(2) is not None:
            b = int(m.group(2))
            nums = list(range(a, b + 1)) if 0 < b - a <= _MAX_RANGE else [a, b]
        out.extend(str(x) for x in nums if str(x) not in out)
    return tuple(out)


def _node_types(gi: GraphIndex) -> np.ndarray:
    """intp [n]: index into NODE_TYPES of every node (from the static one-hot columns; kept on the index)."""
    return gi.derived("question_cues.node_types",
                      lambda g: g.static[:, : len(NODE_TYPES)].argmax(axis=1).astype(np.intp))


def _page_labels(gi: GraphIndex) -> dict[str, int]:
    """Printed page label -> page, by the reference relation's label rule (kept on the index)."""
    from mage_gym.graph.references import _printed_page_labels

    return gi.derived("question_cues.page_labels", lambda g: _printed_page_labels(g.graph.pages))


def best_element_on_page(gi: GraphIndex, fused: np.ndarray) -> np.ndarray:
    """float32 [n_pages]: the highest element percentile of each page (0 where a page has no element)."""
    best = np.zeros(gi.n_pages, dtype=np.float32)
    nonempty = gi.page_hi > gi.page_lo
    if gi.n_nodes > gi.n_pages and nonempty.any():
        # elements are grouped by page, so consecutive non-empty pages' starts delimit the segments
        best[nonempty] = np.maximum.reduceat(fused[gi.n_pages:], gi.page_lo[nonempty] - gi.n_pages)
    return best


def question_columns(gi: GraphIndex, question: str, fused: np.ndarray) -> np.ndarray:
    """float32 [n, len(QUESTION_FEATURES)] for one episode; ``fused`` is the fused percentile of every node."""
    n, n_pages = gi.n_nodes, gi.n_pages
    out = np.zeros((n, len(QUESTION_FEATURES)), dtype=np.float32)
    node_page = gi.node_page
    out[:, 0] = best_element_on_page(gi, np.asarray(fused, dtype=np.float32))[node_page]
    types = cued_types(question)
    if types:
        wanted = np.zeros(len(NODE_TYPES), dtype=bool)
        wanted[[_TYPE_INDEX[t] for t in types]] = True
        match = wanted[_node_types(gi)]
        page_has = np.bincount(node_page[n_pages:][match[n_pages:]], minlength=n_pages) > 0
        match[:n_pages] = page_has
        out[:, 1] = match
    mentioned = page_mentions(question)
    if mentioned:
        labels = _page_labels(gi)
        hit = np.zeros(n_pages, dtype=bool)
        idx = [labels[m] for m in mentioned if m in labels]
        if idx:
            hit[idx] = True
            out[:, 2] = hit[node_page]
    return out
