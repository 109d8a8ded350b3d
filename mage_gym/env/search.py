"""The env's retrieval: question relevance at reset and the page scores of SearchEvidence.

Why its own object: which retriever scores the document and how a query text
becomes a :class:`~mage_gym.retrieval.base.Query` (the question encoder) are
one choice, made once per env; the transition only asks "relevance of this
question" and "page scores for this search". The heavy lifting and the
process-level caches live in :mod:`mage_gym.env.relevance`.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from mage_gym.cache import Cache
from mage_gym.env.graph_index import GraphIndex
from mage_gym.env.relevance import (
    EpisodeRelevance, QueryFn, cached_query, default_query_fn, episode_relevance, node_query,
    search_page_scores, shared_retriever,
)
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval.base import Query, Retriever


class _NodeSearch:
    """A slot search's query and (once computed) its page scores, for one (retriever, episode relevance, node).

    Holds the retriever, so its id in the cache key cannot be reused while the entry lives."""

    __slots__ = ("retriever", "query", "scores")

    def __init__(self, retriever: Retriever, query: Query) -> None:
        self.retriever = retriever
        self.query = query
        self.scores: np.ndarray | None = None


#: Slot searches per episode relevance (held weakly), keyed by (id(retriever), node). Why: a learned policy
#: searches from the same slot nodes in episode after episode, and building the query (text, normalised
#: vector) and its cache key costs more than the rest of the step's bookkeeping.
_NODE_SEARCHES: Cache[_NodeSearch] = Cache("env.node_searches", 4096)


def _node_search(retriever: Retriever, gi: GraphIndex, rel: EpisodeRelevance, node: int) -> _NodeSearch:
    return _NODE_SEARCHES.get(rel, (id(retriever), node), lambda: _NodeSearch(
        retriever, node_query(rel.query, gi.text(node), gi.vectors[node])))


class EnvRetrieval:
    """A retriever (a name, shared per process, or an object) and a query function (default MiniLM)."""

    def __init__(self, retriever: str | Retriever = "hybrid", retriever_cfg: Mapping[str, Any] | None = None,
                 query_fn: QueryFn | None = None) -> None:
        self.retriever: Retriever = (shared_retriever(retriever, **dict(retriever_cfg or {}))
                                     if isinstance(retriever, str) else retriever)
        self.query_fn: QueryFn = query_fn or default_query_fn

    @property
    def name(self) -> str:
        return getattr(self.retriever, "name", type(self.retriever).__name__)

    def relevance(self, graph: EvidenceGraph, question: str) -> EpisodeRelevance:
        """Every node's relevance to the question (cached per graph, question and retriever)."""
        return episode_relevance(graph, question, self.retriever, self.query_fn)

    def search(self, gi: GraphIndex, rel: EpisodeRelevance, node: int, query_text: str | None, free_text: bool
               ) -> tuple[Query | None, Callable[[], np.ndarray] | None]:
        """The query of a SearchEvidence and a function giving its page scores (None, None: no query).

        A free-text search (LLM rounds, scripted calls) encodes ``query_text``;
        a slot search (learned policies) uses the question plus the node's text.
        """
        retriever = self.retriever
        if free_text:
            query = cached_query(self.query_fn, query_text or "")
            return query, (lambda: search_page_scores(gi, retriever, query))
        if not 0 <= node < gi.n_nodes:
            return None, None
        entry = _node_search(retriever, gi, rel, node)

        def scores() -> np.ndarray:
            if entry.scores is None:
                entry.scores = search_page_scores(gi, retriever, entry.query)
            return entry.scores

        return entry.query, scores
