"""Text retrievers (bm25, dense, hybrid/RRF), their caches, and the factory.

No model is loaded here: dense tests pass ``Query.vector`` directly or inject a
fake encoder, because ``make_toy_graph`` carries random 16-d vectors.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import DocumentSource, Element, Page, element_id, page_id
from mage_gym.retrieval import Query, Scores, get_retriever, make_query, rrf
from mage_gym.retrieval.bm25 import BM25Retriever
from mage_gym.retrieval.dense import DenseRetriever
from mage_gym.retrieval.fusion import competition_ranks
from mage_gym.retrieval.hybrid import HybridRetriever
from mage_gym.retrieval.text import element_text, page_text, tokenize
from mage_gym.testing import make_toy_graph


def make_text_graph(pages: list[list[str]], dim: int = 8, seed: int = 0,
                    tables: dict[tuple[int, int], str] | None = None) -> EvidenceGraph:
    """A graph whose page ``p`` has one paragraph per string in ``pages[p]`` (no edges needed here)."""
    rng = np.random.default_rng(seed)
    tables = tables or {}
    page_recs: list[Page] = []
    elements: list[Element] = []
    for p, texts in enumerate(pages):
        for j, t in enumerate(texts):
            md = tables.get((p, j))
            elements.append(Element(
                node_id=element_id("txt", p, j), page=p, index=j, type="table" if md else "paragraph",
                bbox=(0.1, 0.1 * j, 0.9, 0.1 * j + 0.08), text=t, summary=t[:40], reading_order=len(elements),
                table_markdown=md))
        page_recs.append(Page(node_id=page_id("txt", p), index=p, width=612.0, height=792.0,
                              text="\n".join(t for t in texts if t), summary=texts[0] if texts else "",
                              n_elements=len(texts)))

    def unit(n: int) -> np.ndarray:
        v = rng.normal(size=(n, dim)).astype(np.float32)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)

    return EvidenceGraph(
        doc_id="txt", source=DocumentSource(kind="pdf", path="<none>"), pages=page_recs, elements=elements,
        edge_src=np.zeros(0, np.int32), edge_dst=np.zeros(0, np.int32), edge_kind=np.zeros(0, np.int8),
        edge_weight=np.zeros(0, np.float32), edge_label=[], page_vectors=unit(len(page_recs)),
        element_vectors=unit(len(elements)), meta={"parser": "test"},
    )


REPORT = make_text_graph([
    ["Annual report 2019", "Letter from the chairman about our strategy"],
    ["Revenue grew in Europe", "Operating margin improved to 12 percent"],
    ["Employees by region", "Headcount in Asia rose to 4,500 employees"],
    ["Risk factors", "Currency risk and interest rate risk"],
], tables={(1, 1): "| metric | 2019 |\n|---|---|\n| EBITDA | 310 |"})


class FakeEncoder:
    """Deterministic 'embedding': a hashed bag of words, counting calls."""

    def __init__(self, dim: int = 8) -> None:
        self.dim, self.calls = dim, 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, sum(map(ord, w)) % self.dim] += 1
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return np.where(n > 0, out / np.maximum(n, 1e-9), 0).astype(np.float32)


# --- tokenisation and node texts ---------------------------------------------------


def test_tokenize_lowercases_drops_stopwords_keeps_digits() -> None:
    assert tokenize("What is the Revenue of ACME in 2019, Q4 and 3 regions?") == [
        "revenue", "acme", "2019", "q4", "3", "regions"]
    assert tokenize("") == [] and tokenize(None) == [] and tokenize("the of and") == []


def test_table_markdown_is_searchable_text() -> None:
    table = REPORT.elements_of_page(1)[1]
    assert "EBITDA" in element_text(table) and "EBITDA" in page_text(REPORT, 1)


# --- bm25 -----------------------------------------------------------------


def test_bm25_ranks_page_and_element_with_query_words_first() -> None:
    s = BM25Retriever().score(REPORT, Query("How many employees work in Asia?"))
    assert s.pages.dtype == np.float32 and s.pages.shape == (4,) and s.elements.shape == (REPORT.n_elements,)
    assert int(np.argmax(s.pages)) == 2
    best = REPORT.elements[int(np.argmax(s.elements))]
    assert best.text.startswith("Headcount in Asia")
    assert s.pages[0] == 0 and s.pages[3] == 0  # no query word on those pages


def test_bm25_finds_table_cells_through_markdown() -> None:
    s = BM25Retriever().score(REPORT, Query("EBITDA"))
    assert int(np.argmax(s.pages)) == 1
    assert REPORT.elements[int(np.argmax(s.elements))].type == "table"


@pytest.mark.parametrize("text", ["", "   ", "the and of", "zebra unicorn"])
def test_bm25_queries_without_known_terms_score_zero(text: str) -> None:
    s = BM25Retriever().score(REPORT, Query(text))
    assert not s.pages.any() and not s.elements.any()


def test_bm25_empty_texts_and_empty_documents_do_not_crash() -> None:
    blank = make_text_graph([["", ""], [], ["   "]])
    s = BM25Retriever().score(blank, Query("revenue"))
    assert s.pages.shape == (3,) and s.elements.shape == (3,) and not s.pages.any()
    partly = make_text_graph([["", "revenue table"], [""]])
    s = BM25Retriever().score(partly, Query("revenue"))
    assert s.pages[0] > 0 and s.pages[1] == 0 and s.elements[1] > 0 and s.elements[0] == 0
    empty = make_text_graph([])
    for name in ("bm25", "hybrid"):
        r = get_retriever(name, **({"dense": {"encoder": FakeEncoder()}} if name == "hybrid" else {}))
        out = r.score(empty, Query("anything", vector=np.ones(8, np.float32)))
        assert out.pages.shape == (0,) and out.elements.shape == (0,)


# --- dense -------------------------------------------------------------------


def test_dense_ranks_nearest_vector_first_on_toy_graph() -> None:
    g = make_toy_graph()
    r = DenseRetriever()
    for target in (0, 3, 5):
        s = r.score(g, Query("ignored", vector=g.page_vectors[target]))
        assert int(np.argmax(s.pages)) == target
        np.testing.assert_allclose(s.pages[target], 1.0, rtol=1e-5)
    s = r.score(g, Query("ignored", vector=3.0 * g.element_vectors[7]))  # unnormalised input is normalised
    assert int(np.argmax(s.elements)) == 7 and s.elements.dtype == np.float32
    assert np.all(np.abs(s.elements) <= 1 + 1e-5)


def test_dense_accepts_float16_graph_vectors_and_rejects_wrong_dimension() -> None:
    g = make_toy_graph()
    g.page_vectors = g.page_vectors.astype(np.float16)
    s = DenseRetriever().score(g, Query("x", vector=g.page_vectors[2].astype(np.float32)))
    assert int(np.argmax(s.pages)) == 2 and s.pages.dtype == np.float32
    with pytest.raises(ValueError, match="dimensions"):
        DenseRetriever().score(g, Query("x", vector=np.ones(384, np.float32)))


def test_dense_encodes_a_missing_query_vector_once_per_text() -> None:
    enc = FakeEncoder()
    g = make_text_graph([["revenue"], ["risk"]])
    g.page_vectors = enc.encode(["revenue", "risk"])
    g.element_vectors = enc.encode(["revenue", "risk"])
    r = DenseRetriever(encoder=enc)
    s1 = r.score(g, Query("risk"))
    s2 = r.score(g, Query("risk"))
    assert enc.calls == 3  # two for the graph above, one for the query
    assert int(np.argmax(s1.pages)) == 1
    np.testing.assert_array_equal(s1.pages, s2.pages)


def test_dense_zero_vectors_score_zero() -> None:
    g = make_toy_graph()
    g.element_vectors[4] = 0.0
    s = DenseRetriever().score(g, Query("x", vector=g.element_vectors[5]))
    assert s.elements[4] == 0.0


# --- fusion ------------------------------------------------------------------


def test_competition_ranks_share_best_rank_on_ties() -> None:
    assert competition_ranks(np.array([5.0, 3.0, 3.0, 1.0])).tolist() == [1, 2, 2, 4]
    assert competition_ranks(np.array([1.0, 3.0, 3.0, 5.0])).tolist() == [4, 2, 2, 1]


def test_rrf_matches_hand_computed_example() -> None:
    a = np.array([3.0, 0.0, 1.0, 2.0])  # ranks 1, -, 3, 2 (0 = not retrieved)
    b = np.array([0.1, 0.9, 0.5, 0.5])  # ranks 4, 1, 2, 2
    expected = np.array([1 / 61 + 1 / 64, 1 / 61, 1 / 63 + 1 / 62, 1 / 62 + 1 / 62], np.float32)
    np.testing.assert_allclose(rrf([a, b], k=60), expected, rtol=1e-6)
    weighted = np.array([2 / 61 + 1 / 64, 1 / 61, 2 / 63 + 1 / 62, 2 / 62 + 1 / 62], np.float32)
    np.testing.assert_allclose(rrf([a, b], weights=[2, 1], k=60), weighted, rtol=1e-6)
    # without ignore_zero the 0 in ``a`` is ranked last (4th)
    np.testing.assert_allclose(rrf([a, b], k=60, ignore_zero=False)[1], 1 / 64 + 1 / 61, rtol=1e-6)
    np.testing.assert_allclose(rrf([a, b], k=0)[0], 1 / 1 + 1 / 4, rtol=1e-6)


def test_rrf_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        rrf([])
    with pytest.raises(ValueError):
        rrf([np.zeros(3), np.zeros(4)])
    with pytest.raises(ValueError):
        rrf([np.zeros(3)], weights=[1, 2])


def test_hybrid_fuses_components_separately_for_pages_and_elements() -> None:
    g = make_toy_graph()
    r = HybridRetriever(components={"bm25": BM25Retriever(), "dense": DenseRetriever()}, k=60)
    q = Query("chart margin", vector=g.page_vectors[4])
    fused, comps = r.score_with_components(g, q)
    assert set(comps) == {"bm25", "dense"}
    np.testing.assert_allclose(fused.pages, rrf([comps["bm25"].pages, comps["dense"].pages], k=60))
    np.testing.assert_allclose(fused.elements, rrf([comps["bm25"].elements, comps["dense"].elements], k=60))
    np.testing.assert_array_equal(r.score(g, q).pages, fused.pages)
    assert fused.pages.dtype == np.float32 and fused.elements.shape == (g.n_elements,)


def test_hybrid_weights_select_the_ranking() -> None:
    g = make_toy_graph()
    q = Query("revenue", vector=g.page_vectors[3])
    only_dense = get_retriever("hybrid", weights={"bm25": 0.0, "dense": 1.0})
    s = only_dense.score(g, q)
    dense = DenseRetriever().score(g, q)
    assert np.argsort(-s.pages, kind="stable").tolist() == np.argsort(-dense.pages, kind="stable").tolist()
    only_bm25 = get_retriever("hybrid", weights={"dense": 0.0})
    bm = BM25Retriever().score(g, q)
    assert np.array_equal(only_bm25.score(g, q).elements > 0, bm.elements > 0)
    with pytest.raises(ValueError, match="unknown components"):
        get_retriever("hybrid", weights={"colpali": 1.0})


def test_hybrid_handles_empty_texts_and_zero_vectors() -> None:
    g = make_text_graph([["", "revenue"], [""], ["risk", ""]])
    g.element_vectors[0] = 0.0
    r = get_retriever("hybrid")
    s = r.score(g, Query("revenue", vector=g.element_vectors[1]))
    assert np.isfinite(s.pages).all() and np.isfinite(s.elements).all()
    assert s.elements[0] == 0.0  # no text, zero vector: retrieved by no component
    assert int(np.argmax(s.elements)) == 1


# --- caching -------------------------------------------------------------------


def test_indexes_are_built_once_per_graph_and_reused() -> None:
    g = make_toy_graph()
    bm, de = BM25Retriever(), DenseRetriever()
    assert bm.index(g) is bm.index(g) and de.index(g) is de.index(g)
    q = Query("revenue growth", vector=g.page_vectors[1])
    a, b = bm.score(g, q), bm.score(g, q)
    np.testing.assert_array_equal(a.pages, b.pages)
    np.testing.assert_array_equal(a.elements, b.elements)
    other = make_toy_graph(seed=1)
    assert bm.index(other) is not bm.index(g)


# --- factory and query ---------------------------------------------------------------


def test_get_retriever_names_and_errors() -> None:
    assert get_retriever("bm25").name == "bm25"
    assert get_retriever("dense").name == "dense"
    assert get_retriever().name == "hybrid"
    h = get_retriever("hybrid", components={"bm25": {"k1": 1.2}}, k=10)
    assert isinstance(h, HybridRetriever) and list(h.components) == ["bm25"] and h.k == 10.0
    assert h.components["bm25"].k1 == 1.2  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown retriever"):
        get_retriever("splade")
    with pytest.raises(ValueError):
        get_retriever("hybrid", components=["bm25", "hybrid"])
    with pytest.raises(ValueError, match="not a hybrid component"):
        get_retriever("hybrid", components=["bm25"], dense={"encoder": None})
    with pytest.raises(TypeError):
        get_retriever("bm25", no_such_option=1)


def test_make_query_encodes_once_with_given_encoder() -> None:
    enc = FakeEncoder(dim=16)
    q = make_query("chart margin", encoder=enc)
    assert enc.calls == 1 and q.text == "chart margin" and q.vector is not None and q.vector.shape == (16,)
    g = make_toy_graph()
    s = get_retriever("hybrid").score(g, q)  # the vector is reused, nothing is encoded again
    assert enc.calls == 1 and isinstance(s, Scores)
    with pytest.raises(TypeError):
        make_query(None)  # type: ignore[arg-type]


def test_retrievers_pickle_without_their_indexes() -> None:
    g = make_toy_graph()
    r = get_retriever("hybrid", weights={"bm25": 2.0})
    q = Query("revenue growth", vector=g.page_vectors[2])
    before = r.score(g, q)
    clone = pickle.loads(pickle.dumps(r))
    assert clone.weights == {"bm25": 2.0, "dense": 1.0}  # type: ignore[attr-defined]
    assert clone.components["bm25"]._cache.peek(g) is None and len(clone.components["bm25"]._cache) == 0  # type: ignore[attr-defined]
    after = clone.score(g, q)
    np.testing.assert_array_equal(before.pages, after.pages)
    np.testing.assert_array_equal(before.elements, after.elements)


# --- real PDF (a few pages) ---------------------------------------------------------------


@pytest.mark.real_data
def test_real_pdf_page_is_found_by_a_span_of_its_own_text(data_root) -> None:  # type: ignore[no-untyped-def]
    """On a real parsed PDF, 10-word spans of one paragraph find its page with every text retriever.

    Uses no gold labels: the queries are cut from the document itself, so
    the expected page is known without tuning to the file. BM25 indexes
    whole texts, so its span comes from inside the paragraph; dense vectors
    encode an element's first 80 characters (``EmbedConfig.element_max_chars``),
    so the dense span is the paragraph's opening. (A span of chart tick labels
    from past that opening once tied two pages' dense scores to 1e-4.)
    """
    from mage_gym.graph.build import build_graph

    pdfs = sorted((data_root / "mmlongbench-dev" / "documents").glob("*.pdf"))
    if not pdfs:
        pytest.skip("no MMLongBench-Doc PDFs in the data folder")
    graph = build_graph(pdfs[0], parser="fast", max_pages=4)

    def prose(text: str) -> bool:
        return len(tokenize(text)) >= 12 and sum(w.isalpha() for w in text.split()[:10]) >= 8

    candidates = [e for e in graph.elements if prose(e.text)]
    if not candidates:
        pytest.skip(f"{pdfs[0].name}: no prose element with 12+ content words in its first pages")
    target = candidates[len(candidates) // 2]
    words = target.text.split()
    span = " ".join(words[len(words) // 4 : len(words) // 4 + 10])
    query = make_query(span)
    bm = BM25Retriever().score(graph, query)
    assert int(np.argmax(bm.pages)) == target.page
    assert graph.elements[int(np.argmax(bm.elements))].page == target.page
    dense = DenseRetriever().score(graph, make_query(" ".join(words[:10])))
    assert target.page in np.argsort(-dense.pages)[:3].tolist()
    fused = get_retriever("hybrid").score(graph, query)
    assert target.page in np.argsort(-fused.pages)[:2].tolist()
    assert np.isfinite(fused.elements).all() and fused.elements.shape == (graph.n_elements,)


_WORDS = ["revenue", "asia", "table", "growth", "profit", "margin", "europe", "staff", "chart", "total"]


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(_WORDS), max_size=12), min_size=1, max_size=9),
       query=st.lists(st.sampled_from(_WORDS + ["unknown"]), max_size=30),
       method=st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"]))
def test_bm25_scores_are_bm25s_scores_bit_for_bit(texts: list[list[str]], query: list[str], method: str) -> None:
    """The one-call postings sum gives exactly bm25s's per-token scores (repeated query tokens included)."""
    from mage_gym.retrieval.bm25 import LexicalIndex

    index = LexicalIndex.build([" ".join(t) for t in texts], k1=1.5, b=0.75, method=method)
    ours = index.scores(query)
    ids = [index.vocab[t] for t in query if t in index.vocab]
    if index.model is None or not ids:
        assert not ours.any()
        return
    theirs = np.asarray(index.model.get_scores_from_ids(ids), dtype=np.float32)
    assert ours.dtype == np.float32 and np.array_equal(ours, theirs)
