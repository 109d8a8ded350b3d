"""The flat action layout and the slot-rule table, written out by hand.

The env masks actions with a table computed once at import (``_RULES``):
for each budget case and each node code (its state, its page's state,
whether it is an element), which slot operations it accepts. Here the table
is recomputed and compared entry by entry with the rules as
:func:`~mage_gym.env.actions.check_operation` states them, written as plain
loops; tests/test_env_properties.py checks the mask against the checker on
random states.
"""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.env import actions as A
from mage_gym.env.actions import SLOT_OPS, ActionLayout, Op, decode_action, encode_action, n_actions
from mage_gym.env.state import ACTIVATED, OPENED, PRUNED, UNVISITED


def _expected(state: int, page_state: int, is_element: bool, can_activate: bool, can_search: bool,
              can_open: bool) -> dict[Op, bool]:
    return {
        Op.ACTIVATE_PAGE: can_activate and page_state == UNVISITED,
        Op.ACTIVATE_NODE: can_activate and is_element and state == UNVISITED and page_state != PRUNED,
        Op.OPEN_NODE: can_open and is_element and state == ACTIVATED,
        Op.SEARCH: can_activate and can_search,
        Op.PRUNE: state in (ACTIVATED, OPENED),
    }


def test_the_rule_table_is_the_checkers_rules_for_every_case_and_node_code() -> None:
    table = A._rule_tables()
    assert table.shape == (8, 32, len(SLOT_OPS)) and table.dtype == bool
    np.testing.assert_array_equal(table, A._RULES)
    np.testing.assert_array_equal(A._RULES_BY_OP, table.transpose(0, 2, 1))
    for case in range(8):
        can_activate, can_search, can_open = bool(case & 1), bool(case & 2), bool(case & 4)
        for code in range(32):
            state, page_state, is_element = code // 8, (code // 2) % 4, bool(code % 2)
            want = _expected(state, page_state, is_element, can_activate, can_search, can_open)
            got = {op: bool(table[case, code, i]) for i, op in enumerate(SLOT_OPS)}
            assert got == want, (case, code)


def test_the_flat_layout() -> None:
    lay = ActionLayout(3)
    assert (lay.n_slot_ops, lay.n, n_actions(3)) == (5, 16, 16) and lay.STOP == 0
    assert [lay.row(op) for op in SLOT_OPS] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="STOP is not slot-addressed"):
        lay.row(Op.STOP)
    assert lay.encode(Op.STOP, 99) == 0 and lay.encode(Op.ACTIVATE_PAGE, 0) == 1
    assert lay.encode(Op.PRUNE, 2) == encode_action(Op.PRUNE, 2, 3) == 1 + 4 * 3 + 2
    for bad in (-1, 3):
        with pytest.raises(ValueError, match=f"slot {bad} out of range 0..2"):
            lay.encode(Op.OPEN_NODE, bad)
    assert [lay.decode(a) for a in (0, 1, 3, 4, 15)] == [(Op.STOP, -1), (Op.ACTIVATE_PAGE, 0), (Op.ACTIVATE_PAGE, 2),
                                                         (Op.ACTIVATE_NODE, 0), (Op.PRUNE, 2)]
    assert decode_action(7, 3) == (Op.OPEN_NODE, 0)
    for bad in (-1, 16):
        with pytest.raises(ValueError, match=f"action {bad} out of range 0..15"):
            lay.decode(bad)
    ids = lay.slot_action_ids()
    assert ids.dtype == np.intp and ids.tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15]]
    flat = np.arange(16)
    assert lay.blocks(flat).tolist() == ids.tolist() and lay.block(flat, Op.SEARCH).tolist() == [10, 11, 12]
    two = np.stack([flat, flat + 100])
    assert lay.blocks(two).shape == (2, 5, 3) and lay.blocks(two)[1, 4, 2] == 115
    empty = lay.empty_mask()
    assert empty.dtype == bool and empty.shape == (16,) and not empty.any()
    with pytest.raises(ValueError, match="K must be >= 1, got 0"):
        ActionLayout(0)
