"""How much a controller could gain by navigating: retrieval depth, the oracle, and what the graph reaches.

Why these figures: a learned or rule controller is worth training only if
the gold the entry pages miss is (a) reachable from them through the
graph's relations and (b) among the candidate slots the env offers. This
module measures, per episode:

- ``topk`` / ``top2k`` / ``top3k`` page recall of the env's own retriever
  (its page order, inside the episode's page window);
- for every gold page the entry pages miss, whether it lies within one and
  two hops of the working set along each relation kind (and ``any``), beside
  the chance level: the share of non-entry pages that neighbourhood covers,
  i.e. the recall a neighbourhood of that size would have if the missed gold
  pages were placed at random;
- whether a missed gold page has a node among the K candidate slots at reset,
  and its best rank among the frontier slots (the unvisited ones);
- the slot-limited reach (:func:`slot_reach`): whether a missed gold page
  has a node among the K slots after 0, <= 1 and <= 2 activations of slot
  candidates, found on copies of the env's state through its own transition
  and slot layout, attributed to the edge kinds joining that node to the
  working set, beside the chance level (the share of non-entry pages the
  slots show); unlike the hop reach it counts only what a controller can see;
- (in ``experiments/headroom.py``) the privileged oracle under the same
  budget: page recall, pages and tokens rendered.

Hops are counted over graph nodes: the working set is the entry pages and
their elements; one hop is any node joined to it by an edge of the kind, two
hops any node joined to those. A page is reached when any of its nodes is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

ANY = "any"
#: Slot-reach search caps. ``width``: second activations are tried on the first ``width`` slots of each
#: one-step state (None: all K; the slots are in the env's order: working set, then frontier by relevance).
#: ``max_pairs``: at most this many distinct two-step states per episode. Breadth over all K=64 slots gives
#: about 60 one-step and 2,000 two-step states per MMLongBench episode (0.2 s), so the default searches every
#: slot and keeps a state cap only as a guard against very wide frontiers (runs record whether it was hit).
SLOT_REACH_WIDTH: int | None = None
SLOT_REACH_MAX_PAIRS: int | None = 5000
SLOT_LEVELS = (0, 1, 2)


@dataclass
class EpisodeHeadroom:
    """One episode's figures (gold pages inside the graph only; ``missed`` = gold pages not among the entry pages)."""

    episode_id: str
    gold_pages: int
    missed: int
    recall_at: dict[int, float]  # multiple of k -> page recall of the retriever's top (multiple * k)
    reach: dict[int, dict[str, int]]  # hops -> kind -> missed gold pages reached
    hood: dict[int, dict[str, float]]  # hops -> kind -> share of non-entry pages in the neighbourhood
    in_slots: int  # missed gold pages with a node among the K slots at reset
    frontier_ranks: list[int] = field(default_factory=list)  # best frontier rank of each such page
    oracle: dict[str, Any] = field(default_factory=dict)
    slot: "SlotReach | None" = None  # slot-limited reach after <= 1 and <= 2 activations (slot_reach)


def _neighbours(adj: tuple[np.ndarray, np.ndarray], nodes: np.ndarray) -> np.ndarray:
    indptr, idx = adj
    if nodes.size == 0:
        return nodes
    parts = [idx[indptr[n]: indptr[n + 1]] for n in nodes.tolist()]
    return np.unique(np.concatenate(parts)) if parts else nodes


def pages_by_hop(graph: Any, entry_pages: Sequence[int], kinds: Sequence[str], hops: int) -> list[set[int]]:
    """For 1..``hops``: pages with a node within that many edges of ``kinds`` from the entry pages and their
    elements (entry excluded). One breadth-first walk serves every hop count."""
    node_page = np.asarray(graph.node_page)
    seeds = [int(p) for p in entry_pages]
    for p in entry_pages:
        seeds.extend(graph.element_indices_of_page(int(p)))
    frontier = np.unique(np.asarray(seeds, dtype=np.int64))
    seen = set(frontier.tolist())
    entry = {int(p) for p in entry_pages}
    out: list[set[int]] = []
    for _ in range(hops):
        nxt = [_neighbours(graph.adjacency[k], frontier) for k in kinds]
        found = np.unique(np.concatenate(nxt)) if nxt else frontier[:0]
        found = np.asarray([n for n in found.tolist() if n not in seen], dtype=np.int64)
        seen.update(found.tolist())
        frontier = found
        out.append(set(node_page[list(seen)].tolist()) - entry)
    return out


