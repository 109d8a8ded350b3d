"""experiments/quality/embed_quality.py --select-adaptive: the searched families score as the library does, the rule.

The family search evaluates hundreds of settings on cached channel scores;
these tests pin each family to the library function (and the gated family to
the ``hybrid_adaptive`` retriever's own fusion), so the chosen setting is the
one the retriever then runs.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.quality import (
    embed_quality as eq, fusion_adaptive as fa, fusion_grid as fg, fusion_ruling as fr, page_scores as ps,
)
from mage_gym.retrieval.base import Scores
from mage_gym.retrieval.fusion import density_gate, interleave_scores, normalized_sum, rrf
from mage_gym.retrieval.hybrid import HYBRID_ADAPTIVE, DensityGatedHybrid

SLIDES = {"chars_per_element": 40.0, "mean_page_chars": 300.0}
PROSE = {"chars_per_element": 400.0, "mean_page_chars": 4000.0}


def _question(rng: np.random.Generator, i: int, density: dict[str, float], n_pages: int = 30) -> ps.QuestionScores:
    scores = {ch: rng.normal(size=n_pages).astype(np.float32) for ch in ps.CHANNELS}
    gold = tuple(sorted(rng.choice(n_pages, size=4, replace=False).tolist()))
    return ps.QuestionScores(f"e{i}", f"d{i % 4}", gold, scores, None, density=dict(density))


def test_each_family_scores_as_the_library_and_gated_as_the_retriever() -> None:
    rng = np.random.default_rng(2)
    q = _question(rng, 0, PROSE)
    arrays = [q.scores[c] for c in fg.GRID_CHANNELS]
    settings = fa.adaptive_settings()
    assert {s["family"] for s in settings} == set(fa.FAMILIES)
    rrf_s = next(s for s in settings if s["family"] == "rrf" and s["k"] == 30.0 and s["weights"]["dense"] == 0.5)
    np.testing.assert_array_equal(fa.fused_scores(q, rrf_s),
                                  rrf(arrays, [rrf_s["weights"][c] for c in fg.GRID_CHANNELS], 30.0))
    norm_s = next(s for s in settings if s["family"] == "norm" and s["how"] == "minmax")
    np.testing.assert_array_equal(fa.fused_scores(q, norm_s), normalized_sum(
        arrays, [norm_s["weights"][c] for c in fg.GRID_CHANNELS], "minmax"))
    he = rrf([q.scores["bm25"], q.scores["dense"]], [1, 1], 60)
    pt = rrf([q.scores["bm25"], q.scores["page_dense"]], [1, 1], 60)
    np.testing.assert_array_equal(fa.fused_scores(q, {"family": "interleave", "first": "page_text"}),
                                  interleave_scores(pt, he))
    retriever = DensityGatedHybrid(components={n: object() for n in DensityGatedHybrid.GATED},  # type: ignore
                                   **HYBRID_ADAPTIVE)
    chosen = {"family": "gated", **HYBRID_ADAPTIVE}
    chosen.pop("bm25_weight")
    assert chosen in settings and fa.adaptive_preset_matches(HYBRID_ADAPTIVE, chosen)
    assert not fa.adaptive_preset_matches(HYBRID_ADAPTIVE, {**chosen, "lo": chosen["lo"] + 1})
    assert not fa.adaptive_preset_matches(HYBRID_ADAPTIVE, rrf_s)
    gate = density_gate(q.density[chosen["feature"]], chosen["lo"], chosen["width"])
    comps = {c: Scores(pages=q.scores[c], elements=np.zeros(3, np.float32)) for c in fg.GRID_CHANNELS}
    np.testing.assert_array_equal(fa.fused_scores(q, chosen), retriever.fuse(comps, gate).pages)
    with pytest.raises(ValueError, match="family"):
        fa.fused_scores(q, {"family": "vote"})


def _planted(rng: np.random.Generator, n: int) -> list[ps.QuestionScores]:
    """Half slide decks whose 4 gold pages only dense ranks first, half prose where only page_dense does."""
    qs = []
    for i in range(n):
        slides = i % 2 == 0
        q = _question(rng, i, SLIDES if slides else PROSE)
        q.scores["bm25"][:] = 0.0  # no query term anywhere: bm25 does not vote
        for rank, g in enumerate(q.gold):
            q.scores["dense" if slides else "page_dense"][g] = 20.0 - rank
            q.scores["page_dense" if slides else "dense"][g] = -20.0
        qs.append(q)
    return qs


def test_selection_finds_the_gate_when_each_channel_owns_one_kind_of_document() -> None:
    rng = np.random.default_rng(4)
    data = {"one": {"train": _planted(rng, 12), "val": _planted(rng, 8)},
            "two": {"train": _planted(rng, 6), "val": _planted(rng, 6), "test": _planted(rng, 2)}}
    # the test split must never be read: poison it
    for q in data["two"]["test"]:
        q.density = {}
    sel = fa.select_adaptive(data)
    assert sel["questions"] == {"train": {"one": 12, "two": 6}, "val": {"one": 8, "two": 6}}
    assert sel["grid_sizes"] == {"rrf": len(fg.grid_settings()), "norm": 2 * len(fg.grid_settings()) // len(fg.GRID_K),
                                 "interleave": 2, "gated": 2 * 5 * len(fa.GATE_WIDTH) * len(fa.GATE_K)}
    # each rival finds every gold page of half the questions and none of the other half
    assert sel["targets_recall5_sums"]["train"] == {"one": 6.0, "two": 3.0}
    assert sel["chosen_family"] == "gated" and sel["meets_bar_on_train"] and sel["meets_bar_on_val"]
    win = sel["family_winners"]["gated"]
    assert win["train"]["recall5"] == {"one": 1.0, "two": 1.0} and win["val"]["worst_margin"] == pytest.approx(3.0)
    assert sel["family_winners"]["interleave"]["train"]["recall5"]["one"] < 1.0  # 3 + 2 pages of 4 gold
    chosen = sel["chosen"]
    assert density_gate(SLIDES[chosen["feature"]], chosen["lo"], chosen["width"]) < 0.5
    results = json.loads(json.dumps({"command": "c", "date": "d", "commit": "x", "runs": [],
                                     "config": {"ks": [1, 3, 5, 10], "parser": "fast"},
                                     "adaptive_selection": {**sel, "preset_matches_chosen": False}}))
    md = eq.markdown(results)
    assert "## Adaptive fusion" in md and f"Chosen family: gated, setting {chosen}" in md
    assert md.count("| gated |") == 1 and "worst +3.00 q." in md


def test_issue_bar_names_the_checked_retriever() -> None:
    def row(ch: str, r5: float) -> dict:
        return {"dataset": "financebench", "split": "test", "channel": ch, "metrics": {"R@5": r5}}

    runs = [row("hybrid_elements", 0.3), row("page_text", 0.4), row("page_dense", 0.5), row("hybrid_pages", 0.45),
            row("hybrid_adaptive", 0.5)]
    bar = fr.issue_bar(runs, fused="hybrid_adaptive")["financebench"]
    assert bar["fused"] == "hybrid_adaptive" and bar["recall5"] == 0.5 and bar["needed"] == 0.5 and bar["met"]
    assert not fr.issue_bar(runs)["financebench"]["met"]
    md = eq.markdown({"command": "c", "date": "d", "commit": "x", "runs": [],
                      "issue_bar_by_retriever": {"hybrid_adaptive": {"financebench": bar}},
                      "config": {"ks": [5], "parser": "fast"}})
    assert "- financebench: hybrid_adaptive 0.500, needed 0.500: met" in md
