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


def fill_slots(state: EvidenceState, order: np.ndarray, K: int) -> tuple[np.ndarray, int]:
    """:func:`slot_nodes` and the number of filled slots (they are filled from the front)."""
    out = np.full(K, -1, dtype=np.intp)
    w = state.working[:K]
    nw = len(w)
    if nw:
        out[:nw] = w
    need = K - nw
    nf = 0
    if need > 0:
        ranks = state.frontier_ranked.nonzero()[0][:need]
        nf = len(ranks)
        out[nw : nw + nf] = order[ranks]
    return out, nw + nf


def n_working_slots(state: EvidenceState, K: int) -> int:
    """How many leading slots hold working-set nodes (the rest are frontier)."""
    return min(len(state.working), K)
