"""The learned page fusion (``hybrid_learned``): features, fitting, the shipped weights, the retriever.

No model is loaded: graphs carry random unit vectors and the page-text channel
uses a hashed bag-of-words encoder with its disk cache in a temporary folder.
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from experiments.quality import fusion_adaptive as fa, page_scores as ps
from mage_gym.env.relevance import score_question
from mage_gym.retrieval import Query, get_retriever, rrf
from mage_gym.retrieval.learned_fusion import (
    ANCHOR_FEATURE, DEFAULT_MODEL_PATH, FEATURE_SETS, LEARNED_CHANNELS, LearnedFusionHybrid, LinearRanker,
    RankingExample, anchor_scores, best_element_scores, document_features, feature_names, fit_ranker, page_features,
)
from mage_gym.testing import HashingEncoder, graph_from_texts

DOC = {"n_pages": 30.0, "chars_per_element": 120.0, "mean_page_chars": 900.0, "image_only_share": 0.1}


def _toy_question(rng: np.random.Generator, informative: str, n_pages: int = 30):
    """Random channel scores, except ``informative`` ranks the question's two gold pages first."""
    scores = {c: rng.normal(size=n_pages).astype(np.float32) for c in LEARNED_CHANNELS}
    gold = tuple(sorted(rng.choice(n_pages, size=2, replace=False).tolist()))
    for g in gold:
        scores[informative][g] = 5.0 + rng.random()
    return scores, gold


def _examples(rng: np.random.Generator, n: int, informative: str, groups: tuple[str, ...]):
    out = []
    for _ in range(n):
        scores, gold = _toy_question(rng, informative)
        out.append((scores, gold, RankingExample(page_features(scores, DOC, "what is 2019 revenue", groups), gold)))
    return out


@pytest.mark.parametrize("informative", ["page_dense", "best_element"])
def test_fitting_recovers_the_one_informative_channel(informative: str) -> None:
    rng = np.random.default_rng(0)
    groups = FEATURE_SETS["ranks"]
    train = _examples(rng, 60, informative, groups)
    model = fit_ranker([e for *_, e in train], groups, l2=0.01)
    assert model.meta["fit"]["converged"] and model.meta["fit"]["questions"] == 60
    top = int(np.argmax(np.abs(model.weights)))
    assert model.names[top].endswith("_" + informative)
    weight_of = dict(zip(model.names, model.weights))
    assert weight_of[f"pct_{informative}"] > 0 and weight_of[f"rr_{informative}"] > 0
    # on new questions the fitted ranker puts the two gold pages first, where a random channel would not
    test = _examples(rng, 20, informative, groups)
    hits = [set(np.argsort(-model.score_pages(s, DOC, "q"))[:2].tolist()) == set(g) for s, g, _ in test]
    assert all(hits)
    again = fit_ranker([e for *_, e in train], groups, l2=0.01).weights
    np.testing.assert_array_equal(model.weights, again)  # deterministic: the same fit twice


def test_features_are_the_documented_ranks_and_agreement() -> None:
    s = {"bm25": np.array([0.0, 3.0, 1.0, 3.0]), "dense": np.array([0.1, 0.4, 0.3, 0.2]),
         "best_element": np.array([0.5, 0.1, 0.2, 0.3]), "page_dense": np.array([0.2, 0.3, 0.4, np.nan])}
    groups = ("ranks", "agree")
    x = page_features(s, DOC, "q", groups)
    col = {n: x[:, i] for i, n in enumerate(feature_names(groups))}
    # bm25: page 0 scores 0 (not retrieved): reciprocal rank 0, tied last; pages 1 and 3 tie at rank 1
    np.testing.assert_allclose(col["rr_bm25"], [0.0, 1.0, 1 / 3, 1.0])
    np.testing.assert_allclose(col["pct_bm25"], [0.25, 1.0, 0.5, 1.0])
    np.testing.assert_allclose(col["rr_page_dense"], [1 / 3, 1 / 2, 1.0, 0.0])
    # page 1: top 1 of bm25 and dense; top 3 of bm25, dense, page_dense (best_element ranks it 4th)
    assert col["n_top1"][1] == 2 and col["n_top3"][1] == 3 and col["n_top5"][1] == 4
    np.testing.assert_allclose(col["rrf60"][1], 1 / 61 + 1 / 61 + 1 / 64 + 1 / 62)
    assert page_features(s, DOC, "q", FEATURE_SETS["all"]).shape == (4, len(feature_names(FEATURE_SETS["all"])))
    with pytest.raises(ValueError):
        feature_names(("agree",))  # ranks are always in
    with pytest.raises(ValueError):
        page_features({"bm25": s["bm25"]}, DOC, "q", groups)


