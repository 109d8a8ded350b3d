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


# --- the checker's refusals, the transition's counters, the search order, the mask against the checker -------------
# (mutation survivors of env/actions: the errors are what an LLM controller reads back after a refused call)

from types import SimpleNamespace  # noqa: E402

from mage_gym.env.budget import Budget  # noqa: E402
from mage_gym.env.graph_index import graph_index  # noqa: E402
from mage_gym.env.state import EvidenceState  # noqa: E402
from mage_gym.testing import make_toy_graph  # noqa: E402

_GI = graph_index(make_toy_graph(n_pages=3, elements_per_page=2))  # pages 0..2, elements 3..8 (two per page)


def _fresh(**budget) -> EvidenceState:
    return EvidenceState.new(_GI, Budget(**{"k": 1, **budget}), np.arange(_GI.n_nodes))


def _el(page: int, j: int = 0) -> int:
    return int(_GI.page_lo[page]) + j


def test_each_refusal_says_why_in_the_words_the_controller_reads() -> None:
    s = _fresh(m=2, M=3, B=1)
    check = lambda op, node, **kw: A.check_operation(s, op, node, **kw)  # noqa: E731
    n = _GI.n_nodes
    assert check(Op.ACTIVATE_PAGE, -1) == "no node in this slot"
    assert check(Op.ACTIVATE_PAGE, n) == f"node index {n} out of range"
    assert check(Op.ACTIVATE_PAGE, -2) == "node index -2 out of range"
    assert check(Op.SEARCH, -1, free_text=True) is None  # a free-text search needs no node
    assert check(Op.ACTIVATE_NODE, 1) == "ActivateNode needs an element; use ActivatePage for a page"
    assert check(Op.OPEN_NODE, 1) == "pages cannot be opened; open one of its elements"
    assert check(Op.OPEN_NODE, _el(0)) == "only an activated element can be opened"
    assert check(Op.PRUNE, _el(0)) == "only an activated or opened node can be pruned"
    assert A.apply_operation(s, Op.ACTIVATE_NODE, _el(0)).ok
    assert check(Op.ACTIVATE_NODE, _el(0)) == "the node is already activated"
    assert check(Op.ACTIVATE_PAGE, _el(0, 1)) == "page 0 is already activated"
    assert A.apply_operation(s, Op.OPEN_NODE, _el(0)).ok
    assert check(Op.OPEN_NODE, _el(0)) == "the node is already opened"
    assert check(Op.OPEN_NODE, _el(0, 1)) is not None and s.opens_left == 0
    assert A.apply_operation(s, Op.ACTIVATE_NODE, _el(0, 1)).ok
    assert check(Op.OPEN_NODE, _el(0, 1)) == "open budget B is exhausted"
    assert s.round_left == 0 and s.acts_left == 1  # m = 2 paid activations: the round is spent, M is not
    assert check(Op.ACTIVATE_PAGE, 2) == "no activations left in this round (m)"
    assert check(Op.SEARCH, 2) == "no activations left in this round (m)"
    s.counters.round_acts = 0  # a new round
    assert A.apply_operation(s, Op.PRUNE, 0).changed[0] == 0
    assert check(Op.ACTIVATE_PAGE, _el(0)) == "page 0 is pruned (pruning is final)"
    assert check(Op.ACTIVATE_NODE, _el(0)) == "the node is pruned (pruning is final)"
    s.node_state[_el(1)] = UNVISITED  # an element left unvisited on a pruned page (a state the checker still guards)
    s.node_state[1] = PRUNED
    assert check(Op.ACTIVATE_NODE, _el(1)) == "the node's page is pruned"
    s.node_state[1] = UNVISITED
    assert A.apply_operation(s, Op.ACTIVATE_PAGE, 2).ok and s.acts_left == 0
    assert check(Op.ACTIVATE_PAGE, 1) == "activation budget M is exhausted"
    s.stopped = True
    assert check(Op.STOP, 0) == "the episode is over" and check(Op.PRUNE, 2) == "the episode is over"
    every = _fresh(m=4)
    for p in range(3):
        A.apply_operation(every, Op.ACTIVATE_PAGE, p)
    assert A.check_operation(every, Op.SEARCH, 0) == "every page is already activated or pruned"