def neighbourhood_pages(graph: Any, entry_pages: Sequence[int], kinds: Sequence[str], hops: int) -> set[int]:
    """Pages with a node within ``hops`` edges of ``kinds`` from the entry pages and their elements (entry excluded)."""
    return pages_by_hop(graph, entry_pages, kinds, hops)[-1]


def page_order_in_window(order: Sequence[int], window: tuple[int, int] | None) -> list[int]:
    """The retriever's page order restricted to the episode's page window (LongDocURL), as the env does."""
    if window is None:
        return [int(p) for p in order]
    lo, hi = int(window[0]), int(window[1])
    return [int(p) for p in order if lo <= int(p) <= hi]


def measure_episode(env: Any, episode_id: str, seed: int, k: int, kinds: Sequence[str],
                    window: tuple[int, int] | None = None,
                    multiples: Sequence[int] = (1, 2, 3), slot_search: bool = True,
                    slot_width: int | None = SLOT_REACH_WIDTH,
                    slot_max_pairs: int | None = SLOT_REACH_MAX_PAIRS) -> EpisodeHeadroom | None:
    """Reset ``env`` (privileged) on ``episode_id`` and measure retrieval depth, reach and slots at reset.

    ``window``: the episode's page window (its public ``page_window``), as the env applies it.
    ``slot_search``: also measure the slot-limited reach (:func:`slot_reach`, with the two caps).

    None when the episode has no gold pages in the graph (unanswerable or gold out of range).
    """
    from mage_gym.env.relevance import episode_relevance
    from mage_gym.env.state import UNVISITED

    get = env.get_wrapper_attr
    env.reset(seed=seed, options={"episode_id": episode_id})
    view = get("privileged_view")()
    gold = {int(p) for p in view.pages}
    if not view.answerable or not gold:
        return None
    graph = get("graph")
    rel = episode_relevance(graph, get("question"), get("retriever"), get("query_fn"))
    order = page_order_in_window(rel.page_order, window)
    entry = order[:k]
    recall_at = {m: len(gold & set(order[: m * k])) / len(gold) for m in multiples}
    missed = gold - set(entry)
    n_other = max(1, graph.n_pages - len(entry))
    reach: dict[int, dict[str, int]] = {1: {}, 2: {}}
    hood: dict[int, dict[str, float]] = {1: {}, 2: {}}
    for kind in [*kinds, ANY]:
        for hops, pages in enumerate(pages_by_hop(graph, entry, kinds if kind == ANY else [kind], 2), start=1):
            reach[hops][kind] = len(missed & pages)
            hood[hops][kind] = len(pages) / n_other
    slots = np.asarray(get("slots"))
    node_page = np.asarray(graph.node_page)
    state = get("state")
    frontier_ranks: list[int] = []
    in_slots = 0
    valid = slots[slots >= 0]
    slot_pages = node_page[valid] if valid.size else np.zeros(0, dtype=np.int64)
    unvisited = np.asarray(state.node_state)[valid] == UNVISITED
    frontier_pages = slot_pages[unvisited]
    for p in sorted(missed):
        if (slot_pages == p).any():
            in_slots += 1
        hits = np.flatnonzero(frontier_pages == p)
        if hits.size:
            frontier_ranks.append(int(hits[0]))
    slot = (slot_reach(state, np.asarray(get("rel").order), int(get("K")), sorted(missed), width=slot_width,
                       max_pairs=slot_max_pairs) if slot_search else None)
    return EpisodeHeadroom(episode_id=episode_id, gold_pages=len(gold), missed=len(missed), recall_at=recall_at,
                           reach=reach, hood=hood, in_slots=in_slots, frontier_ranks=frontier_ranks, slot=slot)


