"""hybrid_rerank's rules pinned by hand: the page scores it writes, each kind of first stage, its score files.

tests/test_rerank.py checks the behaviour through orders; here the exact
numbers: the first stage's top ``depth`` pages score ``2 + (d - r) / (d + 1)``
by their fused rank ``r``, every other page ``(n - r) / (n + 1)`` by its
first-stage rank (so the reranked block always sits above the rest), the
``cross_encoder`` column is the sigmoid of the score, and a score file is
trusted only when it holds the expected number of finite floats.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from mage_gym.retrieval import Scores, get_retriever
from mage_gym.retrieval.hybrid import HybridRetriever
from mage_gym.retrieval.rerank import RerankedRetriever, ScoreStore, rerank_positions, settings_of
from mage_gym.testing import hash_query_fn, make_toy_graph, rrf_order_by_hand

QF = hash_query_fn(16)


class QuestionWordScorer:
    """A stand-in cross-encoder: a passage scores how many of the question's words it holds, minus 1.5."""

    digest = "question-word-scorer-v1"

    def score(self, question: str, texts: list[str]) -> np.ndarray:
        words = set(question.lower().split())
        return np.array([sum(w in words for w in t.lower().split()) - 1.5 for t in texts], dtype=np.float32)


def _order(scores: np.ndarray) -> list[int]:
    return np.lexsort((np.arange(len(scores)), -np.asarray(scores, dtype=np.float64))).tolist()


@pytest.mark.parametrize("combine", ["rrf", "ce"])
def test_page_scores_written_by_hand(combine: str) -> None:
    g = make_toy_graph(n_pages=10, elements_per_page=4, dim=16)
    q = QF("asia margin revenue")
    r = RerankedRetriever(HybridRetriever(), scorer=QuestionWordScorer(), depth=4, chunks_per_page=2,
                          combine=combine, cache=False)
    first = HybridRetriever().score(g, q)
    first_order = _order(first.pages)
    top = first_order[:4]
    ce = r.page_scores(g, q, top)
    assert ce.dtype == np.float32
    fused_pos = rrf_order_by_hand(ce.tolist(), 60.0) if combine == "rrf" else _order(ce)
    want = np.zeros(10)
    for rank, p in enumerate(first_order):
        want[p] = (10 - rank) / 11
    for rank, pos in enumerate(fused_pos):
        want[top[pos]] = 2 + (4 - rank) / 5
    got, comps = r.score_with_components(g, q)
    assert got.pages.dtype == np.float32 and got.elements.dtype == np.float32
    np.testing.assert_allclose(got.pages, want, rtol=1e-6)
    np.testing.assert_array_equal(got.elements, first.elements.astype(np.float32))
    column = comps["cross_encoder"].pages
    assert column.dtype == np.float32 and comps["cross_encoder"].elements.dtype == np.float32
    np.testing.assert_allclose(column[top], 1 / (1 + np.exp(-ce.astype(np.float64))), rtol=1e-6)
    assert (np.delete(column, top) == 0).all()


def test_a_depth_beyond_the_document_reranks_every_page() -> None:
    g = make_toy_graph(n_pages=5, elements_per_page=3, dim=16)
    q = QF("asia margin")
    r = RerankedRetriever(HybridRetriever(), scorer=QuestionWordScorer(), depth=50, cache=False)
    pages = r.score(g, q).pages
    assert (pages > 2.0).all() and (pages < 3.0).all()


class GatedHybrid(HybridRetriever):
    """A first stage with a per-document gate (as hybrid_adaptive): pages by BM25 at gate 1, by dense at gate 0."""

    def gate(self, graph) -> float:  # noqa: ANN001
        return 1.0 if graph.n_pages > 5 else 0.0  # reads the document, as a density gate does

    def fuse(self, components, gate: float = 0.0) -> Scores:  # noqa: ANN001
        pages = gate * components["bm25"].pages + (1 - gate) * components["dense"].pages
        return Scores(pages=pages, elements=components["dense"].elements)

    def score_with_components(self, graph, query):  # noqa: ANN001
        comps = self.score_components(graph, query)
        return self.fuse(comps, self.gate(graph)), comps

    def score(self, graph, query) -> Scores:  # noqa: ANN001
        return self.score_with_components(graph, query)[0]


