"""experiments/quality/embed_quality.py --select-learned: fitted on train, chosen on val, test never read, reported.

The selection fits one linear ranker per grid setting on cached channel
scores; these tests plant a channel only the learned fusion can use (the
best element vector, which no bar rival reads) and check the rule picks a
setting that finds it, that the test split is never touched, and that the
report block and the shipped-model check say what happened.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.quality import embed_quality as eq, fusion_learned as fl, page_scores as ps

DOC = {"n_pages": 20.0, "chars_per_element": 90.0, "mean_page_chars": 700.0, "image_only_share": 0.0}


def _planted(rng: np.random.Generator, n: int, dataset: str) -> list[ps.QuestionScores]:
    """Questions whose two gold pages only best_element ranks first; other channels are noise."""
    qs = []
    for i in range(n):
        scores = {ch: rng.normal(size=20).astype(np.float32) for ch in ps.CHANNELS}
        gold = tuple(sorted(rng.choice(20, size=2, replace=False).tolist()))
        for g in gold:
            scores["best_element"][g] = 10.0 + rng.random()
        qs.append(ps.QuestionScores(f"{dataset}{i}", f"{dataset}-d{i % 3}", gold, scores, None,
                                    question=f"what changed in {2000 + i}?", doc=dict(DOC)))
    return qs


def test_select_learned_finds_the_planted_channel_and_never_reads_test() -> None:
    rng = np.random.default_rng(7)
    data = {"one": {"train": _planted(rng, 16, "one"), "val": _planted(rng, 8, "one")},
            "two": {"train": _planted(rng, 8, "two"), "val": _planted(rng, 6, "two"), "test": _planted(rng, 3, "t")}}
    for q in data["two"]["test"]:  # poisoned: any read of the test split fails
        q.scores, q.doc = {}, {}
    sel, model = fl.select_learned(data)
    assert sel["questions"] == {"train": {"one": 16, "two": 8}, "val": {"one": 8, "two": 6}}
    assert sel["grid"]["settings"] == len(fl.learned_settings()) == len(sel["settings"])
    assert sel["chosen"] in fl.learned_settings()
    assert sel["meets_bar_on_train"] and sel["meets_bar_on_val"]
    assert sel["chosen_val"]["recall5"] == {"one": 1.0, "two": 1.0}
    # only best_element knows the gold pages, so recall@5 of 1 on val means the model weighs it
    assert {r["val"]["worst_margin"] > 0 for r in sel["settings"]} == {True}
    # the chosen model is the chosen setting's train fit: refitting gives the same weights, another penalty does not
    train = [q for by in data.values() for q in by.get("train", [])]
    assert fl.learned_model_matches(model, fl.fit_learned(train, sel["chosen"]))
    other = {**sel["chosen"], "l2": next(x for x in fl.LEARNED_L2 if x != sel["chosen"]["l2"])}
    assert not fl.learned_model_matches(model, fl.fit_learned(train, other))
    assert not fl.learned_model_matches(None, model)
    results = json.loads(json.dumps({"command": "c", "date": "d", "commit": "x", "runs": [],
                                     "config": {"ks": [1, 3, 5, 10], "parser": "fast"},
                                     "learned_selection": {**sel, "shipped_matches_chosen": True}}))
    md = eq.markdown(results)
    assert "## Learned fusion (`--select-learned`)" in md
    assert f"Chosen: feature set {sel['chosen']['features']}, L2 {sel['chosen']['l2']}" in md
    assert md.count("| ranks |") == len(fl.LEARNED_L2)


def test_select_learned_needs_val_and_examples_respect_the_page_window() -> None:
    rng = np.random.default_rng(8)
    with pytest.raises(ValueError, match="val"):
        fl.select_learned({"one": {"train": _planted(rng, 4, "one")}})
    q = _planted(rng, 1, "w")[0]
    q.inside = np.zeros(20, dtype=bool)
    q.inside[5:12] = True
    q.gold = (3, 7)  # page 3 lies outside the window: not a row the ranker may choose
    ex = fl.ranking_example(q, ("ranks",))
    assert ex.features.shape[0] == 7 and ex.gold == (2,)
