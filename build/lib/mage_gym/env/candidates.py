"""Candidate slots: the working subgraph plus its frontier, in a fixed order, cut at K.

Why slots: a learned policy needs a fixed-size action space over a graph of
any size, so the ``K`` most useful nodes are laid out in slots and actions
address slots. Order (deterministic, so the same state always gives the same
slots):

1. working-set nodes (ACTIVATED/OPENED, never PRUNED) in activation order;
2. frontier nodes (UNVISITED elements of activated pages and UNVISITED graph
   neighbours of working-set nodes along the five relations, including
   page-to-page semantic and reading-order edges and the section relation
   across pages) by fused question relevance, ties by node index;
3. cut at ``K``; empty slots hold -1.

The frontier lives in ``EvidenceState.frontier_ranked`` (a boolean array in
relevance-rank order, kept up to date incrementally), so taking its best nodes
is a single ``nonzero``.
"""
from __future__ import annotations

import numpy as np

from mage_gym.env.state import EvidenceState


def slot_nodes(state: EvidenceState, order: np.ndarray, K: int) -> np.ndarray:
    """intp [K]: node index per slot (-1 for an empty slot).

    ``order`` lists node indices by decreasing relevance (the inverse of
    ``state.rank_of``).
    """
    return fill_slots(state, order, K)[0]


#: First chunk of the frontier scan (ranks); doubled until enough frontier nodes are found. (perf_env's random
#: play on a 500-page document: the last frontier slot has median rank 181, and rank < 1,024 in 99.96% of steps.)
_SCAN0 = 1024


def fill_slots(state: EvidenceState, order: np.ndarray, K: int) -> tuple[np.ndarray, int]:
    """:func:`slot_nodes` and the number of filled slots (they are filled from the front).

    The frontier's best nodes are found by scanning ``frontier_ranked`` in
    growing chunks from the best rank, so a step does not scan all ``n``
    ranks when the first few thousand already hold ``K`` frontier nodes
    (same result as one ``nonzero`` over the whole array).
    """
    out = np.empty(K, dtype=np.intp)
    w = state.working
    nw = min(len(w), K)
    if nw:
        out[:nw] = w[:nw]
    need = K - nw
    nf = 0
    if need > 0:
        fr = state.frontier_ranked
        n = len(fr)
        lo, chunk = 0, _SCAN0
        found: list[np.ndarray] = []
        while lo < n:
            hi = min(n, lo + chunk)
            r = fr[lo:hi].nonzero()[0]
            if len(r):
                r = r[: need - nf]
                if lo:
                    r = r + lo
                found.append(r)
                nf += len(r)
                if nf >= need:
                    break
            lo, chunk = hi, chunk * 2
        if nf:
            ranks = found[0] if len(found) == 1 else np.concatenate(found)
            out[nw: nw + nf] = order[ranks]
    if nw + nf < K:
        out[nw + nf:] = -1
    return out, nw + nf


def n_working_slots(state: EvidenceState, K: int) -> int:
    """How many leading slots hold working-set nodes (the rest are frontier)."""
    return min(len(state.working), K)