class OnlyWithComponents:
    """A first stage that offers its fused scores and components in one call, nothing else."""

    name = "pair"

    def __init__(self) -> None:
        self.inner = HybridRetriever()
        self.components = dict(self.inner.components)

    def score_with_components(self, graph, query):  # noqa: ANN001
        return self.inner.score_with_components(graph, query)

    def score(self, graph, query) -> Scores:  # noqa: ANN001
        return self.inner.score(graph, query)


@pytest.mark.parametrize("first", ["bm25", "hybrid", "gated", "pair"])
def test_every_kind_of_first_stage_keeps_its_own_order_below_the_reranked_pages(first: str) -> None:
    g = make_toy_graph(n_pages=12, elements_per_page=4, dim=16, seed=3)
    q = QF("employees europe risk")
    fs = {"gated": GatedHybrid, "pair": OnlyWithComponents}.get(first, lambda: get_retriever(first))()
    r = RerankedRetriever(fs, scorer=QuestionWordScorer(), depth=3, cache=False)
    want = fs.score(g, q)
    got, comps = r.score_with_components(g, q)
    order, first_order = _order(got.pages), _order(want.pages)
    assert set(order[:3]) == set(first_order[:3]) and order[3:] == first_order[3:]
    np.testing.assert_array_equal(got.elements, np.asarray(want.elements, dtype=np.float32))
    names = list(getattr(fs, "components", {}) or [fs.name])
    assert list(comps) == [*names, "cross_encoder"] and list(r.components) == [*names, "cross_encoder"]
    if first == "gated":  # the gate is applied: BM25's order, not dense's
        assert first_order == _order(fs.score_components(g, q)["bm25"].pages)
        assert first_order != _order(fs.score_components(g, q)["dense"].pages)


@pytest.mark.parametrize("first, names", [("bm25", ["bm25"]), ("hybrid", ["bm25", "dense"])])
def test_a_pickled_reranker_scores_the_same_through_its_own_channel(first: str, names: list[str]) -> None:
    g = make_toy_graph(n_pages=8, elements_per_page=3, dim=16)
    q = QF("revenue growth")
    r = RerankedRetriever(get_retriever(first), scorer=QuestionWordScorer(), depth=4, cache=False)
    assert "components" not in r.__getstate__()
    copy = pickle.loads(pickle.dumps(r))
    assert list(copy.components) == [*names, "cross_encoder"]
    if first == "hybrid":  # the copy's channels are its own first stage's, not the original's
        assert all(copy.components[n] is copy.first_stage.components[n] for n in names)
    assert copy.components["cross_encoder"]._owner is copy
    np.testing.assert_array_equal(copy.components["cross_encoder"].score(g, q).pages,
                                  r.score_with_components(g, q)[1]["cross_encoder"].pages)
    np.testing.assert_array_equal(copy.score(g, q).pages, r.score(g, q).pages)


def test_no_score_file_is_written_or_read_without_the_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MAGE_GYM_CACHE", str(tmp_path))
    g = make_toy_graph(n_pages=6, elements_per_page=3, dim=16)
    q = QF("asia")
    RerankedRetriever(HybridRetriever(), scorer=QuestionWordScorer(), depth=3, cache=False).score(g, q)
    assert not list(tmp_path.rglob("*.npy"))
    RerankedRetriever(HybridRetriever(), scorer=QuestionWordScorer(), depth=3, cache=True).score(g, q)
    assert len(list((tmp_path / "rerank").rglob("*.npy"))) == 1, "the default folder: $MAGE_GYM_CACHE/rerank"


def test_score_files_hold_exact_floats_and_bad_ones_are_misses(tmp_path) -> None:
    store = ScoreStore(tmp_path / "deep" / "er")  # folders made on the first save
    key = ScoreStore.key("m", "q", ["ab", "c"])
    assert key != ScoreStore.key("m", "q", ["a", "bc"]) and key != ScoreStore.key("m", "q2", ["ab", "c"])
    store.save(key, np.array([0.5, -1.25], dtype=np.float64))
    got = store.load(key, 2)
    assert got.dtype == np.float32 and got.tolist() == [0.5, -1.25]
    path = tmp_path / "deep" / "er" / key[:2] / f"{key}.npy"
    assert path.is_file() and np.load(path).dtype == np.float32
    assert store.load(key, 3) is None and not path.exists(), "a wrong length is a miss and the file goes"
    for bad in (np.array([np.nan, 1.0]), np.array([{"a": 1}, 2], dtype=object)):
        with open(path, "wb") as f:
            np.save(f, bad, allow_pickle=True)
        assert store.load(key, 2) is None and not path.exists(), bad
    assert store.load(key, 2) is None  # absent