def test_the_transition_counts_what_it_did_and_takes_plain_ints() -> None:
    s = _fresh(m=3)
    stop = A.apply_operation(s, Op.STOP, -1)
    assert stop.ok is False and stop.error == "Stop is handled by the environment" and s.counters.invalid == 1
    r = A.apply_operation(s, 2, _el(1))  # ActivateNode as a plain int: its page comes too, free
    assert r.op is Op.ACTIVATE_NODE and r.ok and r.changed == [1, _el(1)] and not r.ends_round
    assert (s.counters.acts_used, s.counters.round_acts, s.counters.free_acts, s.counters.operations) == (1, 1, 1, 1)
    r = A.apply_operation(s, Op.ACTIVATE_PAGE, 0)
    assert r.changed == [0] and (s.counters.round_acts, s.counters.operations) == (2, 2) and not r.ends_round
    r = A.apply_operation(s, Op.ACTIVATE_NODE, _el(0, 1))  # the third paid activation of the round (m = 3)
    assert r.changed == [_el(0, 1)] and r.ends_round and s.counters.round_acts == 3 and s.counters.operations == 3
    s.counters.round_acts = 0
    r = A.apply_operation(s, Op.SEARCH, -1, search=lambda: np.array([0.1, 0.2, 0.9]), free_text=True)
    assert r.changed == [2] and r.ends_round and s.counters.searches == 1 and s.counters.round_acts == 1
    r = A.apply_operation(s, Op.PRUNE, 2)
    assert r.ok and s.counters.operations == 5 and s.counters.invalid == 1
    t = _fresh(m=2)  # a search after a paid activation counts the page it activates in the round
    A.apply_operation(t, Op.ACTIVATE_PAGE, 0)
    r = A.apply_operation(t, Op.SEARCH, -1, search=lambda: np.array([0.0, 0.2, 0.9]), free_text=True)
    assert r.changed == [2] and t.counters.round_acts == 2 and t.counters.acts_used == 2
    t.counters.round_acts = 0
    r = A.apply_operation(t, Op.SEARCH, -1, search=lambda: np.array([0.0, 0.2, 0.9]), free_text=True)
    assert r.changed == [1] and t.counters.searches == 2
    with pytest.raises(ValueError, match="^SearchEvidence needs a search function$"):
        A.apply_operation(_fresh(), Op.SEARCH, 0)


def test_search_scores_are_compared_in_float32() -> None:
    s = _fresh(m=1)  # float64 scores that are equal in float32: a tie, broken by page order
    r = A.apply_operation(s, Op.SEARCH, -1, search=lambda: [0.1, 0.1 + 1e-12, 0.0], free_text=True)
    assert r.changed == [0]


def _pages_state(n_pages: int, visited: tuple[int, ...] = ()) -> SimpleNamespace:
    st = np.zeros(n_pages, dtype=np.int8)
    st[list(visited)] = ACTIVATED
    return SimpleNamespace(gi=SimpleNamespace(n_pages=n_pages), node_state=st)


def test_the_best_unvisited_pages_best_first_ties_by_page_beyond_the_first_32() -> None:
    best = A._best_unvisited_pages
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.9], dtype=np.float32)
    assert best(_pages_state(5), scores, 3).tolist() == [1, 4, 0]
    assert best(_pages_state(5, (1,)), scores, 9).tolist() == [4, 0, 2, 3]  # the budget caps nothing here
    ties = np.zeros(40, dtype=np.float32)  # 40 equal scores: the stable order is the page order
    assert best(_pages_state(40), ties, 40).tolist() == list(range(40))
    # the 32 best pages are all visited: the next best come from the rest of the order
    ramp = np.arange(40, 0, -1).astype(np.float32)
    assert best(_pages_state(40, tuple(range(32))), ramp, 3).tolist() == [32, 33, 34]
    assert best(_pages_state(40, tuple(range(30))), ramp, 4).tolist() == [30, 31, 32, 33]
    # scores not one per page (one per node): only the unvisited pages are ranked, by their own scores
    per_node = np.array([0.1, 0.2, 0.3, 9.0, 9.0], dtype=np.float32)
    assert best(_pages_state(3, (2,)), per_node, 2).tolist() == [1, 0]
    assert best(_pages_state(3), per_node, 5).tolist() == [2, 1, 0]
    tied = np.zeros(120, dtype=np.float32)  # per-node scores over 100 pages, many ties: still page order within a tie
    tied[:100:3] = 1.0
    want = list(range(0, 100, 3)) + [p for p in range(100) if p % 3]
    assert best(_pages_state(100), tied, 100).tolist() == want


