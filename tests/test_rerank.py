"""hybrid_rerank: a first stage's top pages reordered by a (fake) cross-encoder, its column, cache and env use."""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.bench.rerank_data import RerankQuestion, recall_at, reranked_order
from mage_gym.env import MageRAGEnv
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.env.graph_index import build_graph_index
from mage_gym.env.relevance import relevance_columns, search_page_scores
from mage_gym.retrieval import Query, get_retriever
from mage_gym.retrieval.hybrid import HybridRetriever
from mage_gym.retrieval.rerank import RerankedRetriever, ScoreStore
from mage_gym.testing import make_toy_graph, rrf_order_by_hand

QF = hash_query_fn(16)


class WordScorer:
    """A stand-in cross-encoder: a passage scores the number of times it names ``word`` (counts its calls)."""

    digest = "word-scorer-v1"

    def __init__(self, word: str) -> None:
        self.word, self.calls, self.pairs = word, 0, 0

    def score(self, question: str, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.pairs += len(texts)
        return np.array([t.lower().count(self.word) - 0.5 for t in texts], dtype=np.float32)


def _reranker(word: str = "risk", tmp_path=None, **kw) -> RerankedRetriever:
    kw.setdefault("cache", tmp_path is not None)
    return RerankedRetriever(HybridRetriever(), scorer=WordScorer(word), cache_dir=tmp_path, **kw)


def test_top_pages_are_reordered_by_the_cross_encoder_and_the_rest_keep_their_order() -> None:
    g = make_toy_graph(n_pages=10, elements_per_page=4, dim=16)
    q = QF("revenue growth chart")
    first = HybridRetriever().score(g, q).pages
    first_order = np.lexsort((np.arange(g.n_pages), -first.astype(np.float64)))
    r = _reranker(depth=4, chunks_per_page=2)
    fused, comps = r.score_with_components(g, q)
    order = np.lexsort((np.arange(g.n_pages), -fused.pages.astype(np.float64)))
    assert set(order[:4]) == set(first_order[:4]), "only the top `depth` pages move"
    assert list(order[4:]) == list(first_order[4:])
    ce = np.array([r.page_scores(g, q, [int(p)])[0] for p in order[:4]])
    assert all(a >= b for a, b in zip(ce, ce[1:])), "the top pages in cross-encoder order"
    assert list(comps) == ["bm25", "dense", "cross_encoder"]
    assert (comps["cross_encoder"].pages[order[4:]] == 0).all() and (comps["cross_encoder"].pages[order[:4]] > 0).all()
    el_page = np.array([e.page for e in g.elements])
    np.testing.assert_array_equal(comps["cross_encoder"].elements, comps["cross_encoder"].pages[el_page])
    np.testing.assert_array_equal(fused.elements, HybridRetriever().score(g, q).elements)
    assert relevance_columns(r) == ("fused", "bm25", "dense", "cross_encoder")
    assert r.scorer.pairs <= 4 * 2


def test_rrf_combination_and_passage_choice() -> None:
    g = make_toy_graph(n_pages=10, elements_per_page=4, dim=16)
    q = QF("asia margin")
    r = _reranker(depth=6, chunks_per_page=1, combine="rrf", rrf_k=0.0)
    texts, owners = r.passages_of(g, q, [0, 3, 3])
    assert owners == [0, 3, 3] and len(texts) == 3
    assert r.score(g, q).pages.shape == (g.n_pages,)
    with pytest.raises(ValueError):
        _reranker(combine="max")
    with pytest.raises(ValueError):
        _reranker(depth=0)


def test_rrf_is_pinned_where_the_first_stage_and_the_fused_order_differ() -> None:
    from mage_gym.retrieval.rerank import rerank_positions

    ce = [0.1, 0.5, 0.9, 0.3]  # the first stage's order is 0, 1, 2, 3; the cross-encoder's alone 2, 1, 3, 0
    assert rerank_positions(np.array(ce), "rrf", 0.0).tolist() == [2, 0, 1, 3]  # 1.333, 1.25, 1.0, 0.583
    assert rerank_positions(np.array(ce), "rrf", 60.0).tolist() == [2, 1, 0, 3]
    assert rerank_positions(np.array(ce), "ce").tolist() == [2, 1, 3, 0]
    assert rrf_order_by_hand(ce, 0.0) == [2, 0, 1, 3] and rrf_order_by_hand(ce, 60.0) == [2, 1, 0, 3]
    # a page without text ranks last in both rules; equal scores keep the first stage's order
    assert rerank_positions(np.array([-np.inf, 0.2, 0.7]), "rrf", 60.0).tolist() == [2, 1, 0]
    assert rerank_positions(np.array([-np.inf, 0.2, 0.7]), "ce").tolist() == [2, 1, 0]
    assert rerank_positions(np.array([0.4, 0.4, 0.4]), "rrf", 60.0).tolist() == [0, 1, 2]
    assert rrf_order_by_hand([-np.inf, 0.2, 0.7], 60.0) == [2, 1, 0] and rrf_order_by_hand([0.4] * 3, 60.0) == [0, 1, 2]


def test_the_retriever_orders_its_top_pages_by_rrf_not_by_the_first_stage() -> None:
    g = make_toy_graph(n_pages=10, elements_per_page=4, dim=16)
    q = QF("asia margin")
    moved = 0
    for word in ("risk", "asia", "revenue", "margin"):
        r = _reranker(word, depth=6, chunks_per_page=2, combine="rrf", rrf_k=0.0)
        first = HybridRetriever().score(g, q).pages.astype(np.float64)
        top = np.lexsort((np.arange(g.n_pages), -first))[:6].tolist()
        ce = r.page_scores(g, q, top).tolist()
        got = np.lexsort((np.arange(g.n_pages), -r.score(g, q).pages.astype(np.float64)))[:6].tolist()
        assert got == [top[i] for i in rrf_order_by_hand(ce, 0.0)], word
        moved += got != top
    assert moved >= 2, "the fused order differs from the first stage's on these queries"


def test_passages_come_best_cosine_first_so_fewer_per_page_are_a_prefix() -> None:
    from mage_gym.retrieval.page_text import page_chunks

    g = make_toy_graph(n_pages=6, elements_per_page=8, dim=16)
    q = Query("asia margin risk")  # no vector: the chunks' own encoder reads it, so cosines order passages
    wide = _reranker(chunks_per_page=4, chunk_chars=60)
    chunks = page_chunks(g, 60)
    sims = wide.passages.index(g).vectors @ wide.passages.query_vector(g, q)
    checked = best_not_first = 0
    for p in range(g.n_pages):
        rows = np.flatnonzero(chunks.page == p)
        if len(rows) < 3:
            continue
        texts, _ = wide.passages_of(g, q, [p])
        assert len(texts) == min(4, len(rows))
        best_not_first += int(np.argmax(sims[rows]) != 0)
        cos = [float(sims[rows[[chunks.texts[i] for i in rows].index(t)]]) for t in texts]
        assert cos == sorted(cos, reverse=True), "a page's passages: best dense cosine first"
        for c in (1, 2):
            assert _reranker(chunks_per_page=c, chunk_chars=60).passages_of(g, q, [p])[0] == texts[:c]
        checked += 1
    assert checked and best_not_first, "the toy pages hold several chunks, and some page's best is not its first"


def test_scores_are_cached_on_disk_by_model_question_and_passages(tmp_path) -> None:
    g = make_toy_graph(n_pages=8, elements_per_page=3, dim=16)
    q = QF("employees in europe")
    r = _reranker("europe", tmp_path, depth=5)
    a = r.score(g, q).pages
    calls = r.scorer.calls
    assert r.last_pairs > 0
    b = _reranker("europe", tmp_path, depth=5)  # a new process would see the same files
    b._scorer = r.scorer
    np.testing.assert_array_equal(b.score(g, q).pages, a)
    assert r.scorer.calls == calls and b.last_pairs == 0, "served from the cache"
    w = _reranker("europe", tmp_path, depth=5)
    w.cache = "write"
    w._scorer = r.scorer
    w.score(g, q)
    assert r.scorer.calls == calls + 1 and w.last_pairs > 0, "write-only: computed again, then stored"
    calls += 1
    with pytest.raises(ValueError, match="cache"):
        _reranker(cache="sometimes")
    r.scorer.digest = "another-model"
    r.score(g, q)
    assert r.scorer.calls == calls + 1, "another model misses"
    key = ScoreStore.key("m", "q", ["x"])
    (tmp_path / key[:2]).mkdir(exist_ok=True)
    (tmp_path / key[:2] / f"{key}.npy").write_bytes(b"not numpy")
    assert ScoreStore(tmp_path).load(key, 1) is None and not (tmp_path / key[:2] / f"{key}.npy").exists()


def test_searches_use_the_first_stage_unless_asked() -> None:
    g = make_toy_graph(n_pages=8, elements_per_page=3, dim=16)
    q = Query("risk table", QF("risk table").vector)
    r = _reranker(depth=5)
    assert r.search_retriever is r.first_stage
    search_page_scores(build_graph_index(g), r, q)
    assert r.scorer.calls == 0, "a SearchEvidence costs no cross-encoder pass"
    s = _reranker(depth=5, rerank_searches=True)
    assert s.search_retriever is s
    search_page_scores(build_graph_index(g), s, q)
    assert s.scorer.calls == 1


def test_the_env_takes_entry_pages_and_columns_from_the_reranked_order() -> None:
    r = _reranker("asia", depth=8, chunks_per_page=2)
    env = MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=48, budget={"k": 2}, retriever=r)
    obs, _ = env.reset(seed=0, options={"episode_id": "page"})
    rel = env.get_wrapper_attr("rel")
    graph = env.get_wrapper_attr("graph")
    fused, comps = r.score_with_components(graph, rel.query)
    want = np.lexsort((np.arange(graph.n_pages), -fused.pages.astype(np.float64)))[:2]
    state = env.get_wrapper_attr("state")
    assert set(np.flatnonzero(state.node_state[: graph.n_pages] == 1)) == set(want.tolist())
    assert rel.component_names == ("bm25", "dense", "cross_encoder")
    from mage_gym.env import NODE_FEATURES

    col = NODE_FEATURES.index("rel_component_3")
    assert obs["nodes"].shape[1] == len(NODE_FEATURES), "the observation keeps its shape"
    assert (obs["nodes"][:, col] >= 0).all()
    from policies.base import EnvInfo

    assert EnvInfo.from_env(env).relevance_columns == ("fused", "bm25", "dense", "cross_encoder")