def test_anchor_column_is_the_element_channel_and_escapes_the_penalty() -> None:
    rng = np.random.default_rng(7)
    groups = FEATURE_SETS["anchor+ranks_agree"]
    assert feature_names(groups)[-1] == ANCHOR_FEATURE
    scores, _ = _toy_question(rng, "page_dense")
    scores["bm25"][3] = 0.0  # not retrieved by bm25: the anchor, like hybrid_elements, counts dense alone there
    x = page_features(scores, DOC, "q", groups)
    expected = rrf([scores["bm25"], scores["dense"]], [1.0, 1.0], 60.0)
    np.testing.assert_allclose(x[:, -1], expected)
    np.testing.assert_allclose(anchor_scores(scores), expected)
    # training data where dense finds gold in half the questions (so the anchor carries signal) and page_dense in
    # the other half: a weak penalty learns both; a very strong one keeps the anchor's weight (unpenalised) and
    # shrinks every other weight to about zero, so it ranks as hybrid_elements does
    train = _examples(rng, 40, "dense", groups) + _examples(rng, 40, "page_dense", groups)
    weak = fit_ranker([e for *_, e in train], groups, l2=0.01)
    strong = fit_ranker([e for *_, e in train], groups, l2=1e4)
    assert weak.meta["fit"]["converged"] and strong.meta["fit"]["converged"]
    assert strong.weights[-1] > 0
    assert np.max(np.abs(strong.weights[:-1])) < 1e-2 * strong.weights[-1]
    held, _ = _toy_question(rng, "page_dense")
    anchor_order = np.lexsort((np.arange(30), -anchor_scores(held)))
    strong_order = np.lexsort((np.arange(30), -strong.score_pages(held, DOC, "q").astype(np.float64)))
    np.testing.assert_array_equal(strong_order, anchor_order)
    # on new page_dense questions the weak fit finds gold the anchor's order misses
    def recall2(model: LinearRanker) -> float:
        tests = [_toy_question(np.random.default_rng(100 + i), "page_dense") for i in range(20)]
        return float(np.mean([len(set(np.argsort(-model.score_pages(t, DOC, "q"))[:2].tolist()) & set(g)) / 2
                              for t, g in tests]))
    assert recall2(weak) > recall2(strong) + 0.3
    # without the anchor the same strong penalty leaves no signal at all: the anchor is what it shrinks towards
    flat = fit_ranker([RankingExample(e.features[:, :-1], e.gold) for *_, e in train], FEATURE_SETS["ranks_agree"],
                      l2=1e4)
    assert np.max(np.abs(flat.weights)) < 1e-2 * strong.weights[-1]


