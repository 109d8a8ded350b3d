"""``oracle``: a greedy controller that knows the gold - an upper-bound reference and a teacher, never a baseline.

Why it exists: a figure for "how much a controller could gain by navigating"
needs a controller that navigates perfectly *within the env's own rules*:
the same candidate slots, the same mask, the same budget. This one reads the
gold only through the env's privileged view (``env.get_wrapper_attr(
"privileged_view")()``, which raises unless the env was built with
``privileged=True``), so it cannot run by accident on an ordinary env, and
every row it produces says ``"privileged": true``.

Greedy, one decision at a time (first rule that applies wins):

1. **open** (text and elements modes): an activated gold element of an uncovered item is
   opened (the reader gets its full text); for an uncovered page-level item,
   an activated element of its page;
2. **activate** a slot that is itself gold for an uncovered item (a gold page:
   ActivatePage; a gold element: ActivateNode, which brings its page);
3. **activate** the page of an uncovered item through a slot on that page
   (its page node first, else any unvisited element of it); in text (and elements) mode an
   active page of an uncovered page-level item gets an element activated
   (to be opened by rule 1: a page's summary covers nothing);
4. **activate** a gold element of an already covered item when it is still
   unvisited (its page is active, so it costs one activation but no page):
   the element's own relations then bring their neighbours into the
   frontier, which is how the second hop of a multi-hop question appears;
5. **make room**: when gold is still uncovered, none of it is in the slots
   and every slot is taken (the relevance-ranked frontier was cut at ``K``),
   prune the least relevant active page that holds no gold. Pruning is free
   and only drops non-gold nodes, but it takes that page's elements and
   neighbours out of the frontier, so nodes the cut hid move up: a
   low-relevance second hop linked from the first (a ``reference`` target
   shares no words with the question) would otherwise never reach a slot.
   With ``make_room="stop"`` it stops there instead (a teacher for students:
   which page "holds no gold" is the one thing about these prunes a student
   cannot see, and a student copying them prunes the pages it needs);
   5a, checked first, **make token room**: under a reader-token budget
   (``env.budget.tokens``), when gold in the slots is refused only because
   its page would not fit, prune the least relevant active page holding no
   gold the same way (``"stop"``: stop instead). The entry pages alone can
   fill a budget set at topk_page's operating cost, so without this rule no
   controller reads past them within it. ``make_room="tokens"`` prunes here
   and stops at rule 5: a student can ground these prunes better (the budget
   says tokens are short, the pruned page is the least relevant one);
6. otherwise **stop**: no gold left in the slots.

An item counts as covered by the env's own rule (:func:`mage_gym.coverage.cover`,
the rule of support, page recall and all-covered): the reader gets its page
image (an active page in ``visual`` mode; in ``text`` mode its whole text, when
it fits the reader's limit; in ``elements`` mode never) or the full text of an opened gold
element (element gold) or of any opened element on its page (page-level
gold). Because it is greedy and never
looks beyond the slots, its recall is a lower bound on what the best
controller reaches; multi-hop questions still work because covering the first
hop's gold brings the second hop's nodes into the frontier.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from mage_gym.coverage import cover
from mage_gym.env import ActionLayout, Op
from mage_gym.render import whole_text_pages
from mage_gym.bench.protocol import EnvInfo
from policies.base import EnvBoundPolicy
from policies.features import SlotView, action_of, op_mask, prune_to_make_room, token_refused_slots


#: what the oracle does where it would prune a non-gold page to make room (rules 5a and 5): prune for both,
#: stop for both, or prune only for reader tokens (5a) and stop where the slots are full (5)
MAKE_ROOM = ("prune", "stop", "tokens")


class OraclePolicy(EnvBoundPolicy):
    """Greedy gold-aware controller over the env's candidate slots (see module docstring).

    Bind it to the env it plays (``OraclePolicy(env)`` or :meth:`bind`): it
    reads the slot contents and the privileged view from there at each step.
    """

    name = "oracle"
    privileged = True  # its results are upper bounds: never in a comparison unless asked for

    def __init__(self, env: Any = None, render_mode: str | None = None, make_room: str = "prune",
                 **kw: Any) -> None:
        super().__init__(env=env, render_mode=render_mode, **kw)
        if make_room not in MAKE_ROOM:
            raise ValueError(f"make_room must be one of {MAKE_ROOM}, got {make_room!r}")
        self.make_room = make_room
        self._view = None
        self._node_page: np.ndarray | None = None
        self._n_pages = 0
        self._mode = "visual"
        self._whole_text = np.zeros(0, dtype=bool)
        self._room_for: list[int] = []  # rule 5a's refused gold slots, best first (read by chat_choice)

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)  # raises unless bound to its env
        get = self._env.get_wrapper_attr
        self._view = get("privileged_view")()  # raises PrivilegedAccessError unless privileged=True
        graph = get("graph")
        self._node_page = np.asarray(graph.node_page)
        self._n_pages = int(graph.n_pages)
        self._mode = self.render_mode or env_info.render_mode
        # text mode: pages sent whole as their text; elements mode: none
        self._whole_text = whole_text_pages(graph, get("render_config"), self._mode)

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> int:
        rule, actions = self.choices(obs, mask)
        if rule is not None:
            self.count(rule)
        return actions[0]

    def choices(self, obs: Mapping[str, np.ndarray], mask: np.ndarray,
                reachable: np.ndarray | None = None) -> tuple[str | None, list[int]]:
        """(the rule that applies, every action that rule accepts equally); :meth:`act` takes the first.

        Why the whole set: when two gold pages sit in the slots the greedy
        order between them (gold item order, slot order) is arbitrary and not
        in the observation; a student imitating one of them would be taught a
        tie-break it cannot see. DAgger labels with the set instead
        (:mod:`policies.dagger`). Rule 1: any open of an uncovered item's
        candidate; rule 2: any slot holding gold of an uncovered item; rule 3:
        for each uncovered page, the action the oracle would take on it; rule
        4: any such gold element; make-room prunes and stops are single.
        ``reachable`` (bool [K], None: all): the slots the caller may act on
        (the chat: its listed candidates), so rule 5a makes token room only for
        gold the caller can then activate.
        """
        view = self._view
        assert view is not None and self._node_page is not None, "reset() first"
        if not view.gold_known:
            return None, [0]
        v = SlotView.from_obs(obs)
        K = v.K
        slots = np.asarray(self._env.get_wrapper_attr("slots"))
        node_page = self._node_page
        valid = slots >= 0
        spage = np.where(valid, node_page[np.clip(slots, 0, None)], -1)
        active_pages = set(spage[v.page_activated].tolist())  # any slot on an active page says so
        opened = set(slots[v.opened].tolist())
        can_open = op_mask(mask, Op.OPEN_NODE, K)
        can_node = op_mask(mask, Op.ACTIVATE_NODE, K)
        can_page = op_mask(mask, Op.ACTIVATE_PAGE, K)
        slot_of = {int(n): s for s, n in enumerate(slots.tolist()) if n >= 0}

        covered = self._covered(view, opened, active_pages)
        uncovered = [(item, page, is_page) for item, page, is_page, c
                     in zip(view.items, view.item_pages, view.item_is_page, covered) if not c]
        if not uncovered:
            return "stops_all_covered", [0]
        text = self._mode != "visual"  # text and elements modes: gold is reached by opening elements
        can_still_open = float(np.asarray(obs["budget"])[2]) > 0  # opens left (the budget vector's third entry)
        out: list[int] = []
        if text:  # rule 1
            for item, page, is_page in uncovered:
                cands = np.flatnonzero(can_open & (spage == page)).tolist() if is_page else \
                    [s for n in item if (s := slot_of.get(int(n))) is not None and can_open[s]]
                out += [action_of(Op.OPEN_NODE, c, K) for c in cands]
            if out:
                return "opens", _unique(out)
        for item, _, _ in uncovered:  # rule 2
            for n in item:
                s = slot_of.get(int(n))
                if s is None:
                    continue
                if int(n) < self._n_pages and can_page[s]:
                    out.append(action_of(Op.ACTIVATE_PAGE, s, K))
                elif int(n) >= self._n_pages and can_node[s]:
                    out.append(action_of(Op.ACTIVATE_NODE, s, K))
        if out:
            return "activations", _unique(out)
        for _, page, is_page in uncovered:  # rule 3
            if page in active_pages and not (text and is_page and can_still_open):
                continue
            on_page = np.flatnonzero(valid & (spage == page))
            # text mode, page-level gold: an element first (it brings its page; opened, it gives full text)
            elements_first = text and is_page
            for s in sorted(on_page.tolist(), key=lambda s: (bool(v.is_page[s]) == elements_first, s)):
                if v.is_page[s] and can_page[s]:
                    out.append(action_of(Op.ACTIVATE_PAGE, s, K))
                    break
                if not v.is_page[s] and can_node[s]:
                    out.append(action_of(Op.ACTIVATE_NODE, s, K))
                    break
        if out:
            return "activations", _unique(out)
        for item in view.items:  # rule 4: a covered item's gold element not yet active (its links lead on)
            for n in item:
                s = slot_of.get(int(n))
                if s is not None and int(n) >= self._n_pages and can_node[s]:
                    out.append(action_of(Op.ACTIVATE_NODE, s, K))
        if out:
            return "activations_gold_links", _unique(out)
        gold_pages = {int(p) for p in view.item_pages} | {int(p) for p in view.pages}
        # rule 5a: what rules 2-4 would take but the budget refuses, best first (gold nodes, their pages' slots)
        wanted: list[int] = []
        for item, page, _ in uncovered:
            wanted += [s for n in item if (s := slot_of.get(int(n))) is not None]
            wanted += np.flatnonzero(valid & (spage == page)).tolist()
        for item in view.items:  # gold nodes (rule 4: a covered item's unvisited element, whose links lead on)
            wanted += [s for n in item if (s := slot_of.get(int(n))) is not None and v.unvisited[s]]
        refused = token_refused_slots(self._env, K) if wanted else np.zeros(K, dtype=bool)
        targets = [s for s in _unique(wanted) if refused[s] and (reachable is None or reachable[s])]
        if targets:
            prune = prune_to_make_room(v, mask, spage, gold_pages, K)
            if prune is not None:
                if self.make_room == "stop":
                    return "stops_instead_of_token_room", [0]
                self._room_for = targets  # the chat takes the first that fits in the same reply
                return "prunes_for_tokens", [prune]
        if valid.all():  # rule 5: the frontier was cut at K; drop a non-gold page to let hidden nodes up
            prune = prune_to_make_room(v, mask, spage, gold_pages, K)
            if prune is not None:
                if self.make_room in ("stop", "tokens"):
                    return "stops_instead_of_make_room", [0]
                return "prunes_to_make_room", [prune]
        return "stops_no_gold_in_slots", [0]

    def chat_choice(self, obs: Mapping[str, np.ndarray], mask: np.ndarray, listing_full: bool,
                    listed: Sequence[str] | None = None) -> int | str | list[int]:
        """The oracle's move through MageRAG-Chat-v0, whose candidate list is shorter than the ``K`` slots.

        ``mask`` is restricted to what the chat shows (listed candidates, held
        evidence, stop). Rules 1-4 are :meth:`choices`'; when gold is still
        uncovered but none of it is listed, the chat's own ways to reach it
        replace rule 5: prune the least relevant non-gold page when the list
        was cut at its length (``listing_full``: hidden candidates move up),
        else ``"search"`` (the caller searches the question: the next pages by
        relevance, as a student can). With ``make_room="stop"`` it stops
        wherever it would prune. ``listed``: the ids of the listed candidates
        (rule 5a makes token room only for gold among them; None: any slot).
        Returns a flat action, ``"search"``, or, where rule 5a prunes, the
        prune and the activation of the gold it makes room for (one reply of
        two calls, so the student sees the candidate's number in the turn
        just before; the activation only when the prune frees enough tokens).
        """
        slots = np.asarray(self._env.get_wrapper_attr("slots"))
        reachable = None
        if listed is not None:
            ids = self._env.get_wrapper_attr("slot_node_ids")()
            shown = set(listed)
            reachable = np.asarray([i is not None and i in shown for i in ids], dtype=bool)
        self._room_for = []
        rule, actions = self.choices(obs, mask, reachable)
        if rule == "prunes_for_tokens":  # the prune and the activation it makes room for, in one reply
            self.count(rule)
            K = len(slots)
            pruned = int(slots[ActionLayout(K).decode(actions[0])[1]])
            fits = self._env.get_wrapper_attr("fits_after_prune")
            for s in self._room_for:
                node = int(slots[s])
                if fits(pruned, node):
                    op = Op.ACTIVATE_PAGE if node < self._n_pages else Op.ACTIVATE_NODE
                    return [actions[0], action_of(op, s, K)]
            return actions[0]
        if rule != "stops_no_gold_in_slots":
            if rule is not None:
                self.count(rule)
            return actions[0]
        v = SlotView.from_obs(obs)
        if listing_full:
            assert self._node_page is not None and self._view is not None
            spage = np.where(slots >= 0, self._node_page[np.clip(slots, 0, None)], -1)
            gold_pages = {int(p) for p in self._view.item_pages} | {int(p) for p in self._view.pages}
            prune = prune_to_make_room(v, mask, spage, gold_pages, v.K)
            if prune is not None and self.make_room in ("stop", "tokens"):
                self.count("chat_stops_instead_of_make_room")
                return 0
            if prune is not None:
                self.count("chat_prunes_to_make_room")
                return prune
        self.count("chat_searches")
        return "search"

    def _covered(self, view: Any, opened: set[int], active_pages: set[int]) -> np.ndarray:
        """bool per gold item: what the reader would get now, by the env's rule (:func:`mage_gym.coverage.cover`).

        Gold outside the graph counts as covered here: nothing in the slots can reach it.
        """
        node_page = self._node_page
        opened_mask = np.zeros(len(node_page), dtype=bool)
        opened_mask[[n for n in opened if n >= 0]] = True
        whole = np.zeros(self._n_pages, dtype=bool)  # pages the reader gets whole: image, or whole text
        whole[list(active_pages)] = True
        if self._mode != "visual":
            whole &= self._whole_text
        cov = cover(view, opened_mask, whole, node_page)
        return cov.items | ~cov.item_counted


def _unique(actions: list[int]) -> list[int]:
    """``actions`` without repeats, first occurrence first (the first is what :meth:`OraclePolicy.act` takes)."""
    return list(dict.fromkeys(actions))


def privileged_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A result row of a privileged policy, marked so (``"privileged": true``) for every output that takes it."""
    return {**dict(row), "privileged": True}
