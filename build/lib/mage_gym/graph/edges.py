"""The relations of the evidence graph (the paper's five plus ``reference``), built as columnar arrays.

Why columnar: a 100-page filing has ~3,000 elements and tens of thousands of
edges; the environment indexes them with numpy (CSR per kind) and the cache
stores them as ``.npy`` files, so edges never exist as Python objects unless a
person asks for them (:attr:`EvidenceGraph.edges`).

Edge direction conventions (the graph's adjacency is undirected; direction is
kept for people and tools):

* ``containment``: page -> element (label ``contains``).
* ``reading_order``: element -> next element in document order, across page
  breaks, and page -> next page (label ``next``).
* ``layout``: between spatial neighbours on one page; the label says where the
  *target* lies relative to the source (``left``/``right``/``above``/``below``);
  the source is the element earlier in reading order.
* ``section``: heading -> sub-heading (``subsection``) and heading -> element of
  its section (``contains``), over the whole document, not per page.
* ``semantic``: embedding k-nearest neighbours among elements and among pages
  (label ``similar``), source earlier than target, weight = cosine similarity.
* ``reference``: an element that mentions "Figure 3", "Table 2", "Section 4.1",
  "Note 7" or "see page 12" -> the caption, heading or page that defines it
  (label: the mention's kind; :mod:`mage_gym.graph.references`).

The pure helpers (:func:`section_structure`, :func:`caption_pairs`,
:func:`is_caption_like`) are shared with the builder and the summariser so the
section paths stored on elements and the caption used in a figure's summary
are exactly the ones the edges encode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from mage_gym.graph.patterns import CAPTION_LIKE_RE
from mage_gym.graph.schema import EDGE_KINDS, BBox, Element, Page
from mage_gym.graph.settings import Settings

VISUALS: frozenset[str] = frozenset({"figure", "chart", "table"})
#: Text types that can serve as a table's header line or a visual's caption.
_TEXTUAL: frozenset[str] = frozenset({"paragraph", "caption", "title", "list", "footnote"})


@dataclass(frozen=True)
class EdgeConfig(Settings):
    """Knobs of the edge builder (part of the graph cache key).

    Distances are in normalised page units (1.0 = page width/height).
    """

    kind: ClassVar[str] = "edge"

    layout_k: int = 3  # spatial neighbours per element
    layout_min_gap: float = 0.01  # distance at which layout weight saturates at 1.0
    caption_max_gap: float = 0.08  # max box gap for caption/header pairing
    semantic_k_elements: int = 3
    semantic_k_pages: int = 2
    semantic_min_sim: float = 0.5  # below this cosine, nodes are unrelated
    semantic_block: int = 1024  # rows per matmul block (memory ~ block * n * 4 bytes)
    references: bool = True  # build the ``reference`` relation (False: the paper's five relations only)


@dataclass
class EdgeArrays:
    """Columnar edges, exactly the fields :class:`EvidenceGraph` stores."""

    src: np.ndarray  # int32
    dst: np.ndarray  # int32
    kind: np.ndarray  # int8 index into EDGE_KINDS
    weight: np.ndarray  # float32
    label: list[str]

    def __len__(self) -> int:
        return int(self.src.shape[0])

    def counts(self) -> dict[str, int]:
        c = np.bincount(self.kind.astype(np.int64), minlength=len(EDGE_KINDS))
        return {k: int(n) for k, n in zip(EDGE_KINDS, c)}


class _Collector:
    """Accumulates edge blocks per kind (numpy chunks, concatenated once)."""

    def __init__(self) -> None:
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.kind: list[np.ndarray] = []
        self.weight: list[np.ndarray] = []
        self.label: list[str] = []

    def add(self, kind: str, src: Sequence[int] | np.ndarray, dst: Sequence[int] | np.ndarray,
            weight: Sequence[float] | np.ndarray | None = None, label: str | Sequence[str] = "") -> None:
        s = np.asarray(src, dtype=np.int32).reshape(-1)
        d = np.asarray(dst, dtype=np.int32).reshape(-1)
        n = s.shape[0]
        if n == 0:
            return
        w = np.ones(n, dtype=np.float32) if weight is None else np.asarray(weight, dtype=np.float32).reshape(-1)
        self.src.append(s)
        self.dst.append(d)
        self.kind.append(np.full(n, EDGE_KINDS.index(kind), dtype=np.int8))
        self.weight.append(w)
        self.label.extend([label] * n if isinstance(label, str) else list(label))

    def finish(self) -> EdgeArrays:
        if not self.src:
            return EdgeArrays(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int8),
                              np.zeros(0, np.float32), [])
        return EdgeArrays(np.concatenate(self.src), np.concatenate(self.dst), np.concatenate(self.kind),
                          np.concatenate(self.weight), self.label)


# --- geometry -----------------------------------------------------------------


def _gaps(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairwise horizontal and vertical box gaps (0 where the boxes overlap on that axis)."""
    x0, y0, x1, y1 = (boxes[:, i] for i in range(4))
    dx = np.maximum(0.0, np.maximum(x0[None, :] - x1[:, None], x0[:, None] - x1[None, :]))
    dy = np.maximum(0.0, np.maximum(y0[None, :] - y1[:, None], y0[:, None] - y1[None, :]))
    return dx, dy


