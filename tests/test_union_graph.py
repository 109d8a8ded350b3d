"""The union graph of several documents (mage_gym.graph.union): invariants, edges, gold, pixels, caches, rendering."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mage_gym.data.episode import Episode
from mage_gym.env.state import ACTIVATED, OPENED
from mage_gym.graph.edges import EdgeConfig, knn_pairs
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import EDGE_KINDS
from mage_gym.graph.union import (
    XDOC_LABEL,
    UnionGraph,
    build_union,
    clear_union_cache,
    page_label,
    union_graph,
)
from mage_gym.render import render
from mage_gym.testing import HashingEncoder, make_toy_graph

SEMANTIC = EDGE_KINDS.index("semantic")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mage_gym.data.synth import SynthConfig, generate_corpus

    root = tmp_path_factory.mktemp("union_synth")
    cfg = SynthConfig(min_pages=3, max_pages=4, questions_per_doc=6, bridge_questions_per_doc=0)
    generate_corpus(root, 2, seed=5, cfg=cfg, workers=1, progress=False)
    return root


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("union_graph_cache")


@pytest.fixture(scope="module")
def members(corpus: Path, cache_dir: Path) -> list[EvidenceGraph]:
    from mage_gym.data.synth import read_manifest
    from mage_gym.graph.build import build_graph

    docs = read_manifest(corpus)["docs"]
    return [build_graph(str(corpus / d["file"]), parser="fast", cache_dir=cache_dir, encoder=HashingEncoder(64),
                        progress=False) for d in docs]


@pytest.fixture(scope="module")
def union(members: list[EvidenceGraph], cache_dir: Path) -> UnionGraph:
    # the in-memory cache is keyed by content and outlives a pytest session run in the same process (mutmut runs
    # the tests twice in one process): a union left there by an earlier run never reaches this run's cache_dir
    clear_union_cache()
    return union_graph(members, cache_dir=cache_dir)


def _edge_set(g: EvidenceGraph, labels: bool = True) -> set[tuple]:
    return {(e.src, e.dst, e.kind, round(e.weight, 6), e.label if labels else "") for e in g.edges}


# --- structure ---------------------------------------------------------------------------------


def test_pages_then_elements_renumbered_with_ids_unchanged(members, union):
    a, b = members
    assert isinstance(union, UnionGraph) and union.doc_id == f"{a.doc_id}+{b.doc_id}"
    assert union.n_pages == a.n_pages + b.n_pages and union.n_elements == a.n_elements + b.n_elements
    assert union.n_nodes == a.n_nodes + b.n_nodes
    assert union.node_ids == ([p.node_id for p in a.pages] + [p.node_id for p in b.pages]
                              + [e.node_id for e in a.elements] + [e.node_id for e in b.elements])
    assert len(set(union.node_ids)) == union.n_nodes
    assert [p.index for p in union.pages] == list(range(union.n_pages))
    ro = [e.reading_order for e in union.elements]
    assert ro == sorted(ro) and len(set(ro)) == len(ro)
    assert np.all(np.diff(union.node_page[union.n_pages:]) >= 0)
    # node_page agrees with each member's, shifted by the document's page offset
    for g, span in zip(members, union.documents):
        idx = [union.index_of[nid] for nid in g.node_ids]
        np.testing.assert_array_equal(union.node_page[idx], g.node_page + span.page_offset)
        np.testing.assert_array_equal(union.vectors[idx], g.vectors)
        for p in range(g.n_pages):
            up = union.union_page(span.doc_id, p)
            assert union.local_page(up) == p and union.doc_ids[union.doc_of_page[up]] == g.doc_id
            assert [e.node_id for e in union.elements_of_page(up)] == [e.node_id for e in g.elements_of_page(p)]
            assert page_label(union, up) == (p + 1, g.doc_id)


def test_member_edges_are_kept_with_offsets(members, union):
    within = {(e.src, e.dst, e.kind, round(e.weight, 6), e.label) for e in union.edges if e.label != XDOC_LABEL}
    assert within == _edge_set(members[0]) | _edge_set(members[1])
    assert union.n_edges - len(within) == union.meta["union"]["cross_edges"]["pages"] + \
        union.meta["union"]["cross_edges"]["elements"]


def test_cross_document_edges_join_documents_above_min_sim(members, union):
    cfg = EdgeConfig.from_dict(members[0].meta["edge_cfg"])
    sel = np.array([lab == XDOC_LABEL for lab in union.edge_label])
    assert sel.any(), "two reports of one domain share words: some cross-document pairs must pass min_sim"
    s, d, w = union.edge_src[sel], union.edge_dst[sel], union.edge_weight[sel]
    assert np.all(union.edge_kind[sel] == SEMANTIC)
    doc = union.doc_of_node
    assert np.all(doc[s] != doc[d])
    is_page = np.arange(union.n_nodes) < union.n_pages
    assert np.all(is_page[s] == is_page[d])  # pages with pages, elements with elements
    assert np.all(w >= cfg.semantic_min_sim)
    v = union.vectors
    np.testing.assert_allclose(w, np.einsum("ij,ij->i", v[s], v[d]), atol=1e-5)
    # the k-nearest rule: every element's best other-document neighbour (if similar enough) is joined to it
    el = v[union.n_pages:]
    sims = el @ el.T
    el_doc = doc[union.n_pages:]
    sims[el_doc[:, None] == el_doc[None, :]] = -np.inf
    pairs = {(int(a), int(b)) for a, b in zip(s, d)} | {(int(b), int(a)) for a, b in zip(s, d)}
    for i in range(union.n_elements):
        j = int(np.argmax(sims[i]))
        if sims[i, j] >= cfg.semantic_min_sim + 0.02:  # clear of the rounding grid's ties
            assert (union.n_pages + i, union.n_pages + j) in pairs


def test_knn_pairs_groups_keep_only_cross_group_pairs_and_default_is_unchanged():
    rng = np.random.default_rng(3)
    v = rng.normal(size=(40, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    groups = np.repeat([0, 1, 2], [15, 15, 10])
    i, j, sim = knn_pairs(v, 2, 0.0, block=7, groups=groups)
    assert len(i) and np.all(groups[i] != groups[j]) and np.all(sim >= 0.0)
    ones = np.zeros(40, dtype=int)
    assert len(knn_pairs(v, 2, 0.0, groups=ones)[0]) == 0  # one group: nothing across
    plain = knn_pairs(v, 2, 0.0, block=7)
    assert np.any(groups[plain[0]] == groups[plain[1]])  # without groups, same-group pairs exist


# --- gold ----------------------------------------------------------------------------------------


def test_remap_gold_points_at_the_same_nodes_and_merge_combines(corpus, members, union):
    from mage_gym.data.gold import merge_gold, remap_gold, resolve_gold
    from mage_gym.data.synth import load_synth

    episodes = [ep for ep in load_synth(corpus) if ep.answerable]
    golds = []
    for doc_index, g in enumerate(members):
        ep = next(e for e in episodes if e.doc_id == g.doc_id and e.evidence_regions)
        gold = resolve_gold(ep, g)
        assert gold.items
        mapped = remap_gold(union, g.doc_id, gold)
        assert remap_gold(union, doc_index, gold).items == mapped.items  # by index or by id
        assert [union.node_ids[i] for i in mapped.gold_nodes] == [g.node_ids[i] for i in gold.gold_nodes]
        assert mapped.pages == tuple(union.union_page(g.doc_id, p) for p in gold.pages)
        assert mapped.level == gold.level and len(mapped.items) == len(gold.items)
        golds.append(mapped)
    merged = merge_gold(golds)
    assert len(merged.items) == sum(len(x.items) for x in golds)
    assert set(merged.pages) == set(golds[0].pages) | set(golds[1].pages)
    assert set(np.unique(union.doc_of_node[merged.gold_nodes]).tolist()) == {0, 1}
    assert not remap_gold(union, 0, resolve_gold(Episode(
        episode_id="u", benchmark="synth", doc_id=members[0].doc_id, source="x", question="q", answer="",
        answer_format="None", answerable=False), members[0])).items


# --- pixels --------------------------------------------------------------------------------------


def test_page_image_and_crop_come_from_the_right_document(members, union):
    b = members[1]
    span = union.span(1)
    up = span.page_offset + 1
    assert np.array_equal(np.asarray(union.page_image(up, dpi=36)), np.asarray(b.page_image(1, dpi=36)))
    el = b.elements_of_page(1)[0]
    assert np.array_equal(np.asarray(union.crop(el.node_id, dpi=36)), np.asarray(b.crop(el.node_id, dpi=36)))
    a = members[0]
    assert np.array_equal(np.asarray(union.page_image(0, dpi=36)), np.asarray(a.page_image(0, dpi=36)))


# --- retrieval -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, cfg", [("hybrid", {}), ("hybrid_pages", {"page_dense": {"cache": False,
                                                                                          "progress": False}})])
def test_retrievers_score_a_union(union, name, cfg):
    from mage_gym.retrieval import get_retriever, make_query

    r = get_retriever(name, **cfg)
    scores = r.score(union, make_query("health services report spending", encoder=HashingEncoder(64)))
    assert scores.pages.shape == (union.n_pages,) and scores.elements.shape == (union.n_elements,)
    assert np.all(np.isfinite(scores.pages))


# --- caching -------------------------------------------------------------------------------------


def test_memory_cache_returns_the_same_object_and_disk_cache_a_union(members, union, cache_dir):
    assert union_graph(members, cache_dir=cache_dir) is union
    flipped = union_graph(members[::-1], cache_dir=cache_dir)
    assert flipped is not union and flipped.doc_ids == (members[1].doc_id, members[0].doc_id)
    clear_union_cache()
    again = union_graph(members, cache_dir=cache_dir)
    assert again is not union and again.meta["cache_hit"] is True and isinstance(again, UnionGraph)
    assert again.documents == union.documents and again.node_ids == union.node_ids
    assert _edge_set(again) == _edge_set(union)
    np.testing.assert_array_equal(again.vectors, union.vectors)
    assert again.local_page(union.n_pages - 1) == union.documents[1].n_pages - 1


def test_toy_graphs_without_store_keys_cache_in_memory_by_content():
    a, b = make_toy_graph(doc_id="A"), make_toy_graph(doc_id="B", n_pages=3, seed=1)
    u = union_graph([a, b])
    assert union_graph([a, b]) is u
    b2 = make_toy_graph(doc_id="B", n_pages=3, seed=1)  # same content, new object: same union
    assert union_graph([a, b2]) is u
    assert union_graph([a, make_toy_graph(doc_id="B", n_pages=3, seed=2)]) is not u
    with pytest.raises(ValueError, match="duplicate"):
        union_graph([a, a])


def test_a_modified_copy_keeping_the_store_key_is_not_taken_for_the_original():
    from dataclasses import replace

    a, b = make_toy_graph(doc_id="A"), make_toy_graph(doc_id="B", n_pages=3, seed=1)
    a.meta["cache_key"] = "k" * 64  # as if loaded from the graph store
    u = union_graph([a, b], disk=False)
    edited = replace(a, elements=[replace(e, text=e.text + " edited") for e in a.elements])
    assert edited.meta["cache_key"] == a.meta["cache_key"]
    u2 = union_graph([edited, b], disk=False)
    assert u2 is not u and u2.elements[0].text.endswith(" edited")


# --- rendering -----------------------------------------------------------------------------------


def _toy_states(g: EvidenceGraph) -> np.ndarray:
    st = np.zeros(g.n_nodes, dtype=np.int8)
    st[[1, 2]] = ACTIVATED
    st[g.element_indices_of_page(1)[0]] = OPENED
    st[g.element_indices_of_page(3)[1]] = ACTIVATED
    return st


def test_one_document_union_renders_byte_identically():
    g = make_toy_graph(n_pages=4, elements_per_page=4, dim=16)
    u = build_union([g])
    assert u.doc_id == g.doc_id and u.n_nodes == g.n_nodes and _edge_set(u) == _edge_set(g)
    st = _toy_states(g)
    for mode in ("visual", "text"):
        assert render(u, st, mode, "q").xml == render(g, st, mode, "q").xml


def test_one_document_union_text_view_is_byte_identical():
    from mage_gym.env import EnvEpisode, MageRAGEnv
    from mage_gym.testing import hash_query_fn

    g = make_toy_graph(n_pages=4, elements_per_page=4, dim=16)
    ep = Episode(episode_id="x", benchmark="synth", doc_id="toy", source="<toy>", question="revenue growth",
                 answer="a", answer_format="Str", evidence_pages=(0,))
    views = []
    for graph in (g, build_union([g])):
        env = MageRAGEnv(episodes=[EnvEpisode(ep, graph)], query_fn=hash_query_fn(16), K=8)
        env.reset(seed=0)
        views.append(env.text_view())
    assert views[0] == views[1] and ' doc="' not in views[0]


def test_union_render_and_text_view_name_documents_and_local_pages():
    import xml.etree.ElementTree as ET

    from mage_gym.env import EnvEpisode, MageRAGEnv
    from mage_gym.testing import hash_query_fn

    a, b = make_toy_graph(doc_id="A", n_pages=3, dim=16), make_toy_graph(doc_id="B", n_pages=3, dim=16, seed=4)
    u = build_union([a, b])
    st = np.zeros(u.n_nodes, dtype=np.int8)
    st[[0, 4]] = ACTIVATED  # A's page 1 and B's page 2
    root = ET.fromstring(render(u, st, "text").xml)
    assert root.get("doc") == "A+B"
    assert [(p.get("id"), p.get("number"), p.get("doc")) for p in root.iter("page")] == [
        ("A:p0", "1", "A"), ("B:p1", "2", "B")]
    ep = Episode(episode_id="x", benchmark="synth", doc_id=u.doc_id, source="<toy>", question="revenue growth",
                 answer="a", answer_format="Str", evidence_pages=(0,))
    env = MageRAGEnv(episodes=[EnvEpisode(ep, u)], query_fn=hash_query_fn(16), K=8, budget={"k": 4})
    env.reset(seed=0)
    view = ET.fromstring(env.text_view())
    for page in view.find("evidence_state").findall("page"):
        doc, local = page.get("id").split(":p")
        assert page.get("doc") == doc and page.get("number") == str(int(local) + 1)
    for cand in view.find("candidates").findall("candidate"):
        assert cand.get("doc") == cand.get("id").split(":")[0]
