"""The state an episode starts from: built once per (graph, question, budget, window), copied at each reset.

Why a template: a reset makes a fresh node-state table, blocks the pages
outside the episode's page window and activates the question's entry pages
(``k`` activations, each touching a page's elements and neighbours). That is
the same work every time the same episode comes back, which in training is
every few hundred steps. Copying the finished state is a handful of memcpys.

The templates live in a small LRU shared by the environments of a process
(a :class:`~mage_gym.cache.Cache`), owned by the episode relevance and keyed
by the graph index, the budget, the window and ``k`` (relevance and index are
shared and read-only). A caller always gets a copy (:meth:`EvidenceState.copy`
is deep for everything but the read-only graph index and rank order), never
the template itself.

Under a reader-token budget the template carries its
:class:`~mage_gym.env.token_budget.TokenMeter` (keyed by what the meter
depends on: render mode, render config, the question's tokens), and the entry
pages are activated in retrieval order only when they fit; the ones left out
are in ``state.tokens.skipped``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from mage_gym.cache import Cache
from mage_gym.env.budget import Budget
from mage_gym.env.graph_index import GraphIndex
from mage_gym.env.relevance import EpisodeRelevance
from mage_gym.env.state import EvidenceState
from mage_gym.env.token_budget import TokenMeter

_TEMPLATES: Cache[EvidenceState] = Cache("env.initial_templates", 32)  # ~n_nodes * 70 bytes each (1 MB for 15,500)


def activate_entry_pages(state: EvidenceState, pages: Sequence[int]) -> list[int]:
    """Activate a question's entry pages for free (at reset, and for each later question of a conversation).

    Under a token budget a page that would push the render past it is left
    out (the next ones are still tried, in order); returns the pages left out.
    """
    meter, skipped = state.tokens, []
    for p in pages:
        if meter is not None and meter.after_activate(p, p, True) > meter.limit:
            skipped.append(p)
            continue
        state.activate(p)
        state.counters.free_acts += 1
    return skipped


def build_initial_state(gi: GraphIndex, budget: Budget, rel: EpisodeRelevance, window: tuple[int, int] | None,
                        k: int, meter: TokenMeter | None = None) -> EvidenceState:
    """A new episode's state: pages outside ``window`` blocked, the ``k`` best pages inside it activated
    (``meter``: the reader-token count of an empty render, under a token budget)."""
    state = EvidenceState.new(gi, budget, rel.rank_of)
    state.tokens = meter
    entry = rel.page_order
    if window is not None:  # pages outside the episode's window are out of play from the start
        lo, hi = max(0, int(window[0])), min(gi.n_pages - 1, int(window[1]))
        inside = np.zeros(gi.n_pages, dtype=bool)
        inside[lo: hi + 1] = True
        if inside.any():
            state.block_pages(np.flatnonzero(~inside))
            entry = entry[inside[entry]]
    skipped = activate_entry_pages(state, entry[:k].tolist())
    if meter is not None:
        meter.skipped = tuple(skipped)
    return state


def initial_state(gi: GraphIndex, budget: Budget, rel: EpisodeRelevance, window: Sequence[int] | None,
                  k: int, meter: TokenMeter | None = None) -> EvidenceState:
    """A fresh copy of :func:`build_initial_state`'s result, built at most once per key while it stays cached."""
    win = None if window is None else (int(window[0]), int(window[1]))
    key = (gi, budget, win, int(k)) if meter is None else (gi, budget, win, int(k), meter.key())
    template = _TEMPLATES.get(rel, key, lambda: build_initial_state(gi, budget, rel, win, k, meter))
    return template.copy()


__all__ = ["activate_entry_pages", "build_initial_state", "initial_state"]
