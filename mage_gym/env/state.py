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
  lying on an ACTIVATED page;
- ``unvisited_ranked``, ``code``, ``dyn`` and ``page_dist`` equal their
  definitions from the node states (kept incrementally for the step loop);
- under a reader-token budget, ``tokens`` (a :class:`~mage_gym.env.token_budget.TokenMeter`)
  holds the render's count of the node states, within the budget (or at the
  empty render's floor, when even that passes it).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from mage_gym.env.budget import Budget
from mage_gym.env.graph_index import N_KINDS, GraphIndex
from mage_gym.env.token_budget import TokenMeter

UNVISITED, ACTIVATED, OPENED, PRUNED = 0, 1, 2, 3
STATE_NAMES: tuple[str, ...] = ("unvisited", "activated", "opened", "pruned")

#: Columns of ``EvidenceState.dyn``, the per-node dynamic observation features kept up
#: to date by every update, so building an observation is one gather (see observation.py).
DYN_UNVISITED, DYN_ACTIVATED, DYN_OPENED, DYN_PRUNED = 0, 1, 2, 3  # the state one-hot
DYN_LINK0 = 4  # DYN_LINK0 + kind: linked to the working set by that edge kind
DYN_ACTPOS = DYN_LINK0 + N_KINDS  # activation position / max working-set size
DYN_PAGEACT = DYN_ACTPOS + 1  # the node's page is ACTIVATED
#: the best working-set neighbour's relevance rank, as 1 - rank / n (0: no working-set neighbour); the rank is
#: the episode's fused order, so this needs no relevance input and is a max kept on every activation
DYN_LINKER = DYN_PAGEACT + 1
N_DYN = DYN_LINKER + 1


def log_distance_table(n_pages: int) -> np.ndarray:
    """float32 [n_pages + 1]: the observed page distance, log1p(d) / log1p(n_pages - 1) capped at 1, for every
    distance d; 1 at d = n_pages (no active page).

    Why log-scaled by the document's length: on a 500-page report a linear
    scale would put the neighbouring page at 0.002, indistinguishable from the
    active page itself, while "next page" vs "ten pages away" is what matters.
    Non-decreasing in d, so the minimum over active pages of the scaled
    distance is the scaled minimum distance: the state keeps it scaled.
    """
    d = np.arange(n_pages + 1, dtype=np.float64)
    lut = np.minimum(1.0, np.log1p(d) / np.log1p(max(1, n_pages - 1))).astype(np.float32)
    lut[n_pages] = 1.0
    return lut


class _GraphAux:
    """Per-graph arrays the updates read, derived once per :class:`GraphIndex` and kept on it.

    Why: an activation is a dozen small numpy calls, so per-call overheads
    matter: CSR bounds as Python ints (slicing with them is cheaper than with
    numpy scalars), the flat ``dyn`` indices of every merged-CSR entry (one
    fancy write per update), ``log_offset``, from which the (log-scaled)
    distance of every page to page ``u`` is a slice (no array is built per
    activation), and ``dyn0``, the ``dyn`` table of a fresh state (copied:
    as cheap as zeroing it).
    """

    __slots__ = ("n_pages", "ptr", "page_lo", "page_hi", "link_idx", "linker_idx", "log_dist", "log_offset",
                 "code0", "dyn0")

    def __init__(self, gi: GraphIndex) -> None:
        self.n_pages: int = gi.n_pages
        self.ptr: list[int] = gi.nbr_ptr.tolist()
        self.page_lo: list[int] = gi.page_lo.tolist()
        self.page_hi: list[int] = gi.page_hi.tolist()
        self.link_idx = gi.nbr * N_DYN + DYN_LINK0 + gi.nbr_kind.astype(np.intp)  # (neighbour, its link column)
        self.linker_idx = gi.nbr * N_DYN + DYN_LINKER  # (neighbour, DYN_LINKER)
        self.log_dist = log_distance_table(gi.n_pages)
        #: scaled |j - (n_pages - 1)| for j in 0 .. 2 n_pages - 2: ``page_offsets(u)`` slices it for every page p
        self.log_offset = self.log_dist[np.abs(np.arange(-(gi.n_pages - 1), gi.n_pages, dtype=np.intp))]
        self.code0 = mask_code(np.zeros(gi.n_nodes, dtype=np.int8), gi.node_page, gi.n_pages)  # all UNVISITED
        self.dyn0 = np.zeros((gi.n_nodes, N_DYN), dtype=np.float32)
        self.dyn0[:, DYN_UNVISITED] = 1.0

    def page_offsets(self, u: int) -> np.ndarray:
        """float32 [n_pages] view: the scaled distance |p - u| of every page p to page ``u``."""
        start = self.n_pages - 1 - u
        return self.log_offset[start: start + self.n_pages]