def test_settings_of_passes_every_setting_and_nothing_else() -> None:
    cfg = {"depth": 7, "chunks_per_page": 2, "chunk_chars": 300, "combine": "ce", "rrf_k": 10.0,
           "rerank_searches": True, "cache": "write", "cache_dir": "/x", "checkpoint": "/ckpt", "max_graphs": 3,
           "name": "mine", "other": 1, "first_stage": "bm25"}
    assert settings_of(cfg) == {k: v for k, v in cfg.items() if k not in ("other", "first_stage")}
    assert settings_of({"depth": None, "combine": "rrf"}) == {"combine": "rrf"}


def test_rerank_positions_default_constant_is_60() -> None:
    ce = np.array([0.1, 0.5, 0.9, 0.3])
    assert rerank_positions(ce, "rrf").tolist() == rerank_positions(ce, "rrf", 60.0).tolist() == [2, 1, 0, 3]
    # a tie at k = 60 that k = 61 breaks: first-stage ranks 1, 2; cross-encoder ranks 4, 1 of four
    tie = np.array([0.0, 1.0, 0.5, 0.4])
    assert rerank_positions(tie, "rrf").tolist() == rrf_order_by_hand(tie.tolist(), 60.0)


class FixedScorer:
    """Scores passages by a table: extreme scores test the sigmoid column's clipping."""

    digest = "fixed"

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table

    def score(self, question: str, texts: list[str]) -> list[float]:  # a plain list of Python floats
        return [self.table.get(t.split()[-1], 0.0) for t in texts]


def test_the_column_is_the_sigmoid_clipped_at_50_and_zero_for_a_page_without_text() -> None:
    from mage_gym.testing import graph_from_texts

    g = graph_from_texts([["alpha"], ["beta"], ["gamma"], []], dim=16)
    q = QF("alpha beta gamma")
    r = RerankedRetriever(get_retriever("bm25"), scorer=FixedScorer({"alpha": -60.0, "beta": 60.0, "gamma": -50.5}),
                          depth=4, cache=False)
    col = r.score_with_components(g, q)[1]["cross_encoder"].pages
    want = np.array([1 / (1 + np.exp(50.0)), 1 / (1 + np.exp(-50.0)), 1 / (1 + np.exp(50.0)), 0.0], dtype=np.float32)
    np.testing.assert_array_equal(col, want)  # -60 and -50.5 clip to -50; the empty page has no score: 0
    assert col.dtype == np.float32


def test_the_cache_key_reads_the_question(tmp_path) -> None:
    g = make_toy_graph(n_pages=4, elements_per_page=1, dim=16)  # one short passage a page: the same texts
    calls = []

    class Counting(QuestionWordScorer):
        def score(self, question, texts):  # noqa: ANN001
            calls.append(question)
            return super().score(question, texts)

    r = RerankedRetriever(HybridRetriever(), scorer=Counting(), depth=4, chunks_per_page=1, cache=True,
                          cache_dir=tmp_path)
    for text in ("section revenue", "section revenue", "section margin"):  # the same pages, the same passages
        r.page_scores(g, QF(text), [0, 1, 2, 3])
    assert calls == ["section revenue", "section margin"], "a new question is scored, the same one is cached"


def test_a_pickled_score_file_is_never_unpickled(tmp_path) -> None:
    """Loading a score file runs no code: allow_pickle stays off (a pickle runs its payload on load)."""
    marker = tmp_path / "ran"
    store = ScoreStore(tmp_path)
    key = ScoreStore.key("m", "q", ["x"])
    (tmp_path / key[:2]).mkdir()
    with open(tmp_path / key[:2] / f"{key}.npy", "wb") as f:
        np.save(f, np.array([_Payload(marker), 1.0], dtype=object), allow_pickle=True)
    assert store.load(key, 2) is None and not marker.exists()


