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

``hybrid_adaptive`` (:class:`DensityGatedHybrid`) moves the page weight
between the two dense channels per document, by the document's text density
(:func:`document_text_density`): element-pooled vectors on sparse slides,
page-text chunks on dense prose; its setting was searched on the train splits
(``experiments/quality/embed_quality.py --select-adaptive``).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from mage_gym.cache import Cache
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval.base import Query, Retriever, Scores
from mage_gym.retrieval.fusion import density_gate, rrf


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
                 name: str = "hybrid", observed: Mapping[str, Retriever] | None = None) -> None:
        if components is None:
            from mage_gym.retrieval.bm25 import BM25Retriever
            from mage_gym.retrieval.dense import DenseRetriever

            components = {"bm25": BM25Retriever(), "dense": DenseRetriever()}
        if not components:
            raise ValueError("hybrid retrieval needs at least one component")
        self.components: dict[str, Retriever] = dict(components)
        self.observed: dict[str, Retriever] = dict(observed or {})
        clash = set(self.observed) & set(self.components)
        if clash:
            raise ValueError(f"{sorted(clash)} both fused and observed-only; a channel is one or the other")
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
        """Fused scores and the component scores they came from, in one pass; observed-only channels follow the
        fused components in the dict (they are not fused)."""
        comps = self.score_components(graph, query)
        return self.fuse(comps), {**comps, **self.score_observed(graph, query)}

    def score_observed(self, graph: EvidenceGraph, query: Query) -> dict[str, Scores]:
        """Each observed-only channel's scores (empty without ``observed``). A channel that says it cannot
        score this query (``can_score``: e.g. query vectors from another encoder than its own) is left out,
        so its column stays 0; fused channels have no such escape: they raise."""
        return {name: r.score(graph, query) for name, r in self.observed.items()
                if getattr(r, "can_score", None) is None or r.can_score(graph, query)}

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        return self.fuse(self.score_components(graph, query))


#: Text-density measures a gate can read (:func:`document_text_density`).
DENSITY_FEATURES: tuple[str, ...] = ("chars_per_element", "mean_page_chars")
#: ``hybrid_adaptive``'s settings: chosen by experiments/quality/embed_quality.py --select-adaptive (gate parameters on the
#: dev sets' TRAIN splits, the fusion family on their VAL splits; rule ADAPTIVE_SELECTION_RULE there);
#: docs/results/embed_quality/. conf/retriever/hybrid_adaptive.yaml repeats them (tests/test_config_defaults.py
#: fails when the two disagree).
HYBRID_ADAPTIVE: dict[str, object] = {"feature": "chars_per_element", "lo": 100.0, "width": 200.0, "k": 120.0,
                                      "bm25_weight": 1.0}


def document_text_density(graph: EvidenceGraph) -> dict[str, float]:
    """How much text a document's pages and elements carry, from the text BM25 indexes.

    ``mean_page_chars``: mean characters of a page's searchable text
    (:func:`mage_gym.retrieval.text.page_text`); ``chars_per_element``: all
    pages' characters over the number of elements (a document without
    elements counts one, so its pages are all page text).
    """
    from mage_gym.retrieval.text import page_text

    chars = sum(len(page_text(graph, i)) for i in range(graph.n_pages))
    return {"mean_page_chars": chars / max(1, graph.n_pages),
            "chars_per_element": chars / max(1, graph.n_elements)}


class DensityGatedHybrid(HybridRetriever):
    """RRF of bm25, dense and page_dense whose page weights depend on the document's text density.

    Pages: ``bm25_weight / (k + rank_bm25) + (1 - g) / (k + rank_dense) + g / (k + rank_page_dense)``
    with ``g = density_gate(document_text_density(graph)[feature], lo, width)``: at ``g = 0`` this is
    ``hybrid_elements``' page ranking at the same ``k``, at ``g = 1`` the page-text channel's.
    Elements are fused with ``element_weights`` / ``element_k`` (default: as ``hybrid_elements``),
    since the page-text channel would give every element of a page its page's score.
    ``components`` must hold ``bm25``, ``dense`` and ``page_dense`` (other names are not gated and
    are an error). The density is computed once per graph and cached while the graph lives.
    """

    GATED = ("bm25", "dense", "page_dense")

    def __init__(self, components: Mapping[str, Retriever] | None = None, feature: str = "chars_per_element",
                 lo: float = 100.0, width: float = 200.0, k: float = 120.0, bm25_weight: float = 1.0,
                 element_weights: Mapping[str, float] | None = None, element_k: float = 60.0,
                 ignore_zero: bool = True, name: str = "hybrid_adaptive", max_graphs: int = 8) -> None:
        if components is None:
            from mage_gym.retrieval.bm25 import BM25Retriever
            from mage_gym.retrieval.dense import DenseRetriever
            from mage_gym.retrieval.page_text import PageTextDenseRetriever

            components = {"bm25": BM25Retriever(), "dense": DenseRetriever(), "page_dense": PageTextDenseRetriever()}
        if set(components) != set(self.GATED):
            raise ValueError(f"a density-gated hybrid fuses exactly {self.GATED}, got {sorted(components)}")
        if feature not in DENSITY_FEATURES:
            raise ValueError(f"density feature must be one of {DENSITY_FEATURES}, got {feature!r}")
        if float(width) < 0 or float(bm25_weight) < 0:
            raise ValueError(f"width and bm25_weight must be >= 0, got {width}, {bm25_weight}")
        if element_weights is None:
            element_weights = {"bm25": 1.0, "dense": 1.0, "page_dense": 0.0}
        super().__init__(components={n: components[n] for n in self.GATED},
                         weights={"bm25": bm25_weight, "dense": 0.5, "page_dense": 0.5}, k=k,
                         ignore_zero=ignore_zero, element_weights=element_weights, element_k=element_k, name=name)
        self.feature, self.lo, self.width, self.bm25_weight = feature, float(lo), float(width), float(bm25_weight)
        self._density: Cache[dict[str, float]] = Cache("retrieval.hybrid_adaptive.density", max_graphs,
                                                      per_graph=True)

    def gate(self, graph: EvidenceGraph) -> float:
        """The page-text dense channel's share ``g`` for this document (0..1)."""
        density = self._density.get(graph, None, lambda: document_text_density(graph))
        return density_gate(density[self.feature], self.lo, self.width)

    def fuse(self, components: Mapping[str, Scores], gate: float = 0.5) -> Scores:
        """Pages by the gated RRF (``gate`` = g), elements as the base class fuses them."""
        if not 0.0 <= gate <= 1.0:
            raise ValueError(f"gate must be in [0, 1], got {gate}")
        missing = [n for n in self.GATED if n not in components]
        if missing:
            raise ValueError(f"component scores missing for {missing}")
        names = list(self.GATED)
        weights = {"bm25": self.bm25_weight, "dense": 1.0 - gate, "page_dense": gate}
        return Scores(
            pages=rrf([components[n].pages for n in names], [weights[n] for n in names], self.k, self.ignore_zero),
            elements=rrf([components[n].elements for n in names], [self.element_weights[n] for n in names],
                         self.element_k, self.ignore_zero),
        )

    def score_with_components(self, graph: EvidenceGraph, query: Query) -> tuple[Scores, dict[str, Scores]]:
        comps = self.score_components(graph, query)
        return self.fuse(comps, self.gate(graph)), {**comps, **self.score_observed(graph, query)}

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        return self.score_with_components(graph, query)[0]
