"""``heuristic``: the MAGE-RAG reference pipeline written as rules (graph-neighbour expansion).

Why: the reference implementation's best ablation grows the evidence set
along graph edges from the most relevant activated nodes, opens the best
candidates and drops weak pages. As a rule policy on the same observation as
the learned policy it is the bar PPO has to clear, and it needs no model.

Each step, in this order (first rule that applies wins):

1. **prune**: an activated page whose relevance is below ``prune_max_rel``,
   with no activated/opened element of its own at or above ``open_min_rel``,
   while more than ``min_pages`` pages are active, is pruned (weakest first);
2. **open**: the most relevant activated element at or above
   ``open_min_rel`` is opened (until ``max_opens``);
3. **expand**: the unvisited candidate with the best score is activated if
   eligible. Its *effective relevance* is its relevance plus ``cue_bonus``
   when its type matches the question's cues (a chart question and a chart,
   or a page holding one); the score adds ``link_bonus`` x (number of edge
   kinds linking it to the working set), ``linker_weight`` x the relevance
   of the best working-set node linking to it, minus ``distance_penalty`` x
   its page's (log-scaled) distance to the nearest active page. Eligible:
   an element whose effective relevance reaches ``expand_min_rel``; a page
   whose effective relevance reaches ``page_min_rel`` (a page costs far more
   reader tokens), or whose best element reaches ``page_best_min_rel`` (the
   page-level score missed a strong element), or, with
   ``follow_page_labels``, whose header/footer prints a page number the
   question names ("page 12"): such pages go first. With
   ``max_pages`` set, a candidate that would add a page beyond it first
   swaps out the weakest active page without a strong element (a page image
   costs ~1,000 reader tokens in ``visual`` mode, so the page count is kept);
4. otherwise **stop** (no gain expected) - the mask makes every other rule
   impossible once the budget is spent, which also ends in stop.

Relevance is the observation's fused percentile: within pages for pages and
within elements for elements. The question-aware columns are the
observation's (``mage_gym.env.question_cues``); nothing here reads gold.
Defaults equal ``conf/policy/heuristic.yaml``, chosen on training documents
only (see README): there, in ``visual`` mode, opening (page images already
carry the content) and pruning (it dropped gold entry pages) lowered the
reward, so both are off; they remain available. The page rules
(``page_min_rel``, ``page_best_min_rel``, ``follow_page_labels``) and the
zero weights were chosen by ``experiments/tune_heuristic.py`` on dev
train/val splits at equal tokens against topk_page.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mage_gym.env import Op
from policies.base import BasePolicy, EnvInfo
from policies.features import SlotView, action_of, best_slot, op_mask


class HeuristicPolicy(BasePolicy):
    name = "heuristic"

    def __init__(self, expand_min_rel: float = 0.995, page_min_rel: float = 0.98, open_min_rel: float = 1.01,
                 prune_max_rel: float = 0.0, min_pages: int = 2, max_opens: int | None = None,
                 link_bonus: float = 0.02, max_pages: int | None = None, render_mode: str | None = None,
                 page_best_min_rel: float = 0.998, cue_bonus: float = 0.0, linker_weight: float = 0.0,
                 distance_penalty: float = 0.0, follow_page_labels: bool = True, **kw: Any) -> None:
        super().__init__(render_mode=render_mode, **kw)
        for name, value in (("expand_min_rel", expand_min_rel), ("page_min_rel", page_min_rel),
                            ("open_min_rel", open_min_rel), ("prune_max_rel", prune_max_rel),
                            ("page_best_min_rel", page_best_min_rel)):
            if not 0.0 <= float(value) <= 1.01:
                raise ValueError(f"{name} must be a percentile in [0, 1], got {value}")
        if min_pages < 0:
            raise ValueError(f"min_pages must be >= 0, got {min_pages}")
        if max_pages is not None and max_pages < 1:
            raise ValueError(f"max_pages must be >= 1 or null, got {max_pages}")
        self.max_pages = max_pages
        self.expand_min_rel = float(expand_min_rel)
        self.page_min_rel = float(page_min_rel)
        self.open_min_rel = float(open_min_rel)
        self.prune_max_rel = float(prune_max_rel)
        self.min_pages = int(min_pages)
        self.max_opens = max_opens
        self.link_bonus = float(link_bonus)
        self.page_best_min_rel = float(page_best_min_rel)
        for name, value in (("cue_bonus", cue_bonus), ("linker_weight", linker_weight),
                            ("distance_penalty", distance_penalty)):
            if float(value) < 0.0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        self.cue_bonus = float(cue_bonus)
        self.linker_weight = float(linker_weight)
        self.distance_penalty = float(distance_penalty)
        self.follow_page_labels = bool(follow_page_labels)
        self._opens = 0

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)
        self._opens = 0

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> int:
        v = SlotView.from_obs(obs)
        K = v.K
        a = self._prune(v, mask)
        if a is not None:
            self.count("prunes")
            return a
        if self.max_opens is None or self._opens < self.max_opens:
            allowed = op_mask(mask, Op.OPEN_NODE, K) & (v.rel >= self.open_min_rel)
            slot = best_slot(v.rel, allowed)
            if slot is not None:
                self._opens += 1
                self.count("opens")
                return action_of(Op.OPEN_NODE, slot, K)
        eff = v.rel + self.cue_bonus * v.cue_type
        labelled = v.cue_page & v.is_page if self.follow_page_labels else np.zeros(K, dtype=bool)
        score = (eff + self.link_bonus * v.links + self.linker_weight * v.linker_rel
                 - self.distance_penalty * v.page_distance + 2.0 * labelled)
        el_ok = op_mask(mask, Op.ACTIVATE_NODE, K) & ~v.is_page & (eff >= self.expand_min_rel)
        page_ok = op_mask(mask, Op.ACTIVATE_PAGE, K) & v.is_page & (
            (eff >= self.page_min_rel) | (v.page_best_rel >= self.page_best_min_rel) | labelled)
        slot = best_slot(score, el_ok | page_ok)
        if slot is not None:
            adds_page = bool(v.is_page[slot] or not v.page_activated[slot])
            if adds_page and self.max_pages is not None and \
                    int(np.sum(v.is_page & v.activated)) >= self.max_pages:
                victim = self._weakest_page(v, mask, below=1.01)
                if victim is None:
                    self.count("stops_page_cap")
                    return 0
                self.count("swaps")
                return action_of(Op.PRUNE, victim, K)
            self.count("expansions")
            return action_of(Op.ACTIVATE_NODE if el_ok[slot] else Op.ACTIVATE_PAGE, slot, K)
        self.count("stops_no_gain")
        return 0

    def _prune(self, v: SlotView, mask: np.ndarray) -> int | None:
        slot = self._weakest_page(v, mask, below=self.prune_max_rel)
        return None if slot is None else action_of(Op.PRUNE, slot, v.K)

    def _weakest_page(self, v: SlotView, mask: np.ndarray, below: float) -> int | None:
        """Slot of the least relevant prunable active page under ``below`` holding no strong element."""
        active_pages = np.flatnonzero(v.is_page & v.activated)
        if len(active_pages) <= self.min_pages:
            return None
        can = op_mask(mask, Op.PRUNE, v.K)
        weak = [s for s in active_pages.tolist() if can[s] and v.rel[s] < below]
        strong = min(self.open_min_rel, self.expand_min_rel)
        keep_el = (v.activated | v.opened) & ~v.is_page & (v.rel >= strong)
        weak = [s for s in weak if not np.any(keep_el & v.same_page(s))]
        if not weak:
            return None
        return min(weak, key=lambda s: (v.rel[s], s))