class _Payload:
    def __init__(self, marker) -> None:  # noqa: ANN001
        self.marker = marker

    def __reduce__(self):
        return (_touch, (str(self.marker),))


def _touch(path: str) -> None:
    from pathlib import Path

    Path(path).touch()


def test_a_page_without_text_keeps_only_its_first_stage_rank_under_rrf() -> None:
    assert rerank_positions(np.array([-np.inf, 0.2, 0.7]), "rrf", 0.0).tolist() == [2, 0, 1]  # 1.0 ties 1.0


def test_the_shipped_rrf_constant_is_60() -> None:
    """Twenty pages where k = 60 and k = 61 order two of them differently (found by search, checked by hand rule)."""
    ce = np.array([8, 0, 0, 2, 0, 13, 10, 12, 5, 12, 15, 7, 9, 19, 16, 19, 7, 13, 19, 13], dtype=float)
    assert rerank_positions(ce, "rrf").tolist() == rrf_order_by_hand(ce.tolist(), 60.0)
    assert rerank_positions(ce, "rrf").tolist() != rrf_order_by_hand(ce.tolist(), 61.0)


def test_defaults_and_refused_settings() -> None:
    first = get_retriever("bm25")
    r = RerankedRetriever(first)
    assert (r.depth, r.chunks_per_page, r.combine, r.rrf_k, r.rerank_searches, r.cache, r.cache_dir, r.checkpoint,
            r.name, r.last_pairs, r.observed) == (10, 1, "rrf", 60.0, False, True, None, None, "hybrid_rerank", 0, {})
    assert r.first_stage is first and r._scorer is None
    assert (r.passages.chunk_chars, r.passages.cache) == (1000, True)
    assert (r._chunks.name, r._chunks.per_graph) == ("retrieval.hybrid_rerank.chunks", True)
    assert list(r.components) == ["bm25", "cross_encoder"] and r.components["bm25"] is first
    assert r.components["cross_encoder"]._owner is r
    w = RerankedRetriever(first, depth=1, chunks_per_page=1, chunk_chars=300, rrf_k=0.0, cache="write",
                          cache_dir=Path("/tmp/x"), checkpoint="/ckpt", max_graphs=20, name="mine")
    assert (w.depth, w.rrf_k, w.cache, w.cache_dir, w.checkpoint, w.name) == (1, 0.0, "write", "/tmp/x", "/ckpt", "mine")
    assert (w.passages.chunk_chars, w.passages.cache, w._chunks.max_entries) == (300, True, 20)
    assert r.passages.__getstate__()["max_graphs"] == 8 and w.passages.__getstate__()["max_graphs"] == 20
    assert RerankedRetriever(first, cache=False).passages.cache is False
    for kw, message in [({"depth": 0}, "depth and chunks_per_page must be >= 1, got 0, 1"),
                        ({"chunks_per_page": 0}, "depth and chunks_per_page must be >= 1, got 10, 0"),
                        ({"combine": "max"}, "combine must be one of ('ce', 'rrf'), got 'max'"),
                        ({"rrf_k": -1}, "rrf_k must be >= 0, got -1"),
                        ({"cache": "sometimes"}, "cache must be true, false or 'write', got 'sometimes'")]:
        with pytest.raises(ValueError) as err:
            RerankedRetriever(first, **kw)
        assert str(err.value) == message
    with pytest.raises(TypeError, match="^first_stage must be a retriever, got str$"):
        RerankedRetriever("bm25")


def test_a_document_without_elements_gets_empty_float32_element_scores() -> None:
    """Image-only pages without OCR parse to no elements: every channel still has an (empty) float32 element row."""
    from mage_gym.testing import graph_from_texts

    g = graph_from_texts([[], []], doc_id="image_only")
    r = RerankedRetriever(HybridRetriever(), scorer=QuestionWordScorer(), cache=False)
    fused, comps = r.score_with_components(g, hash_query_fn(32)("what grew?"))
    for s in (fused, *comps.values()):
        assert s.elements.shape == (0,) and s.elements.dtype == np.float32 and s.pages.shape == (2,)