def test_hybrid_rerank_is_built_by_name_without_loading_a_model() -> None:
    r = get_retriever("hybrid_rerank", depth=7, combine="rrf")
    assert isinstance(r, RerankedRetriever) and r.depth == 7 and r._scorer is None
    assert relevance_columns(r)[-1] == "cross_encoder"
    with pytest.raises(ValueError, match="unknown hybrid_rerank options"):
        get_retriever("hybrid_rerank", depht=3)
    with pytest.raises(ValueError, match="own first stage"):
        get_retriever("hybrid_rerank", first_stage="hybrid_rerank")
    assert get_retriever("hybrid_rerank", first_stage="bm25").components.keys() >= {"cross_encoder"}


def test_reranked_order_from_scored_passages_matches_the_retriever_rule() -> None:
    q = RerankQuestion("d", "val", "e", "doc", "q", (2,), [5, 1, 2, 7], [["a", "b"], ["c"], ["d", "e"], ["f"]])
    scores = [np.array([0.1, 0.9]), np.array([0.5]), np.array([0.7, 0.0]), np.array([3.0])]
    assert reranked_order(q, scores, 3, 1, "ce") == [2, 1, 5, 7]
    assert reranked_order(q, scores, 3, 2, "ce") == [5, 2, 1, 7]
    assert reranked_order(q, scores, 2, 1, "ce")[2:] == [2, 7]
    assert recall_at(reranked_order(q, scores, 3, 1, "ce"), q.gold, 1) == 1.0
    assert reranked_order(q, scores, 3, 1, "rrf")[0] in (5, 2)