def aggregate(rows: Sequence[EpisodeHeadroom], kinds: Sequence[str]) -> dict[str, Any]:
    """Means over episodes; reach and chance as shares of all missed gold pages (micro average)."""
    n = len(rows)
    missed = sum(r.missed for r in rows)

    def mean(xs: Sequence[float | None]) -> float | None:
        xs = [float(x) for x in xs if x is not None]
        return float(np.mean(xs)) if xs else None

    out: dict[str, Any] = {"episodes": n, "gold_pages": sum(r.gold_pages for r in rows), "missed_gold_pages": missed}
    for m, key in ((1, "topk_recall"), (2, "top2k_recall"), (3, "top3k_recall")):
        out[key] = mean([r.recall_at.get(m) for r in rows])
    out["oracle_recall"] = mean([r.oracle.get("recall") for r in rows])
    out["oracle_pages"] = mean([r.oracle.get("pages") for r in rows])
    out["oracle_tokens"] = mean([r.oracle.get("tokens") for r in rows])
    for hops in (1, 2):
        reach: dict[str, float | None] = {}
        chance: dict[str, float | None] = {}
        for kind in [*kinds, ANY]:
            reach[kind] = sum(r.reach[hops][kind] for r in rows) / missed if missed else None
            chance[kind] = (sum(r.hood[hops][kind] * r.missed for r in rows) / missed) if missed else None
        out[f"reach_{hops}hop"] = reach
        out[f"chance_{hops}hop"] = chance
    out["missed_in_slots_at_reset"] = sum(r.in_slots for r in rows) / missed if missed else None
    ranks = [x for r in rows for x in r.frontier_ranks]
    out["frontier_rank_of_reachable_gold"] = ({"median": float(np.median(ranks)), "mean": float(np.mean(ranks)),
                                               "n": len(ranks)} if ranks else None)
    slots = [r.slot for r in rows if r.slot is not None]
    if rows and len(slots) == len(rows):
        out.update(aggregate_slot_reach(slots, kinds))
    return out


# --- slot-limited reach: what the env's own K slots show after <= 1 and <= 2 activations -----------------------


@dataclass
class SlotReach:
    """One episode's slot-limited reach (see :func:`slot_reach`).

    A missed gold page is *reached at level L* when, in some state at most L
    activations away from reset, one of its nodes (the page or an element) sits
    in a frontier slot. ``first`` maps each reached missed page to its smallest
    level; ``kinds`` to the edge kinds joining its slot node(s) to the working
    set in the states of that level (the relation that put it there); ``rank``
    to its best frontier rank (0 = first frontier slot) in those states. The
    same bookkeeping over every non-entry page in play gives the chance level
    (``cover_*``: the share of pages the slots show, i.e. the recall of gold
    placed at random).
    """

    missed: int
    n_other: int  # non-entry pages in play at reset (chance denominator)
    first: dict[int, int] = field(default_factory=dict)  # missed gold page -> first level reached
    kinds: dict[int, set[str]] = field(default_factory=dict)
    rank: dict[int, int] = field(default_factory=dict)
    cover_first: dict[int, int] = field(default_factory=dict)  # any non-entry page -> first level in the slots
    cover_kinds: dict[int, set[str]] = field(default_factory=dict)
    gold_nodes: dict[int, int] = field(default_factory=dict)  # level -> frontier slot nodes on missed gold (summed)
    frontier_nodes: dict[int, int] = field(default_factory=dict)  # level -> frontier slot nodes (summed over states)
    states: dict[int, int] = field(default_factory=dict)  # level -> distinct states examined
    capped: bool = False  # the two-step search stopped at max_pairs
    width: int | None = None  # the caps the search ran with (see slot_reach)
    max_pairs: int | None = None

    def reached(self, level: int, kind: str = ANY) -> int:
        """Missed gold pages reached within ``level`` activations (through ``kind``; ``any``: by any route)."""
        return sum(1 for p, lv in self.first.items() if lv <= level and (kind == ANY or kind in self.kinds[p]))

    def covered(self, level: int, kind: str = ANY) -> int:
        """Non-entry pages the slots show within ``level`` activations (through ``kind``)."""
        return sum(1 for p, lv in self.cover_first.items()
                   if lv <= level and (kind == ANY or kind in self.cover_kinds[p]))

    def to_row(self) -> dict[str, Any]:
        """A JSON-ready summary for ``episodes.jsonl`` (per reached missed gold page: level, kinds, rank)."""
        return {"missed": self.missed, "n_other": self.n_other, "capped": self.capped,
                "states": {str(k): v for k, v in sorted(self.states.items())},
                "reached": {str(p): {"level": lv, "kinds": sorted(self.kinds[p]), "rank": self.rank[p]}
                            for p, lv in sorted(self.first.items())},
                "covered": {str(lv): sum(1 for x in self.cover_first.values() if x == lv) for lv in SLOT_LEVELS}}

    def ranks(self, level: int) -> list[int]:
        """Best frontier rank of each missed gold page reached within ``level`` activations, at its first level."""
        return [self.rank[p] for p, lv in self.first.items() if lv <= level]


