"""Reciprocal rank fusion (RRF) of several score arrays over the same items.

Why ranks and not scores: BM25 scores are unbounded, cosines live in [-1, 1]
and ColPali late-interaction sums grow with query length, so any weighted sum
of raw scores needs per-document calibration. RRF (Cormack et al., 2009) only
uses each retriever's ordering: ``fused[i] = sum_r w_r / (k + rank_r(i))``.

Two conventions, chosen so fused scores are well defined on full score arrays
(classic RRF fuses top-k lists):

* ties share the best rank of their group ("competition" ranking: scores
  ``[5, 3, 3, 1]`` get ranks ``[1, 2, 2, 4]``), so input order never matters;
* with ``ignore_zero`` an item whose score is exactly 0 counts as *not
  retrieved* by that retriever and gets no contribution from it. That is what
  a lexical engine returns for a page without any query term, and what a dense
  retriever gives for a node without text (zero vector), so such nodes are not
  lifted just because they are numerous and tied.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def competition_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks, higher score first, ties sharing the best rank (int64 [n])."""
    s = np.asarray(scores, dtype=np.float64)
    desc = np.sort(-s)
    return np.searchsorted(desc, -s, side="left").astype(np.int64) + 1


def rrf(score_arrays: Sequence[np.ndarray], weights: Sequence[float] | None = None, k: float = 60.0,
        ignore_zero: bool = True) -> np.ndarray:
    """Fused float32 [n] RRF score of items scored by every array in ``score_arrays``.

    Non-finite scores (NaN, -inf) count as not retrieved, like exact zeros
    under ``ignore_zero``.
    """
    if not score_arrays:
        raise ValueError("rrf needs at least one score array")
    if k < 0:
        raise ValueError(f"RRF constant k must be >= 0, got {k}")
    weights = [1.0] * len(score_arrays) if weights is None else list(weights)
    if len(weights) != len(score_arrays):
        raise ValueError(f"{len(weights)} weights for {len(score_arrays)} score arrays")
    n = len(score_arrays[0])
    fused = np.zeros(n, dtype=np.float64)
    for arr, w in zip(score_arrays, weights):
        s = np.asarray(arr, dtype=np.float64)
        if s.shape != (n,):
            raise ValueError(f"score arrays disagree in shape: {s.shape} vs ({n},)")
        if w == 0 or n == 0:
            continue
        retrieved = np.isfinite(s)
        if ignore_zero:
            retrieved &= s != 0
        if not retrieved.any():
            continue
        ranked = np.where(retrieved, s, -np.inf)
        ranks = competition_ranks(ranked)
        fused += np.where(retrieved, w / (k + ranks), 0.0)
    return fused.astype(np.float32)