def test_saved_weights_load_and_rank_deterministically(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    groups = FEATURE_SETS["all"]
    train = _examples(rng, 30, "dense", groups)
    model = fit_ranker([e for *_, e in train], groups, l2=0.1, meta={"command": "test"})
    back = LinearRanker.load(model.save(tmp_path / "m.json"))
    scores, _ = _toy_question(rng, "dense")
    np.testing.assert_array_equal(back.score_pages(scores, DOC, "q 1"), model.score_pages(scores, DOC, "q 1"))
    assert back.meta["command"] == "test" and back.groups == model.groups
    data = json.loads((tmp_path / "m.json").read_text())
    data["features"] = data["features"][1:]  # a file for another feature set is refused, not applied
    with pytest.raises(ValueError):
        LinearRanker.from_json(data)


def test_shipped_model_is_a_fitted_ranker_with_its_command() -> None:
    shipped = LinearRanker.load()
    assert DEFAULT_MODEL_PATH.name == "learned_fusion.json"
    assert "embed_quality.py" in shipped.meta["command"] and "--select-learned" in shipped.meta["command"]
    assert shipped.meta["setting"]["features"] in FEATURE_SETS and shipped.meta["setting"]["l2"] == shipped.l2
    assert shipped.meta["fit"]["converged"]
    rng = np.random.default_rng(5)
    scores, _ = _toy_question(rng, "bm25")
    first = shipped.score_pages(scores, DOC, "how many staff in 2020?")
    np.testing.assert_array_equal(first, LinearRanker.load().score_pages(scores, DOC, "how many staff in 2020?"))
    assert first.dtype == np.float32 and np.all(np.isfinite(first))


PAGES = [["Revenue by region", "Asia 40% of revenue"], ["Headcount", "1,200 staff at year end"],
         ["Outlook " + "management expects continued growth in Asia and stable margins " * 3],
         ["Risk factors", "currency exposure", "supply chain"], [], ["Appendix", "glossary of terms"]]


def test_retriever_entry_pages_are_the_fused_scores_of_the_model(tmp_path: Path) -> None:
    g = graph_from_texts(PAGES, doc_id="learned", dim=32, seed=1, meta={"parser": "test", "embed_model": "hash-32"})
    r = get_retriever("hybrid_learned", page_dense={"cache_dir": str(tmp_path), "encoder": HashingEncoder(32)})
    assert isinstance(r, LearnedFusionHybrid) and r.name == "hybrid_learned"
    text = "growth in Asia revenue"
    q = Query(text, vector=HashingEncoder(32).encode([text])[0])
    fused, comps = r.score_with_components(g, q)
    assert list(comps) == ["bm25", "dense", "page_dense"]
    # pages: the shipped model over the components' channels, exactly what embed_quality's selection scores
    el_page = np.array([e.page for e in g.elements], dtype=np.intp)
    channels = {"bm25": comps["bm25"].pages, "dense": comps["dense"].pages,
                "best_element": best_element_scores(comps["dense"].elements, el_page, g.n_pages),
                "page_dense": comps["page_dense"].pages}
    doc = document_features(g)
    np.testing.assert_array_equal(fused.pages, LinearRanker.load().score_pages(channels, doc, text))
    qs = ps.QuestionScores("e", "learned", (0,), channels, None, question=text, doc=doc)
    np.testing.assert_array_equal(fa.fused_scores(qs, {"family": "learned", "model": r.model}), fused.pages)
    # elements: as hybrid_elements ranks them
    np.testing.assert_array_equal(fused.elements, rrf([comps["bm25"].elements, comps["dense"].elements], [1, 1], 60))
    # the env's entry pages are the top of these scores (ties by page index), and so are embed_quality's
    rel = score_question(g, r, q)
    expected = np.lexsort((np.arange(g.n_pages), -fused.pages.astype(np.float64)))
    np.testing.assert_array_equal(rel.page_order, expected)
    assert ps.ranked_pages(fused.pages, None, 3) == expected[:3].tolist()
    np.testing.assert_array_equal(r.score(g, q).pages, fused.pages)
    with pytest.raises(TypeError):
        r.fuse(comps)
    with pytest.raises(ValueError):
        get_retriever("hybrid_learned", components=["bm25", "dense"])


def test_preset_config_file_builds_the_shipped_model() -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "retriever"
                                                / "hybrid_learned.yaml"))
    assert cfg.pop("name") == "hybrid_learned"
    r = get_retriever("hybrid_learned", **cfg)
    assert isinstance(r, LearnedFusionHybrid)
    np.testing.assert_array_equal(r.model.weights, LinearRanker.load().weights)
    back = pickle.loads(pickle.dumps(r))  # envs (and their retrievers) go to worker processes
    assert isinstance(back, LearnedFusionHybrid) and back.model.names == r.model.names