def slot_activations(state: Any, slots: np.ndarray, n: int, width: int | None = None) -> list[tuple[Any, int]]:
    """Activations of slot candidates the env would accept now, in slot order: ``(op, node)`` pairs.

    For each of the first ``width`` filled slots (all when None): ActivatePage of
    its page and, for an element, ActivateNode; kept when the env's own rule
    (:func:`mage_gym.env.actions.check_operation`, the mask's twin) accepts it;
    one ActivatePage per page. SearchEvidence is left out: it activates pages by
    a query, not a slot candidate.
    """
    from mage_gym.env.actions import Op, check_operation

    gi = state.gi
    out: list[tuple[Any, int]] = []
    pages_seen: set[int] = set()
    for v in slots[: n if width is None else min(n, width)].tolist():
        p = int(gi.node_page[v])
        if p not in pages_seen and check_operation(state, Op.ACTIVATE_PAGE, p) is None:
            pages_seen.add(p)
            out.append((Op.ACTIVATE_PAGE, p))
        if not gi.is_page[v] and check_operation(state, Op.ACTIVATE_NODE, v) is None:
            out.append((Op.ACTIVATE_NODE, v))
    return out


def activated_copy(state: Any, op: Any, node: int) -> Any:
    """A copy of ``state`` after ``op`` on ``node`` through the env's transition (:func:`apply_operation`),
    closing the round as the env does when the activation used the round's last one."""
    from mage_gym.env.actions import apply_operation

    c = state.copy()
    res = apply_operation(c, op, node)
    if not res.ok:
        raise ValueError(f"activation refused: {res.error}")
    if res.ends_round:  # mirrors MageRAGEnv._close_round (the reader is not called: only slots matter here)
        c.counters.round += 1
        c.counters.round_acts = 0
        if c.counters.round >= c.budget.T:
            c.stopped = True
    return c


def slot_reach(state: Any, order: np.ndarray, K: int, missed_pages: Sequence[int],
               width: int | None = SLOT_REACH_WIDTH, max_pairs: int | None = SLOT_REACH_MAX_PAIRS) -> SlotReach:
    """Slot-limited reach of ``missed_pages`` from ``state`` (the env's state at reset; left unchanged).

    Level 0 is ``state`` itself; level 1 every state one accepted slot
    activation away (:func:`slot_activations` over all K slots); level 2 the
    states one more activation away, trying only the first ``width`` slots of
    each level-1 state and stopping after ``max_pairs`` distinct level-2
    states (the caps; ``capped`` says whether the second was hit). States are
    de-duplicated by their working set (activating a then b equals b then a).
    Slots come from :func:`mage_gym.env.candidates.fill_slots` with the env's
    relevance ``order``, exactly as the env lays them out.
    """
    from mage_gym.env.candidates import fill_slots, n_working_slots
    from mage_gym.env.state import UNVISITED
    from mage_gym.graph.schema import EDGE_KINDS

    gi = state.gi
    node_page = gi.node_page
    entry = {int(v) for v in state.working if v < gi.n_pages}
    is_missed = np.zeros(gi.n_pages, dtype=bool)
    for p in missed_pages:
        if 0 <= int(p) < gi.n_pages:
            is_missed[int(p)] = True
    in_play = np.flatnonzero(state.node_state[: gi.n_pages] == UNVISITED)
    out = SlotReach(missed=len(set(int(p) for p in missed_pages)), n_other=max(1, len(in_play)), width=width,
                    max_pairs=max_pairs)
    kind_names = np.asarray(EDGE_KINDS)

    def observe(s: Any, level: int) -> tuple[np.ndarray, int]:
        slots, n = fill_slots(s, order, K)
        nw = n_working_slots(s, K)
        fr = slots[nw:n]
        out.states[level] = out.states.get(level, 0) + 1
        out.frontier_nodes[level] = out.frontier_nodes.get(level, 0) + len(fr)
        if not len(fr):
            return slots, n
        pages = node_page[fr]
        bits = s.relation_bits(fr)
        gold = is_missed[pages]
        out.gold_nodes[level] = out.gold_nodes.get(level, 0) + int(gold.sum())
        for i, p in enumerate(pages.tolist()):
            if p in entry:
                continue
            ks = set(kind_names[bits[i]].tolist())
            if out.cover_first.setdefault(p, level) == level:
                out.cover_kinds.setdefault(p, set()).update(ks)
            if gold[i] and out.first.setdefault(p, level) == level:
                out.kinds.setdefault(p, set()).update(ks)
                out.rank[p] = min(out.rank.get(p, i), i)
        return slots, n

    slots0, n0 = observe(state, 0)
    level1: list[tuple[Any, np.ndarray, int]] = []
    seen: set[frozenset[int]] = set()
    for op, v in slot_activations(state, slots0, n0):
        s1 = activated_copy(state, op, v)
        key = frozenset(s1.working)
        if key in seen:
            continue
        seen.add(key)
        slots1, n1 = observe(s1, 1)
        level1.append((s1, slots1, n1))
    pairs = 0
    for s1, slots1, n1 in level1:
        if out.capped:
            break
        for op, v in slot_activations(s1, slots1, n1, width):
            if max_pairs is not None and pairs >= max_pairs:
                out.capped = True
                break
            s2 = activated_copy(s1, op, v)
            key = frozenset(s2.working)
            if key in seen:
                continue
            seen.add(key)
            pairs += 1
            observe(s2, 2)
    for level in SLOT_LEVELS:
        out.states.setdefault(level, 0)
        out.gold_nodes.setdefault(level, 0)
        out.frontier_nodes.setdefault(level, 0)
    return out