def test_the_search_order_cache_holds_at_most_two_million_page_indices_and_256_orders() -> None:
    best = A._best_unvisited_pages
    for n_pages, entries in ((1, 2_000_000), (7, 2_000_000 // 7), (10_000, 256)):
        best(_pages_state(n_pages), np.zeros(n_pages, dtype=np.float32), 1)
        assert A._SEARCH_ORDERS.max_entries == entries and type(A._SEARCH_ORDERS.max_entries) is int


def _mask_matches_checker(s: EvidenceState, slots: np.ndarray) -> None:
    lay = ActionLayout(len(slots))
    mask = A.action_mask(s, slots)
    for a in range(lay.n):
        op, slot = lay.decode(a)
        node = -1 if op == Op.STOP else int(slots[slot])
        # Stop stays marked after the end, so a mask is never empty (vector envs)
        valid = True if op == Op.STOP else (node >= 0 and A.check_operation(s, op, node) is None)
        assert bool(mask[a]) == valid, (op, slot, node, A.check_operation(s, op, node))


def test_the_mask_is_the_checker_through_an_episode() -> None:
    """Node 0 filled, unfilled slots, one filled slot, a spent round, spent opens, a token budget, the end."""
    from mage_gym.env.token_budget import TokenMeter
    from mage_gym.render import RenderConfig

    s = _fresh(m=2, M=4, B=1)
    slots = np.array([0, _el(0), _el(1), 2, -1, -1])
    _mask_matches_checker(s, slots)
    _mask_matches_checker(s, np.array([_el(2), -1, -1]))  # one filled slot
    assert A.action_mask(s, np.array([_el(2), -1]))[ActionLayout(2).encode(Op.ACTIVATE_NODE, 0)]
    A.apply_operation(s, Op.ACTIVATE_NODE, _el(0))
    _mask_matches_checker(s, slots)
    A.apply_operation(s, Op.OPEN_NODE, _el(0))  # B spent
    A.apply_operation(s, Op.ACTIVATE_PAGE, 2)  # the round's m = 2 spent, M not
    assert s.round_left == 0 and s.acts_left > 0
    _mask_matches_checker(s, slots)
    s.counters.round_acts = 0
    _mask_matches_checker(s, slots)
    t = _fresh(m=4, B=4)
    t.tokens = TokenMeter.start(_GI, 10 ** 6, "text", RenderConfig(), "what grew?")
    t.tokens.limit = t.tokens.after_activate(_el(1), 1, True)  # page 1 with its element fits, nothing more
    _mask_matches_checker(t, slots)
    A.apply_operation(t, Op.ACTIVATE_NODE, _el(1))
    _mask_matches_checker(t, np.array([_el(1), _el(1, 1), 0, 2, -1]))
    t.stopped = True
    _mask_matches_checker(t, slots)


def test_a_page_that_exactly_fits_the_token_budget_is_searched_in() -> None:
    from mage_gym.env.token_budget import TokenMeter
    from mage_gym.render import RenderConfig

    s = _fresh(m=2)
    s.tokens = TokenMeter.start(_GI, 10 ** 6, "text", RenderConfig(), "what grew?")
    s.tokens.limit = s.tokens.after_activate(2, 2, True)  # page 2 exactly, not page 1 with it
    assert A.check_operation(s, Op.ACTIVATE_PAGE, 2) is None
    r = A.apply_operation(s, Op.SEARCH, -1, search=lambda: np.array([0.1, 0.5, 0.9], dtype=np.float32),
                          free_text=True)
    assert r.changed == [2] and r.skipped == [1] and s.tokens.used == s.tokens.limit
    assert A.check_operation(s, Op.ACTIVATE_PAGE, 1) == s.tokens.refusal(s.tokens.after_activate(1, 1, True))


def test_one_slot_is_a_layout() -> None:
    one = ActionLayout(1)
    assert one.n == 6 and one.decode(5) == (Op.PRUNE, 0)
