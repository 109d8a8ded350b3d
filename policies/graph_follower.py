"""``graph_follower``: read the passage that best matches the question, then follow its relations a few pages on.

Why it exists: a two-hop question (a synthetic *bridge* question, or "what
does Note 7 say about ...") names its first hop but not its second; the second
hop's page shares no words with the question, so retrieval alone misses it,
and a controller has to *navigate*: from the passage that matches the
question, along a cross-reference, the section tree or a semantic link. This
rule policy is the simplest controller that does that from public signals
only, so it shows the task is solvable without gold (issue 13, item 8) and
gives learned controllers a navigating baseline beside ``heuristic`` (which
expands by relevance and so never reaches a page the question does not
match).

What it reads: the observation (relevance, slot types, mask) and the env's
public graph API (``env.get_wrapper_attr("graph")``: per-kind adjacency and
node pages; ``slots``: which node sits in which slot). Never gold; it runs
on any env, privileged or not. It needs its env: build it with
``GraphFollowerPolicy(env)`` or call :meth:`bind`; :func:`mage_gym.bench.play.run_episode`
binds it to the env it plays (``needs_env``).

One episode, one decision at a time:

1. **anchor**: activate the most question-relevant element on the entry
   pages; it and the element after it on the same page (a passage often
   names its subject, then points on: "... is reviewed in Section 4.4")
   are the anchors;
2. **plan**: the pages of nodes within ``hops`` edges of the anchors along
   each relation of ``kinds``, nearest first (one edge along any relation
   before two), then in ``kinds`` order (explicit references first: they are
   the most precise), then the best anchor's links first; active pages are
   skipped; keep the first ``max_new_pages``;
3. **follow**: activate each planned page through a slot on it (a node the
   relation reached first, then the page node, then any element). When the
   page has no slot because the relevance-ranked frontier was cut at ``K``
   (a page reached only by a link ranks low for the question), prune the
   least relevant active entry page other than the anchor's (``make_room``;
   pruning is free and final) and try again; a page that still has no slot
   when nothing is left to prune is skipped. Under a reader-token budget the
   same prune makes room when the page has a slot but would not fit the
   budget (the entry pages can fill it);
4. in ``text`` mode, an element it activates is opened next while opens
   are left (a summary gives the reader nothing); then **stop**.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from mage_gym.env import Op
from mage_gym.bench.protocol import EnvInfo
from policies.base import EnvBoundPolicy
from policies.features import SlotView, action_of, best_slot, op_mask, prune_to_make_room, token_refused_slots

#: Relations followed by default, in priority order.
DEFAULT_KINDS: tuple[str, ...] = ("reference", "semantic", "section")


class GraphFollowerPolicy(EnvBoundPolicy):
    """Anchor on the best passage, follow its relations to a few new pages (see module docstring)."""

    name = "graph_follower"
    needs_env = True  # :func:`mage_gym.bench.play.run_episode` binds it to the env it plays

    def __init__(self, env: Any = None, kinds: Sequence[str] = DEFAULT_KINDS, hops: int = 2,
                 max_new_pages: int = 3, make_room: bool = True, render_mode: str | None = None,
                 **kw: Any) -> None:
        super().__init__(env=env, render_mode=render_mode, **kw)
        if hops < 1 or max_new_pages < 0:
            raise ValueError(f"hops must be >= 1 and max_new_pages >= 0, got {hops}, {max_new_pages}")
        self.kinds, self.hops, self.max_new_pages, self.make_room = tuple(kinds), int(hops), int(max_new_pages), \
            bool(make_room)
        self._graph: Any = None
        self._anchors: list[int] | None = None
        self._plan: list[tuple[int, list[int]]] | None = None  # (page, nodes the relations reached on it)
        self._followed: set[int] = set()  # pages activated from the plan (never pruned to make room)
        self._to_open: list[int] = []
        self._mode = "visual"

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)  # raises unless bound to its env
        self._graph = self._env.get_wrapper_attr("graph")
        self._anchors, self._plan, self._followed, self._to_open = None, None, set(), []
        self._mode = self.render_mode or env_info.render_mode

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> int:
        g = self._graph
        assert g is not None, "reset() first"
        v = SlotView.from_obs(obs)
        K = v.K
        slots = np.asarray(self._env.get_wrapper_attr("slots"))
        valid = slots >= 0
        spage = np.where(valid, np.asarray(g.node_page)[np.clip(slots, 0, None)], -1)
        can_node, can_page = op_mask(mask, Op.ACTIVATE_NODE, K), op_mask(mask, Op.ACTIVATE_PAGE, K)
        slot_of = {int(n): s for s, n in enumerate(slots.tolist()) if n >= 0}

        if self._mode == "text" and self._to_open:  # step 4: open what was just activated
            can_open = op_mask(mask, Op.OPEN_NODE, K)
            while self._to_open:
                s = slot_of.get(self._to_open.pop(0))
                if s is not None and can_open[s]:
                    self.count("opens")
                    return action_of(Op.OPEN_NODE, s, K)
        if self._anchors is None:  # step 1
            on_entry = ~v.is_page & v.page_activated
            s = best_slot(v.rel, can_node & on_entry)
            if self.make_room:  # the best passage would not fit the token budget: drop another entry page first
                refused = token_refused_slots(self._env, K) & on_entry
                r = best_slot(v.rel, refused)
                if r is not None and (s is None or v.rel[r] > v.rel[s]):
                    prune = prune_to_make_room(v, mask, spage, {int(spage[r])}, K)
                    if prune is not None:
                        self.count("prunes_for_tokens")
                        return prune
            if s is None:
                self.count("stops_no_anchor")
                return 0
            a = int(slots[s])
            nxt = a + 1
            self._anchors = [a] + ([nxt] if nxt < g.n_nodes and g.node_page[nxt] == g.node_page[a] else [])
            return self._activated(Op.ACTIVATE_NODE, s, a, K)
        if self._plan is None:  # step 2
            active = {int(p) for p in spage[v.page_activated]}
            self._plan = self._reached_pages(active)[: self.max_new_pages]
            self.count("planned_pages", len(self._plan))
        while self._plan:  # step 3
            page, reached = self._plan[0]
            on_page = np.flatnonzero(spage == page).tolist()
            first = {slot_of[n] for n in reached if n in slot_of}
            for s in sorted(on_page, key=lambda s: (s not in first, not v.is_page[s], s)):
                if v.is_page[s] and can_page[s]:
                    self._plan.pop(0)
                    self._followed.add(page)
                    return self._activated(Op.ACTIVATE_PAGE, s, int(slots[s]), K)
                if not v.is_page[s] and can_node[s]:
                    self._plan.pop(0)
                    self._followed.add(page)
                    return self._activated(Op.ACTIVATE_NODE, s, int(slots[s]), K)
            anchor_page = int(g.node_page[self._anchors[0]]) if self._anchors else -1
            keep = self._followed | {anchor_page}
            if self.make_room and on_page and token_refused_slots(self._env, K)[on_page].any():
                prune = prune_to_make_room(v, mask, spage, keep, K)  # the page would not fit the token budget
                if prune is not None:
                    self.count("prunes_for_tokens")
                    return prune
            if self.make_room and valid.all():
                prune = prune_to_make_room(v, mask, spage, keep, K)
                if prune is not None:
                    self.count("prunes_to_make_room")
                    return prune
            self.count("pages_without_slot")
            self._plan.pop(0)
        return 0

    def _activated(self, op: Op, slot: int, node: int, K: int) -> int:
        """Count an activation and, in text mode, queue an activated element for opening."""
        self.count("activations")
        if self._mode == "text" and node >= int(self._graph.n_pages):
            self._to_open.append(node)
        return action_of(op, slot, K)

    def _reached_pages(self, active: set[int]) -> list[tuple[int, list[int]]]:
        """(page, reached nodes on it) within ``hops`` edges of the anchors: nearest first, then by ``kinds`` order.

        Distance before relation: a page one edge away along any relation is a
        better bet than one two edges away along a preferred one (two-edge
        semantic paths fan out over look-alike passages).
        """
        g = self._graph
        node_page = np.asarray(g.node_page)
        kinds = [k for k in self.kinds if k in g.adjacency]
        frontier = {k: list(self._anchors or []) for k in kinds}  # lists: the best-matching anchor's links first
        seen = {k: set(frontier[k]) for k in kinds}
        plan: dict[int, list[int]] = {}
        for _ in range(self.hops):
            for kind in kinds:
                indptr, idx = g.adjacency[kind]
                nxt = []
                for n in frontier[kind]:
                    for m in idx[indptr[n]:indptr[n + 1]].tolist():
                        if m not in seen[kind]:
                            seen[kind].add(m)
                            nxt.append(m)
                for m in nxt:
                    p = int(node_page[m])
                    if p not in active:
                        plan.setdefault(p, []).append(int(m))
                frontier[kind] = nxt
        return list(plan.items())