def measure_slot_reach(env: Any, missed_pages: Sequence[int], width: int | None = SLOT_REACH_WIDTH,
                       max_pairs: int | None = SLOT_REACH_MAX_PAIRS) -> SlotReach:
    """:func:`slot_reach` on the env's current state (call right after reset), its relevance order and K."""
    get = env.get_wrapper_attr
    return slot_reach(get("state"), np.asarray(get("rel").order), int(get("K")), missed_pages,
                      width=width, max_pairs=max_pairs)


def aggregate_slot_reach(rows: Sequence[SlotReach], kinds: Sequence[str] | None = None) -> dict[str, Any]:
    """The ``slot_*`` metrics over episodes (micro averages over missed gold pages, as the hop reach).

    ``slot_reach_L``: {kind: share of missed gold pages reached within L activations through kind, ``any``};
    ``slot_chance_L``: {kind: the same share for gold placed at random among the non-entry pages in play};
    ``slot_gold_share``: {L: share of frontier slot contents lying on missed gold pages, over the states of
    exactly L activations}; ``slot_frontier_rank_L``: median / mean / n of the best frontier rank of the
    gold reached within L; ``slot_search``: the caps and the states examined. ``kinds``: the relations
    reported (default: every edge kind; ``any`` counts every route whatever the list).
    """
    from mage_gym.graph.schema import EDGE_KINDS

    missed = sum(r.missed for r in rows)
    out: dict[str, Any] = {}
    for level in SLOT_LEVELS:
        reach: dict[str, float | None] = {}
        chance: dict[str, float | None] = {}
        for kind in [*(EDGE_KINDS if kinds is None else kinds), ANY]:
            reach[kind] = sum(r.reached(level, kind) for r in rows) / missed if missed else None
            chance[kind] = (sum(r.covered(level, kind) / r.n_other * r.missed for r in rows) / missed
                            if missed else None)
        out[f"slot_reach_{level}"] = reach
        out[f"slot_chance_{level}"] = chance
    shares: dict[str, float | None] = {}
    for level in SLOT_LEVELS:
        fr = sum(r.frontier_nodes[level] for r in rows if r.missed)
        shares[str(level)] = sum(r.gold_nodes[level] for r in rows if r.missed) / fr if fr else None
        xs = [x for r in rows for x in r.ranks(level)]
        out[f"slot_frontier_rank_{level}"] = ({"median": float(np.median(xs)), "mean": float(np.mean(xs)),
                                               "n": len(xs)} if xs else None)
    out["slot_gold_share"] = shares
    with_missed = [r for r in rows if r.missed]
    out["slot_search"] = {
        "width": rows[0].width if rows else None, "max_pairs": rows[0].max_pairs if rows else None,
        "episodes": len(with_missed),
        "capped_episodes": sum(1 for r in with_missed if r.capped),
        "mean_states_1": float(np.mean([r.states[1] for r in with_missed])) if with_missed else None,
        "mean_states_2": float(np.mean([r.states[2] for r in with_missed])) if with_missed else None,
    }
    return out
