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
- the privileged oracle (:class:`policies.oracle.OraclePolicy`) under the
  same budget: page recall, pages and tokens rendered.

Hops are counted over graph nodes: the working set is the entry pages and
their elements; one hop is any node joined to it by an edge of the kind, two
hops any node joined to those. A page is reached when any of its nodes is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

ANY = "any"


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
                    multiples: Sequence[int] = (1, 2, 3)) -> EpisodeHeadroom | None:
    """Reset ``env`` (privileged) on ``episode_id`` and measure retrieval depth, reach and slots at reset.

    ``window``: the episode's page window (its public ``page_window``), as the env applies it.

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
    return EpisodeHeadroom(episode_id=episode_id, gold_pages=len(gold), missed=len(missed), recall_at=recall_at,
                           reach=reach, hood=hood, in_slots=in_slots, frontier_ranks=frontier_ranks)


def run_oracle(env: Any, episode_id: str, seed: int) -> dict[str, Any]:
    """The oracle's page recall, pages and tokens on one episode (privileged env)."""
    from policies.oracle import OraclePolicy
    from policies.runner import run_episode

    policy = OraclePolicy(env)
    r = run_episode(env, policy, episode_id, seed=seed)
    m = r.metrics
    return {"recall": m.get("evidence_page_recall"), "pages": m.get("pages_rendered"),
            "tokens": m.get("tokens_rendered")}


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
    return out
