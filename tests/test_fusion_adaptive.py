"""Fusion alternatives to plain RRF (normalised sums, interleaving, the density gate) and ``hybrid_adaptive``.

No model is loaded: graphs carry random unit vectors and the page-text channel
uses a hashed bag-of-words encoder with its disk cache in a temporary folder.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval import Query, get_retriever, rrf
from mage_gym.retrieval.fusion import density_gate, interleave_scores, normalized, normalized_sum
from mage_gym.retrieval.hybrid import (
    HYBRID_ADAPTIVE, DensityGatedHybrid, HybridRetriever, document_text_density,
)
from mage_gym.testing import HashingEncoder, graph_from_texts


def test_normalisations_put_channels_on_one_scale() -> None:
    s = np.array([3.0, 1.0, 2.0, -np.inf], dtype=np.float32)
    z = normalized(s, "z")
    assert z.mean() == pytest.approx(0.0) and z.std() == pytest.approx(1.0)
    assert z[3] == z.min() == z[1]  # not retrieved counts as the minimum
    mm = normalized(s, "minmax")
    assert mm.max() == 1.0 and mm.min() == 0.0 and mm[0] == 1.0
    assert not normalized(np.full(4, 2.0), "z").any() and not normalized(np.full(4, 2.0), "minmax").any()
    with pytest.raises(ValueError, match="normalisation"):
        normalized(s, "rank")
    a, b = np.array([10.0, 0.0, 5.0]), np.array([0.1, 0.3, 0.2])
    np.testing.assert_allclose(normalized_sum([a, b], [1.0, 0.5], "minmax"),
                               normalized(a, "minmax") + 0.5 * normalized(b, "minmax"), rtol=1e-6)
    with pytest.raises(ValueError):
        normalized_sum([a, b], [1.0], "z")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 25).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 5), min_size=n, max_size=n), st.lists(st.integers(0, 5), min_size=n, max_size=n))))
def test_interleaving_keeps_the_head_of_both_rankings(pair: tuple[list[int], list[int]]) -> None:
    a, b = (np.asarray(x, dtype=np.float32) for x in pair)
    s = interleave_scores(a, b)
    n = len(a)
    order = np.argsort(-s, kind="stable")
    assert sorted(s.tolist()) == list(range(1, n + 1))  # a strict order over all items
    idx = np.arange(n)
    top_a, top_b = np.lexsort((idx, -a)), np.lexsort((idx, -b))
    assert order[0] == top_a[0]
    for m in range(1, n + 1):  # the first 2m interleaved items hold the m best of each ranking
        assert set(top_a[:m]) | set(top_b[:m]) <= set(order[: 2 * m])


def test_density_gate_is_a_clipped_ramp_or_a_step() -> None:
    assert density_gate(50, 100, 200) == 0.0 and density_gate(200, 100, 200) == 0.5
    assert density_gate(400, 100, 200) == 1.0
    assert density_gate(99.9, 100, 0) == 0.0 and density_gate(100, 100, 0) == 1.0
    with pytest.raises(ValueError):
        density_gate(1.0, 0.0, -1.0)
    with pytest.raises(ValueError):
        density_gate(float("nan"), 0.0, 1.0)


def make_graph(pages: list[list[str]], doc_id: str = "gate", dim: int = 32) -> EvidenceGraph:
    return graph_from_texts(pages, doc_id=doc_id, dim=dim, seed=1,
                            meta={"parser": "test", "embed_model": "hashing-bow-32"})


SLIDES = [["Revenue by region", "Asia 40%"], ["Headcount", "1,200 staff"], ["Outlook", "growth in Asia"]]
PROSE = [["Revenue " + "rose in every region during the year, led by strong demand in Asia " * 4],
         ["Headcount " + "grew to twelve hundred staff as the company hired engineers " * 4],
         ["Outlook " + "management expects continued growth in Asia and stable margins " * 4]]


def _adaptive(tmp_path: Path, **kw) -> DensityGatedHybrid:
    return get_retriever("hybrid_adaptive", page_dense={"cache_dir": str(tmp_path), "encoder": HashingEncoder(32)},
                         **kw)  # type: ignore[return-value]


@pytest.mark.parametrize("doc", [SLIDES, PROSE])
def test_gated_pages_are_rrf_with_the_documents_gate_and_elements_as_hybrid_elements(tmp_path: Path,
                                                                                      doc: list[list[str]]) -> None:
    g = make_graph(doc)
    r = _adaptive(tmp_path)
    density = document_text_density(g)
    chars = sum(len(t) for page in doc for t in page) + sum(len(page) - 1 for page in doc)  # lines joined by \n
    assert density["chars_per_element"] == pytest.approx(chars / g.n_elements)
    assert density["mean_page_chars"] == pytest.approx(chars / g.n_pages)
    gate = r.gate(g)
    assert gate == density_gate(density[HYBRID_ADAPTIVE["feature"]], HYBRID_ADAPTIVE["lo"], HYBRID_ADAPTIVE["width"])
    assert (gate == 0.0) == (doc is SLIDES) and (gate > 0.0) == (doc is PROSE)
    text = "growth in Asia"
    q = Query(text, vector=HashingEncoder(32).encode([text])[0])
    fused, comps = r.score_with_components(g, q)
    assert list(comps) == ["bm25", "dense", "page_dense"]
    np.testing.assert_array_equal(fused.pages, rrf([comps[n].pages for n in comps], [1.0, 1.0 - gate, gate],
                                                   HYBRID_ADAPTIVE["k"]))
    np.testing.assert_array_equal(fused.elements, get_retriever("hybrid_elements").score(g, q).elements)
    np.testing.assert_array_equal(r.score(g, q).pages, fused.pages)


def test_gate_ends_are_the_two_channels(tmp_path: Path) -> None:
    """g = 0 ranks pages as hybrid_elements does (same k), g = 1 as the page-text channel (bm25 + page_dense)."""
    g = make_graph(PROSE)
    text = "engineers hired"
    q = Query(text, vector=HashingEncoder(32).encode([text])[0])
    elements_only = _adaptive(tmp_path, lo=1e9, width=0.0, k=60.0)
    assert elements_only.gate(g) == 0.0
    np.testing.assert_array_equal(elements_only.score(g, q).pages, get_retriever("hybrid_elements").score(g, q).pages)
    pages_only = _adaptive(tmp_path, lo=0.0, width=0.0, k=60.0)
    comps = pages_only.score_components(g, q)
    page_text = HybridRetriever(components={"bm25": pages_only.components["bm25"],
                                            "page_dense": pages_only.components["page_dense"]})
    np.testing.assert_array_equal(pages_only.score(g, q).pages, page_text.fuse(
        {"bm25": comps["bm25"], "page_dense": comps["page_dense"]}).pages)


def test_preset_config_file_pickling_and_refusals(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "retriever"
                                                / "hybrid_adaptive.yaml"))
    assert cfg.pop("name") == "hybrid_adaptive" and cfg == HYBRID_ADAPTIVE
    r = get_retriever("hybrid_adaptive", lo=None)  # conf nulls keep the preset
    assert isinstance(r, DensityGatedHybrid) and r.name == "hybrid_adaptive"
    assert (r.feature, r.lo, r.width, r.k) == tuple(HYBRID_ADAPTIVE[k] for k in ("feature", "lo", "width", "k"))
    g = make_graph(PROSE)
    q = Query("growth", vector=HashingEncoder(32).encode(["growth"])[0])
    r = _adaptive(tmp_path)
    clone = pickle.loads(pickle.dumps(r))
    np.testing.assert_array_equal(clone.score(g, q).pages, r.score(g, q).pages)
    with pytest.raises(ValueError, match="components"):
        get_retriever("hybrid_adaptive", components=["bm25", "dense"])
    with pytest.raises(ValueError, match="density feature"):
        get_retriever("hybrid_adaptive", feature="pages")
    with pytest.raises(ValueError, match="gate must be"):
        r.fuse(r.score_components(g, q), gate=1.5)


def test_env_relevance_reads_the_adaptive_hybrid(tmp_path: Path) -> None:
    from mage_gym.env.relevance import score_question

    g = make_graph(SLIDES)
    r = _adaptive(tmp_path)
    q = Query("Asia", vector=HashingEncoder(32).encode(["Asia"])[0])
    rel = score_question(g, r, q)
    assert rel.component_names == ("bm25", "dense", "page_dense")
    np.testing.assert_array_equal(rel.fused_pages, r.score(g, q).pages)
