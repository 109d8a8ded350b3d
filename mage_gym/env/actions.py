"""The six controller operations, the flat action encoding, the one transition, the mask.

Why one module: the mask must accept exactly the actions the transition
accepts, so both are written side by side from the same rules (and a property
test tries every action against the mask). Both policy interfaces (flat
``step`` for learned policies, ``submit_round`` for LLM policies) end up in
:func:`apply_operation`.

Rules (``m``/``M``/``B`` from :class:`~mage_gym.env.budget.Budget`):

- ActivatePage(node): activates the page of ``node`` (the node itself when it
  is a page). The page must be UNVISITED (not active, not pruned). Costs 1
  activation of the round and of ``M``.
- ActivateNode(node): ``node`` must be an UNVISITED element whose page is not
  pruned; its page is activated too, free. Costs 1 of the round and of ``M``.
- OpenNode(node): ``node`` must be an ACTIVATED element; costs 1 of ``B``.
- SearchEvidence(query): activates the best UNVISITED pages for the query, as
  many as the activations left in the round (and in ``M``), each costing 1;
  valid when at least one activation is left and an UNVISITED page exists.
  Ends the round.
- PruneNode(node): ``node`` must be ACTIVATED or OPENED. Final: a pruned node
  never comes back, and pruning a page prunes all its elements.
- Stop: always valid; ends the episode.

Under a reader-token budget (``Budget.tokens``; :mod:`mage_gym.env.token_budget`):

- ActivatePage, ActivateNode (with the page it activates) and OpenNode are
  refused when the render after them would count more reader tokens than the
  budget; the error names the count it would reach and the budget;
- SearchEvidence is valid as before; of the pages it would activate (the best
  UNVISITED ones, as many as the activations left), it activates, best first,
  those that still fit, each costing 1, and reports the others in
  ``OpResult.skipped`` (it may activate none: the search is still counted and
  ends the round);
- PruneNode only lowers the count, so it is never refused for tokens.

A round also ends after ``m`` paid activations (flat interface) or when an
LLM policy's round is submitted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Callable, ClassVar

import numpy as np

from mage_gym.cache import Cache
from mage_gym.env.state import ACTIVATED, OPENED, PRUNED, UNVISITED, EvidenceState
from mage_gym.env.token_budget import TokenMeter


class Op(IntEnum):
    STOP = 0
    ACTIVATE_PAGE = 1
    ACTIVATE_NODE = 2
    OPEN_NODE = 3
    SEARCH = 4
    PRUNE = 5


#: Names used in traces, text views and info (the paper's operation names).
OP_NAMES: dict[Op, str] = {
    Op.STOP: "Stop", Op.ACTIVATE_PAGE: "ActivatePage", Op.ACTIVATE_NODE: "ActivateNode",
    Op.OPEN_NODE: "OpenNode", Op.SEARCH: "SearchEvidence", Op.PRUNE: "PruneNode",
}
OP_BY_NAME: dict[str, Op] = {v: k for k, v in OP_NAMES.items()}
#: Slot-addressed operations, in the order they occupy the flat action space.
SLOT_OPS: tuple[Op, ...] = (Op.ACTIVATE_PAGE, Op.ACTIVATE_NODE, Op.OPEN_NODE, Op.SEARCH, Op.PRUNE)


@dataclass(frozen=True)
class ActionLayout:
    """The flat action space over ``K`` slots: Stop first, then one block of ``K`` slots per :data:`SLOT_OPS` op.

    Why one object: the env's ``action_space`` and mask, the policies' slot
    views and the PPO head must agree on where an (operation, slot) pair sits;
    deriving all of them from here (and from ``SLOT_OPS``) keeps them agreeing
    when an operation is added.
    """

    K: int

    STOP: ClassVar[int] = 0  # flat id of Stop
    ops: ClassVar[tuple[Op, ...]] = SLOT_OPS

    def __post_init__(self) -> None:
        if int(self.K) < 1:
            raise ValueError(f"K must be >= 1, got {self.K}")

    @property
    def n_slot_ops(self) -> int:
        """Slot-addressed operations (rows of the mask blocks, outputs per slot of a policy head)."""
        return len(self.ops)

    @property
    def n(self) -> int:
        """Size of the flat action space (``Discrete(n)``; a policy head has this many logits)."""
        return 1 + self.n_slot_ops * self.K

    def row(self, op: Op | int) -> int:
        """Block index of a slot operation (its row in :meth:`blocks`)."""
        try:
            return _ROWS[op]
        except KeyError:
            raise ValueError(f"{Op(op).name} is not slot-addressed") from None

    def encode(self, op: Op | int, slot: int) -> int:
        """Flat action id of ``op`` on ``slot`` (Stop ignores the slot)."""
        op = Op(op)
        if op == Op.STOP:
            return self.STOP
        if not 0 <= slot < self.K:
            raise ValueError(f"slot {slot} out of range 0..{self.K - 1}")
        return 1 + self.row(op) * self.K + int(slot)

    def decode(self, action: int) -> tuple[Op, int]:
        """Inverse of :meth:`encode`; the slot is -1 for Stop."""
        a = int(action)
        if not 0 <= a < self.n:
            raise ValueError(f"action {a} out of range 0..{self.n - 1}")
        if a == self.STOP:
            return Op.STOP, -1
        row, slot = divmod(a - 1, self.K)
        return self.ops[row], slot

    def blocks(self, flat: np.ndarray) -> np.ndarray:
        """View of a flat mask/logit vector (last axis ``n``) without Stop, shaped ``[..., n_slot_ops, K]``."""
        flat = np.asarray(flat)
        return flat[..., 1:].reshape(flat.shape[:-1] + (self.n_slot_ops, self.K))

    def block(self, flat: np.ndarray, op: Op | int) -> np.ndarray:
        """The ``K`` entries of ``op`` in a flat mask/logit vector (a view)."""
        start = 1 + self.row(op) * self.K
        return np.asarray(flat)[..., start: start + self.K]

    def slot_action_ids(self) -> np.ndarray:
        """intp [n_slot_ops, K]: the flat id of every (slot operation, slot) pair."""
        return 1 + np.arange(self.n_slot_ops * self.K, dtype=np.intp).reshape(self.n_slot_ops, self.K)

    def empty_mask(self) -> np.ndarray:
        """bool [n], all False."""
        return np.zeros(self.n, dtype=bool)


_ROWS: dict[int, int] = {int(op): i for i, op in enumerate(SLOT_OPS)}


def n_actions(K: int) -> int:
    """Size of the flat action space: Stop plus the slot operations over ``K`` slots."""
    return ActionLayout(K).n


def encode_action(op: Op | int, slot: int, K: int) -> int:
    """Flat action id: 0 is Stop, then op-major blocks of ``K`` slots (see :class:`ActionLayout`)."""
    return ActionLayout(K).encode(op, slot)


def decode_action(action: int, K: int) -> tuple[Op, int]:
    """Inverse of :func:`encode_action`; slot is -1 for Stop."""
    return ActionLayout(K).decode(action)


@dataclass
class OpResult:
    """What one operation did; traces and info are built from it."""

    op: Op
    node: int  # target node index (-1 for Stop / free-text search)
    ok: bool
    error: str | None = None
    changed: list[int] = field(default_factory=list)  # nodes whose state changed
    ends_round: bool = False
    skipped: list[int] = field(default_factory=list)  # pages a search left out for the token budget


def check_operation(state: EvidenceState, op: Op, node: int, free_text: bool = False) -> str | None:
    """Why ``op`` on ``node`` would be refused, or None when it is valid.

    ``free_text`` marks an LLM SearchEvidence whose query does not come from a node.
    """
    if state.stopped:
        return "the episode is over"
    if op == Op.STOP:
        return None
    gi = state.gi
    if op == Op.SEARCH and free_text:
        node = 0  # no target node needed
    elif not 0 <= node < gi.n_nodes:
        return "no node in this slot" if node == -1 else f"node index {node} out of range"
    st = state.node_state
    if op == Op.ACTIVATE_PAGE:
        p = gi.node_page[node]
        if st[p] == PRUNED:
            return f"page {p} is pruned (pruning is final)"
        if st[p] != UNVISITED:
            return f"page {p} is already activated"
        err = _activation_budget_error(state)
        if err is None and state.tokens is not None:
            return _token_error(state.tokens, state.tokens.after_activate(p, p, True))
        return err
    if op == Op.ACTIVATE_NODE:
        if gi.is_page[node]:
            return "ActivateNode needs an element; use ActivatePage for a page"
        if st[node] == PRUNED:
            return "the node is pruned (pruning is final)"
        if st[node] != UNVISITED:
            return "the node is already activated"
        p = gi.node_page[node]
        if st[p] == PRUNED:
            return "the node's page is pruned"
        err = _activation_budget_error(state)
        if err is None and state.tokens is not None:
            return _token_error(state.tokens, state.tokens.after_activate(node, p, st[p] == UNVISITED))
        return err
    if op == Op.OPEN_NODE:
        if gi.is_page[node]:
            return "pages cannot be opened; open one of its elements"
        if st[node] != ACTIVATED:
            return "the node is already opened" if st[node] == OPENED else "only an activated element can be opened"
        if state.opens_left <= 0:
            return "open budget B is exhausted"
        if state.tokens is not None:
            return _token_error(state.tokens, state.tokens.after_open(node))
        return None
    if op == Op.SEARCH:
        err = _activation_budget_error(state)
        if err:
            return err
        if state.n_unvisited_pages <= 0:
            return "every page is already activated or pruned"
        return None
    if op == Op.PRUNE:
        if st[node] != ACTIVATED and st[node] != OPENED:
            return "only an activated or opened node can be pruned"
        return None
    return f"unknown operation {op!r}"


def _activation_budget_error(state: EvidenceState) -> str | None:
    if state.acts_left <= 0:
        return "activation budget M is exhausted"
    if state.round_left <= 0:
        return "no activations left in this round (m)"
    return None


def _token_error(meter: TokenMeter, after: int) -> str | None:
    return meter.refusal(after) if after > meter.limit else None


SearchFn = Callable[[], np.ndarray]  # returns float page scores [n_pages] for the operation's query


def apply_operation(state: EvidenceState, op: Op, node: int, search: SearchFn | None = None,
                    free_text: bool = False) -> OpResult:
    """Run one operation on ``state`` in place (Stop is handled by the environment).

    Refused operations change nothing but ``counters.invalid``.
    """
    if type(op) is not Op:  # (the env's decoded actions already are: skip the enum call)
        op = Op(op)
    err = check_operation(state, op, node, free_text)
    if err is None and op == Op.STOP:
        err = "Stop is handled by the environment"
    if err is not None:
        state.counters.invalid += 1
        return OpResult(op, node, False, err)
    c, gi = state.counters, state.gi
    res = OpResult(op, node, True)
    if op == Op.ACTIVATE_PAGE:
        p = int(gi.node_page[node])
        state.activate(p)
        c.acts_used += 1
        c.round_acts += 1
        res.changed = [p]
    elif op == Op.ACTIVATE_NODE:
        p = int(gi.node_page[node])
        if state.node_state[p] == UNVISITED:
            state.activate(p)
            c.free_acts += 1
            res.changed.append(p)
        state.activate(node)
        c.acts_used += 1
        c.round_acts += 1
        res.changed.append(node)
    elif op == Op.OPEN_NODE:
        state.open(node)
        c.opens_used += 1
        res.changed = [node]
    elif op == Op.SEARCH:
        if search is None:
            raise ValueError("SearchEvidence needs a search function")
        scores = np.asarray(search(), dtype=np.float32)
        best = _best_unvisited_pages(state, scores, min(state.round_left, state.acts_left))
        meter = state.tokens
        for p in best.tolist():
            if meter is not None and meter.after_activate(p, p, True) > meter.limit:
                res.skipped.append(p)
                continue
            res.changed.append(p)
            state.activate(p)
            c.acts_used += 1
            c.round_acts += 1
        c.searches += 1
        res.ends_round = True
    elif op == Op.PRUNE:
        res.changed = state.prune(node)
    if op in (Op.ACTIVATE_PAGE, Op.ACTIVATE_NODE) and c.round_acts >= state.budget.m:
        res.ends_round = True
    c.operations += 1
    return res


#: The stable order of all pages by score, per scores array (held weakly). Why this many: a random or learned
#: policy searches from hundreds to thousands of distinct slot nodes per question, and a miss re-sorts every
#: page. Bounded by stored page indices (16 MB), at least 256 orders: the bound follows the page count of the
#: document searched.
_SEARCH_ORDERS: Cache[np.ndarray] = Cache("env.search_orders", 256)
_MAX_SEARCH_ORDER_PAGES = 2_000_000


def _best_unvisited_pages(state: EvidenceState, scores: np.ndarray, budget: int) -> np.ndarray:
    """The ``budget`` best-scoring UNVISITED pages, best first; ties in ascending page order.

    Why a cache: SearchEvidence scores are themselves cached per query (the
    same array comes back for a repeated search), so the stable order of all
    pages by score is kept per scores array and filtered by the current
    state; filtering a stable order gives exactly the stable sort of the
    unvisited pages alone.
    """
    gi, st = state.gi, state.node_state
    if len(scores) != gi.n_pages:  # not one score per page: sort the unvisited pages directly
        pages = (st[: gi.n_pages] == UNVISITED).nonzero()[0]
        return pages[np.argsort(-scores[pages], kind="stable")[: min(budget, len(pages))]]
    _SEARCH_ORDERS.max_entries = max(256, _MAX_SEARCH_ORDER_PAGES // max(1, len(scores)))
    order = _SEARCH_ORDERS.get(scores, None, lambda: np.argsort(-scores, kind="stable"))
    head = order[:_SEARCH_HEAD]  # usually enough: the best pages not yet visited, without filtering all pages
    ranked = head[st[head] == UNVISITED]
    if len(ranked) < budget and len(order) > _SEARCH_HEAD:
        ranked = order[st[order] == UNVISITED]
    return ranked[: min(budget, len(ranked))]


#: Pages of a search's order looked at first; the rest only when fewer than the budget are unvisited among them.
_SEARCH_HEAD = 32


def _slot_rules(st: np.ndarray, pst: np.ndarray, is_el: np.ndarray, can_activate: bool, can_search: bool,
                can_open: bool) -> np.ndarray:
    """bool [len(st), n_slot_ops] in :data:`SLOT_OPS` order: which slot operations a node accepts.

    ``st``/``pst``: the node's and its page's state; ``is_el``: the node is an
    element. The vectorised twin of :func:`check_operation`'s per-node rules.
    """
    out = np.zeros((len(st), len(SLOT_OPS)), dtype=bool)
    if can_activate:
        out[:, _ROWS[Op.ACTIVATE_PAGE]] = pst == UNVISITED
        out[:, _ROWS[Op.ACTIVATE_NODE]] = is_el & (st == UNVISITED) & (pst != PRUNED)
        if can_search:
            out[:, _ROWS[Op.SEARCH]] = True
    if can_open:
        out[:, _ROWS[Op.OPEN_NODE]] = is_el & (st == ACTIVATED)
    out[:, _ROWS[Op.PRUNE]] = (st == ACTIVATED) | (st == OPENED)
    return out


def _rule_tables() -> np.ndarray:
    """bool [8, 32, n_slot_ops]: :func:`_slot_rules` for every budget case (can_activate + 2 * can_search +
    4 * can_open) and every node code (8 * state + 2 * page state + is_element)."""
    code = np.arange(32)
    st, pst, is_el = (code // 8).astype(np.int8), ((code // 2) % 4).astype(np.int8), (code % 2).astype(bool)
    return np.stack([_slot_rules(st, pst, is_el, bool(c & 1), bool(c & 2), bool(c & 4)) for c in range(8)])


_RULES = _rule_tables()
#: ``_RULES`` with the operation axis before the node-code axis: ``_RULES_BY_OP[case].take(codes, axis=1)`` is the
#: ``[n_slot_ops, n]`` block the flat mask holds (rows follow SLOT_OPS), gathered in one call.
_RULES_BY_OP = np.ascontiguousarray(_RULES.transpose(0, 2, 1))


def action_mask(state: EvidenceState, slots: np.ndarray, n: int | None = None, tokens: bool = True) -> np.ndarray:
    """bool [ActionLayout(K).n]: exactly the flat actions :func:`apply_operation` accepts.

    Vectorised twin of :func:`check_operation` over the ``K`` slot nodes
    (``n``: how many leading slots are filled; computed when None): each
    filled slot's node is coded by its state, its page's state and whether it
    is an element (``state.code``, kept current by the state), and its row of
    the mask is read from :func:`_slot_rules` tabulated for the budget's case.
    ``tokens=False`` leaves the reader-token budget out: what would be valid
    without it (:meth:`MageRAGEnv.token_refusals` compares the two).
    """
    K = len(slots)
    mask = np.zeros(1 + len(SLOT_OPS) * K, dtype=bool)
    mask[ActionLayout.STOP] = True  # after the end only Stop stays marked, so a mask is never empty (vector envs)
    if state.stopped:
        return mask
    if n is None:
        n = int(np.count_nonzero(slots >= 0))
    if n == 0:
        return mask
    can_activate = state.round_left > 0 and state.acts_left > 0
    case = can_activate + 2 * (can_activate and state.n_unvisited_pages > 0) + 4 * (state.opens_left > 0)
    blocks = mask[1:].reshape(len(SLOT_OPS), K)  # a view: one row per slot operation
    blocks[:, :n] = _RULES_BY_OP[case].take(state.code[slots[:n]], axis=1)
    if tokens and state.tokens is not None:
        _mask_tokens(state, slots[:n], blocks)
    return mask


def _mask_tokens(state: EvidenceState, nodes: np.ndarray, blocks: np.ndarray) -> None:
    """Clear the activations and opens the token budget refuses: the vectorised twin of :func:`_token_error`'s
    uses in :func:`check_operation`, for the slots the other rules left open (one gather for the three rows)."""
    n = len(nodes)
    rows = [blocks[r, :n] for r in _TOKEN_ROWS]  # views: ActivatePage, ActivateNode, OpenNode
    on = np.flatnonzero(rows[0] | rows[1] | rows[2])
    if not len(on):
        return
    v = nodes[on]
    pages = state.gi.node_page[v]
    fits = state.tokens.fit_slots(v, pages, state.node_state[pages] == UNVISITED)
    for row, fit in zip(rows, fits):
        row[on] &= fit


#: the mask rows the token budget can clear, in :meth:`TokenMeter.fit_slots` order
_TOKEN_ROWS = (_ROWS[Op.ACTIVATE_PAGE], _ROWS[Op.ACTIVATE_NODE], _ROWS[Op.OPEN_NODE])
