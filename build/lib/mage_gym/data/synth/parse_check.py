"""Does a parser see what the generator drew? Match gold boxes to parsed elements.

Why: gold evidence is the generator's own geometry, but the environment
rewards and scores on *graph nodes*, which come from a parser. If a parser
merges two paragraphs or misses a ruled table, gold cannot be resolved onto
nodes and the episode is silently weaker. This check builds the graph of a few
sampled documents with each parser and, for every drawn element, looks for a
parsed element of a compatible type with IoU >= 0.5 on the same page.

Three rates per element type:
- ``strict``: a parsed element of the same type overlaps with IoU >= threshold;
- ``compatible``: same, allowing compatible types (a list read as paragraphs,
  a chart read as a figure, a caption read as a paragraph);
- ``merged``: the union box of compatible parsed elements lying mostly inside
  the gold box reaches the threshold (a list split into one element per item).
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from mage_gym.graph.schema import BBox, bbox_inside_fraction, bbox_iou

#: Parsed types that count as a match for each gold type (``compatible`` rate).
COMPATIBLE: dict[str, frozenset[str]] = {
    "paragraph": frozenset({"paragraph", "list"}),
    "list": frozenset({"list", "paragraph"}),
    "title": frozenset({"title"}),
    "table": frozenset({"table"}),
    "chart": frozenset({"chart", "figure"}),
    "figure": frozenset({"figure", "chart"}),
    "caption": frozenset({"caption", "paragraph"}),
    "footnote": frozenset({"footnote", "paragraph"}),
}
#: Gold types that must reach 100% (compatible) for the corpus to be usable.
REQUIRED_TYPES: tuple[str, ...] = ("paragraph", "list", "title", "table", "chart", "figure")


@dataclass
class TypeStats:
    n: int = 0
    strict: int = 0
    compatible: int = 0
    merged: int = 0

    def rates(self) -> dict[str, float | int]:
        d = max(self.n, 1)
        return {"n": self.n, "strict": round(self.strict / d, 4), "compatible": round(self.compatible / d, 4),
                "merged": round(self.merged / d, 4)}


@dataclass
class CheckResult:
    parser: str
    docs: list[str] = field(default_factory=list)
    by_type: dict[str, TypeStats] = field(default_factory=lambda: defaultdict(TypeStats))
    question_gold: TypeStats = field(default_factory=TypeStats)
    misses: list[dict[str, Any]] = field(default_factory=list)  # unmatched gold (compatible), for debugging
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "parser": self.parser, "docs": self.docs, "seconds": round(self.seconds, 2),
            "by_type": {t: s.rates() for t, s in sorted(self.by_type.items())},
            "question_gold": self.question_gold.rates(),
            "required_ok": self.required_ok(),
            "misses": self.misses[:50],
        }

    def required_ok(self) -> bool:
        return all(self.by_type[t].compatible == self.by_type[t].n for t in REQUIRED_TYPES if t in self.by_type)


def _union(boxes: Sequence[BBox]) -> BBox:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def match_element(gold_type: str, gold_box: BBox, parsed: Iterable[tuple[str, BBox]], threshold: float = 0.5
                  ) -> tuple[bool, bool, bool, float]:
    """``(strict, compatible, merged, best_iou)`` for one gold box against one page's parsed elements."""
    ok_types = COMPATIBLE.get(gold_type, frozenset({gold_type}))
    strict = compatible = False
    best = 0.0
    inside: list[BBox] = []
    for ptype, pbox in parsed:
        iou = bbox_iou(gold_box, pbox)
        if ptype in ok_types:
            best = max(best, iou)
            if iou >= threshold:
                compatible = True
                strict = strict or ptype == gold_type
            if bbox_inside_fraction(pbox, gold_box) >= 0.8:
                inside.append(pbox)
    merged = compatible or (bool(inside) and bbox_iou(gold_box, _union(inside)) >= threshold)
    return strict, compatible, merged, best


def check_document(pdf: str | os.PathLike[str], gold_elements: list[dict[str, Any]], parser: str,
                   question_gold: Iterable[tuple[int, BBox, str]] = (), threshold: float = 0.5,
                   result: CheckResult | None = None, max_pages: int | None = None) -> CheckResult:
    """Parse one PDF (no embeddings, no cache) and add its match counts to ``result``."""
    import time

    from mage_gym.graph.build import build_graph

    res = result or CheckResult(parser)
    t0 = time.perf_counter()
    g = build_graph(str(pdf), parser=parser, cache=False, encoder=None, max_pages=max_pages)
    res.seconds += time.perf_counter() - t0
    by_page: dict[int, list[tuple[str, BBox]]] = defaultdict(list)
    for e in g.elements:
        by_page[e.page].append((e.type, tuple(e.bbox)))  # type: ignore[arg-type]
    n_pages = g.n_pages
    res.docs.append(Path(pdf).stem)
    for ge in gold_elements:
        if ge["page"] >= n_pages:
            continue
        box = tuple(ge["bbox"])
        s, c, m, best = match_element(ge["type"], box, by_page[ge["page"]], threshold)  # type: ignore[arg-type]
        st = res.by_type[ge["type"]]
        st.n += 1
        st.strict += s
        st.compatible += c
        st.merged += m
        if not c:
            res.misses.append({"doc": Path(pdf).stem, "id": ge.get("id"), "type": ge["type"], "page": ge["page"],
                               "best_iou": round(best, 3), "text": str(ge.get("text", ""))[:60]})
    for page, box, etype in question_gold:
        if page >= n_pages:
            continue
        s, c, m, _ = match_element(etype, box, by_page[page], threshold)
        res.question_gold.n += 1
        res.question_gold.strict += s
        res.question_gold.compatible += c
        res.question_gold.merged += m
    return res


def check_corpus(root: str | os.PathLike[str], parsers: Sequence[str] = ("fast", "layout"), n_docs: int = 3,
                 threshold: float = 0.5, max_pages: int | None = None) -> dict[str, CheckResult]:
    """Check the first ``n_docs`` documents of a generated corpus with each parser."""
    from mage_gym.data.synth.corpus import load_synth, read_manifest

    base = Path(root)
    manifest = read_manifest(base)
    docs = manifest["docs"][: max(0, n_docs)]
    episodes = load_synth(base)
    qgold: dict[str, list[tuple[int, BBox, str]]] = defaultdict(list)
    for ep in episodes:
        for r in ep.evidence_regions:
            qgold[ep.doc_id].append((r.page, r.bbox, r.type))
    out: dict[str, CheckResult] = {}
    for parser in parsers:
        res = CheckResult(parser)
        for d in docs:
            layout = json.loads((base / d["layout"]).read_text(encoding="utf-8"))
            check_document(base / d["file"], layout["elements"], parser, qgold[d["doc_id"]], threshold, res,
                           max_pages)
        out[parser] = res
    return out


def format_table(results: dict[str, CheckResult]) -> str:
    """A plain-text match table: one row per (parser, type)."""
    lines = [f"{'parser':<8} {'type':<10} {'n':>6} {'strict':>7} {'compat':>7} {'merged':>7}"]
    for parser, res in results.items():
        rows = [(t, s.rates()) for t, s in sorted(res.by_type.items())] + [("Q-gold", res.question_gold.rates())]
        for t, r in rows:
            lines.append(f"{parser:<8} {t:<10} {r['n']:>6} {r['strict']:>7.1%} {r['compatible']:>7.1%} "
                         f"{r['merged']:>7.1%}")
    return "\n".join(lines)
