"""experiments/embed_quality.py: recall arithmetic, the train-split fusion grid, the results file shape.

The grid search re-implements RRF on cached ranks (it evaluates hundreds of
settings); these tests pin it to the library's ``rrf`` so the setting chosen
on train is the setting the ``hybrid_pages`` preset then runs.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from experiments import embed_quality as eq
from mage_gym.retrieval.fusion import rrf


def _question(rng: np.random.Generator, n_pages: int, i: int, window: bool = False) -> eq.QuestionScores:
    scores = {}
    for ch in eq.CHANNELS:
        s = rng.normal(size=n_pages).astype(np.float32)
        s[rng.random(n_pages) < 0.2] = 0.0  # pages a channel did not retrieve
        scores[ch] = s
    gold = tuple(sorted(rng.choice(n_pages, size=int(rng.integers(1, 3)), replace=False).tolist()))
    inside = None
    if window:
        inside = np.zeros(n_pages, dtype=bool)
        inside[2: n_pages - 2] = True
    return eq.QuestionScores(f"e{i}", f"d{i % 3}", gold, scores, inside)


def test_ranked_pages_breaks_ties_by_page_and_keeps_to_the_window() -> None:
    s = np.array([0.5, 0.9, 0.5, 0.9, 0.1], dtype=np.float32)
    assert eq.ranked_pages(s, None, 3) == [1, 3, 0]
    inside = np.array([True, False, True, False, True])
    assert eq.ranked_pages(s, inside, 5) == [0, 2, 4]
    assert eq.page_recall([0, 2], (2, 4)) == 0.5 and eq.page_recall([1], (1,)) == 1.0


@pytest.mark.parametrize("window", [False, True])
def test_grid_recall_equals_recall_of_library_rrf(window: bool) -> None:
    rng = np.random.default_rng(3)
    qs = [_question(rng, 17, i, window) for i in range(25)]
    channels = ("bm25", "dense", "page_dense")
    cache = eq.RankCache(qs, channels)
    for weights, k in [({"bm25": 1.0, "dense": 1.0, "page_dense": 1.0}, 60.0),
                       ({"bm25": 2.0, "dense": 0.0, "page_dense": 0.5}, 5.0),
                       ({"bm25": 0.0, "dense": 1.5, "page_dense": 1.0}, 15.0)]:
        got = cache.recall(weights, k, (1, 3, 5))
        for kk in (1, 3, 5):
            want = np.mean([eq.page_recall(eq.ranked_pages(
                rrf([q.scores[c] for c in channels], [weights[c] for c in channels], k), q.inside, kk), q.gold)
                for q in qs])
            assert got[kk] == pytest.approx(want, abs=1e-12)


def test_selection_prefers_the_setting_that_wins_on_train() -> None:
    """Gold always ranks first in page_dense and low elsewhere: the chosen fusion must lean on page_dense."""
    rng = np.random.default_rng(5)
    data = {}
    for ds in ("a", "b"):
        splits = {}
        for split in ("train", "val"):
            qs = []
            for i in range(20):
                q = _question(rng, 30, i)
                g = q.gold[0]
                q.gold = (g,)
                q.scores["page_dense"][g] = 10.0
                q.scores["bm25"][g] = q.scores["dense"][g] = -5.0
                qs.append(q)
            splits[split] = qs
        data[ds] = splits
    sel = eq.select_fusion(data, argparse.Namespace(ks=(1, 3, 5, 10)))
    chosen = sel["chosen"]["weights"]
    assert chosen["page_dense"] > 0 and chosen["page_dense"] >= 2 * max(chosen["bm25"], chosen["dense"])
    assert sel["top"][0]["train_recall5_mean"] == 1.0
    assert sel["train_datasets"] == {"a": 20, "b": 20}
    assert set(sel["per_dataset_best_on_train"]) == {"a", "b"}
    assert sel["shared_val_recall"]["a"]["5"] == 1.0


def test_rows_and_markdown_come_from_the_results_file() -> None:
    rng = np.random.default_rng(0)
    qs = [_question(rng, 12, i) for i in range(6)]
    for q in qs:
        for name in eq.FUSED:
            q.fused[name] = eq.ranked_pages(q.scores["bm25"], None, 10)
    rows = eq.recall_rows("mmlongbench", "test", qs, (1, 5))
    rows += eq.recall_rows("mmlongbench", "train", [], (1, 5))
    assert {r["channel"] for r in rows[:-1]} == {*eq.CHANNELS, *eq.FUSED}
    assert rows[-1] == {"dataset": "mmlongbench", "split": "train", "channel": None,
                        "metrics": {"questions": 0, "documents": 0}}
    bm25 = next(r for r in rows if r["channel"] == "bm25")["metrics"]
    assert bm25["questions"] == 6 and bm25["documents"] == 3
    assert bm25["R@5"] == pytest.approx(np.mean([eq.page_recall(eq.ranked_pages(q.scores["bm25"], None, 5), q.gold)
                                                 for q in qs]))
    assert next(r for r in rows if r["channel"] == "env_default")["metrics"]["R@5"] == bm25["R@5"]
    results = json.loads(json.dumps({"command": "cmd", "date": "2026-12-01", "commit": "abc", "runs": rows,
                                     "config": {"ks": [1, 5], "parser": "fast"}}))
    md = eq.markdown(results)
    assert f"| bm25 | - | {bm25['R@1']:.3f} / {bm25['R@5']:.3f} |" in md
    assert "train (0 q., 0 docs)" in md and "test (6 q., 3 docs)" in md and "`cmd`" in md
