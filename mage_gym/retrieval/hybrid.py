"""Hybrid retrieval: RRF of BM25, dense and page-text dense (optionally ColPali), pages and elements separately.

Why hybrid is the default: lexical and dense retrieval fail on different
questions (exact figures vs paraphrase), and rank fusion of the two is a
robust, tuning-free gain. Pages and elements are fused separately because they
are separate rankings in the environment (entry pages at reset; element hits
at SearchEvidence).

Two presets (``mage_gym.retrieval.HYBRID_PRESETS``): ``hybrid_elements``
fuses BM25 over page text with dense page vectors pooled from element
snippets (the original hybrid); ``hybrid_pages`` adds the page-text dense
channel (MiniLM over chunks of the full page text). ``element_weights`` lets a
channel rank pages without reordering elements: the page-text channel gives
an element its page's score, which would tie every element of a good page.

The environment also wants each component's relevance as per-node features,
so :meth:`HybridRetriever.score_with_components` returns the fused scores and
the component scores from one pass (components are computed once).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval.base import Query, Retriever, Scores
from mage_gym.retrieval.fusion import rrf


class HybridRetriever:
    """Weighted reciprocal rank fusion of component retrievers.

    ``components`` maps a name to a retriever (default: ``bm25`` and ``dense``
    with default settings); ``weights`` maps a name to its RRF weight (missing
    names weigh 1) for pages, and for elements unless ``element_weights``
    names it (missing names there take their page weight); ``k`` is the RRF
    constant (60, as in the original paper), ``element_k`` the one for
    elements (default ``k``); ``ignore_zero`` is explained in
    :mod:`mage_gym.retrieval.fusion`; ``name`` is what traces record.
    """

    name = "hybrid"

    def __init__(self, components: Mapping[str, Retriever] | None = None,
                 weights: Mapping[str, float] | None = None, k: float = 60.0, ignore_zero: bool = True,
                 element_weights: Mapping[str, float] | None = None, element_k: float | None = None,
                 name: str = "hybrid") -> None:
        if components is None:
            from mage_gym.retrieval.bm25 import BM25Retriever
            from mage_gym.retrieval.dense import DenseRetriever

            components = {"bm25": BM25Retriever(), "dense": DenseRetriever()}
        if not components:
            raise ValueError("hybrid retrieval needs at least one component")
        self.components: dict[str, Retriever] = dict(components)
        weights = dict(weights or {})
        unknown = set(weights) - set(self.components)
        if unknown:
            raise ValueError(f"weights given for unknown components {sorted(unknown)}; "
                             f"components are {sorted(self.components)}")
        self.weights = {n: float(weights.get(n, 1.0)) for n in self.components}
        element_weights = dict(element_weights or {})
        unknown = set(element_weights) - set(self.components)
        if unknown:
            raise ValueError(f"element_weights given for unknown components {sorted(unknown)}; "
                             f"components are {sorted(self.components)}")
        self.element_weights = {n: float(element_weights.get(n, self.weights[n])) for n in self.components}
        if any(w < 0 for w in [*self.weights.values(), *self.element_weights.values()]):
            raise ValueError(f"RRF weights must be >= 0, got {self.weights} / {self.element_weights}")
        if float(k) < 0 or (element_k is not None and float(element_k) < 0):
            raise ValueError(f"RRF constants must be >= 0, got k={k}, element_k={element_k}")
        self.name = str(name)
        self.k = float(k)
        self.element_k = float(k) if element_k is None else float(element_k)
        self.ignore_zero = bool(ignore_zero)

    def score_components(self, graph: EvidenceGraph, query: Query) -> dict[str, Scores]:
        """Each component's own scores (e.g. ``{"bm25": ..., "dense": ...}``)."""
        return {name: r.score(graph, query) for name, r in self.components.items()}

    def fuse(self, components: Mapping[str, Scores]) -> Scores:
        """RRF of component scores, pages and elements separately."""
        names: Sequence[str] = list(self.components)
        missing = [n for n in names if n not in components]
        if missing:
            raise ValueError(f"component scores missing for {missing}")
        return Scores(
            pages=rrf([components[n].pages for n in names], [self.weights[n] for n in names], self.k,
                      self.ignore_zero),
            elements=rrf([components[n].elements for n in names], [self.element_weights[n] for n in names],
                         self.element_k, self.ignore_zero),
        )

    def score_with_components(self, graph: EvidenceGraph, query: Query) -> tuple[Scores, dict[str, Scores]]:
        """Fused scores and the component scores they came from, in one pass."""
        comps = self.score_components(graph, query)
        return self.fuse(comps), comps

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        return self.fuse(self.score_components(graph, query))
