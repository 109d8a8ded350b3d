"""Dense retrieval: cosine of the question's MiniLM vector with the graph's node vectors.

Why it is cheap: the graph already carries L2-normalised page and element
vectors from the build (``mage_gym/graph/embed.py``), so scoring is two
matrix-vector products; the only model call is the question encoding, which
:func:`mage_gym.retrieval.make_query` does once per episode. Nodes without text
have the zero vector and therefore score exactly 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from mage_gym.cache import Cache
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval.base import Query, Scores


class QueryEncoder(Protocol):
    def encode(self, texts: list[str]) -> np.ndarray: ...


def _default_encoder() -> QueryEncoder:
    from mage_gym.graph.embed import get_encoder

    return get_encoder()


def _as_matrix(vectors: np.ndarray, n: int, name: str) -> np.ndarray:
    """float32 C-contiguous [n, dim] copy-free when already so; typed error when the shape is off."""
    arr = np.ascontiguousarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n:
        if n == 0 and arr.size == 0:
            return np.zeros((0, arr.shape[-1] if arr.ndim == 2 else 0), dtype=np.float32)
        raise ValueError(f"graph.{name} has shape {vectors.shape}; expected [{n}, dim]")
    return arr


@dataclass
class DenseIndex:
    pages: np.ndarray  # float32 [n_pages, dim]
    elements: np.ndarray  # float32 [n_elements, dim]

    @property
    def dim(self) -> int:
        return int(self.pages.shape[1]) if self.pages.ndim == 2 and self.pages.shape[1] else int(self.elements.shape[1])


class DenseRetriever:
    """Cosine relevance (in [-1, 1]) of every page and element to ``Query.vector``.

    When the query has no vector, it is encoded with ``encoder`` (default: the
    process-wide MiniLM from :func:`mage_gym.graph.embed.get_encoder`); the last
    ``query_cache_size`` encodings are remembered so repeated searches of the
    same text never re-encode.
    """

    name = "dense"

    def __init__(self, encoder: QueryEncoder | Callable[[], QueryEncoder] | None = None,
                 max_graphs: int = 8, query_cache_size: int = 64) -> None:
        self._encoder = encoder
        self._cache: Cache[DenseIndex] = Cache("retrieval.dense.index", max_graphs, per_graph=True)
        self._query_vectors: Cache[np.ndarray] = Cache("retrieval.dense.query_vectors", int(query_cache_size),
                                                       owned=False)

    def index(self, graph: EvidenceGraph) -> DenseIndex:
        return self._cache.get(graph, None, lambda: self._build(graph))

    @staticmethod
    def _build(graph: EvidenceGraph) -> DenseIndex:
        return DenseIndex(
            pages=_as_matrix(graph.page_vectors, graph.n_pages, "page_vectors"),
            elements=_as_matrix(graph.element_vectors, graph.n_elements, "element_vectors"),
        )

    def query_vector(self, query: Query) -> np.ndarray:
        """The unit query vector: ``Query.vector`` if given, else an (LRU-cached) encoding of its text."""
        if query.vector is not None:
            vec = np.asarray(query.vector, dtype=np.float32).reshape(-1)
        else:
            text = query.text
            vec = self._query_vectors.get(None, text, lambda: self._encode(text))
        norm = float(np.linalg.norm(vec))
        if not np.isfinite(norm):
            raise ValueError("query vector has non-finite values")
        return (vec / norm).astype(np.float32) if norm > 0 else vec

    def _encode(self, text: str) -> np.ndarray:
        enc = self._encoder
        if enc is None:
            enc = _default_encoder()
        elif not hasattr(enc, "encode"):
            enc = enc()  # a factory
        return np.asarray(enc.encode([text]), dtype=np.float32)[0]  # type: ignore[union-attr]

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        idx = self.index(graph)
        vec = self.query_vector(query)
        if idx.pages.shape[0] + idx.elements.shape[0] and vec.shape[0] != idx.dim:
            raise ValueError(
                f"query vector has {vec.shape[0]} dimensions but graph {graph.doc_id!r} has {idx.dim}-d "
                "vectors; encode the query with the encoder that built the graph"
            )
        return Scores(pages=_matvec(idx.pages, vec), elements=_matvec(idx.elements, vec))


def _matvec(matrix: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """float32 ``matrix @ vec`` without BLAS threads.

    Why einsum: for a few thousand rows OpenBLAS switches ``@`` to its
    multi-threaded path, which on a shared 2-core machine was measured at
    16-20 ms per call (threads waiting for a busy core) against 0.3 ms for
    einsum's single-threaded SIMD loop on 5,000 x 384.
    """
    if matrix.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    return np.einsum("ij,j->i", matrix, vec.astype(matrix.dtype, copy=False)).astype(np.float32, copy=False)
