"""Exact precision and recall of the ``reference`` relation on synthetic documents, where the targets are known.

Why synthetic: on real PDFs only a hand-labelled sample tells whether a link
is right, and nothing tells which references were missed. The generator
records every cross-reference it draws (``layout/<doc>.json`` ->
``references``: source block, mention, kind, target block, target page), and
every block's box, so each parsed mention can be checked against the truth.

Matching, per document (one parsed graph, no embeddings):

- a drawn reference is *found* when a parsed mention with the same label and
  number sits in an element on the source block's page whose box overlaps the
  source block (one parsed mention per drawn reference, first come first
  served in reading order);
- a found reference is *correct* when its parsed target is an element on the
  target's page overlapping the target block or the block's caption (a table
  or chart is cited by its caption as much as by its body), or, for a page
  mention, the target page itself (or an element on it);
- a parsed mention matching no drawn reference is *spurious*; when it is
  linked, its link counts against precision (the generator records every
  reference it writes, so such a link has no true target).

Per kind: ``recall = correct / drawn``, ``found_recall = found / drawn``,
``precision = correct / (linked found + linked spurious)``.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from mage_gym.graph.schema import BBox, bbox_inside_fraction

#: Share of the smaller of two boxes that must lie inside the other for them to "overlap" (parsers trim or
#: pad boxes by a few points, and may merge or split blocks, so IoU would punish the wrong thing).
OVERLAP_SHARE = 0.5


def overlaps(a: Sequence[float], b: Sequence[float], share: float = OVERLAP_SHARE) -> bool:
    """True when at least ``share`` of either box lies inside the other."""
    ta: BBox = (float(a[0]), float(a[1]), float(a[2]), float(a[3]))
    tb: BBox = (float(b[0]), float(b[1]), float(b[2]), float(b[3]))
    return bbox_inside_fraction(ta, tb) >= share or bbox_inside_fraction(tb, ta) >= share


def drawn_key(kind: str, mention: str) -> tuple[str, str]:
    """(label, number) of a drawn mention such as ``"Section 2.1"`` or ``"page 36"``: the number is its last word."""
    return kind, mention.split()[-1].upper().rstrip(".")


@dataclass
class KindTally:
    drawn: int = 0
    found: int = 0  # drawn references with a matching parsed mention
    linked: int = 0  # ... of which the mention is linked to some target
    correct: int = 0  # ... of which the target is the right one
    spurious: int = 0  # parsed mentions matching no drawn reference
    spurious_linked: int = 0

    def to_dict(self) -> dict[str, Any]:
        links = self.linked + self.spurious_linked
        return {"drawn": self.drawn, "found": self.found, "linked": self.linked, "correct": self.correct,
                "spurious": self.spurious, "spurious_linked": self.spurious_linked,
                "found_recall": _ratio(self.found, self.drawn), "recall": _ratio(self.correct, self.drawn),
                "precision": _ratio(self.correct, links)}


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


@dataclass
class SynthRefEval:
    """Tallies over documents, plus examples of each failure for a person to read."""

    by_kind: dict[str, KindTally] = field(default_factory=lambda: defaultdict(KindTally))
    documents: list[str] = field(default_factory=list)
    misses: list[dict[str, Any]] = field(default_factory=list)  # drawn, not found
    wrong: list[dict[str, Any]] = field(default_factory=list)  # found, unlinked or linked elsewhere
    spurious: list[dict[str, Any]] = field(default_factory=list)
    max_examples: int = 25

    def to_dict(self) -> dict[str, Any]:
        total = KindTally()
        for t in self.by_kind.values():
            for name in ("drawn", "found", "linked", "correct", "spurious", "spurious_linked"):
                setattr(total, name, getattr(total, name) + getattr(t, name))
        return {"documents": len(self.documents), "by_kind": {k: t.to_dict() for k, t in sorted(self.by_kind.items())},
                "overall": total.to_dict(), "examples": {"missed": self.misses[: self.max_examples],
                                                         "wrong_target": self.wrong[: self.max_examples],
                                                         "spurious": self.spurious[: self.max_examples]}}

    def _note(self, bucket: list[dict[str, Any]], item: dict[str, Any]) -> None:
        if len(bucket) < self.max_examples:
            bucket.append(item)


def _target_ok(graph: Any, target: int, ref: Mapping[str, Any], boxes: Mapping[str, tuple[int, list[float]]]) -> bool:
    page = ref.get("target_page")
    if ref["kind"] == "page" or ref.get("target") is None:
        if page is None:
            return False
        return target == page or (target >= graph.n_pages and graph.elements[target - graph.n_pages].page == page)
    if target < graph.n_pages:
        return False
    el = graph.elements[target - graph.n_pages]
    for bid in (ref["target"], f"{ref['target']}.caption"):
        if bid in boxes and boxes[bid][0] == el.page and overlaps(el.bbox, boxes[bid][1]):
            return True
    return False


def evaluate_graph(graph: Any, layout: Mapping[str, Any], result: SynthRefEval | None = None) -> SynthRefEval:
    """Add one document's tallies (its parsed ``graph`` against its generator ``layout`` record) to ``result``."""
    from mage_gym.graph.references import find_references

    res = result if result is not None else SynthRefEval()
    doc = str(layout.get("doc_id", graph.doc_id))
    res.documents.append(doc)
    boxes = {e["id"]: (int(e["page"]), list(e["bbox"])) for e in layout["elements"]}
    mentions = find_references(graph.pages, graph.elements)
    used = [False] * len(mentions)
    for ref in layout["references"]:
        if ref.get("target") is None and ref.get("target_page") is None:
            continue  # target never drawn: nothing to link to
        if ref["source"] not in boxes:
            continue
        kind, num = drawn_key(ref["kind"], ref["mention"])
        tally = res.by_kind[kind]
        tally.drawn += 1
        src_page, src_box = boxes[ref["source"]]
        hit = -1
        for i, m in enumerate(mentions):
            if used[i] or m.label != kind or m.number != num:
                continue
            el = graph.elements[m.source - graph.n_pages]
            if el.page == src_page and overlaps(el.bbox, src_box):
                hit = i
                break
        item = {"doc": doc, "kind": kind, "mention": ref["mention"], "source": ref["source"],
                "target": ref.get("target"), "target_page": ref.get("target_page")}
        if hit < 0:
            res._note(res.misses, item)
            continue
        used[hit] = True
        tally.found += 1
        target = mentions[hit].target
        if target >= 0:
            tally.linked += 1
        if target >= 0 and _target_ok(graph, target, ref, boxes):
            tally.correct += 1
        else:
            res._note(res.wrong, {**item, "linked_to": graph.node_ids[target] if target >= 0 else None,
                                  "linked_text": _node_text(graph, target)})
    for i, m in enumerate(mentions):
        if used[i]:
            continue
        tally = res.by_kind[m.label]
        tally.spurious += 1
        tally.spurious_linked += int(m.target >= 0)
        el = graph.elements[m.source - graph.n_pages]
        res._note(res.spurious, {"doc": doc, "kind": m.label, "mention": m.text, "page": el.page,
                                 "source_text": " ".join(el.text.split())[:160],
                                 "linked_text": _node_text(graph, m.target)})
    return res


def _node_text(graph: Any, node: int) -> str | None:
    if node < 0:
        return None
    if node < graph.n_pages:
        return f"[page {node}]"
    el = graph.elements[node - graph.n_pages]
    return f"[{el.type} p{el.page}] " + " ".join(el.text.split())[:100]


def evaluate_corpus(root: str | os.PathLike[str], parser: str = "fast", n_docs: int | None = None,
                    max_examples: int = 25) -> SynthRefEval:
    """Parse the first ``n_docs`` documents of a generated corpus (no cache, no embeddings) and evaluate them."""
    from mage_gym.data.synth.corpus import read_manifest
    from mage_gym.graph.build import build_graph

    base = Path(root)
    docs = read_manifest(base)["docs"]
    res = SynthRefEval(max_examples=max_examples)
    for d in docs[: n_docs if n_docs is not None else len(docs)]:
        layout = json.loads((base / d["layout"]).read_text(encoding="utf-8"))
        graph = build_graph(str(base / d["file"]), parser=parser, cache=False, encoder=None, progress=False)
        evaluate_graph(graph, layout, res)
    return res
