"""perf_graph's side-by-side mode: each tree builds in its own process, and graphs are compared by content."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from experiments.perf.perf_graph import graph_fingerprint, side_by_side
from mage_gym.testing import make_toy_graph

ROOT = Path(__file__).resolve().parents[1]


def test_fingerprint_follows_content_not_identity() -> None:
    a, b = make_toy_graph(seed=3), make_toy_graph(seed=3)
    assert graph_fingerprint(a) == graph_fingerprint(b)
    e0 = dataclasses.replace(b.elements[0], text=b.elements[0].text + " changed")
    assert graph_fingerprint(dataclasses.replace(b, elements=[e0, *b.elements[1:]])) != graph_fingerprint(a)
    vecs = b.element_vectors.copy()
    vecs[0, 0] += 1e-3
    assert graph_fingerprint(dataclasses.replace(b, element_vectors=vecs)) != graph_fingerprint(a)


@pytest.mark.slow  # two fresh processes, each loading the encoder and building a two-page graph
def test_side_by_side_builds_each_tree_and_compares_graphs(tmp_path: Path) -> None:
    import pymupdf

    doc = pymupdf.open()
    for i in range(2):
        doc.new_page().insert_text((72, 300), f"Line {i} of a small document for the benchmark.", fontsize=11)
    doc.save(tmp_path / "small.pdf")
    args = argparse.Namespace(parsers=["fast"], pages=2, workers=1, rounds=1)
    out = side_by_side(ROOT, ROOT, [tmp_path / "small.pdf"], args)
    res = out["fast"]
    assert len(out["runs"]["before"]) == len(out["runs"]["after"]) == 1
    assert res["before"]["pages"] == res["after"]["pages"] == 2
    assert res["ratio_pages_per_second"] == pytest.approx(res["after"]["pages_per_second"] /
                                                          res["before"]["pages_per_second"], abs=1e-3)
    assert res["ratio_per_round_median"] == res["ratio_per_round"][0]
    assert res["graph_identity"]["small.pdf"] == {"same_graph": True, "deterministic": True}
