"""Synthetic graphs and a model-free text encoder for env tests and the performance script.

Why: the environment's speed and memory targets are about a 500-page
document, and its unit tests must run without PDFs or the MiniLM model. A
:class:`HashEncoder` gives deterministic bag-of-words vectors (the same in
every process), and :func:`make_large_graph` builds a graph shaped like a
parsed long report (titles opening sections that span pages, tables, charts,
five edge kinds) whose node vectors come from that encoder, so dense
retrieval over it is meaningful. Not used by the environment by default.
"""
from __future__ import annotations

import re
import zlib

import numpy as np

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import EDGE_KINDS, DocumentSource, Element, Page, element_id, page_id
from mage_gym.retrieval.base import Query

_TOKEN = re.compile(r"[a-z0-9]+")


class HashEncoder:
    """Deterministic bag-of-words vectors: each token maps to a fixed random unit vector (by CRC32)."""

    def __init__(self, dim: int = 384) -> None:
        self.dim = int(dim)
        self._tok: dict[str, np.ndarray] = {}

    def _vec(self, token: str) -> np.ndarray:
        v = self._tok.get(token)
        if v is None:
            v = np.random.default_rng(zlib.crc32(token.encode())).standard_normal(self.dim).astype(np.float32)
            self._tok[token] = v
        return v

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            toks = _TOKEN.findall(t.lower())
            if toks:
                v = np.sum([self._vec(w) for w in toks], axis=0)
                n = float(np.linalg.norm(v))
                out[i] = v / n if n > 0 else v
        return out


def hash_query_fn(dim: int = 384):
    """A ``query_fn`` for :class:`~mage_gym.env.env.MageRAGEnv` built on :class:`HashEncoder`."""
    enc = HashEncoder(dim)

    def query_fn(text: str) -> Query:
        return Query(text=text, vector=enc.encode([text])[0])

    return query_fn


_TOPICS = [
    ["revenue", "sales", "growth", "quarter"], ["margin", "profit", "operating", "income"],
    ["employees", "headcount", "staff", "hiring"], ["risk", "exposure", "hedging", "credit"],
    ["asia", "europe", "americas", "region"], ["product", "launch", "customers", "market"],
    ["cash", "liquidity", "debt", "capital"], ["research", "patents", "development", "innovation"],
    ["energy", "emissions", "carbon", "sustainability"], ["board", "governance", "audit", "committee"],
]
_TYPES = ("paragraph", "paragraph", "list", "table", "chart", "caption", "paragraph", "figure", "footnote")


def make_large_graph(n_pages: int = 500, elements_per_page: int = 30, dim: int = 384, seed: int = 0,
                     doc_id: str = "synthetic", semantic_per_node: int = 2) -> EvidenceGraph:
    """A long-report-like graph: ``n_pages`` pages of ``elements_per_page`` elements each."""
    rng = np.random.default_rng(seed)
    enc = HashEncoder(dim)
    pages: list[Page] = []
    elements: list[Element] = []
    topics: list[int] = []
    section: tuple[str, ...] = ()
    h = 1.0 / elements_per_page
    for p in range(n_pages):
        page_topic = int(rng.integers(len(_TOPICS)))
        texts = []
        for j in range(elements_per_page):
            t = page_topic if rng.random() < 0.7 else int(rng.integers(len(_TOPICS)))
            words = " ".join(rng.choice(_TOPICS[t], size=3))
            if j == 0 and p % 3 == 0:
                etype, level = "title", 1
                section = (f"Section {p // 3} {words}",)
                text = section[0]
            else:
                etype, level = _TYPES[(p + j) % len(_TYPES)], None
                text = f"page {p} item {j} {words} value {int(rng.integers(1000))}"
            elements.append(Element(
                node_id=element_id(doc_id, p, j), page=p, index=j, type=etype,
                bbox=(0.08, j * h + 0.002, 0.92, (j + 1) * h - 0.002), text=text, summary=text[:60],
                reading_order=len(elements), section_path=section, heading_level=level,
                table_markdown=f"| k | v |\n|---|---|\n| {words} | {j} |" if etype == "table" else None,
            ))
            topics.append(t)
            texts.append(text)
        pages.append(Page(node_id=page_id(doc_id, p), index=p, width=612.0, height=792.0,
                          text="\n".join(texts), summary=texts[0][:80], n_elements=elements_per_page))
    n_el = len(elements)
    el_vecs = enc.encode([e.text for e in elements])
    page_vecs = enc.encode([pg.text for pg in pages])
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    kind: list[np.ndarray] = []
    labels: list[str] = []

    def add(s: np.ndarray, d: np.ndarray, k: str, label: str) -> None:
        src.append(s.astype(np.int32)), dst.append(d.astype(np.int32))
        kind.append(np.full(len(s), EDGE_KINDS.index(k), dtype=np.int8))
        labels.extend([label] * len(s))

    el_idx = np.arange(n_el) + n_pages
    el_page = np.repeat(np.arange(n_pages), elements_per_page)
    add(el_page, el_idx, "containment", "contains")
    add(el_idx[:-1], el_idx[1:], "reading_order", "next")
    add(np.arange(n_pages - 1), np.arange(1, n_pages), "reading_order", "next")
    same_page = el_page[:-1] == el_page[1:]
    add(el_idx[:-1][same_page], el_idx[1:][same_page], "layout", "below")
    titles = [i for i, e in enumerate(elements) if e.type == "title"]
    for a, b in zip(titles, titles[1:] + [n_el]):
        add(np.full(b - a - 1, n_pages + a), np.arange(a + 1, b) + n_pages, "section", "child")
    topics_arr = np.asarray(topics)
    for t in range(len(_TOPICS)):
        members = np.flatnonzero(topics_arr == t)
        if len(members) < 2:
            continue
        for _ in range(semantic_per_node):
            partner = rng.permutation(members)
            keep = members != partner
            add(members[keep] + n_pages, partner[keep] + n_pages, "semantic", "similar")
    sims = page_vecs @ page_vecs.T
    np.fill_diagonal(sims, -np.inf)
    best = np.argmax(sims, axis=1)
    keep = np.arange(n_pages) < best
    add(np.arange(n_pages)[keep], best[keep], "semantic", "similar")
    return EvidenceGraph(
        doc_id=doc_id, source=DocumentSource(kind="pdf", path=f"<{doc_id}>"), pages=pages, elements=elements,
        edge_src=np.concatenate(src), edge_dst=np.concatenate(dst), edge_kind=np.concatenate(kind),
        edge_weight=np.ones(sum(len(s) for s in src), dtype=np.float32), edge_label=labels,
        page_vectors=page_vecs, element_vectors=el_vecs, meta={"parser": "synthetic", "version": "synthetic"},
    )


def toy_episodes(n_pages: int = 8, elements_per_page: int = 5, dim: int = 16, seed: int = 0) -> list:
    """Four episodes over one :func:`mage_gym.testing.make_toy_graph` graph, one per kind of gold.

    ``elem`` (element-level gold by node id), ``page`` (page-level gold),
    ``region`` (a gold box on a page) and ``unans`` (unanswerable). Use with
    ``query_fn=hash_query_fn(dim)``.
    """
    from mage_gym.data.episode import Episode, Region
    from mage_gym.env.episodes import EnvEpisode
    from mage_gym.testing import make_toy_graph

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
