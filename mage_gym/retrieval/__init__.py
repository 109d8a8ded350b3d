"""Page and element retrieval: BM25, dense MiniLM, page-text MiniLM, ColPali/ColQwen, fused (hybrid).

Usage per episode::

    retriever = get_retriever("hybrid")          # once per env; indexes are cached per graph
    query = make_query(question)                 # encodes the question once
    scores = retriever.score(graph, query)       # at reset: entry pages = top of scores.pages
    scores = retriever.score(graph, Query(question + " " + node_text))  # SearchEvidence

``get_retriever`` names: ``bm25`` (BM25 over page text and over element text),
``dense`` (graph vectors: pages pooled from 80-character element snippets),
``page_dense`` (MiniLM over chunks of each page's full text, best chunk; vectors
cached on disk per document), ``colpali``, and the fusions ``hybrid_elements``
(bm25 + dense, the original hybrid; page_dense scored as an observed-only
column, never fused), ``hybrid_pages`` (bm25 + dense +
page_dense, weights chosen on the dev sets' train splits), ``hybrid_adaptive``
(bm25 + dense + page_dense, the page weight moving between the two dense
channels with each document's text density), ``hybrid_learned`` (pages ranked by a
linear learning-to-rank model over the channels, ``learned_fusion.json``), ``hybrid``, which
is whichever of the two :data:`DEFAULT_HYBRID` names (the environment's default
retriever), and ``hybrid_rerank`` (a first stage, ``hybrid`` by default, whose top pages a
cross-encoder fine-tuned from the shipped MiniLM reorders: :mod:`mage_gym.retrieval.rerank`).
Only ``colpali`` needs colpali-engine, and ``hybrid_rerank`` loads its cross-encoder (torch,
transformers) on its first query.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mage_gym.retrieval.base import Query, Retriever, Scores
from mage_gym.retrieval.fusion import rrf

#: Single channels (usable alone or as hybrid components).
CHANNEL_NAMES: tuple[str, ...] = ("bm25", "dense", "page_dense", "colpali")
#: Named fusions: component list and RRF settings (overridable by keyword config). conf/retriever/<name>.yaml
#: repeats each preset for Hydra; tests/test_config_defaults.py fails when the two disagree.
HYBRID_PRESETS: dict[str, dict[str, Any]] = {
    # page_dense is observed only: the env shows its percentile as the last relevance column (the one hybrid_pages
    # fills with the same channel) without it entering the fusion, so entry pages are the original hybrid's
    "hybrid_elements": {"components": ["bm25", "dense"], "k": 60.0, "observed": ["page_dense"]},
    # page weights and k: chosen on the dev sets' train splits by the rule in experiments/quality/embed_quality.py
    # (SELECTION_RULE: best pooled train recall@5 among settings losing at most one question against
    # hybrid_elements on any dataset's train split); docs/results/embed_quality/
    "hybrid_pages": {"components": ["bm25", "dense", "page_dense"], "k": 120.0,
                     "weights": {"bm25": 1.0, "dense": 0.25, "page_dense": 0.25},
                     # elements are ranked exactly as hybrid_elements ranks them (page weights are chosen on
                     # page recall only); the page channel would give every element of a page its page's score
                     "element_weights": {"bm25": 1.0, "dense": 1.0, "page_dense": 0.0}, "element_k": 60.0},
}
#: What ``hybrid`` (the env's default retriever) means. Switching the default is this one line.
DEFAULT_HYBRID = "hybrid_elements"
RETRIEVER_NAMES: tuple[str, ...] = ("bm25", "dense", "page_dense", "hybrid", "hybrid_elements", "hybrid_pages",
                                    "hybrid_adaptive", "hybrid_learned", "hybrid_rerank", "colpali")
DEFAULT_RETRIEVER = "hybrid"


def make_query(text: str, encoder: Any = None) -> Query:
    """A :class:`Query` carrying the L2-normalised MiniLM vector of ``text``.

    Why: the question is searched at reset and again at every SearchEvidence
    (as part of the query); encoding it once per episode keeps those calls
    model-free. ``encoder`` is anything with ``encode(list[str]) -> [n, dim]``
    (default: the process-wide MiniLM encoder).
    """
    if not isinstance(text, str):
        raise TypeError(f"query text must be a str, got {type(text).__name__}")
    if encoder is None:
        from mage_gym.graph.embed import get_encoder

        encoder = get_encoder()
    vec = np.asarray(encoder.encode([text]), dtype=np.float32)
    if vec.ndim != 2 or vec.shape[0] != 1:
        raise ValueError(f"encoder returned shape {vec.shape} for one text; expected [1, dim]")
    return Query(text=text, vector=vec[0])


def _build_one(name: str, cfg: Mapping[str, Any]) -> Retriever:
    cfg = dict(cfg)
    if name == "bm25":
        from mage_gym.retrieval.bm25 import BM25Retriever

        return BM25Retriever(**cfg)
    if name == "dense":
        from mage_gym.retrieval.dense import DenseRetriever

        return DenseRetriever(**cfg)
    if name == "page_dense":
        from mage_gym.retrieval.page_text import PageTextDenseRetriever

        return PageTextDenseRetriever(**cfg)
    if name == "colpali":
        from mage_gym.retrieval.colpali import ColPaliRetriever

        return ColPaliRetriever(**cfg)
    if name in HYBRID_PRESETS or name == "hybrid":
        return _build_hybrid(name, cfg)
    if name == "hybrid_adaptive":
        return _build_adaptive(cfg)
    if name == "hybrid_learned":
        return _build_learned(cfg)
    if name == "hybrid_rerank":
        return _build_rerank(cfg)
    raise ValueError(f"unknown retriever {name!r}; expected one of {RETRIEVER_NAMES}")


def _build_hybrid(name: str, cfg: dict[str, Any]) -> Retriever:
    """A preset's settings updated by ``cfg`` (None values keep the preset's).

    ``components``: list of names or {name: cfg}; per-name cfg may also sit at
    top level (``bm25={...}``). ``hybrid`` is the :data:`DEFAULT_HYBRID` preset
    under the name ``hybrid``.
    """
    from mage_gym.retrieval.hybrid import HybridRetriever

    preset = DEFAULT_HYBRID if name == "hybrid" else name
    merged: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in HYBRID_PRESETS[preset].items()}
    given = {k: v for k, v in cfg.items() if v is not None}
    if "components" in given and "components" in merged:
        # weights of components the caller dropped would be an error: keep only those still present
        spec = given["components"]
        keep = set(spec) if not isinstance(spec, str) else {spec}
        for key in ("weights", "element_weights"):
            if isinstance(merged.get(key), Mapping):
                merged[key] = {n: w for n, w in merged[key].items() if n in keep}
    merged.update(given)
    spec = merged.pop("components")
    observed_spec = merged.pop("observed", None) or []
    if isinstance(observed_spec, str):
        observed_spec = [observed_spec]
    if isinstance(spec, str):
        spec = [spec]
    if isinstance(spec, Mapping):
        comp_cfgs = {str(n): dict(c or {}) for n, c in spec.items()}
    else:
        comp_cfgs = {str(n): {} for n in spec}
    # a channel the caller fuses is no longer observed-only
    obs_cfgs = {str(n): dict(c or {}) for n, c in (observed_spec.items() if isinstance(observed_spec, Mapping)
                                                   else ((n, {}) for n in observed_spec)) if str(n) not in comp_cfgs}
    for n in [*comp_cfgs, *obs_cfgs]:
        if n not in CHANNEL_NAMES:
            raise ValueError(f"hybrid component {n!r} is not one of {CHANNEL_NAMES}")
        (comp_cfgs if n in comp_cfgs else obs_cfgs)[n].update(dict(merged.pop(n, None) or {}))
    for n in CHANNEL_NAMES:  # config for a component that is not used is a mistake worth reporting
        if n in merged:
            raise ValueError(f"config given for {n!r}, which is not a hybrid component {sorted(comp_cfgs)}")
    components = {n: _build_one(n, c) for n, c in comp_cfgs.items()}
    observed = {n: _build_one(n, c) for n, c in obs_cfgs.items()}
    merged.setdefault("name", name)
    return HybridRetriever(components=components, observed=observed, **merged)


def _build_adaptive(cfg: dict[str, Any]) -> Retriever:
    """``hybrid_adaptive``: its preset (``hybrid.HYBRID_ADAPTIVE``) updated by ``cfg`` (None keeps the preset's);
    ``bm25`` / ``dense`` / ``page_dense`` keys configure those components."""
    from mage_gym.retrieval.hybrid import HYBRID_ADAPTIVE, DensityGatedHybrid

    merged = {**HYBRID_ADAPTIVE, **{k: v for k, v in cfg.items() if v is not None}}
    if "components" in merged:
        raise ValueError("hybrid_adaptive always fuses bm25, dense and page_dense; drop 'components'")
    comps = {n: _build_one(n, dict(merged.pop(n, None) or {})) for n in DensityGatedHybrid.GATED}
    return DensityGatedHybrid(components=comps, **merged)


def _build_learned(cfg: dict[str, Any]) -> Retriever:
    """``hybrid_learned``: pages by the linear ranker of ``learned_fusion.json`` (``model``: another file),
    elements as hybrid_elements; ``bm25`` / ``dense`` / ``page_dense`` keys configure those components."""
    from mage_gym.retrieval.learned_fusion import LearnedFusionHybrid

    merged = {k: v for k, v in cfg.items() if v is not None}
    if "components" in merged:
        raise ValueError("hybrid_learned always reads bm25, dense and page_dense; drop 'components'")
    comps = {n: _build_one(n, dict(merged.pop(n, None) or {})) for n in LearnedFusionHybrid.COMPONENTS}
    return LearnedFusionHybrid(components=comps, **merged)


def _build_rerank(cfg: dict[str, Any]) -> Retriever:
    """``hybrid_rerank``: ``first_stage`` (a retriever name, default ``hybrid``; its options in
    ``first_stage_cfg``) reordered by the cross-encoder; the other keys are
    :class:`~mage_gym.retrieval.rerank.RerankedRetriever` settings (unknown keys are an error)."""
    from mage_gym.retrieval.rerank import RerankedRetriever, settings_of

    merged = {k: v for k, v in cfg.items() if v is not None}
    first = str(merged.pop("first_stage", DEFAULT_RETRIEVER))
    if first == "hybrid_rerank":
        raise ValueError("hybrid_rerank cannot be its own first stage")
    first_cfg = dict(merged.pop("first_stage_cfg", None) or {})
    settings = settings_of(merged)
    unknown = sorted(set(merged) - set(settings))
    if unknown:
        raise ValueError(f"unknown hybrid_rerank options {unknown}")
    return RerankedRetriever(first_stage=get_retriever(first, **first_cfg), **settings)


def get_retriever(name: str = DEFAULT_RETRIEVER, **cfg: Any) -> Retriever:
    """Build a retriever by name with its keyword config (see each backend's class docstring).

    Examples: ``get_retriever("bm25", k1=1.2)``, ``get_retriever("hybrid_pages")``,
    ``get_retriever("hybrid", weights={"bm25": 1, "dense": 2}, k=60)``,
    ``get_retriever("hybrid", components=["bm25", "dense", "colpali"], colpali={"model_path": "/models/colqwen"})``,
    ``get_retriever("colpali", model_path="/models/colqwen2.5")``.
    """
    if not isinstance(name, str) or name.lower() not in RETRIEVER_NAMES:
        raise ValueError(f"unknown retriever {name!r}; expected one of {RETRIEVER_NAMES}")
    return _build_one(name.lower(), cfg)


__all__ = [
    "CHANNEL_NAMES",
    "DEFAULT_HYBRID",
    "DEFAULT_RETRIEVER",
    "HYBRID_PRESETS",
    "Query",
    "RETRIEVER_NAMES",
    "Retriever",
    "Scores",
    "get_retriever",
    "make_query",
    "rrf",
]
