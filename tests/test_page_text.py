"""Page-text dense channel (``page_dense``), its disk cache, and the ``hybrid_pages`` fusion.

No model is loaded: a counting bag-of-words encoder stands in for MiniLM,
and every on-disk cache lives in a temporary folder.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval import DEFAULT_HYBRID, HYBRID_PRESETS, Query, get_retriever, rrf
from mage_gym.retrieval.hybrid import HybridRetriever
from mage_gym.retrieval.page_text import (
    ChunkVectorStore, PageTextDenseRetriever, cache_key, encoder_for_graph, page_chunks, split_page_text,
)
from mage_gym.testing import graph_from_texts


class CountingEncoder:
    """Hashed bag of words (deterministic), counting the texts it encodes."""

    def __init__(self, dim: int = 32, name: str = "counting-bow") -> None:
        self.dim, self.name, self.texts = dim, name, 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, sum(map(ord, w)) % self.dim] += 1.0
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, n, out=np.zeros_like(out), where=n > 0)


FILLER = " ".join(f"filler{i}" for i in range(400))  # a long page: ~4,000 characters before the fact


def make_graph(pages: list[list[str]], dim: int = 32, doc_id: str = "pt", meta: dict | None = None) -> EvidenceGraph:
    return graph_from_texts(pages, doc_id=doc_id, dim=dim, seed=0, meta=meta)


REPORT = [
    ["Annual report", "Letter from the chairman about strategy"],
    ["Balance sheet", FILLER + " goodwill impairment charge recorded in fiscal 2021"],
    ["Employees by region", "Headcount rose in Asia"],
    [""],  # a page without text
]


# --- chunking ---------------------------------------------------------------------


def test_split_packs_lines_and_cuts_long_lines_at_words() -> None:
    assert split_page_text("", 100) == [] and split_page_text(" \n \n", 100) == []
    assert split_page_text("a b\nc  d", 100) == ["a b\nc d"]
    chunks = split_page_text("one two three four five six", 10)
    assert chunks == ["one two", "three four", "five six"]
    assert split_page_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]  # a word longer than a chunk
    with pytest.raises(ValueError):
        split_page_text("text", 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab \n", max_size=60), max_size=8), st.integers(5, 40))
def test_chunks_fit_and_keep_every_word_in_order(lines: list[str], size: int) -> None:
    text = "\n".join(lines)
    chunks = split_page_text(text, size)
    assert all(0 < len(c) <= size for c in chunks)
    # words survive in order (a word longer than a chunk is cut into pieces, so compare characters)
    assert "".join("".join(c.split()) for c in chunks) == "".join(text.split())


def test_page_chunks_follow_pages_and_skip_empty_ones() -> None:
    g = make_graph(REPORT)
    ch = page_chunks(g, 200)
    assert ch.n_pages == 4 and len(ch.texts) == len(ch.page)
    assert np.all(np.diff(ch.page) >= 0) and 3 not in ch.page.tolist()
    assert (ch.page == 1).sum() > 10  # the long page is cut into many chunks
    assert ch.digest() == page_chunks(g, 200).digest() != page_chunks(g, 300).digest()


# --- scoring ----------------------------------------------------------------------------


def test_a_fact_deep_in_a_long_page_is_found_and_elements_take_their_page_score(tmp_path: Path) -> None:
    g = make_graph(REPORT)
    enc = CountingEncoder()
    r = PageTextDenseRetriever(chunk_chars=300, encoder=enc, cache_dir=tmp_path)
    text = "goodwill impairment charge fiscal 2021"
    q = Query(text, vector=enc.encode([text])[0])
    s = r.score(g, q)
    assert int(np.argmax(s.pages)) == 1 and s.pages[3] == 0.0
    # the page's best chunk: exactly the cosine of the chunk holding the fact
    idx = r.index(g)
    best = max(float(idx.vectors[i] @ q.vector) for i in np.flatnonzero(idx.chunk_page == 1))
    assert s.pages[1] == pytest.approx(best)
    # one chunk of the first 1,000 characters (what a 256-token model sees of the page) misses the fact
    head = enc.encode([g.pages[1].text[:1000]])[0]
    assert float(head @ q.vector) < 0.5 * best
    el_page = np.array([e.page for e in g.elements])
    np.testing.assert_array_equal(s.elements, s.pages[el_page])
    assert s.pages.dtype == np.float32 and s.elements.shape == (g.n_elements,)


def test_query_without_vector_is_encoded_and_wrong_dimension_is_refused(tmp_path: Path) -> None:
    g = make_graph(REPORT)
    r = PageTextDenseRetriever(chunk_chars=300, encoder=CountingEncoder(), cache_dir=tmp_path)
    assert int(np.argmax(r.score(g, Query("headcount asia")).pages)) == 2
    with pytest.raises(ValueError, match="dimensions"):
        r.score(g, Query("x", vector=np.ones(7, np.float32)))
    with pytest.raises(ValueError):
        PageTextDenseRetriever(chunk_chars=10)


# --- the on-disk cache -------------------------------------------------------------------


def test_vectors_are_computed_once_and_reloaded_from_disk(tmp_path: Path) -> None:
    g = make_graph(REPORT)
    first = CountingEncoder()
    a = PageTextDenseRetriever(chunk_chars=300, encoder=first, cache_dir=tmp_path)
    va = a.index(g).vectors
    assert first.texts == len(va) > 0
    assert a.index(g).vectors is va and first.texts == len(va)  # in memory
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"  # no temporary file left behind
    second = CountingEncoder()
    b = PageTextDenseRetriever(chunk_chars=300, encoder=second, cache_dir=tmp_path)
    np.testing.assert_array_equal(b.index(g).vectors, va)
    assert second.texts == 0  # loaded, not encoded
    # another chunking, another encoder or another text is another entry
    PageTextDenseRetriever(chunk_chars=400, encoder=second, cache_dir=tmp_path).index(g)
    PageTextDenseRetriever(chunk_chars=300, encoder=CountingEncoder(name="other"), cache_dir=tmp_path).index(g)
    PageTextDenseRetriever(chunk_chars=300, encoder=second, cache_dir=tmp_path).index(
        make_graph([*REPORT[:3], ["new text"]]))
    assert len(list(tmp_path.glob("*.npz"))) == 4


def test_a_corrupted_or_mismatched_entry_is_recomputed(tmp_path: Path) -> None:
    g = make_graph(REPORT)
    enc = CountingEncoder()
    r = PageTextDenseRetriever(chunk_chars=300, encoder=enc, cache_dir=tmp_path)
    good = r.index(g).vectors.copy()
    key = cache_key(page_chunks(g, 300), enc, 300)
    path = ChunkVectorStore(tmp_path).path(key)
    path.write_bytes(b"not a numpy file")
    enc2 = CountingEncoder()
    again = PageTextDenseRetriever(chunk_chars=300, encoder=enc2, cache_dir=tmp_path).index(g).vectors
    np.testing.assert_array_equal(again, good)
    assert enc2.texts == len(good) and path.exists()  # recomputed and stored again
    ChunkVectorStore(tmp_path).save(key, good[:-1])  # wrong number of rows under this key
    assert ChunkVectorStore(tmp_path).load(key, len(good)) is None and not path.exists()


def test_cache_off_writes_nothing_and_pickle_keeps_settings_only(tmp_path: Path) -> None:
    g = make_graph(REPORT)
    r = PageTextDenseRetriever(chunk_chars=300, encoder=CountingEncoder(), cache=False, cache_dir=tmp_path)
    before = r.score(g, Query("headcount asia")).pages
    assert not any(tmp_path.iterdir())
    clone = pickle.loads(pickle.dumps(r))
    assert clone.chunk_chars == 300 and clone._indexes.peek(g) is None
    np.testing.assert_array_equal(clone.score(g, Query("headcount asia")).pages, before)


def test_encoder_follows_the_graph_embedding_model() -> None:
    from mage_gym.testing import HashingEncoder

    enc = encoder_for_graph(make_graph(REPORT, meta={"embed_model": "hashing-bow-64"}))
    assert isinstance(enc, HashingEncoder) and enc.dim == 64


# --- fusion ----------------------------------------------------------------------------


def _components(tmp_path: Path, enc: CountingEncoder) -> dict:
    from mage_gym.retrieval.bm25 import BM25Retriever
    from mage_gym.retrieval.dense import DenseRetriever

    return {"bm25": BM25Retriever(), "dense": DenseRetriever(),
            "page_dense": PageTextDenseRetriever(chunk_chars=300, encoder=enc, cache_dir=tmp_path)}


def test_hybrid_pages_fuses_three_channels_for_pages_and_two_for_elements(tmp_path: Path) -> None:
    g = make_graph(REPORT)
    enc = CountingEncoder(dim=32)
    preset = HYBRID_PRESETS["hybrid_pages"]
    r = HybridRetriever(components=_components(tmp_path, enc), weights=preset["weights"], k=preset["k"],
                        element_weights=preset["element_weights"], element_k=preset["element_k"],
                        name="hybrid_pages")
    text = "goodwill impairment charge"
    fused, comps = r.score_with_components(g, Query(text, vector=enc.encode([text])[0]))
    assert list(comps) == ["bm25", "dense", "page_dense"]
    w = preset["weights"]
    np.testing.assert_allclose(fused.pages, rrf([comps[n].pages for n in comps], [w[n] for n in comps], preset["k"]))
    # elements: the page channel's element scores (its page's) are not fused; bm25 + dense are
    ew = preset["element_weights"]
    np.testing.assert_allclose(fused.elements, rrf([comps["bm25"].elements, comps["dense"].elements],
                                                   [ew["bm25"], ew["dense"]], preset["element_k"]))
    assert int(np.argmax(fused.pages)) == 1


def test_named_hybrids_and_the_default() -> None:
    old = get_retriever("hybrid_elements")
    assert isinstance(old, HybridRetriever) and list(old.components) == ["bm25", "dense"] and old.k == 60.0
    assert old.name == "hybrid_elements" and old.weights == {"bm25": 1.0, "dense": 1.0}
    new = get_retriever("hybrid_pages", page_dense={"cache": False})
    assert list(new.components) == ["bm25", "dense", "page_dense"] and new.name == "hybrid_pages"  # type: ignore
    assert new.element_weights["page_dense"] == 0.0  # type: ignore[attr-defined]
    default = get_retriever("hybrid", components=None, k=None)  # conf/retriever/hybrid.yaml's nulls
    assert default.name == "hybrid"  # type: ignore[attr-defined]
    assert list(default.components) == HYBRID_PRESETS[DEFAULT_HYBRID]["components"]  # type: ignore
    # dropping a component drops the preset's weights for it
    two = get_retriever("hybrid_pages", components=["bm25", "page_dense"])
    assert set(two.weights) == {"bm25", "page_dense"}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown components"):
        HybridRetriever(components=_components(Path("."), CountingEncoder()), element_weights={"colpali": 0})
    with pytest.raises(ValueError, match="not one of"):
        get_retriever("hybrid_pages", components=["bm25", "hybrid"])


def test_env_relevance_shows_the_page_channel_in_the_last_column(tmp_path: Path) -> None:
    from mage_gym.env.graph_index import build_graph_index
    from mage_gym.env.relevance import N_RELEVANCE, page_view, percentile, score_question, search_page_scores

    g = make_graph(REPORT)
    enc = CountingEncoder()
    r = HybridRetriever(components=_components(tmp_path, enc), element_weights={"page_dense": 0.0})
    text = "goodwill impairment charge"
    q = Query(text, vector=enc.encode([text])[0])
    rel = score_question(g, r, q)
    assert rel.component_names == ("bm25", "dense", "page_dense") and N_RELEVANCE == 4
    page_scores = r.components["page_dense"].score(g, q).pages
    np.testing.assert_array_equal(rel.features[: g.n_pages, 3], percentile(page_scores))
    assert rel.entry_pages(1) == [1]
    # SearchEvidence scores pages on the page-only view: the same page scores, vectors loaded not re-encoded
    calls = enc.texts
    gi = build_graph_index(g)
    np.testing.assert_array_equal(search_page_scores(gi, r, q), r.score(g, q).pages)
    assert enc.texts == calls and page_view(gi).n_elements == 0 and page_view(gi) is page_view(gi)


def test_hybrid_pages_ranks_elements_exactly_as_hybrid_elements() -> None:
    """The page channel changes page ranking only: element scores equal the original hybrid's."""
    from mage_gym.testing import HashingEncoder

    g = make_graph(REPORT, meta={"embed_model": "hashing-bow-32"})
    text = "goodwill impairment charge"
    q = Query(text, vector=HashingEncoder(32).encode([text])[0])
    new = get_retriever("hybrid_pages", page_dense={"cache": False}).score(g, q)
    old = get_retriever("hybrid_elements").score(g, q)
    np.testing.assert_array_equal(new.elements, old.elements)
    assert int(np.argmax(new.pages)) == 1


def test_config_files_state_the_presets() -> None:
    """conf/retriever/hybrid_{elements,pages}.yaml say what the presets do (one setting, two places)."""
    from omegaconf import OmegaConf

    conf = Path(__file__).resolve().parents[1] / "conf" / "retriever"
    for name in ("hybrid_elements", "hybrid_pages"):
        cfg = OmegaConf.to_container(OmegaConf.load(conf / f"{name}.yaml"))
        assert cfg.pop("name") == name
        cfg.pop("page_dense", None)  # component settings: the page_dense defaults
        assert cfg == HYBRID_PRESETS[name]
    pd = OmegaConf.load(conf / "hybrid_pages.yaml").page_dense
    assert pd.chunk_chars == PageTextDenseRetriever().chunk_chars
