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

import weakref
from dataclasses import dataclass, field, fields

import numpy as np

from mage_gym.env.budget import Budget
from mage_gym.env.graph_index import N_KINDS, GraphIndex

UNVISITED, ACTIVATED, OPENED, PRUNED = 0, 1, 2, 3
STATE_NAMES: tuple[str, ...] = ("unvisited", "activated", "opened", "pruned")

#: Columns of ``EvidenceState.dyn``, the per-node dynamic observation features kept up
#: to date by every update, so building an observation is one gather (see observation.py).
DYN_ACTIVATED, DYN_OPENED, DYN_PRUNED = 0, 1, 2
DYN_LINK0 = 3  # DYN_LINK0 + kind: linked to the working set by that edge kind
DYN_ACTPOS = DYN_LINK0 + N_KINDS  # activation position / max working-set size
DYN_PAGEACT = DYN_ACTPOS + 1  # the node's page is ACTIVATED
#: the best working-set neighbour's relevance rank, as 1 - rank / n (0: no working-set neighbour); the rank is
#: the episode's fused order, so this needs no relevance input and is a max kept on every activation
DYN_LINKER = DYN_PAGEACT + 1
N_DYN = DYN_LINKER + 1

class _GraphAux:
    """Per-graph arrays the updates read, derived once per process from the :class:`GraphIndex`.

    Why: an activation is a dozen small numpy calls, so per-call overheads
    matter: CSR bounds as Python ints (slicing with them is cheaper than with
    numpy scalars), the flat ``dyn`` indices of every merged-CSR entry (one
    fancy write per update), and a page range for the distance update.
    """

    __slots__ = ("ptr", "page_lo", "page_hi", "link_idx", "linker_idx", "pages", "__weakref__")

    def __init__(self, gi: GraphIndex) -> None:
        self.ptr: list[int] = gi.nbr_ptr.tolist()
        self.page_lo: list[int] = gi.page_lo.tolist()
        self.page_hi: list[int] = gi.page_hi.tolist()
        self.link_idx = gi.nbr * N_DYN + DYN_LINK0 + gi.nbr_kind.astype(np.intp)  # (neighbour, its link column)
        self.linker_idx = gi.nbr * N_DYN + DYN_LINKER  # (neighbour, DYN_LINKER)
        self.pages = np.arange(gi.n_pages, dtype=np.intp)


_AUX: "weakref.WeakKeyDictionary[GraphIndex, _GraphAux]" = weakref.WeakKeyDictionary()
_LAST_AUX: list = [None, None]  # (weakref to the last graph index, its aux): skips the dictionary on the hot path


def _aux(gi: GraphIndex) -> _GraphAux:
    ref = _LAST_AUX[0]
    if ref is not None and ref() is gi:
        return _LAST_AUX[1]
    aux = _AUX.get(gi)
    if aux is None:
        aux = _AUX[gi] = _GraphAux(gi)
    _LAST_AUX[0], _LAST_AUX[1] = weakref.ref(gi), aux
    return aux


