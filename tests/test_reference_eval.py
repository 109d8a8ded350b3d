"""Exact evaluation of the `reference` relation against the synthetic generator's recorded references."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mage_gym.bench.reference_eval import drawn_key, evaluate_corpus, evaluate_graph, overlaps
from mage_gym.graph.schema import Element, Page


def _graph(specs: list[tuple[int, str, str, tuple[float, float, float, float]]], footers: list[str]) -> SimpleNamespace:
    pages = [Page(node_id=f"d:p{i}", index=i, width=600, height=800, text="", summary="", footer_text=f)
             for i, f in enumerate(footers)]
    per_page: dict[int, int] = {}
    els = []
    for pos, (page, etype, text, box) in enumerate(specs):
        idx = per_page.get(page, 0)
        per_page[page] = idx + 1
        els.append(Element(node_id=f"d:p{page}:e{idx}", page=page, index=idx, type=etype, bbox=box, text=text,
                           summary=text[:30], reading_order=pos))
    ids = [p.node_id for p in pages] + [e.node_id for e in els]
    return SimpleNamespace(doc_id="d", pages=pages, elements=els, n_pages=len(pages), node_ids=ids)


TOP, MID, LOW = (0.1, 0.1, 0.9, 0.2), (0.1, 0.4, 0.9, 0.5), (0.1, 0.7, 0.9, 0.8)


def test_overlap_and_drawn_key() -> None:
    assert overlaps((0.1, 0.1, 0.9, 0.2), (0.1, 0.1, 0.9, 0.4))  # a split half lies inside the drawn block
    assert not overlaps(TOP, MID)
    assert drawn_key("section", "Section 2.1") == ("section", "2.1")
    assert drawn_key("appendix", "Appendix b") == ("appendix", "B")


def test_found_correct_missed_wrong_and_spurious_are_told_apart() -> None:
    graph = _graph([
        (0, "paragraph", "Sales rose, see Table 2 and Section 3.", TOP),  # Table 2 right; Section 3 has no heading
        (0, "paragraph", "Costs fell (Figure 9).", MID),  # a mention the generator never drew
        (1, "caption", "Table 2: Sales", TOP),
        (1, "table", "a | b | c", MID),
        (2, "title", "3 Outlook", TOP),
        (2, "paragraph", "The plan is on page 4.", MID),
    ], footers=["3", "4", "5"])
    layout = {"doc_id": "d", "elements": [
        {"id": "b1", "page": 0, "bbox": list(TOP)}, {"id": "b2", "page": 0, "bbox": list(MID)},
        {"id": "b3", "page": 1, "bbox": list(MID)}, {"id": "b3.caption", "page": 1, "bbox": list(TOP)},
        {"id": "b4", "page": 2, "bbox": list(LOW)},  # the drawn heading sits lower than the parsed "3 Outlook"
        {"id": "b5", "page": 2, "bbox": list(MID)}, {"id": "b6", "page": 1, "bbox": list(LOW)},
    ], "references": [
        {"source": "b1", "mention": "Table 2", "kind": "table", "target": "b3", "target_page": 1},
        {"source": "b1", "mention": "Section 3", "kind": "section", "target": "b4", "target_page": 2},
        {"source": "b2", "mention": "Note 4", "kind": "note", "target": "b6", "target_page": 1},  # not in the text
        {"source": "b5", "mention": "page 4", "kind": "page", "target": None, "target_page": 1},
        {"source": "b5", "mention": "Table 8", "kind": "table", "target": None, "target_page": None},  # skipped
    ]}
    res = evaluate_graph(graph, layout).to_dict()
    kinds = res["by_kind"]
    assert (kinds["table"]["drawn"], kinds["table"]["found"], kinds["table"]["correct"]) == (1, 1, 1)
    assert kinds["table"]["precision"] == 1.0  # linked to the caption of the drawn table
    assert (kinds["section"]["found"], kinds["section"]["linked"], kinds["section"]["correct"]) == (1, 1, 0)
    assert kinds["section"]["recall"] == 0.0 and kinds["section"]["precision"] == 0.0
    assert (kinds["note"]["drawn"], kinds["note"]["found"]) == (1, 0)
    assert kinds["page"]["correct"] == 1
    assert (kinds["figure"]["drawn"], kinds["figure"]["spurious"], kinds["figure"]["spurious_linked"]) == (0, 1, 0)
    assert res["overall"]["drawn"] == 4 and res["overall"]["correct"] == 2
    assert [x["mention"] for x in res["examples"]["missed"]] == ["Note 4"]
    assert [x["mention"] for x in res["examples"]["wrong_target"]] == ["Section 3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mage_gym.data.synth import SynthConfig, generate_corpus

    root = tmp_path_factory.mktemp("refs")
    cfg = SynthConfig(min_pages=20, max_pages=24, questions_per_doc=4, bridge_questions_per_doc=4)
    generate_corpus(root, 1, seed=3, cfg=cfg, workers=1, progress=False)
    return root


def test_generated_references_are_found_and_linked_by_the_fast_parser(corpus: Path) -> None:
    layout = json.loads(next((corpus / "layout").glob("*.json")).read_text())
    drawn = [r for r in layout["references"] if r["target"] is not None or r["target_page"] is not None]
    res = evaluate_corpus(corpus, parser="fast").to_dict()
    overall = res["overall"]
    assert overall["drawn"] == len(drawn) > 10
    # Measured on generated corpora: every drawn kind is linked right (see docs/results/reference_quality).
    assert overall["recall"] >= 0.95 and overall["precision"] >= 0.95
    assert overall["spurious"] <= 0.05 * overall["drawn"]


def test_measure_counts_samples_and_scores_only_labels_of_current_links() -> None:
    from experiments.quality.reference_quality import measure

    graph = _graph([
        (0, "paragraph", "See Table 2, Table 5 and Note 9 of our 2020 Form 10-K.", TOP),
        (1, "caption", "Table 2: Sales", TOP),
    ], footers=["1", "2"])
    body, sample = measure([(graph, None)], {}, sample_per_label=5, seed=0)
    assert body["mentions"] == {"note": {"found": 1, "external": 1, "linked": 0},
                                "table": {"found": 2, "external": 0, "linked": 1}}
    assert [(r["mention"], r["target"]) for r in sample] == [("Table 2", "d:p1:e0")]
    assert "[[Table 2]]" in sample[0]["context"]
    labels = {sample[0]["key"]: {"label": "table", "correct": False}, "stale": {"label": "table", "correct": True}}
    body, _ = measure([(graph, None)], labels, sample_per_label=5, seed=0)
    assert body["precision"] == {"table": {"n": 1, "correct": 0, "precision": 0.0}}
    assert body["synthetic"] is None
