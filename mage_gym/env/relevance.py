"""Question relevance of every node, computed once per episode, and SearchEvidence scoring.

Why cached at process level: an episode is reset many times during training
(and by several environments in the same process), while its relevance only
depends on the graph, the question and the retriever. Caching it keeps reset
well under 20 ms and the question is encoded once. SearchEvidence scores are
cached per (graph, query text) for the same reason: a learned policy searches
with the question plus a node's text, which repeats across resets.

Relevance features are percentiles within their level (pages among pages,
elements among elements), so retrievers with different score scales are
comparable and the fused ordering of frontier nodes mixes pages and elements
fairly. Ties share a percentile; the order breaks them by node index.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from mage_gym.cache import Cache
from mage_gym.env.graph_index import GraphIndex
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval.base import Query, Retriever, Scores

#: Number of per-retriever relevance columns in the observation (fused first, then components in the
#: retriever's order, then its observed-only channels). ``hybrid_elements`` fills bm25, dense and, observed
#: only (not fused: its entry pages are bm25 + dense alone), page_dense in the last column; ``hybrid_pages``
#: fuses the same page-text channel and shows it in the same column (elements: their page's page-text
#: percentile), so the observation space and the columns' meaning stay whichever hybrid is the default.
N_RELEVANCE = 4
#: The name a relevance column has when no channel fills it (always 0).
EMPTY_COLUMN = "none"


def relevance_columns(retriever: Retriever) -> tuple[str, ...]:
    """What each of the ``N_RELEVANCE`` relevance columns holds for ``retriever``: ``fused``, then channel names.

    Why: a checkpoint reads these columns by position; its sidecar records this
    tuple so that a policy trained when a column was empty (or held another
    channel) is refused by name instead of acting on a changed input.
    """
    if hasattr(retriever, "score_with_components"):
        names = [*getattr(retriever, "components", {}), *getattr(retriever, "observed", {})]
    else:
        names = [getattr(retriever, "name", "retriever")]
    names = names[: N_RELEVANCE - 1]
    return ("fused", *names, *[EMPTY_COLUMN] * (N_RELEVANCE - 1 - len(names)))


def default_relevance_columns() -> tuple[str, ...]:
    """:func:`relevance_columns` of the env's default retriever (building it loads no model or index)."""
    from mage_gym.retrieval import get_retriever

    return relevance_columns(get_retriever())
QueryFn = Callable[[str], Query]


@dataclass(frozen=True, eq=False)
class EpisodeRelevance:
    query: Query  # the question, with its vector
    fused_pages: np.ndarray  # float32 [n_pages] raw fused page scores
    features: np.ndarray  # float32 [n, N_RELEVANCE]: fused, then component percentiles (0-padded)
    component_names: tuple[str, ...]
    order: np.ndarray  # intp [n]: nodes by decreasing fused percentile, ties by index
    rank_of: np.ndarray  # intp [n]: inverse of order
    page_order: np.ndarray  # intp [n_pages]: pages by decreasing fused score, ties by index

    def entry_pages(self, k: int) -> list[int]:
        return self.page_order[:k].tolist()


