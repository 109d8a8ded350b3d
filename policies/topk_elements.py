"""``topk_elements``: the k entry pages, but the reader gets their best elements instead of the whole pages.

Why: this is the baseline the multigranular claim implies (MAGE-RAG: reading
regions instead of pages gives the reader the same evidence with less
noise). It keeps everything of ``topk_page`` but the granularity: the same
entry pages (the env's retriever, activated free at reset), and then, in
relevance order, ActivateNode + OpenNode on the best unvisited elements of
those pages until ``n_open`` elements are open or the budget runs out; Stop.
It never searches and never leaves the entry pages, so the only thing it
changes against ``topk_page`` is *what* of those pages is read.

It plays in the ``elements`` render mode (:mod:`mage_gym.render`): an
activated page is sent as its summary only, opened elements as their full
text plus a crop for figures, charts and tables; no page is sent whole. The
benchmark compares it at equal tokens with ``topk_page`` reading whole page
images (:data:`mage_gym.bench.equal_cost.BASELINE_MODE`).

Relevance is the observation's fused retrieval percentile (elements are
ranked among elements), exactly what ``topk_text`` reads.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mage_gym.env import Op
from policies.base import BasePolicy, EnvInfo
from policies.features import SlotView, action_of, best_slot, op_mask


class TopKElementsPolicy(BasePolicy):
    """``n_open``: elements to open (None = the open budget B), all on the entry pages. The default, 4, was
    chosen on the TRAIN and VAL splits of MMLongBench and FinanceBench (conf/policy/topk_elements.yaml says how)."""

    name = "topk_elements"

    def __init__(self, n_open: int | None = 4, render_mode: str | None = "elements", **kw: Any) -> None:
        super().__init__(render_mode=render_mode, **kw)
        if n_open is not None and int(n_open) < 0:
            raise ValueError(f"n_open must be >= 0 or null, got {n_open}")
        self.n_open = None if n_open is None else int(n_open)
        self._opened = 0
        self._target = 0

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)
        self._opened = 0
        self._target = env_info.budget.B if self.n_open is None else min(self.n_open, env_info.budget.B)

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> int:
        if self._opened >= self._target:
            return 0
        v = SlotView.from_obs(obs)
        K = v.K
        slot = best_slot(v.rel, op_mask(mask, Op.OPEN_NODE, K))  # an element activated on the previous step
        if slot is not None:
            self._opened += 1
            self.count("opens")
            return action_of(Op.OPEN_NODE, slot, K)
        # the best unvisited element of an entry page (the only pages active: this policy activates no page)
        slot = best_slot(v.rel, op_mask(mask, Op.ACTIVATE_NODE, K) & v.page_activated & ~v.is_page)
        if slot is not None:
            self.count("activations")
            return action_of(Op.ACTIVATE_NODE, slot, K)
        self.count("stops_no_element_left")
        return 0
