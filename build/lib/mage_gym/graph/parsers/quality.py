"""How well parsed regions line up with human region-level evidence boxes.

Why this measure: the controller opens *elements*; a gold evidence region is
usable at element granularity only if some set of parsed elements covers it
tightly. The rule (from the project brief): a gold box is *matched* when the
union of the page's parsed elements lying >= 80% inside it has IoU >= 0.5 with
it. Elements that spill far outside the gold box do not count (they would
drag in noise), and a gold box cut into several elements still matches.

Gold: MMDocIR's ``mmdocir_layout.jsonl`` for MMLongBench-Doc; boxes are in PDF
points of the annotation's ``page_size`` and are rescaled to the real page.
Each box takes its question's evidence type; a question citing several types
gives its boxes the category ``mixed`` (and ``none`` when it cites none).
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from mage_gym.graph.schema import BBox, bbox_inside_fraction, bbox_iou

#: MMLongBench-Doc / MMDocIR evidence type -> short category.
EVIDENCE_TYPES: dict[str, str] = {
    "Pure-text (Plain-text)": "text",
    "Table": "table",
    "Chart": "chart",
    "Figure": "figure",
    "Generalized-text (Layout)": "layout",
}
CATEGORIES: tuple[str, ...] = ("text", "table", "chart", "figure", "layout", "mixed", "none")

INSIDE_SHARE = 0.8
MIN_IOU = 0.5


@dataclass(frozen=True)
class GoldBox:
    doc: str  # PDF file name
    page: int  # 0-based
    bbox: BBox  # in points of ``page_size``
    page_size: tuple[float, float]
    category: str  # the single type, or "mixed" / "none"
    types: tuple[str, ...] = ()  # every type cited by a question using this box

    def rescaled(self, width: float, height: float) -> BBox:
        """The box in a page of ``width`` x ``height`` units."""
        return rescale_bbox(self.bbox, self.page_size, (width, height))


def rescale_bbox(bbox: BBox, page_size: Sequence[float], real_size: Sequence[float]) -> BBox:
    sx = real_size[0] / page_size[0] if page_size[0] else 1.0
    sy = real_size[1] / page_size[1] if page_size[1] else 1.0
    x0, y0, x1, y1 = bbox
    return (x0 * sx, y0 * sy, x1 * sx, y1 * sy)


def evidence_category(types: Iterable[str]) -> str:
    cats = {EVIDENCE_TYPES.get(t.strip(), "other") for t in types if t and t.strip()}
    if not cats:
        return "none"
    return cats.pop() if len(cats) == 1 else "mixed"


def _parse_types(raw: object) -> list[str]:
    if isinstance(raw, list):
        return [str(t) for t in raw]
    if isinstance(raw, str) and raw.strip():
        try:
            val = ast.literal_eval(raw)
            return [str(t) for t in val] if isinstance(val, (list, tuple)) else [str(val)]
        except (ValueError, SyntaxError):
            return [raw]
    return []


def load_gold_boxes(path: str | Path) -> dict[str, list[GoldBox]]:
    """Gold boxes per document, de-duplicated (the same box cited by several
    questions counts once; if their types differ it becomes ``mixed``)."""
    per_doc: dict[str, dict[tuple, GoldBox]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            doc = rec["doc_name"]
            seen = per_doc.setdefault(doc, {})
            for q in rec.get("questions", ()):
                raw_types = _parse_types(q.get("type"))
                cat = evidence_category(raw_types)
                short = tuple(sorted({EVIDENCE_TYPES.get(t.strip(), "other") for t in raw_types if t.strip()}))
                for m in q.get("layout_mapping", ()) or ():
                    try:
                        bbox = tuple(float(v) for v in m["bbox"])
                        size = (float(m["page_size"][0]), float(m["page_size"][1]))
                        page = int(m["page"])
                    except (KeyError, TypeError, ValueError, IndexError):
                        continue
                    if len(bbox) != 4 or bbox[2] <= bbox[0] or bbox[3] <= bbox[1]:
                        continue
                    key = (page, tuple(round(v, 1) for v in bbox))
                    old = seen.get(key)
                    if old is not None and old.category != cat:
                        cat_final = "mixed"
                    else:
                        cat_final = cat
                    types = tuple(sorted(set(short) | set(old.types if old else ())))
                    seen[key] = GoldBox(doc, page, bbox, size, cat_final, types)  # type: ignore[arg-type]
    return {doc: list(boxes.values()) for doc, boxes in per_doc.items()}


def match_gold(gold: BBox, elements: Sequence[BBox], inside: float = INSIDE_SHARE, min_iou: float = MIN_IOU) -> tuple[bool, float]:
    """(matched, IoU) of the union of elements lying >= ``inside`` within ``gold``."""
    members = [b for b in elements if bbox_inside_fraction(b, gold) >= inside]
    if not members:
        return False, 0.0
    u = (min(b[0] for b in members), min(b[1] for b in members), max(b[2] for b in members), max(b[3] for b in members))
    iou = bbox_iou(u, gold)
    return iou >= min_iou, iou


#: Gold categories whose element type we can check, and the parsed types that count as right.
TYPED_CATEGORIES: dict[str, frozenset[str]] = {
    "table": frozenset({"table"}), "chart": frozenset({"chart"}), "figure": frozenset({"figure"}),
}


def best_overlap_type(gold: BBox, elements: Sequence[tuple[BBox, str]], min_iou: float = 0.3) -> str | None:
    """Type of the parsed element that overlaps ``gold`` most (IoU >= ``min_iou``), else None.

    Why: box matching says whether a region was *found*; this says whether it
    was *named* right (a chart typed ``figure`` is found but loses its chart
    features in the environment and its crop in the reader input).
    """
    best, best_iou = None, min_iou
    for box, kind in elements:
        iou = bbox_iou(box, gold)
        if iou >= best_iou:
            best, best_iou = kind, iou
    return best


@dataclass
class Tally:
    n: int = 0
    matched: int = 0
    iou_sum: float = 0.0

    def add(self, matched: bool, iou: float) -> None:
        self.n += 1
        self.matched += int(matched)
        self.iou_sum += iou

    def as_dict(self) -> dict[str, float]:
        return {
            "boxes": self.n,
            "matched": self.matched,
            "match_rate": round(self.matched / self.n, 4) if self.n else 0.0,
            "mean_iou": round(self.iou_sum / self.n, 4) if self.n else 0.0,
        }


__all__ = [
    "EVIDENCE_TYPES", "CATEGORIES", "GoldBox", "load_gold_boxes", "match_gold", "rescale_bbox",
    "evidence_category", "Tally", "TYPED_CATEGORIES", "best_overlap_type",
]