def percentile(scores: np.ndarray) -> np.ndarray:
    """1 - (number of strictly higher scores) / n, in (0, 1]; ties share a value.

    One stable argsort, then each tie group takes the position of its first
    member (twice as fast as a binary search per item on 15,000 nodes).
    """
    s = np.nan_to_num(np.asarray(scores, dtype=np.float32), nan=-np.inf)
    n = len(s)
    if n == 0:
        return np.zeros(0, dtype=np.float32)
    order = np.argsort(-s, kind="stable")
    sv = s[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(sv[1:], sv[:-1], out=new[1:])
    start = np.where(new, np.arange(n), 0)
    np.maximum.accumulate(start, out=start)
    higher = np.empty(n, dtype=np.intp)
    higher[order] = start
    return (1.0 - higher / n).astype(np.float32)


def _node_percentile(sc: Scores, n_pages: int, n_elements: int) -> np.ndarray:
    pages = np.asarray(sc.pages, dtype=np.float32)
    elements = np.asarray(sc.elements, dtype=np.float32)
    if pages.shape != (n_pages,) or elements.shape != (n_elements,):
        raise ValueError(f"retriever returned scores of shape {pages.shape}/{elements.shape}; "
                         f"expected ({n_pages},)/({n_elements},)")
    return np.concatenate([percentile(pages), percentile(elements)])


def score_question(graph: EvidenceGraph, retriever: Retriever, query: Query) -> EpisodeRelevance:
    """Score all nodes for the question (fused and per component) and order them."""
    if hasattr(retriever, "score_with_components"):
        fused, comps = retriever.score_with_components(graph, query)  # type: ignore[attr-defined]
    else:
        fused = retriever.score(graph, query)
        comps = {getattr(retriever, "name", "retriever"): fused}
    n_pages, n_el = graph.n_pages, graph.n_elements
    n = n_pages + n_el
    feats = np.zeros((n, N_RELEVANCE), dtype=np.float32)
    feats[:, 0] = _node_percentile(fused, n_pages, n_el)
    names = tuple(comps)[: N_RELEVANCE - 1]
    for j, name in enumerate(names):
        feats[:, 1 + j] = _node_percentile(comps[name], n_pages, n_el)
    idx = np.arange(n)
    order = np.lexsort((idx, -feats[:, 0])).astype(np.intp)
    rank_of = np.empty(n, dtype=np.intp)
    rank_of[order] = np.arange(n, dtype=np.intp)
    fp = np.asarray(fused.pages, dtype=np.float32)
    page_order = np.lexsort((np.arange(n_pages), -fp.astype(np.float64))).astype(np.intp)
    return EpisodeRelevance(query=query, fused_pages=fp, features=feats, component_names=names,
                            order=order, rank_of=rank_of, page_order=page_order)


#: Question relevance per graph (held weakly) and (retriever, query function, question). ~0.5 MB per entry on a
#: 500-page graph; :func:`reserve_questions` raises the bound for a training env cycling through its episodes.
_QUESTIONS: Cache[EpisodeRelevance] = Cache("env.question_relevance", 128)
#: SearchEvidence page scores per graph (held weakly) and (retriever, query text, query vector).
_SEARCHES: Cache[np.ndarray] = Cache("env.search_scores", 8192)
#: Question vectors per (query function, text): the question is encoded once per process.
_QUERY_VECTORS: Cache[Query] = Cache("env.query_vectors", 4096, owned=False)
#: One retriever object per (name, config), so that their per-graph indexes are shared by every env.
_RETRIEVERS: Cache[Retriever] = Cache("env.shared_retrievers", 64, owned=False)


def shared_retriever(name: str, **cfg: Any) -> Retriever:
    """One retriever object per (name, config) per process, so their per-graph indexes are shared."""
    from mage_gym.retrieval import get_retriever

    return _RETRIEVERS.get(None, name + repr(sorted(cfg.items())), lambda: get_retriever(name, **cfg))


def reserve_questions(n: int) -> None:
    """Keep the relevance of at least ``n`` (graph, question) pairs (a training env cycles through its episodes)."""
    _QUESTIONS.reserve(n)


def clear_caches() -> None:
    """Forget cached question relevance, search scores and question vectors (retriever indexes stay).

    Why: the next reset of any episode is then cold (question encoded and
    scored again), which is what a speed measurement of reset needs.
    """
    _QUESTIONS.clear()
    _SEARCHES.clear()
    _QUERY_VECTORS.clear()


def default_query_fn(text: str) -> Query:
    from mage_gym.retrieval import make_query

    return make_query(text)


def cached_query(query_fn: QueryFn, text: str) -> Query:
    """``query_fn(text)`` once per (function, text) in this process (question vectors)."""
    return _QUERY_VECTORS.get(None, (id(query_fn), text), lambda: query_fn(text))


def episode_relevance(graph: EvidenceGraph, question: str, retriever: Retriever, query_fn: QueryFn
                      ) -> EpisodeRelevance:
    """Cached :func:`score_question` for (graph, question, retriever)."""
    return _QUESTIONS.get(graph, (id(retriever), id(query_fn), question),
                          lambda: score_question(graph, retriever, cached_query(query_fn, question)))


def _build_page_view(graph: EvidenceGraph) -> EvidenceGraph:
    from dataclasses import replace

    from mage_gym.retrieval.text import page_text

    pages = [replace(p, text=page_text(graph, p.index), header_text="", footer_text="", n_elements=0)
             for p in graph.pages]
    dim = graph.page_vectors.shape[1] if graph.page_vectors.ndim == 2 else 0
    return EvidenceGraph(
        doc_id=graph.doc_id, source=graph.source, pages=pages, elements=[],
        edge_src=np.zeros(0, np.int32), edge_dst=np.zeros(0, np.int32), edge_kind=np.zeros(0, np.int8),
        edge_weight=np.zeros(0, np.float32), edge_label=[], page_vectors=graph.page_vectors,
        element_vectors=np.zeros((0, dim), dtype=graph.page_vectors.dtype), meta=dict(graph.meta),
    )


def page_view(gi: GraphIndex) -> EvidenceGraph:
    """The pages of the index's graph without its elements, for page-only search (kept on the index).

    Why: SearchEvidence only activates pages, so scoring every element (30x
    more nodes on a typical report) would be wasted. Page texts are the exact
    searchable texts the full retriever uses (``retrieval.text.page_text``),
    so page scores are the same as ``retriever.score(graph, q).pages``.
    """
    return gi.derived("relevance.page_view", lambda g: _build_page_view(g.graph))


def search_page_scores(gi: GraphIndex, retriever: Retriever, query: Query) -> np.ndarray:
    """Fused page scores for a SearchEvidence query (cached per graph, by query text and vector).

    A retriever may name another one for searches (``search_retriever``: ``hybrid_rerank`` searches with its
    first stage, so a search costs no cross-encoder pass)."""
    vec_key = None if query.vector is None else np.asarray(query.vector, dtype=np.float32).tobytes()
    key = (id(retriever), query.text, vec_key)
    searcher = getattr(retriever, "search_retriever", retriever)
    return _SEARCHES.get(gi.graph, key, lambda: np.asarray(searcher.score(page_view(gi), query).pages,
                                                           dtype=np.float32))


def node_query(question: Query, node_text: str, node_vector: np.ndarray | None) -> Query:
    """The learned policy's search query: the question plus a node's text.

    The vector is the normalised sum of the question vector and the node's
    stored embedding, so a search needs no encoder call in the step loop.
    """
    text = f"{question.text}\n{node_text}".strip()
    if question.vector is None or node_vector is None or node_vector.shape != np.shape(question.vector):
        return Query(text=text, vector=question.vector)
    v = np.asarray(question.vector, dtype=np.float32) + np.asarray(node_vector, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return Query(text=text, vector=(v / norm).astype(np.float32) if norm > 0 else v.astype(np.float32))
