"""The heuristic's question-aware rules on hand-built observations: each signal changes the choice only
when its option is on (``OFF`` is the heuristic before these rules)."""
from __future__ import annotations

import numpy as np
import pytest

import mage_gym
from mage_gym.env import NODE_FEATURES, ActionLayout, Op, encode_action
from policies import get_policy
from mage_gym.bench.protocol import EnvInfo

COL = {n: i for i, n in enumerate(NODE_FEATURES)}
K = 4
#: every question-aware rule off: the heuristic as it was before them
OFF = {"page_min_rel": 0.95, "page_best_min_rel": 1.01, "follow_page_labels": False, "cue_bonus": 0.0,
       "linker_weight": 0.0, "distance_penalty": 0.0}


def _obs(rows: list[dict[str, float]]) -> dict[str, np.ndarray]:
    """Slot 0: an active entry page; slots 1..: unvisited candidates described by ``rows``."""
    nodes = np.zeros((K, len(NODE_FEATURES)), np.float32)
    nodes[0, [COL["type_page"], COL["state_activated"], COL["page_activated"]]] = 1
    nodes[0, COL["rel_fused"]] = 1.0
    for s, row in enumerate(rows, start=1):
        nodes[s, COL["state_unvisited"]] = 1
        nodes[s, COL["page_position"]] = s / K
        for name, value in row.items():
            nodes[s, COL[name]] = value
    return {"nodes": nodes, "slot_mask": np.ones(K, np.float32), "budget": np.ones(4, np.float32)}


def _mask(obs: dict[str, np.ndarray]) -> np.ndarray:
    layout = ActionLayout(K)
    mask = layout.empty_mask()
    mask[layout.STOP] = True
    is_page = obs["nodes"][:, COL["type_page"]] > 0.5
    unvisited = obs["nodes"][:, COL["state_unvisited"]] > 0.5
    layout.block(mask, Op.ACTIVATE_PAGE)[:] = unvisited
    layout.block(mask, Op.ACTIVATE_NODE)[:] = unvisited & ~is_page
    return mask


def _act(obs: dict[str, np.ndarray], **options: object) -> int:
    pol = get_policy("heuristic", **{**OFF, **options})
    pol.reset(EnvInfo(K=K, n_actions=ActionLayout(K).n, budget=mage_gym.env.Budget(), render_mode="visual"))
    return pol.act(obs, None, _mask(obs))


def test_follow_page_labels_activates_the_named_page_first() -> None:
    obs = _obs([{"type_page": 1, "rel_fused": 0.97},
                {"type_page": 1, "rel_fused": 0.30, "cue_page_label": 1}])
    assert _act(obs) == encode_action(Op.ACTIVATE_PAGE, 1, K)
    assert _act(obs, follow_page_labels=True) == encode_action(Op.ACTIVATE_PAGE, 2, K)


def test_cue_bonus_makes_a_matching_element_eligible() -> None:
    obs = _obs([{"type_chart": 1, "rel_fused": 0.97, "cue_type_match": 1},
                {"type_paragraph": 1, "rel_fused": 0.5}])
    assert _act(obs, expand_min_rel=0.99) == 0  # nothing reaches the threshold: stop
    assert _act(obs, expand_min_rel=0.99, cue_bonus=0.03) == encode_action(Op.ACTIVATE_NODE, 1, K)


def test_page_best_element_rule() -> None:
    obs = _obs([{"type_page": 1, "rel_fused": 0.4, "page_best_element_rel": 0.999}])
    assert _act(obs, page_min_rel=0.95) == 0
    assert _act(obs, page_min_rel=0.95, page_best_min_rel=0.995) == encode_action(Op.ACTIVATE_PAGE, 1, K)


def test_linker_and_distance_order_equally_relevant_pages() -> None:
    obs = _obs([{"type_page": 1, "rel_fused": 0.96, "linker_rel": 0.2, "active_page_distance": 0.9},
                {"type_page": 1, "rel_fused": 0.96, "linker_rel": 0.9, "active_page_distance": 0.1}])
    assert _act(obs) == encode_action(Op.ACTIVATE_PAGE, 1, K)  # tie: lowest slot
    assert _act(obs, linker_weight=0.1) == encode_action(Op.ACTIVATE_PAGE, 2, K)
    assert _act(obs, distance_penalty=0.1) == encode_action(Op.ACTIVATE_PAGE, 2, K)


def test_configured_defaults_follow_labels_and_strong_elements() -> None:
    """conf/policy/heuristic.yaml (and the class defaults) turn the label and best-element rules on."""
    obs = _obs([{"type_page": 1, "rel_fused": 0.97},
                {"type_page": 1, "rel_fused": 0.30, "cue_page_label": 1}])
    pol = get_policy("heuristic")
    pol.reset(EnvInfo(K=K, n_actions=ActionLayout(K).n, budget=mage_gym.env.Budget(), render_mode="visual"))
    assert pol.act(obs, None, _mask(obs)) == encode_action(Op.ACTIVATE_PAGE, 2, K)


def test_option_checks() -> None:
    with pytest.raises(ValueError, match="cue_bonus"):
        get_policy("heuristic", cue_bonus=-0.1)
    with pytest.raises(ValueError, match="page_best_min_rel"):
        get_policy("heuristic", page_best_min_rel=2.0)