def _aux(gi: GraphIndex) -> _GraphAux:
    """The update tables of ``gi`` (derived once per graph index, kept on it; read several times a step)."""
    try:
        return gi.memo["state.aux"]
    except KeyError:
        return gi.derived("state.aux", _GraphAux)


def mask_code(node_state: np.ndarray, node_page: np.ndarray, n_pages: int, nodes: np.ndarray | None = None
              ) -> np.ndarray:
    """int8: ``8 * state + 2 * page state + is_element`` of ``nodes``: the row of the action mask's rule table.

    Why kept per node (``EvidenceState.code``): the mask reads it for the
    ``K`` slots with one gather instead of recomputing it from three gathers
    and four arithmetic ops every step; the updates change it by a constant
    (activating a page adds 2 to the code of each of its elements).
    """
    idx = np.arange(len(node_state)) if nodes is None else nodes
    return (node_state[idx] * 8 + node_state[node_page[idx]] * 2 + (idx >= n_pages)).astype(np.int8)


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
    code: np.ndarray  # int8 [n]: mask_code of every node (the action mask's rule row)
    frontier_ranked: np.ndarray  # bool [n], indexed by rank: True where that node is on the frontier
    unvisited_ranked: np.ndarray  # bool [n], indexed by rank: node_state == UNVISITED (see activate)
    act_pos: np.ndarray  # int32 [n]: activation position, -1 if never activated
    dyn: np.ndarray  # float32 [n, N_DYN]: dynamic observation features (columns above)
    page_dist: np.ndarray  # float32 [n_pages]: log_distance_table of the distance to the nearest ACTIVATED page
    working: list[int] = field(default_factory=list)  # ACTIVATED/OPENED nodes, activation order
    activation_order: list[int] = field(default_factory=list)  # every node ever activated
    n_unvisited_pages: int = 0
    counters: Counters = field(default_factory=Counters)
    stopped: bool = False
    stop_reason: str | None = None
    tokens: TokenMeter | None = None  # the reader-token count, under a token budget only (Budget.tokens)

    def __post_init__(self) -> None:
        self._actpos_div = max(1, self.budget.max_working_set)  # DYN_ACTPOS's divisor (activate runs per step)

    @classmethod
    def new(cls, gi: GraphIndex, budget: Budget, rank_of: np.ndarray) -> "EvidenceState":
        n = gi.n_nodes
        return cls(
            gi=gi, budget=budget, rank_of=rank_of,
            node_state=np.zeros(n, dtype=np.int8), code=_aux(gi).code0.copy(),
            rel_count=np.zeros(n * N_KINDS, dtype=np.int16),
            frontier_ranked=np.zeros(n, dtype=bool), unvisited_ranked=np.ones(n, dtype=bool),
            act_pos=np.full(n, -1, dtype=np.int32),
            dyn=_aux(gi).dyn0.copy(),
            page_dist=np.ones(gi.n_pages, dtype=np.float32),  # no active page
            n_unvisited_pages=gi.n_pages,
        )

    def copy(self) -> "EvidenceState":
        """An independent copy (shares the read-only graph index and rank order)."""
        return EvidenceState(
            gi=self.gi, budget=self.budget, rank_of=self.rank_of,
            node_state=self.node_state.copy(), code=self.code.copy(), rel_count=self.rel_count.copy(),
            frontier_ranked=self.frontier_ranked.copy(), unvisited_ranked=self.unvisited_ranked.copy(),
            act_pos=self.act_pos.copy(), dyn=self.dyn.copy(),
            page_dist=self.page_dist.copy(),
            working=list(self.working), activation_order=list(self.activation_order),
            n_unvisited_pages=self.n_unvisited_pages, counters=self.counters.copy(),
            stopped=self.stopped, stop_reason=self.stop_reason,
            tokens=None if self.tokens is None else self.tokens.copy(),
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
        """What is left of each budget (traces record it per step); ``tokens`` only under a token budget."""
        left = {"round_activations": self.round_left, "activations": self.acts_left,
                "opens": self.opens_left, "rounds": self.rounds_left, "steps": self.steps_left}
        if self.tokens is not None:
            left["tokens"] = self.tokens.left
        return left

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

        Why ``unvisited_ranked``: a related node is on the frontier exactly
        when it is UNVISITED, so copying that flag, gathered by rank, into the
        frontier (``fr[r] = unvisited[r]``) is the whole frontier update: a
        visited neighbour was off the frontier and stays off.
        """
        rank, st = self.rank_of, self.node_state
        aux = _aux(self.gi)
        unv, fr = self.unvisited_ranked, self.frontier_ranked
        st[u] = ACTIVATED
        code = self.code
        ru = rank[u]
        unv[ru] = False
        fr[ru] = False
        pos = len(self.activation_order)
        self.act_pos[u] = pos
        self.activation_order.append(u)
        self.working.append(u)
        lo, hi = aux.ptr[u], aux.ptr[u + 1]
        self.rel_count[self.gi.nbr_flat[lo:hi]] += 1  # flat indices of one node are distinct (see graph_index)
        r = rank[self.gi.nbr[lo:hi]]
        fr[r] = unv[r]
        flat = self.dyn.reshape(-1)  # a view: dyn is C-contiguous
        base = u * N_DYN
        flat[base + DYN_UNVISITED] = 0.0
        flat[base + DYN_ACTIVATED] = 1.0
        flat[base + DYN_ACTPOS] = min(1.0, (pos + 1) / self._actpos_div)
        flat[aux.link_idx[lo:hi]] = 1.0
        cells = aux.linker_idx[lo:hi]  # a neighbour linked by several kinds repeats: every copy gets the same max
        # The max is taken in float32 (the value rounded first): rounding is monotone, so this equals rounding
        # the float64 max, without promoting the gathered cells to float64 and back.
        flat[cells] = np.maximum(flat[cells], np.float32(1.0 - ru / len(rank)))
        if u < aux.n_pages:
            code[u] = 8 * ACTIVATED + 2 * ACTIVATED  # a page is its own page
            self.n_unvisited_pages -= 1
            start = aux.n_pages - 1 - u  # aux.page_offsets(u), inlined
            np.minimum(self.page_dist, aux.log_offset[start: start + aux.n_pages], out=self.page_dist)
            elo, ehi = aux.page_lo[u], aux.page_hi[u]
            r = rank[elo:ehi]
            fr[r] = unv[r]
            flat[base + DYN_PAGEACT] = 1.0
            flat[elo * N_DYN + DYN_PAGEACT: ehi * N_DYN: N_DYN] = 1.0
            codes = code[elo:ehi]  # a view, updated in place: their page state UNVISITED -> ACTIVATED
            codes += 2
        else:  # an element's page is already ACTIVATED: only its own state changes
            code[u] += 8
        if self.tokens is not None:
            self.tokens.activated(u)

    def _recompute_linker(self, nodes: np.ndarray) -> None:
        """DYN_LINKER of ``nodes`` from scratch (after a prune: a max cannot be decremented).

        Reads each node's own neighbour list, while :meth:`activate` writes to
        the activated node's neighbours: the same thing because the merged
        adjacency is symmetric (``EvidenceGraph.adjacency`` is undirected).
        """
        gi = self.gi
        lo = gi.nbr_ptr[nodes]
        lens = gi.nbr_ptr[nodes + 1] - lo
        out = np.zeros(len(nodes), dtype=np.float32)
        ends = np.cumsum(lens)
        if len(ends) and ends[-1] > 0:
            starts = ends - lens
            nb = gi.nbr[np.arange(int(ends[-1])) + np.repeat(lo - starts, lens)]
            st = self.node_state[nb]
            # The best link is the working-set neighbour of lowest rank: reduce ranks, then map the few minima
            # to 1 - rank / n (the same float64 value as mapping every rank first: the map is monotone).
            n = len(self.rank_of)
            ranks = np.where((st == ACTIVATED) | (st == OPENED), self.rank_of[nb], n)
            nonempty = lens > 0
            best = np.minimum.reduceat(ranks, starts[nonempty])
            out[nonempty] = np.where(best < n, 1.0 - best / n, 0.0)
        self.dyn[nodes, DYN_LINKER] = out

    def _page_deactivated(self, u: int) -> None:
        """Update ``page_dist`` after page ``u`` left the working set.

        Only the pages between the nearest active pages on either side of
        ``u`` can have had ``u`` as their nearest active page; each gets the
        distance to the nearer of those two (a linear sweep over all pages,
        :func:`_page_distances`, gives the same values at several times the cost).
        """
        n_pages = self.gi.n_pages
        active = np.flatnonzero(self.node_state[:n_pages] == ACTIVATED)
        i = int(np.searchsorted(active, u))
        left = int(active[i - 1]) if i > 0 else None
        right = int(active[i]) if i < len(active) else None
        lo = 0 if left is None else left + 1
        hi = n_pages if right is None else right
        pages = np.arange(lo, hi)
        if left is None and right is None:
            dist = np.full(len(pages), n_pages)
        elif right is None:
            dist = pages - left
        elif left is None:
            dist = right - pages
        else:
            dist = np.minimum(pages - left, right - pages)
        self.page_dist[lo:hi] = _aux(self.gi).log_dist[dist]

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
        self.unvisited_ranked[self.rank_of[nodes]] = False
        self.code[nodes] = mask_code(self.node_state, gi.node_page, gi.n_pages, nodes)
        self.dyn[nodes, DYN_UNVISITED] = 0.0
        self.dyn[nodes, DYN_PRUNED] = 1.0
        self.n_unvisited_pages -= len(pages)

    def open(self, u: int) -> None:
        self.node_state[u] = OPENED
        self.code[u] += 8  # ACTIVATED -> OPENED
        self.dyn[u, DYN_ACTIVATED] = 0.0
        self.dyn[u, DYN_OPENED] = 1.0
        if self.tokens is not None:
            self.tokens.opened(u)

    def prune_targets(self, u: int) -> np.ndarray:
        """The nodes pruning ``u`` changes: ``u``, and for a page its elements not yet pruned, in node order."""
        gi = self.gi
        if u < gi.n_pages:
            lo, hi = int(gi.page_lo[u]), int(gi.page_hi[u])
            return np.concatenate(([u], np.flatnonzero(self.node_state[lo:hi] != PRUNED) + lo)).astype(
                np.intp, copy=False)
        return np.array([u], dtype=np.intp)

    def prune(self, u: int) -> list[int]:
        """Prune ``u`` (and, for a page, all its elements). Returns the changed node indices."""
        gi, st = self.gi, self.node_state
        is_page = u < gi.n_pages
        tg = self.prune_targets(u)
        lo, hi = (int(gi.page_lo[u]), int(gi.page_hi[u])) if is_page else (u, u)
        prev = st[tg]
        if self.tokens is not None:
            self.tokens.pruned(tg.tolist(), prev.tolist())
        st[tg] = PRUNED
        self.unvisited_ranked[self.rank_of[tg]] = False
        if is_page:  # the page and all its elements (pruned earlier ones too: their page state changes)
            self.code[u] = 8 * PRUNED + 2 * PRUNED
            self.code[lo:hi] = 8 * PRUNED + 2 * PRUNED + 1
        else:
            self.code[u] = 8 * PRUNED + 2 * int(st[gi.node_page[u]]) + 1
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
        dyn[tg, DYN_UNVISITED] = 0.0
        dyn[tg, DYN_ACTIVATED] = 0.0
        dyn[tg, DYN_OPENED] = 0.0
        dyn[tg, DYN_PRUNED] = 1.0
        dyn[touched, DYN_LINK0: DYN_LINK0 + N_KINDS] = self.rel_count.reshape(-1, N_KINDS)[touched] > 0
        if len(parts) > 1:  # only neighbours of pruned working-set nodes can lose their best link
            self._recompute_linker(np.unique(np.concatenate(parts[1:])))
        if is_page:
            self._page_deactivated(u)
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
        by_rank = np.argsort(self.rank_of)
        assert np.array_equal(frontier[by_rank], self.frontier_ranked), "frontier drifted"
        assert np.array_equal((st == UNVISITED)[by_rank], self.unvisited_ranked), "unvisited flags drifted"
        assert self.n_unvisited_pages == int(np.sum(st[: gi.n_pages] == UNVISITED))
        assert np.array_equal(mask_code(st, gi.node_page, gi.n_pages), self.code), "mask codes drifted"
        dyn = np.zeros_like(self.dyn)
        for col, value in ((DYN_UNVISITED, UNVISITED), (DYN_ACTIVATED, ACTIVATED), (DYN_OPENED, OPENED),
                           (DYN_PRUNED, PRUNED)):
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
        want = log_distance_table(gi.n_pages)[_page_distances(gi.n_pages, st)]
        assert np.array_equal(want, self.page_dist), "page distances drifted"
        c = self.counters
        assert len(self.activation_order) == c.acts_used + c.free_acts, "activation count mismatch"
        assert 0 <= c.acts_used <= self.budget.M and 0 <= c.opens_used <= self.budget.B
        assert 0 <= c.round_acts <= self.budget.m and 0 <= c.round <= self.budget.T
        assert c.opens_used >= int(np.sum(st == OPENED))
        if self.tokens is not None:
            meter = self.tokens
            assert (meter.xml_chars, meter.image_tokens) == meter.recount(st), "token count drifted"
            assert meter.used <= max(meter.limit, meter.floor), "render past the token budget"