def _nbr_dyn_pair(gi: GraphIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per merged-CSR entry, the flat ``dyn`` indices of (neighbour, its link column) and of (neighbour,
    DYN_LINKER): one fancy write each per update."""
    aux = _aux(gi)
    return aux.link_idx, aux.linker_idx


def _page_distances(n_pages: int, node_state: np.ndarray) -> np.ndarray:
    """intp [n_pages]: pages to the nearest ACTIVATED page (``n_pages`` where none is): after a page prune.

    Two running sweeps (the nearest active page at or before each page, and at
    or after it), so the cost is linear in the pages whatever their number.
    """
    active = node_state[:n_pages] == ACTIVATED
    if not active.any():
        return np.full(n_pages, n_pages, dtype=np.intp)
    idx = np.arange(n_pages, dtype=np.intp)
    far = 2 * n_pages  # farther than any page: a side without an active page never wins the minimum
    before = np.where(active, idx, -far)
    np.maximum.accumulate(before, out=before)
    after = np.where(active, idx, far)[::-1]
    after = np.minimum.accumulate(after)[::-1]
    return np.minimum(idx - before, after - idx)


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
    dyn: np.ndarray  # float32 [n, N_DYN]: dynamic observation features (columns above)
    page_dist: np.ndarray  # intp [n_pages]: pages to the nearest ACTIVATED page (n_pages: none is active)
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
            dyn=np.zeros((n, N_DYN), dtype=np.float32),
            page_dist=np.full(gi.n_pages, gi.n_pages, dtype=np.intp),
            n_unvisited_pages=gi.n_pages,
        )

    def copy(self) -> "EvidenceState":
        """An independent copy (shares the read-only graph index and rank order)."""
        return EvidenceState(
            gi=self.gi, budget=self.budget, rank_of=self.rank_of,
            node_state=self.node_state.copy(), rel_count=self.rel_count.copy(),
            frontier_ranked=self.frontier_ranked.copy(), act_pos=self.act_pos.copy(), dyn=self.dyn.copy(),
            page_dist=self.page_dist.copy(),
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
        frontier; nothing leaves it except ``u`` itself. (The hot path of the
        environment: a handful of numpy calls on the node's neighbour slice.)
        """
        gi, st, fr, rank = self.gi, self.node_state, self.frontier_ranked, self.rank_of
        aux = _aux(gi)
        st[u] = ACTIVATED
        pos = len(self.activation_order)
        self.act_pos[u] = pos
        self.activation_order.append(u)
        self.working.append(u)
        lo, hi = aux.ptr[u], aux.ptr[u + 1]
        self.rel_count[gi.nbr_flat[lo:hi]] += 1  # flat indices of one node are distinct (see graph_index)
        fr[rank[u]] = False
        nb = gi.nbr[lo:hi]
        fr[rank[nb[st[nb] == UNVISITED]]] = True
        flat = self.dyn.reshape(-1)  # a view: dyn is C-contiguous
        base = u * N_DYN
        flat[base + DYN_ACTIVATED] = 1.0
        flat[base + DYN_ACTPOS] = min(1.0, (pos + 1) / max(1, self.budget.max_working_set))
        flat[aux.link_idx[lo:hi]] = 1.0
        cells = aux.linker_idx[lo:hi]  # a neighbour linked by several kinds repeats: every copy gets the same max
        flat[cells] = np.maximum(flat[cells], 1.0 - rank[u] / len(rank))
        if u < gi.n_pages:
            self.n_unvisited_pages -= 1
            d = aux.pages - u
            np.abs(d, out=d)
            np.minimum(self.page_dist, d, out=self.page_dist)
            elo, ehi = aux.page_lo[u], aux.page_hi[u]
            fr[rank[elo:ehi][st[elo:ehi] == UNVISITED]] = True
            flat[base + DYN_PAGEACT] = 1.0
            flat[elo * N_DYN + DYN_PAGEACT: ehi * N_DYN: N_DYN] = 1.0

    def _recompute_linker(self, nodes: np.ndarray) -> None:
        """DYN_LINKER of ``nodes`` from scratch (after a prune: a max cannot be decremented)."""
        gi = self.gi
        lo = gi.nbr_ptr[nodes]
        lens = gi.nbr_ptr[nodes + 1] - lo
        out = np.zeros(len(nodes), dtype=np.float32)
        ends = np.cumsum(lens)
        if len(ends) and ends[-1] > 0:
            starts = ends - lens
            nb = gi.nbr[np.arange(int(ends[-1])) + np.repeat(lo - starts, lens)]
            st = self.node_state[nb]
            vals = np.where((st == ACTIVATED) | (st == OPENED), 1.0 - self.rank_of[nb] / len(self.rank_of), 0.0)
            nonempty = lens > 0
            out[nonempty] = np.maximum.reduceat(vals, starts[nonempty])
        self.dyn[nodes, DYN_LINKER] = out

    @property
    def _dyn_flat(self) -> np.ndarray:
        return self.dyn.reshape(-1)  # a view: dyn is C-contiguous

    def block_pages(self, pages: np.ndarray) -> None:
        """Prune never-visited pages and their elements before the episode starts.

        Used for a page window (LongDocURL gives the reader a page range): the
        pages outside it can never become candidates nor be rendered.
        """
        gi = self.gi
        pages = np.asarray(pages, dtype=np.intp)
        if not len(pages):
            return
        if np.any(self.node_state[pages] != UNVISITED) or self.working:
            raise ValueError("block_pages is for the start of an episode (pages must be unvisited)")
        is_blocked = np.zeros(gi.n_pages, dtype=bool)
        is_blocked[pages] = True
        nodes = np.flatnonzero(is_blocked[gi.node_page])
        self.node_state[nodes] = PRUNED
        self.dyn[nodes, DYN_PRUNED] = 1.0
        self.n_unvisited_pages -= len(pages)

    def open(self, u: int) -> None:
        self.node_state[u] = OPENED
        self.dyn[u, DYN_ACTIVATED] = 0.0
        self.dyn[u, DYN_OPENED] = 1.0

    def prune(self, u: int) -> list[int]:
        """Prune ``u`` (and, for a page, all its elements). Returns the changed node indices."""
        gi, st = self.gi, self.node_state
        is_page = u < gi.n_pages
        if is_page:  # the page, then its elements not yet pruned, in node order
            lo, hi = int(gi.page_lo[u]), int(gi.page_hi[u])
            tg = np.concatenate(([u], np.flatnonzero(st[lo:hi] != PRUNED) + lo)).astype(np.intp, copy=False)
        else:
            tg = np.array([u], dtype=np.intp)
        prev = st[tg]
        st[tg] = PRUNED
        parts = [tg]
        live = (prev == ACTIVATED) | (prev == OPENED)
        if live.any():
            ptr = _aux(gi).ptr
            for v in tg[live].tolist():  # one at a time: two of them may share a neighbour (repeated flat indices)
                self.working.remove(v)
                lo_v, hi_v = ptr[v], ptr[v + 1]
                self.rel_count[gi.nbr_flat[lo_v:hi_v]] -= 1
                parts.append(gi.nbr[lo_v:hi_v])
        if is_page and prev[0] == UNVISITED:
            self.n_unvisited_pages -= 1
        touched = np.concatenate(parts) if len(parts) > 1 else tg
        self._refresh_frontier(touched)
        dyn = self.dyn
        dyn[tg, DYN_ACTIVATED] = 0.0
        dyn[tg, DYN_OPENED] = 0.0
        dyn[tg, DYN_PRUNED] = 1.0
        dyn[touched, DYN_LINK0: DYN_LINK0 + N_KINDS] = self.rel_count.reshape(-1, N_KINDS)[touched] > 0
        self._recompute_linker(np.unique(touched))
        if is_page:
            self.page_dist[:] = _page_distances(gi.n_pages, st)
            dyn[u, DYN_PAGEACT] = 0.0
            dyn[lo:hi, DYN_PAGEACT] = 0.0
        return tg.tolist()

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
        dyn = np.zeros_like(self.dyn)
        for col, value in ((DYN_ACTIVATED, ACTIVATED), (DYN_OPENED, OPENED), (DYN_PRUNED, PRUNED)):
            dyn[:, col] = st == value
        dyn[:, DYN_LINK0: DYN_LINK0 + N_KINDS] = expect.reshape(-1, N_KINDS) > 0
        seen = self.act_pos >= 0
        dyn[seen, DYN_ACTPOS] = np.minimum(1.0, (self.act_pos[seen] + 1) / max(1, self.budget.max_working_set))
        dyn[:, DYN_PAGEACT] = st[gi.node_page] == ACTIVATED
        value = (1.0 - self.rank_of / len(self.rank_of)).astype(np.float32)
        for v in active:
            nb = gi.nbr[gi.nbr_ptr[v]: gi.nbr_ptr[v + 1]]
            dyn[nb, DYN_LINKER] = np.maximum(dyn[nb, DYN_LINKER], value[v])
        assert np.allclose(dyn, self.dyn, atol=1e-6), "dynamic features drifted"
        assert np.array_equal(_page_distances(gi.n_pages, st), self.page_dist), "page distances drifted"
        c = self.counters
        assert len(self.activation_order) == c.acts_used + c.free_acts, "activation count mismatch"
        assert 0 <= c.acts_used <= self.budget.M and 0 <= c.opens_used <= self.budget.B
        assert 0 <= c.round_acts <= self.budget.m and 0 <= c.round <= self.budget.T
        assert c.opens_used >= int(np.sum(st == OPENED))
