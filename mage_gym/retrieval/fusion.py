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


# --- alternatives to RRF, searched on the train splits (experiments/quality/embed_quality.py --select-adaptive) ------


def normalized(scores: np.ndarray, how: str = "z") -> np.ndarray:
    """Scores rescaled over the pages of one question: ``"z"`` (mean 0, sd 1) or ``"minmax"`` (0..1).

    Why: a weighted *sum* of scores needs each channel on a common scale per
    query (BM25 is unbounded, cosines are not); constant scores give zeros,
    non-finite scores count as the array's minimum (not retrieved).
    """
    s = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(s)
    if not finite.any():
        return np.zeros(s.shape, dtype=np.float64)
    s = np.where(finite, s, s[finite].min())
    if how == "z":
        sd = s.std()
        return (s - s.mean()) / sd if sd > 0 else np.zeros_like(s)
    if how == "minmax":
        lo, hi = s.min(), s.max()
        return (s - lo) / (hi - lo) if hi > lo else np.zeros_like(s)
    raise ValueError(f"normalisation must be 'z' or 'minmax', got {how!r}")


def normalized_sum(score_arrays: Sequence[np.ndarray], weights: Sequence[float], how: str = "z") -> np.ndarray:
    """Weighted sum of per-question normalised scores (CombSUM), float32 [n]."""
    if len(score_arrays) != len(weights) or not score_arrays:
        raise ValueError(f"{len(weights)} weights for {len(score_arrays)} score arrays")
    n = len(score_arrays[0])
    fused = np.zeros(n, dtype=np.float64)
    for arr, w in zip(score_arrays, weights):
        if np.shape(arr) != (n,):
            raise ValueError(f"score arrays disagree in shape: {np.shape(arr)} vs ({n},)")
        if w:
            fused += float(w) * normalized(arr, how)
    return fused.astype(np.float32)


def interleave_scores(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Scores whose descending order takes pages alternately from two rankings, ``first`` leading.

    Why: the top k then holds the ceil(k/2) best pages of one ranking and the
    floor(k/2) best of the other that are not already in (a page both rank
    high is taken once), so neither ranking's best pages can be crowded out.
    Ties inside a ranking are broken by item index, as the environment does.
    """
    a = np.asarray(first, dtype=np.float64)
    b = np.asarray(second, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"interleave needs two score arrays of one shape, got {a.shape} and {b.shape}")
    n = len(a)
    idx = np.arange(n)
    orders = (np.lexsort((idx, -a)), np.lexsort((idx, -b)))
    position = np.full(n, -1, dtype=np.int64)
    pos, heads = 0, [0, 0]
    while pos < n:
        for j in (0, 1):
            order = orders[j]
            while heads[j] < n and position[order[heads[j]]] >= 0:
                heads[j] += 1
            if heads[j] < n:
                position[order[heads[j]]] = pos
                pos += 1
    return (n - position).astype(np.float32)


def density_gate(value: float, lo: float, width: float) -> float:
    """Share in [0, 1] given to the page-text dense channel for a document of text density ``value``.

    0 at or below ``lo``, 1 at or above ``lo + width``, linear between; ``width``
    0 is a step at ``lo`` (``value >= lo`` gives 1). Why a document-level gate:
    on sparse-text documents (slides: short elements) the element-pooled page
    vectors are the better dense signal, on dense-text documents (filings,
    papers) the page-text chunks are; questions alone did not tell them apart
    on the train splits (``docs/results/embed_quality/``).
    """
    if width < 0:
        raise ValueError(f"gate width must be >= 0, got {width}")
    v = float(value)
    if not np.isfinite(v):
        raise ValueError(f"text density must be finite, got {value}")
    if width == 0:
        return 1.0 if v >= lo else 0.0
    return float(min(1.0, max(0.0, (v - lo) / width)))