def _direction(a: BBox, b: BBox, dx: float, dy: float) -> str:
    """Where box ``b`` lies relative to box ``a``.

    The axis with the larger gap decides; boxes that overlap on both axes fall
    back to the larger centre offset (relative to the boxes' sizes).
    """
    cax, cay = (a[0] + a[2]) / 2, (a[1] + a[3]) / 2
    cbx, cby = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
    if dx > dy:
        horizontal = True
    elif dy > dx:
        horizontal = False
    else:
        wx = max(1e-6, (a[2] - a[0] + b[2] - b[0]) / 2)
        wy = max(1e-6, (a[3] - a[1] + b[3] - b[1]) / 2)
        horizontal = abs(cbx - cax) / wx > abs(cby - cay) / wy
    if horizontal:
        return "right" if cbx >= cax else "left"
    return "below" if cby >= cay else "above"


def is_caption_like(etype: str, text: str) -> bool:
    """A caption element, or a short text line that reads like one ("Figure 3: ...", "Table 2 ...")."""
    if etype == "caption":
        return True
    return etype in ("paragraph", "title", "footnote") and len(text) <= 400 and bool(CAPTION_LIKE_RE.match(text))


def caption_pairs(types: Sequence[str], boxes: Sequence[BBox], texts: Sequence[str],
                  max_gap: float = EdgeConfig.caption_max_gap) -> dict[int, list[int]]:
    """Captions and table header lines of the visuals on ONE page.

    Returns ``{visual position: [text positions]}`` (positions within the
    given lists). A caption-like element belongs to the single nearest visual
    whose box is within ``max_gap`` and that it is aligned with (overlaps on
    the other axis). A table with no caption still gets the nearest text line
    directly above it (its header text), if adjacent. Figures and charts with
    no caption get the nearest caption-like text on either side.
    """
    n = len(types)
    out: dict[int, list[int]] = {}
    vis = [i for i in range(n) if types[i] in VISUALS]
    if not vis or n < 2:
        return out
    b = np.asarray(boxes, dtype=np.float64).reshape(n, 4)
    dx, dy = _gaps(b)
    dist = np.hypot(dx, dy)
    aligned = (dx == 0) | (dy == 0)
    taken: set[int] = set()
    for c in range(n):
        if types[c] in VISUALS or not is_caption_like(types[c], texts[c]):
            continue
        cand = [v for v in vis if aligned[c, v] and dist[c, v] <= max_gap]
        if cand:
            v = min(cand, key=lambda v: (dist[c, v], v))
            out.setdefault(v, []).append(c)
            taken.add(c)
    for v in vis:
        if types[v] != "table" or v in out:
            continue
        # header text: the nearest text directly above the table, horizontally overlapping
        above = [t for t in range(n) if t != v and types[t] in _TEXTUAL and t not in taken and dx[v, t] == 0
                 and b[t, 3] <= b[v, 1] + 1e-6 and dy[v, t] <= max_gap and texts[t].strip()]
        if above:
            t = min(above, key=lambda t: (dy[v, t], t))
            out[v] = [t]
            taken.add(t)
    return out


