"""Lexical retrieval: BM25 (``bm25s``) over page text and over element text.

Why BM25 beside dense vectors: document questions often name exact strings
(years, product names, table headers) that a 384-d sentence vector blurs;
BM25 finds them and costs well under a millisecond per query once indexed.

Two indexes per graph, one over pages and one over elements, because the two
granularities have different length statistics (BM25 normalises by the
average document length of its own collection). Texts are tokenised by
:func:`mage_gym.retrieval.text.tokenize` (lowercase, NLTK stopwords removed);
tables are searched through their markdown as well as their text.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval.base import Query, Scores
from mage_gym.retrieval.cache import GraphIndexCache
from mage_gym.retrieval.text import element_text, page_text, tokenize


@dataclass
class LexicalIndex:
    """One BM25 index over a list of texts; ``None`` model when no text has a token."""

    n_docs: int
    vocab: dict[str, int]
    model: object | None  # bm25s.BM25

    @classmethod
    def build(cls, texts: list[str], k1: float, b: float, method: str) -> "LexicalIndex":
        token_lists = [tokenize(t) for t in texts]
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(tok, len(vocab)) for tok in toks] for toks in token_lists]
        if not vocab:  # empty collection or all texts empty: every score is 0
            return cls(n_docs=len(texts), vocab=vocab, model=None)
        import bm25s

        model = bm25s.BM25(k1=k1, b=b, method=method)
        # The (ids, vocab) form skips bm25s' own tokeniser and handles empty documents.
        model.index((ids, vocab), create_empty_token=False, show_progress=False)
        return cls(n_docs=len(texts), vocab=vocab, model=model)

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """float32 [n_docs] BM25 score of each text; zeros when no query token is known."""
        ids = [self.vocab[t] for t in query_tokens if t in self.vocab]
        if self.model is None or not ids:
            return np.zeros(self.n_docs, dtype=np.float32)
        model = self.model
        if getattr(model, "nonoccurrence_array", None) is not None:  # BM25L/BM25+: bm25s adds a constant
            return np.asarray(model.get_scores_from_ids(ids), dtype=np.float32)  # type: ignore[attr-defined]
        return _postings_sum(model.scores, ids, np.dtype(model.dtype))  # type: ignore[attr-defined]


def _postings_sum(index: dict, token_ids: list[int], dtype: np.dtype) -> np.ndarray:
    """Each document's summed BM25 weights over ``token_ids``, exactly as ``bm25s.BM25.get_scores_from_ids``.

    Why not bm25s's own call: it runs one ``np.add.at`` per query token, and a
    slot search's query (the question plus a node's text) has dozens of
    tokens, so that Python loop was the largest share of a SearchEvidence
    step. Here the postings of all tokens are gathered in query-token order
    and added by a single ``np.add.at``, which adds element by element in
    order: every document receives the same float additions in the same
    order, so the scores are bit-identical (tests/test_retrieval.py).
    """
    data, indices, indptr = index["data"], index["indices"], index["indptr"]
    q = np.asarray(token_ids, dtype=np.int64)
    starts, ends = indptr[q].astype(np.int64), indptr[q + 1].astype(np.int64)
    lengths = ends - starts
    # positions start_i, ..., end_i - 1 of every token, concatenated in token order
    offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    positions = offsets + np.arange(int(lengths.sum()), dtype=np.int64)
    scores = np.zeros(int(index["num_docs"]), dtype=dtype)
    np.add.at(scores, indices[positions], data[positions])
    return scores.astype(np.float32, copy=False)


@dataclass
class BM25Index:
    pages: LexicalIndex
    elements: LexicalIndex


class BM25Retriever:
    """BM25 relevance of every page and element (0 = no query term present).

    Config: ``k1``, ``b`` and ``method`` are bm25s' (Lucene variant by default);
    ``max_graphs`` bounds how many document indexes stay cached.
    """

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75, method: str = "lucene", max_graphs: int = 8) -> None:
        self.k1, self.b, self.method = float(k1), float(b), method
        self._cache: GraphIndexCache[BM25Index] = GraphIndexCache(max_graphs)

    def index(self, graph: EvidenceGraph) -> BM25Index:
        """The graph's index, built on first use and cached while the graph lives."""
        return self._cache.get(graph, self._build)

    def _build(self, graph: EvidenceGraph) -> BM25Index:
        pages = [page_text(graph, i) for i in range(graph.n_pages)]
        elements = [element_text(e) for e in graph.elements]
        return BM25Index(
            pages=LexicalIndex.build(pages, self.k1, self.b, self.method),
            elements=LexicalIndex.build(elements, self.k1, self.b, self.method),
        )

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        idx = self.index(graph)
        tokens = tokenize(query.text)
        return Scores(pages=idx.pages.scores(tokens), elements=idx.elements.scores(tokens))
