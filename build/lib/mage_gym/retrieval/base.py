"""Retriever interface shared by page retrieval at reset and SearchEvidence.

A retriever is *fitted* once per document graph (indexes built, cached on the
retriever) and then *queried* per episode. Scores are "higher is better"
float32 arrays over all pages / all elements of the graph; fusion works on
ranks, so scales need not agree across retrievers.

Why a query object: the question's dense vector is computed once per episode
(``Query.vector``) and reused by every search of that episode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from mage_gym.graph.graph import EvidenceGraph


@dataclass(frozen=True)
class Query:
    text: str
    vector: np.ndarray | None = None  # L2-normalised MiniLM vector of ``text``


@dataclass(frozen=True)
class Scores:
    pages: np.ndarray  # float32 [n_pages]
    elements: np.ndarray  # float32 [n_elements]


@runtime_checkable
class Retriever(Protocol):
    name: str

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        """Relevance of every page and element of ``graph`` to ``query``."""
        ...