# --- section tree -------------------------------------------------------------


def _title_text(text: str, limit: int = 100) -> str:
    t = " ".join(text.split())
    return t if len(t) <= limit else t[: limit - 1].rstrip() + "\u2026"


def section_structure(types: Sequence[str], levels: Sequence[int | None],
                      texts: Sequence[str]) -> tuple[list[int], list[tuple[str, ...]]]:
    """Parent heading and section path of every element, over the whole document.

    Elements are given in document reading order. A ``title`` opens a section
    that holds everything after it until the next title of the same or a
    higher level (smaller number), across page boundaries. Titles with no level
    count as level 1. Returns ``(parent, path)``: ``parent[i]`` is the position
    of the nearest enclosing heading (``-1`` for none); ``path[i]`` the titles of
    the enclosing headings, outermost first; a heading's path ends with itself
    (the section it opens), so a sub-heading reads ``("Results", "Ablations")``.
    """
    parent: list[int] = []
    paths: list[tuple[str, ...]] = []
    stack: list[tuple[int, int, str]] = []  # (level, position, title)
    for i, (t, lvl, txt) in enumerate(zip(types, levels, texts)):
        if t == "title":
            level = int(lvl) if lvl is not None and int(lvl) > 0 else 1
            while stack and stack[-1][0] >= level:
                stack.pop()
            parent.append(stack[-1][1] if stack else -1)
            stack.append((level, i, _title_text(txt)))
            paths.append(tuple(s[2] for s in stack))
        else:
            parent.append(stack[-1][1] if stack else -1)
            paths.append(tuple(s[2] for s in stack))
    return parent, paths


# --- the five relations ---------------------------------------------------------


def _containment(out: _Collector, n_pages: int, el_page: np.ndarray) -> None:
    out.add("containment", el_page, n_pages + np.arange(el_page.shape[0]), label="contains")


def _reading_order(out: _Collector, n_pages: int, n_el: int) -> None:
    if n_el > 1:
        i = np.arange(n_el - 1)
        out.add("reading_order", n_pages + i, n_pages + i + 1, label="next")
    if n_pages > 1:
        p = np.arange(n_pages - 1)
        out.add("reading_order", p, p + 1, label="next")


def _layout(out: _Collector, n_pages: int, elements: Sequence[Element], el_page: np.ndarray,
            cfg: EdgeConfig) -> None:
    """k nearest boxes per element on its page, plus forced caption/header pairs."""
    if not elements:
        return
    boxes_all = np.asarray([e.bbox for e in elements], dtype=np.float64)
    starts = np.flatnonzero(np.r_[True, el_page[1:] != el_page[:-1]])
    ends = np.r_[starts[1:], len(elements)]
    src: list[int] = []
    dst: list[int] = []
    wts: list[float] = []
    labs: list[str] = []
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        m = hi - lo
        if m < 2:
            continue
        b = boxes_all[lo:hi]
        dx, dy = _gaps(b)
        dist = np.hypot(dx, dy)
        np.fill_diagonal(dist, np.inf)
        pairs: set[tuple[int, int]] = set()
        k = min(cfg.layout_k, m - 1)
        if k > 0:
            # stable order: by distance, then by position (ties broken deterministically)
            order = np.argsort(dist, axis=1, kind="stable")[:, :k]
            for i in range(m):
                for j in order[i].tolist():
                    pairs.add((min(i, j), max(i, j)))
        page_el = elements[lo:hi]
        forced = caption_pairs([e.type for e in page_el], [e.bbox for e in page_el], [e.text for e in page_el],
                               cfg.caption_max_gap)
        for v, caps in forced.items():
            for c in caps:
                pairs.add((min(v, c), max(v, c)))
        for i, j in sorted(pairs):
            d = float(dist[i, j])
            src.append(n_pages + lo + i)
            dst.append(n_pages + lo + j)
            wts.append(cfg.layout_min_gap / max(d, cfg.layout_min_gap))
            labs.append(_direction(page_el[i].bbox, page_el[j].bbox, float(dx[i, j]), float(dy[i, j])))
    out.add("layout", src, dst, wts, labs)


