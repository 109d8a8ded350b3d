"""The evidence state: node-state table, working set, frontier and budget counters.

Why this shape: the state must be cheap to update and to copy (property tests
try every action on a copy; vectorised envs hold many), so it is a handful of
numpy arrays over all graph nodes plus small Python lists, and every update
touches only the changed node and its neighbours.

Invariants (checked by :meth:`EvidenceState.check_invariants`):
- a node is in ``working`` iff its state is ACTIVATED or OPENED, in activation order;
- an element that is not UNVISITED/PRUNED has an ACTIVATED page;
- a PRUNED page has only PRUNED elements (pruning a page hides its elements);
- ``rel_count[v, kind]`` is the number of working-set neighbours of ``v`` by ``kind``;
- the frontier is exactly the UNVISITED nodes related to the working set or
  lying on an ACTIVATED page.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from mage_gym.env.budget import Budget
from mage_gym.env.graph_index import N_KINDS, GraphIndex

UNVISITED, ACTIVATED, OPENED, PRUNED = 0, 1, 2, 3
STATE_NAMES: tuple[str, ...] = ("unvisited", "activated", "opened", "pruned")


@dataclass
class Counters:
    """Budget use and progress; everything a mask or a reward needs besides the table."""

    round: int = 0  # 0-based index of the current round
    round_acts: int = 0  # paid activations in the current round
    acts_used: int = 0  # paid activations (towards M)
    opens_used: int = 0  # OpenNode operations (towards B)
    free_acts: int = 0  # entry pages and pages ActivateNode activated for free
    steps: int = 0  # step calls, valid or not (towards the hard cap)
    operations: int = 0  # valid operations executed (stop excluded)
    searches: int = 0
    invalid: int = 0  # refused actions
    evaluator_calls: int = 0  # submit_round calls (LLM evaluator rounds)
    reader_calls: int = 0

    def copy(self) -> "Counters":
        return Counters(**{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass
class EvidenceState:
    """Mutable per-episode state over one graph. Create with :meth:`new`."""

    gi: GraphIndex
    budget: Budget
    rank_of: np.ndarray  # intp [n]: position of each node in the episode's relevance order
    node_state: np.ndarray  # int8 [n]
    rel_count: np.ndarray  # int16 [n * N_KINDS]: working-set neighbours per edge kind (flat)
    frontier_ranked: np.ndarray  # bool [n], indexed by rank: True where that node is on the frontier
    act_pos: np.ndarray  # int32 [n]: activation position, -1 if never activated
    working: list[int] = field(default_factory=list)  # ACTIVATED/OPENED nodes, activation order
    activation_order: list[int] = field(default_factory=list)  # every node ever activated
    n_unvisited_pages: int = 0
    counters: Counters = field(default_factory=Counters)
    stopped: bool = False
    stop_reason: str | None = None

    @classmethod
    def new(cls, gi: GraphIndex, budget: Budget, rank_of: np.ndarray) -> "EvidenceState":
        n = gi.n_nodes
        return cls(
            gi=gi, budget=budget, rank_of=rank_of,
            node_state=np.zeros(n, dtype=np.int8),
            rel_count=np.zeros(n * N_KINDS, dtype=np.int16),
            frontier_ranked=np.zeros(n, dtype=bool),
            act_pos=np.full(n, -1, dtype=np.int32),
            n_unvisited_pages=gi.n_pages,
        )

    def copy(self) -> "EvidenceState":
        """An independent copy (shares the read-only graph index and rank order)."""
        return EvidenceState(
            gi=self.gi, budget=self.budget, rank_of=self.rank_of,
            node_state=self.node_state.copy(), rel_count=self.rel_count.copy(),
            frontier_ranked=self.frontier_ranked.copy(), act_pos=self.act_pos.copy(),
            working=list(self.working), activation_order=list(self.activation_order),
            n_unvisited_pages=self.n_unvisited_pages, counters=self.counters.copy(),
            stopped=self.stopped, stop_reason=self.stop_reason,
        )

    # --- budget views ----------------------------------------------------------

    @property
    def round_left(self) -> int:
        return max(0, self.budget.m - self.counters.round_acts)

    @property
    def acts_left(self) -> int:
        return max(0, self.budget.M - self.counters.acts_used)

    @property
    def opens_left(self) -> int:
        return max(0, self.budget.B - self.counters.opens_used)

    @property
    def rounds_left(self) -> int:
        return max(0, self.budget.T - self.counters.round)

    @property
    def steps_left(self) -> int:
        return max(0, self.budget.max_steps - self.counters.steps)

    def can_activate(self) -> bool:
        return self.round_left > 0 and self.acts_left > 0

    def budget_left(self) -> dict[str, int]:
        return {"round_activations": self.round_left, "activations": self.acts_left,
                "opens": self.opens_left, "rounds": self.rounds_left, "steps": self.steps_left}

    # --- state updates (no validity checks here: see actions.py) -----------------

    def _neighbours(self, u: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.gi.nbr_ptr[u], self.gi.nbr_ptr[u + 1]
        return self.gi.nbr[lo:hi], self.gi.nbr_flat[lo:hi]

    def _refresh_frontier(self, touched: np.ndarray) -> None:
        st = self.node_state[touched]
        related = self.rel_count.reshape(-1, N_KINDS)[touched].any(axis=1)
        on_active_page = self.node_state[self.gi.node_page[touched]] == ACTIVATED
        self.frontier_ranked[self.rank_of[touched]] = (st == UNVISITED) & (related | on_active_page)

    def activate(self, u: int) -> None:
        """Mark ``u`` ACTIVATED and grow the frontier around it.

        Every UNVISITED neighbour of ``u`` (and, for a page, every UNVISITED
        element of it) is now related to the working set, so it joins the
        frontier; nothing leaves it except ``u`` itself.
        """
        gi, st, fr, rank = self.gi, self.node_state, self.frontier_ranked, self.rank_of
        st[u] = ACTIVATED
        self.act_pos[u] = len(self.activation_order)
        self.activation_order.append(u)
        self.working.append(u)
        lo, hi = gi.nbr_ptr[u], gi.nbr_ptr[u + 1]
        self.rel_count[gi.nbr_flat[lo:hi]] += 1  # flat indices of one node are distinct (see graph_index)
        fr[rank[u]] = False
        nb = gi.nbr[lo:hi]
        fr[rank[nb[st[nb] == UNVISITED]]] = True
        if gi.is_page[u]:
            self.n_unvisited_pages -= 1
            elo, ehi = int(gi.page_lo[u]), int(gi.page_hi[u])
            fr[rank[(st[elo:ehi] == UNVISITED).nonzero()[0] + elo]] = True

    def open(self, u: int) -> None:
        self.node_state[u] = OPENED

    def prune(self, u: int) -> list[int]:
        """Prune ``u`` (and, for a page, all its elements). Returns the changed node indices."""
        targets = [u]
        if self.gi.is_page[u]:
            lo, hi = int(self.gi.page_lo[u]), int(self.gi.page_hi[u])
            targets += [v for v in range(lo, hi) if self.node_state[v] != PRUNED]
        parts = [np.asarray(targets, dtype=np.intp)]
        for v in targets:
            prev = self.node_state[v]
            self.node_state[v] = PRUNED
            if prev == ACTIVATED or prev == OPENED:
                self.working.remove(v)
                nb, flat = self._neighbours(v)
                self.rel_count[flat] -= 1
                parts.append(nb)
            elif prev == UNVISITED and self.gi.is_page[v]:
                self.n_unvisited_pages -= 1
        self._refresh_frontier(np.concatenate(parts))
        return targets

    # --- queries ------------------------------------------------------------------

    def counts(self) -> np.ndarray:
        """Number of nodes in each state (int64 [4])."""
        return np.bincount(self.node_state, minlength=4)

    def relation_bits(self, nodes: np.ndarray) -> np.ndarray:
        """bool [len(nodes), 5]: related to the working set by each edge kind."""
        return self.rel_count.reshape(-1, N_KINDS)[nodes] > 0

    def check_invariants(self) -> None:
        """Raise AssertionError if the incremental bookkeeping drifted (used by tests)."""
        gi, st = self.gi, self.node_state
        active = np.flatnonzero((st == ACTIVATED) | (st == OPENED))
        assert sorted(self.working) == active.tolist(), "working set != activated/opened nodes"
        assert [self.act_pos[v] for v in self.working] == sorted(self.act_pos[v] for v in self.working)
        el = np.arange(gi.n_pages, gi.n_nodes)
        visible = el[(st[el] == ACTIVATED) | (st[el] == OPENED)]
        assert np.all(st[gi.node_page[visible]] == ACTIVATED), "visible element on a non-activated page"
        pruned_pages = np.flatnonzero(st[: gi.n_pages] == PRUNED)
        for p in pruned_pages:
            assert np.all(st[gi.page_lo[p]: gi.page_hi[p]] == PRUNED), "element alive on a pruned page"
        assert np.all(st[: gi.n_pages] != OPENED), "a page cannot be opened"
        expect = np.zeros(gi.n_nodes * N_KINDS, dtype=np.int64)
        for v in active:
            np.add.at(expect, gi.nbr_flat[gi.nbr_ptr[v]: gi.nbr_ptr[v + 1]], 1)
        assert np.array_equal(expect, self.rel_count), "relation counts drifted"
        related = expect.reshape(-1, N_KINDS).any(axis=1)
        frontier = (st == UNVISITED) & (related | (st[gi.node_page] == ACTIVATED))
        assert np.array_equal(frontier[np.argsort(self.rank_of)], self.frontier_ranked), "frontier drifted"
        assert self.n_unvisited_pages == int(np.sum(st[: gi.n_pages] == UNVISITED))
        c = self.counters
        assert len(self.activation_order) == c.acts_used + c.free_acts, "activation count mismatch"
        assert 0 <= c.acts_used <= self.budget.M and 0 <= c.opens_used <= self.budget.B
        assert 0 <= c.round_acts <= self.budget.m and 0 <= c.round <= self.budget.T
        assert c.opens_used >= int(np.sum(st == OPENED))