def test_val_grid_and_the_selection_rule_of_train_reranker() -> None:
    from experiments.train_reranker import choose, evaluate

    qs = [RerankQuestion("a", "val", "e1", "d", "q", (2,), [5, 1, 2, 7, 8, 9], [["x"]] * 6),
          RerankQuestion("b", "val", "e2", "d", "q", (9,), [5, 1, 2, 7, 8, 9], [["x"]] * 6)]
    scores = [[np.array([0.0]), np.array([0.1]), np.array([0.9]), np.array([0.2]), np.array([0.3]),
               np.array([0.0])]] * 2
    rows = evaluate(qs, scores, [2, 6])
    first = rows[0]
    assert first["combine"] == "first_stage" and first["pooled"]["R@1"] == 0.0
    ce6 = next(r for r in rows if r["combine"] == "ce" and r["depth"] == 6 and r["chunks_per_page"] == 1)
    assert ce6["per_dataset"]["a"]["R@1"] == 1.0 and ce6["per_dataset"]["b"]["R@5"] == 0.0
    best = choose(rows)
    assert best["depth"] > 0 and best["pooled"]["R@5"] == max(r["pooled"]["R@5"] for r in rows if r["depth"])
    assert best["chunks_per_page"] == 1, "ties go to fewer passages read"