def _section(out: _Collector, n_pages: int, elements: Sequence[Element]) -> None:
    parent, _ = section_structure([e.type for e in elements], [e.heading_level for e in elements],
                                  [e.text for e in elements])
    par = np.asarray(parent, dtype=np.int64)
    child = np.flatnonzero(par >= 0)
    if child.size == 0:
        return
    labels = ["subsection" if elements[c].type == "title" else "contains" for c in child.tolist()]
    out.add("section", n_pages + par[child], n_pages + child, label=labels)


def _reference(out: _Collector, pages: Sequence[Page], elements: Sequence[Element]) -> None:
    from mage_gym.graph.references import find_references

    seen: dict[tuple[int, int], str] = {}
    for m in find_references(pages, elements):
        if m.target >= 0 and (m.source, m.target) not in seen:
            seen[(m.source, m.target)] = m.label
    if seen:
        out.add("reference", [s for s, _ in seen], [t for _, t in seen], label=list(seen.values()))


#: similarities closer than 1 / RANK_GRID count as tied when ranking neighbours (see :func:`knn_pairs`)
RANK_GRID = 100


def knn_pairs(vectors: np.ndarray, k: int, min_sim: float, block: int = 1024,
              groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unordered pairs ``(i < j)`` where j is among i's k most similar rows or vice versa.

    Blocked matmul (``block`` rows at a time) keeps memory at ``block * n``
    floats, so thousands of elements take milliseconds. Pairs below
    ``min_sim`` are dropped; zero vectors (empty text) never pass a positive
    threshold. Returns ``(i, j, sim)`` sorted by ``(i, j)``.

    Neighbours are ranked by similarity rounded to ``1 / RANK_GRID``, then by
    distance in reading order (nearer first). Why: repeated texts have equal
    vectors, and the encoder's last digits change with batch composition and
    thread count; ranking by raw similarity let that noise pick among tied
    neighbours, so the graph changed with the number of build workers. The
    returned similarities are recomputed per pair outside BLAS for the same
    reason (see the end of the function).

    ``groups`` (int [n], optional): rows of the same group are never
    neighbours, so each row's k neighbours come from other groups only. The
    union of several documents' graphs (:mod:`mage_gym.graph.union`) passes the
    document of each row to add cross-document pairs with exactly these rules;
    ``None`` (the default, every single-document graph) leaves the result
    unchanged.
    """
    n = int(vectors.shape[0])
    k = min(k, n - 1)
    if n < 2 or k <= 0:
        e = np.zeros(0, dtype=np.int64)
        return e, e, np.zeros(0, dtype=np.float32)
    v = np.ascontiguousarray(vectors, dtype=np.float32)
    if groups is not None:
        groups = np.asarray(groups).reshape(-1)
        if groups.shape[0] != n:
            raise ValueError(f"groups has {groups.shape[0]} entries for {n} rows")
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        s = v[lo:hi] @ v.T  # [b, n]
        s[np.arange(hi - lo), np.arange(lo, hi)] = -np.inf
        if groups is not None:
            s[groups[lo:hi, None] == groups[None, :]] = -np.inf
        # in grid steps: rounded similarity, minus reading distance / n (less than one step)
        rank = np.rint(s.astype(np.float64) * RANK_GRID)
        rank -= np.abs(np.subtract.outer(np.arange(lo, hi, dtype=np.float64), np.arange(n, dtype=np.float64))) / n
        top = np.argpartition(-rank, k - 1, axis=1)[:, :k]
        ts = np.take_along_axis(s, top, axis=1)
        keep = ts >= min_sim
        r = np.broadcast_to(np.arange(lo, hi)[:, None], top.shape)
        rows.append(r[keep])
        cols.append(top[keep])
    i = np.concatenate(rows).astype(np.int64)
    j = np.concatenate(cols).astype(np.int64)
    a, b = np.minimum(i, j), np.maximum(i, j)
    code = np.unique(a * n + b)
    a, b = code // n, code % n
    # the stored similarity: one dot product per kept pair in numpy's own loop, not BLAS, whose last bit
    # depends on its thread count (OMP_NUM_THREADS at process start: a Ray task or a build worker vs. the
    # driver), so the edge weights, like the choice of neighbours above, do not change with it
    sim = np.einsum("ij,ij->i", v[a], v[b]).astype(np.float32)
    return a, b, sim


def _semantic(out: _Collector, n_pages: int, n_el: int, vectors: np.ndarray, el_page: np.ndarray,
              cfg: EdgeConfig) -> None:
    page_v, el_v = vectors[:n_pages], vectors[n_pages:]
    n = n_pages + n_el
    # Pairs already joined by containment are excluded. Element-element and
    # page-page pairs never are today; the check keeps that true if kinds mix.
    contained = np.sort(el_page.astype(np.int64) * n + n_pages + np.arange(n_el, dtype=np.int64))
    for offset, vecs, k in ((n_pages, el_v, cfg.semantic_k_elements), (0, page_v, cfg.semantic_k_pages)):
        i, j, sim = knn_pairs(vecs, k, cfg.semantic_min_sim, cfg.semantic_block)
        s, d = i + offset, j + offset
        keep = ~(np.isin(s * n + d, contained) | np.isin(d * n + s, contained))
        s, d, sim = s[keep], d[keep], sim[keep]
        out.add("semantic", s, d, sim, label="similar")


def build_edges(pages: Sequence[Page], elements: Sequence[Element], vectors: np.ndarray | None,
                cfg: EdgeConfig | Mapping[str, Any] | None = None) -> EdgeArrays:
    """All relations of one document (the paper's five, and ``reference`` unless ``cfg.references`` is off).

    ``elements`` must be in document reading order (their node index is
    ``len(pages) + position``); ``vectors`` is the ``[n_pages + n_elements, dim]``
    embedding matrix, pages first, L2-normalised (``None`` skips semantic edges).
    """
    cfg = EdgeConfig.from_dict(cfg)
    n_pages, n_el = len(pages), len(elements)
    el_page = np.fromiter((e.page for e in elements), dtype=np.int64, count=n_el)
    if n_el and (np.any(np.diff(el_page) < 0) or el_page.max() >= n_pages or el_page.min() < 0):
        raise ValueError("elements must be in document order and refer to existing pages")
    out = _Collector()
    _containment(out, n_pages, el_page)
    _reading_order(out, n_pages, n_el)
    _layout(out, n_pages, elements, el_page, cfg)
    _section(out, n_pages, elements)
    if cfg.references:
        _reference(out, pages, elements)
    if vectors is not None:
        if vectors.shape[0] != n_pages + n_el:
            raise ValueError(f"vectors has {vectors.shape[0]} rows, expected {n_pages + n_el} (pages + elements)")
        _semantic(out, n_pages, n_el, vectors, el_page, cfg)
    return out.finish()
