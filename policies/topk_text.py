"""``topk_text``: open the best elements by text relevance within the entry pages and one search.

Why: this is the Text-RAG baseline (retrieve chunks by text similarity, show
their text to the reader) expressed with the environment's operations, so it
is judged on the same budget and metrics as everything else:

1. one SearchEvidence (re-retrieval) with the question plus the most relevant
   visible element's text, which activates the best pages not yet active;
2. then, repeatedly, ActivateNode on the most relevant unvisited element of an
   activated page and OpenNode on the most relevant activated element, until
   ``n_open`` elements are open or the budget runs out;
3. Stop. Rendered in ``text`` mode (no images).

Relevance is the observation's fused retrieval percentile (BM25 + dense by
default); no graph expansion is used - that is what separates it from
``heuristic``.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mage_gym.env import Op
from mage_gym.bench.protocol import EnvInfo
from policies.base import BasePolicy
from policies.features import SlotView, action_of, best_slot, op_mask


class TopKTextPolicy(BasePolicy):
    """``n_open``: elements to open (None = the open budget B); ``search``: do the one search."""

    name = "topk_text"

    def __init__(self, n_open: int | None = None, search: bool = True, render_mode: str | None = "text",
                 **kw: Any) -> None:
        super().__init__(render_mode=render_mode, **kw)
        if n_open is not None and n_open < 0:
            raise ValueError(f"n_open must be >= 0, got {n_open}")
        self.n_open = n_open
        self.search = bool(search)
        self._searched = False
        self._opened = 0

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)
        self._searched = not self.search
        self._opened = 0

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> int:
        v = SlotView.from_obs(obs)
        K = v.K
        target = self.n_open if self.n_open is not None else (self.env_info.budget.B if self.env_info else K)
        if not self._searched:
            self._searched = True
            allowed = op_mask(mask, Op.SEARCH, K) & ~v.is_page
            slot = best_slot(v.rel, allowed)
            if slot is not None:
                return action_of(Op.SEARCH, slot, K)
        if self._opened >= target:
            return 0
        slot = best_slot(v.rel, op_mask(mask, Op.OPEN_NODE, K))
        if slot is not None:
            self._opened += 1
            return action_of(Op.OPEN_NODE, slot, K)
        slot = best_slot(v.rel, op_mask(mask, Op.ACTIVATE_NODE, K) & v.page_activated)
        if slot is not None:
            return action_of(Op.ACTIVATE_NODE, slot, K)
        return 0
