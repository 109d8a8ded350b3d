"""Test helpers: small hand-made evidence graphs and a model-free text encoder (no PDF, no model).

Why: modules downstream of the graph (retrieval, gold mapping, env, render)
need a graph with known structure to test against, and the graph builder's
tests need vectors, without paying for parsing or the text encoder. Vectors
here are deterministic pseudo-embeddings.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.hashing import HashingEncoder
from mage_gym.graph.schema import EDGE_KINDS, DocumentSource, Element, Page, element_id, page_id
from mage_gym.bench.synthetic import HashEncoder, hash_query_fn, make_large_graph

_TYPES = ("title", "paragraph", "table", "chart", "paragraph", "list", "figure", "caption")


def make_toy_graph(n_pages: int = 6, elements_per_page: int = 4, doc_id: str = "toy", dim: int = 16,
                   seed: int = 0) -> EvidenceGraph:
    """A graph with every element type and all five edge kinds.

    Element ``j`` of page ``p`` has text ``"page {p} item {j} <word>"``; a
    title opens every page so the section tree spans pages.
    """
    rng = np.random.default_rng(seed)
    words = ["revenue", "growth", "chart", "margin", "employees", "risk", "asia", "europe", "table", "profit"]
    pages: list[Page] = []
    elements: list[Element] = []
    order = 0
    current_section: tuple[str, ...] = ()
    for p in range(n_pages):
        texts = []
        for j in range(elements_per_page):
            etype = _TYPES[(p + j) % len(_TYPES)] if j else "title"
            word = words[(p * elements_per_page + j) % len(words)]
            text = f"page {p} item {j} {word}"
            if etype == "title":
                current_section = (f"Section {p}",)
                text = f"Section {p} {word}"
            y0 = j / elements_per_page
            elements.append(Element(
                node_id=element_id(doc_id, p, j), page=p, index=j, type=etype,
                bbox=(0.1, y0 + 0.01, 0.9, y0 + 1 / elements_per_page - 0.01), text=text,
                summary=text[:40], reading_order=order, section_path=current_section,
                heading_level=1 if etype == "title" else None,
                table_markdown="| a | b |\n|---|---|\n| 1 | 2 |" if etype == "table" else None,
            ))
            order += 1
            texts.append(text)
        pages.append(Page(node_id=page_id(doc_id, p), index=p, width=612.0, height=792.0,
                          text="\n".join(texts), summary=texts[0], n_elements=elements_per_page))
    n_pages, n_el = len(pages), len(elements)
    src: list[int] = []
    dst: list[int] = []
    kind: list[int] = []
    lab: list[str] = []

    def add(s: int, d: int, k: str, label: str = "") -> None:
        src.append(s), dst.append(d), kind.append(EDGE_KINDS.index(k)), lab.append(label)

    for j, e in enumerate(elements):
        add(e.page, n_pages + j, "containment")
        if j + 1 < n_el:
            add(n_pages + j, n_pages + j + 1, "reading_order", "next")
        if j + 1 < n_el and elements[j + 1].page == e.page:
            add(n_pages + j, n_pages + j + 1, "layout", "below")
        if e.type == "title":
            title_idx = n_pages + j
        elif "title_idx" in locals():
            add(title_idx, n_pages + j, "section", "child")
    for p in range(n_pages - 1):
        add(p, p + 1, "reading_order", "next")
    page_vecs = rng.normal(size=(n_pages, dim)).astype(np.float32)
    el_vecs = rng.normal(size=(n_el, dim)).astype(np.float32)
    page_vecs /= np.linalg.norm(page_vecs, axis=1, keepdims=True)
    el_vecs /= np.linalg.norm(el_vecs, axis=1, keepdims=True)
    # semantic: each element's nearest other element
    sims = el_vecs @ el_vecs.T
    np.fill_diagonal(sims, -1)
    for j in range(n_el):
        k = int(np.argmax(sims[j]))
        if j < k:
            add(n_pages + j, n_pages + k, "semantic")
    return EvidenceGraph(
        doc_id=doc_id, source=DocumentSource(kind="pdf", path="<toy>"), pages=pages, elements=elements,
        edge_src=np.asarray(src, dtype=np.int32), edge_dst=np.asarray(dst, dtype=np.int32),
        edge_kind=np.asarray(kind, dtype=np.int8), edge_weight=np.ones(len(src), dtype=np.float32),
        edge_label=lab, page_vectors=page_vecs, element_vectors=el_vecs,
        meta={"parser": "toy", "version": "toy"},
    )


def toy_quote_pairs(n_questions: int = 8, n_pages: int = 8, elements_per_page: int = 4, element: int = 1,
                    seed: int = 1, prefix: str = "toy-q", dim: int = 16):
    """``EnvEpisode`` s on one toy graph: question i quotes element ``element`` of page i, its element-level gold.

    Why: env, policy and training tests need a handful of single-document
    episodes whose gold is known and reachable; built here once instead of
    in each test file. Use with ``query_fn=mage_gym.testing.hash_query_fn(dim)``.
    """
    from mage_gym.data.episode import Episode
    from mage_gym.env.episodes import EnvEpisode

    g = make_toy_graph(n_pages=n_pages, elements_per_page=elements_per_page, dim=dim, seed=seed)
    out = []
    for i in range(n_questions):
        el = g.elements[i * elements_per_page + element]
        out.append(EnvEpisode(Episode(episode_id=f"{prefix}{i}", benchmark="synth", doc_id=g.doc_id, source="<toy>",
                                      question=el.text, answer="x", answer_format="Str", evidence_pages=(el.page,),
                                      gold_node_ids=(el.node_id,)), g))
    return out


def toy_conversation(n_pages: int = 8, turns: int = 3, episode_id: str = "conv", dim: int = 16):
    """A conversation of ``turns`` questions on one toy graph, element gold per turn (an ``EnvEpisode``).

    Use with ``query_fn=mage_gym.testing.hash_query_fn(dim)``.
    """
    from mage_gym.data.composite import CompositeEpisode, DocumentRef, Turn
    from mage_gym.env.episodes import EnvEpisode

    g = make_toy_graph(n_pages=n_pages, elements_per_page=5, dim=dim, seed=0)
    questions = ["Which chart shows revenue growth?", "And the asia risk margin?", "What about europe employees?",
                 "Which table shows profit?"][:turns]
    pages = [n_pages // 2, 3, n_pages - 1, 1][:turns]
    ts = tuple(Turn(q, "x", "Str", True, (_toy_part(g.doc_id, f"{episode_id}#{i}", q, p),))
               for i, (q, p) in enumerate(zip(questions, pages)))
    ep = CompositeEpisode(episode_id=episode_id, benchmark="mmlongbench",
                          documents=(DocumentRef(g.doc_id, "<toy>"),), turns=ts, group="g0")
    return EnvEpisode(ep, [g])


def toy_crossdoc(page_a: int = 4, page_b: int = 2, episode_id: str = "xdoc", dim: int = 16):
    """One question over two toy documents ``A`` (6 pages) and ``B`` (5 pages), gold in both (an ``EnvEpisode``)."""
    from mage_gym.data.composite import CompositeEpisode, DocumentRef, Turn
    from mage_gym.env.episodes import EnvEpisode

    ga = make_toy_graph(n_pages=6, elements_per_page=4, doc_id="A", dim=dim, seed=0)
    gb = make_toy_graph(n_pages=5, elements_per_page=4, doc_id="B", dim=dim, seed=1)
    q = "Compare revenue growth of A and B"
    turn = Turn(q, "A", "Str", True, (_toy_part("A", f"{episode_id}-A", q, page_a),
                                      _toy_part("B", f"{episode_id}-B", q, page_b)))
    ep = CompositeEpisode(episode_id=episode_id, benchmark="mmlongbench",
                          documents=(DocumentRef("A", "<A>"), DocumentRef("B", "<B>")), turns=(turn,), group="AB")
    return EnvEpisode(ep, [ga, gb])


def _toy_part(doc: str, episode_id: str, question: str, page: int, element: int = 2):
    from mage_gym.data.episode import Episode

    return Episode(episode_id=episode_id, benchmark="mmlongbench", doc_id=doc, source=f"<{doc}>", question=question,
                   answer="x", answer_format="Str", evidence_pages=(page,),
                   gold_node_ids=(f"{doc}:p{page}:e{element}",))


def graph_from_texts(pages: Sequence[Sequence[str]], doc_id: str = "texts", dim: int = 32, seed: int = 0,
                     meta: dict | None = None) -> EvidenceGraph:
    """A graph with one paragraph element per text (``pages[p][j]``), no edges and random unit vectors.

    For retriever tests: BM25 and page-text channels read the texts; the
    vectors only fill the dense slots (``meta`` names the encoder, e.g.
    ``{"embed_model": "hashing-bow-32"}``, for channels that re-encode).
    """
    rng = np.random.default_rng(seed)
    page_recs: list[Page] = []
    elements: list[Element] = []
    for p, texts in enumerate(pages):
        for j, t in enumerate(texts):
            elements.append(Element(node_id=element_id(doc_id, p, j), page=p, index=j, type="paragraph",
                                    bbox=(0.1, 0.1 * j, 0.9, 0.1 * j + 0.08), text=t, summary=t[:40],
                                    reading_order=len(elements)))
        page_recs.append(Page(node_id=page_id(doc_id, p), index=p, width=612.0, height=792.0,
                              text="\n".join(t for t in texts if t), summary="", n_elements=len(texts)))

    def unit(n: int) -> np.ndarray:
        v = rng.normal(size=(n, dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    return EvidenceGraph(
        doc_id=doc_id, source=DocumentSource(kind="pdf", path="<none>"), pages=page_recs, elements=elements,
        edge_src=np.zeros(0, np.int32), edge_dst=np.zeros(0, np.int32), edge_kind=np.zeros(0, np.int8),
        edge_weight=np.zeros(0, np.float32), edge_label=[], page_vectors=unit(len(page_recs)),
        element_vectors=unit(len(elements)), meta=dict(meta or {"parser": "test"}),
    )


def toy_episodes(n_pages: int = 8, elements_per_page: int = 5, dim: int = 16, seed: int = 0) -> list:
    """Four episodes over one :func:`mage_gym.testing.make_toy_graph` graph, one per kind of gold.

    ``elem`` (element-level gold by node id), ``page`` (page-level gold),
    ``region`` (a gold box on a page) and ``unans`` (unanswerable). Use with
    ``query_fn=hash_query_fn(dim)``.
    """
    from mage_gym.data.episode import Episode, Region
    from mage_gym.env.episodes import EnvEpisode

    g = make_toy_graph(n_pages=n_pages, elements_per_page=elements_per_page, dim=dim, seed=seed)
    last = n_pages - 1
    box = g.elements_of_page(last)[1].bbox
    common = dict(benchmark="mmlongbench", doc_id=g.doc_id, source="<toy>")
    eps = [
        Episode(episode_id="elem", question="Which chart shows revenue growth?", answer="12", answer_format="Int",
                evidence_pages=(n_pages // 2,), gold_node_ids=(f"{g.doc_id}:p{n_pages // 2}:e2",), **common),
        Episode(episode_id="page", question="What is the asia risk margin?", answer="low", answer_format="Str",
                evidence_pages=(3,), **common),
        Episode(episode_id="region", question="How many employees in europe?", answer="40", answer_format="Int",
                evidence_pages=(last,), evidence_regions=(Region(page=last, bbox=box),), **common),
        Episode(episode_id="unans", question="What is the profit table total?", answer="Not answerable",
                answer_format="None", answerable=False, **common),
    ]
    return [EnvEpisode(ep, g) for ep in eps]


def rrf_order_by_hand(ce: Sequence[float], rrf_k: float) -> list[int]:
    """Reciprocal-rank fusion written out, as the tests' independent check of the shipped reranking rule.

    Position ``i`` (the first stage's rank ``i + 1``) fused with its score's rank (1 + the number of
    higher scores; a page without text, ``-inf``, has no such term); ties keep the first stage's order.
    """
    finite = [c for c in ce if c != float("-inf")]
    key = [1 / (rrf_k + i + 1) + (1 / (rrf_k + 1 + sum(o > c for o in finite)) if c != float("-inf") else 0.0)
           for i, c in enumerate(ce)]
    return sorted(range(len(ce)), key=lambda i: (-key[i], i))


__all__ = ["HashEncoder", "HashingEncoder", "hash_query_fn", "make_large_graph", "make_toy_graph", "rrf_order_by_hand", "toy_quote_pairs",
           "toy_conversation", "toy_crossdoc", "graph_from_texts", "toy_episodes"]
