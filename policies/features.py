"""Named views of the numeric observation for rule policies.

Why: rule policies (``topk_text``, ``heuristic``) must see exactly what the
learned policy sees - the K-slot table, the mask and the budget - so their
comparison with PPO is fair. This module turns the observation's columns
(named by :data:`mage_gym.env.NODE_FEATURES`, a public contract of the
environment) into arrays with names, and flat action ids into (op, slot).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from mage_gym.env import NODE_FEATURES, ActionLayout, Op

_COL = {name: i for i, name in enumerate(NODE_FEATURES)}
_LINK_COLS = [i for name, i in _COL.items() if name.startswith("linked_by_")]
_TYPE_COLS = {name[len("type_"):]: i for name, i in _COL.items() if name.startswith("type_")}


@dataclass(frozen=True)
class SlotView:
    """Per-slot arrays (length K) read from one observation."""

    valid: np.ndarray  # bool: the slot holds a node
    is_page: np.ndarray  # bool
    types: np.ndarray  # str: node type name ("page", "paragraph", "table", ...)
    rel: np.ndarray  # float: fused question relevance percentile (within pages / within elements)
    unvisited: np.ndarray  # bool
    activated: np.ndarray  # bool
    opened: np.ndarray  # bool
    links: np.ndarray  # int: number of edge kinds relating the node to the working set
    page_pos: np.ndarray  # float: page position in the document (equal for a page and its elements)
    page_activated: np.ndarray  # bool: the node's page is activated
    page_best_rel: np.ndarray  # float: best element percentile on the node's page
    cue_type: np.ndarray  # bool: the node's type (a page: one of its elements) matches the question's cues
    cue_page: np.ndarray  # bool: the node's page prints a page label the question names
    linker_rel: np.ndarray  # float: relevance (1 - rank / n) of the best working-set node linking to it
    page_distance: np.ndarray  # float: log-scaled distance of its page to the nearest active page (0: on one)
    budget: np.ndarray  # float [4]: round activations, activations, opens, rounds left (normalised)

    @property
    def K(self) -> int:
        return len(self.valid)

    @classmethod
    def from_obs(cls, obs: Mapping[str, np.ndarray]) -> "SlotView":
        nodes = np.asarray(obs["nodes"], dtype=np.float32)
        valid = np.asarray(obs["slot_mask"]) > 0.5
        type_idx = nodes[:, list(_TYPE_COLS.values())].argmax(axis=1)
        names = np.asarray(list(_TYPE_COLS), dtype=object)[type_idx]
        return cls(
            valid=valid,
            is_page=valid & (nodes[:, _COL["type_page"]] > 0.5),
            types=np.where(valid, names, ""),
            rel=np.where(valid, nodes[:, _COL["rel_fused"]], -1.0),
            unvisited=valid & (nodes[:, _COL["state_unvisited"]] > 0.5),
            activated=valid & (nodes[:, _COL["state_activated"]] > 0.5),
            opened=valid & (nodes[:, _COL["state_opened"]] > 0.5),
            links=(nodes[:, _LINK_COLS] > 0.5).sum(axis=1),
            page_pos=nodes[:, _COL["page_position"]],
            page_activated=valid & (nodes[:, _COL["page_activated"]] > 0.5),
            page_best_rel=np.where(valid, nodes[:, _COL["page_best_element_rel"]], 0.0),
            cue_type=valid & (nodes[:, _COL["cue_type_match"]] > 0.5),
            cue_page=valid & (nodes[:, _COL["cue_page_label"]] > 0.5),
            linker_rel=np.where(valid, nodes[:, _COL["linker_rel"]], 0.0),
            page_distance=np.where(valid, nodes[:, _COL["active_page_distance"]], 1.0),
            budget=np.asarray(obs["budget"], dtype=np.float32),
        )

    def same_page(self, slot: int) -> np.ndarray:
        """bool [K]: slots on the same page as ``slot`` (by page position)."""
        return self.valid & np.isclose(self.page_pos, self.page_pos[slot], atol=1e-6)


def action_of(op: Op, slot: int, K: int) -> int:
    return ActionLayout(K).encode(op, slot)


def op_mask(mask: np.ndarray, op: Op, K: int) -> np.ndarray:
    """bool [K]: slots where ``op`` is a valid action."""
    return np.asarray(ActionLayout(K).block(mask, op), dtype=bool)


def best_slot(scores: np.ndarray, allowed: np.ndarray) -> int | None:
    """The allowed slot with the highest score (lowest slot on ties), or None."""
    idx = np.flatnonzero(allowed)
    if not len(idx):
        return None
    return int(idx[np.argmax(scores[idx])])


def prune_to_make_room(v: SlotView, mask: np.ndarray, slot_pages: np.ndarray, keep: set[int], K: int) -> int | None:
    """PruneNode on the least relevant prunable page slot whose page is not in ``keep``, or None.

    Why: when the frontier fills all ``K`` slots, nodes ranked below them stay
    hidden; dropping a page that does not matter lets them up (graph_follower
    keeps the pages it follows, the oracle keeps gold pages).
    """
    can_prune = op_mask(mask, Op.PRUNE, K) & v.is_page & ~np.isin(slot_pages, list(keep))
    s = best_slot(-v.rel, can_prune)
    return None if s is None else action_of(Op.PRUNE, s, K)


def token_refused_slots(env: object, K: int) -> np.ndarray:
    """bool [K]: slots whose ActivatePage or ActivateNode only the reader-token budget refuses now.

    Why: under ``env.budget.tokens`` the entry pages can fill the budget, so a
    page a controller plans to read is refused until it prunes one it needs
    less (the oracle's and graph_follower's token room); all False without a
    budget (:meth:`mage_gym.env.MageRAGEnv.token_refusals`).
    """
    refused = np.asarray(env.get_wrapper_attr("token_refusals")(), dtype=bool)  # type: ignore[attr-defined]
    return op_mask(refused, Op.ACTIVATE_PAGE, K) | op_mask(refused, Op.ACTIVATE_NODE, K)
