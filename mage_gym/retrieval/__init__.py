"""Page and element retrieval: BM25, dense MiniLM, ColPali/ColQwen, fused (hybrid).

Usage per episode::

    retriever = get_retriever("hybrid")          # once per env; indexes are cached per graph
    query = make_query(question)                 # encodes the question once
    scores = retriever.score(graph, query)       # at reset: entry pages = top of scores.pages
    scores = retriever.score(graph, Query(question + " " + node_text))  # SearchEvidence

``get_retriever`` names: ``bm25``, ``dense``, ``hybrid`` (default), ``colpali``.
Only ``colpali`` needs torch/transformers/colpali-engine, imported when it is built.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mage_gym.retrieval.base import Query, Retriever, Scores
from mage_gym.retrieval.fusion import rrf

RETRIEVER_NAMES: tuple[str, ...] = ("bm25", "dense", "hybrid", "colpali")
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
    if name == "colpali":
        from mage_gym.retrieval.colpali import ColPaliRetriever

        return ColPaliRetriever(**cfg)
    if name == "hybrid":
        return _build_hybrid(cfg)
    raise ValueError(f"unknown retriever {name!r}; expected one of {RETRIEVER_NAMES}")


def _build_hybrid(cfg: dict[str, Any]) -> Retriever:
    """``components``: list of names or {name: cfg}; per-name cfg may also sit at top level (``bm25={...}``)."""
    from mage_gym.retrieval.hybrid import HybridRetriever

    spec = cfg.pop("components", ("bm25", "dense"))
    if isinstance(spec, Mapping):
        comp_cfgs = {str(n): dict(c or {}) for n, c in spec.items()}
    else:
        comp_cfgs = {str(n): {} for n in spec}
    for n in list(comp_cfgs):
        if n == "hybrid" or n not in RETRIEVER_NAMES:
            raise ValueError(f"hybrid component {n!r} is not one of {RETRIEVER_NAMES[:2] + RETRIEVER_NAMES[3:]}")
        comp_cfgs[n].update(dict(cfg.pop(n, None) or {}))
    for n in RETRIEVER_NAMES:  # config for a component that is not used is a mistake worth reporting
        if n in cfg:
            raise ValueError(f"config given for {n!r}, which is not a hybrid component {sorted(comp_cfgs)}")
    components = {n: _build_one(n, c) for n, c in comp_cfgs.items()}
    return HybridRetriever(components=components, **cfg)


def get_retriever(name: str = DEFAULT_RETRIEVER, **cfg: Any) -> Retriever:
    """Build a retriever by name with its keyword config (see each backend's class docstring).

    Examples: ``get_retriever("bm25", k1=1.2)``,
    ``get_retriever("hybrid", weights={"bm25": 1, "dense": 2}, k=60)``,
    ``get_retriever("hybrid", components=["bm25", "dense", "colpali"], colpali={"model_path": "/models/colqwen"})``,
    ``get_retriever("colpali", model_path="/models/colqwen2.5")``.
    """
    if not isinstance(name, str) or name.lower() not in RETRIEVER_NAMES:
        raise ValueError(f"unknown retriever {name!r}; expected one of {RETRIEVER_NAMES}")
    return _build_one(name.lower(), cfg)


__all__ = [
    "DEFAULT_RETRIEVER",
    "Query",
    "RETRIEVER_NAMES",
    "Retriever",
    "Scores",
    "get_retriever",
    "make_query",
    "rrf",
]
