"""The reader-token budget: what the reader would be sent, counted exactly and kept current on the state.

Why a meter on the state: with ``Budget.tokens`` set, an activation or open
that would push the stop-time render past the budget is refused, and the
action mask must say so before the policy acts, for up to ``K`` slots every
step. Rendering the working subgraph for each candidate would cost a render
per slot. Instead the meter keeps the two sums the render's token count is
made of (:func:`mage_gym.render.node_share`):

    tokens = ceil(xml_chars / 4) + question_tokens + image_tokens

where ``xml_chars`` is the ``<evidence>`` wrapper plus each rendered node's
share, and every operation changes the sums by the shares of the nodes whose
state it changes. The state calls :meth:`TokenMeter.activated`,
:meth:`TokenMeter.opened` and :meth:`TokenMeter.pruned` from its own updates,
so the count follows every path that changes the table (reset templates,
carried conversation turns, the final open pass). ``ceil`` is applied to the
total, never per node, so the count is the render's to the token.

The question is the one the reader is asked: the bare question, or in a
conversation's later turns the earlier turns then the question
(:func:`mage_gym.env.turns.reader_question`), fixed for the turn.

When nothing can be rendered within the budget (the question and the empty
wrapper alone pass it), the count is that floor, above the budget: every
activation and open is refused and the reader gets the empty render.

Off (``tokens=None``), no meter exists and the step loop does not look for one
beyond a ``None`` check.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from mage_gym.env.graph_index import GraphIndex
from mage_gym.render import RenderConfig, frame_chars, node_share, text_tokens

_ACTIVATED, _OPENED = 1, 2  # node states (mage_gym.env.state; not imported: the state imports this module's type)


def fragment_memo(gi: GraphIndex) -> dict:
    """The renderer's node-fragment memo for the index's graph (kept on the index: it lives and dies with it).

    Shared by :func:`mage_gym.render.render` at stop and the meter, so a
    fragment is built once whichever asks first.
    """
    return gi.derived("render.fragments", lambda _: {})


class RenderCosts:
    """Each node's share of a render of one graph in one mode and config: XML characters and image tokens.

    Filled lazily (a share is computed the first time a rule asks for it) and
    shared by every meter on the graph: column 0 is the node ACTIVATED (a
    page: its fragment and closing tag), column 1 OPENED (elements only).
    """

    __slots__ = ("gi", "mode", "config", "memo", "frame", "chars", "images")

    def __init__(self, gi: GraphIndex, mode: str, config: RenderConfig) -> None:
        self.gi, self.mode, self.config = gi, mode, config
        self.memo = fragment_memo(gi)
        self.frame = frame_chars(gi.graph, mode)
        self.chars = np.full((gi.n_nodes, 2), -1, dtype=np.int64)  # -1: not computed yet
        self.images = np.zeros((gi.n_nodes, 2), dtype=np.int64)

    @classmethod
    def of(cls, gi: GraphIndex, mode: str, config: RenderConfig) -> "RenderCosts":
        """The table for ``(gi, mode, config)``, kept on the graph index."""
        tables = gi.derived("token_budget.costs", lambda _: {})
        table = tables.get((mode, config))
        if table is None:
            table = tables[(mode, config)] = cls(gi, mode, config)
        return table

    def share(self, v: int, opened: bool = False) -> tuple[int, int]:
        """``(chars, image tokens)`` of node ``v`` ACTIVATED (``opened``: OPENED)."""
        col = int(opened)
        if self.chars[v, col] < 0:
            self.chars[v, col], self.images[v, col] = node_share(self.gi.graph, v, opened, self.mode, self.config,
                                                                  self.memo)
        return int(self.chars[v, col]), int(self.images[v, col])

    def shares(self, nodes: np.ndarray, opened: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The same for an array of nodes: int64 arrays (chars, image tokens)."""
        col = int(opened)
        chars = self.chars[nodes, col]
        missing = nodes[chars < 0]
        if len(missing):  # (most steps: none; the mask asks for the same few slots again and again)
            for v in np.unique(missing).tolist():
                self.share(v, opened)
            chars = self.chars[nodes, col]
        return chars, self.images[nodes, col]

    def gather(self, nodes: np.ndarray, pages: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(chars [n, 2], images [n, 2], page chars [n], page images [n])``: each node's shares (ACTIVATED,
        OPENED) and its page's, computed first where missing (the mask's one gather for its three rules)."""
        chars, pc = self.chars[nodes], self.chars[pages, 0]
        if (chars < 0).any() or (pc < 0).any():
            for v in np.unique(np.concatenate((nodes, pages))).tolist():
                self.share(v)
                self.share(v, True)
            chars, pc = self.chars[nodes], self.chars[pages, 0]
        return chars, self.images[nodes], pc, self.images[pages, 0]


class TokenMeter:
    """The reader tokens of the current working subgraph's render, and what an operation would make of them.

    ``limit``: the budget (``Budget.tokens``); ``question_tokens``: the asked
    question's tokens; ``skipped``: nodes left out when the state was built
    (entry pages, or a conversation's carried nodes) because they did not fit.
    """

    __slots__ = ("costs", "limit", "question_tokens", "xml_chars", "image_tokens", "skipped")

    def __init__(self, costs: RenderCosts, limit: int, question_tokens: int) -> None:
        self.costs = costs
        self.limit = int(limit)
        self.question_tokens = int(question_tokens)
        self.xml_chars = costs.frame
        self.image_tokens = 0
        self.skipped: tuple[int, ...] = ()

    @classmethod
    def start(cls, gi: GraphIndex, limit: int, mode: str, config: RenderConfig, question: str) -> "TokenMeter":
        """A meter on an empty working subgraph, for the reader's ``question`` (as asked, history included)."""
        return cls(RenderCosts.of(gi, mode, config), limit, text_tokens(question))

    def copy(self) -> "TokenMeter":
        out = TokenMeter.__new__(TokenMeter)
        out.costs, out.limit, out.question_tokens = self.costs, self.limit, self.question_tokens
        out.xml_chars, out.image_tokens, out.skipped = self.xml_chars, self.image_tokens, self.skipped
        return out

    def key(self) -> tuple:
        """What a state built with this meter depends on beyond the graph and budget (reset template keys)."""
        return (self.costs.mode, self.costs.config, self.question_tokens)

    # --- the count ---------------------------------------------------------------------------

    @property
    def used(self) -> int:
        """``render(...).tokens`` of the current state."""
        return -(-self.xml_chars // 4) + self.question_tokens + self.image_tokens

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)

    def after(self, chars: int, images: int) -> int:
        """The count after adding ``chars`` XML characters and ``images`` image tokens."""
        return -(-(self.xml_chars + chars) // 4) + self.question_tokens + self.image_tokens + images

    def info(self) -> dict[str, int]:
        """``info["token_budget"]``: limit, used, left."""
        return {"limit": self.limit, "used": self.used, "left": self.left}

    # --- what an operation would render (the rules read these; the mask reads the array forms) --------

    def after_activate(self, v: int, page: int, page_unvisited: bool) -> int:
        """The count after activating ``v`` (a page, or an element on ``page``, activated too when unvisited)."""
        chars, images = self.costs.share(v)
        if v != page and page_unvisited:
            pc, pi = self.costs.share(page)
            chars, images = chars + pc, images + pi
        return self.after(chars, images)

    def after_open(self, v: int) -> int:
        """The count after opening the ACTIVATED element ``v``."""
        ac, ai = self.costs.share(v)
        oc, oi = self.costs.share(v, True)
        return self.after(oc - ac, oi - ai)

    def fit_slots(self, nodes: np.ndarray, pages: np.ndarray, page_unvisited: np.ndarray) -> np.ndarray:
        """bool [3, n]: for each node (``pages``: its page), whether ActivatePage (its page), ActivateNode (it, and
        its page when ``page_unvisited``) and OpenNode would stay within the limit: :meth:`after_activate` and
        :meth:`after_open` for many nodes at once (the action mask)."""
        chars, images, pc, pi = self.costs.gather(nodes, pages)
        with_page = page_unvisited & (nodes != pages)
        room = self.limit - self.question_tokens - self.image_tokens  # what the XML and new images may take
        x = self.xml_chars
        out = np.empty((3, len(nodes)), dtype=bool)
        out[0] = -(-(x + pc) // 4) + pi <= room
        out[1] = -(-(x + chars[:, 0] + pc * with_page) // 4) + images[:, 0] + pi * with_page <= room
        out[2] = -(-(x + chars[:, 1] - chars[:, 0]) // 4) + images[:, 1] - images[:, 0] <= room
        return out

    def refusal(self, after: int) -> str:
        """The error of an operation refused by the budget (it names what it would render and the budget)."""
        return (f"would render {after} reader tokens, over the token budget of {self.limit} "
                f"({self.used} used, {self.left} left)")

    # --- updates (called by EvidenceState) ------------------------------------------------------

    def activated(self, v: int) -> None:
        chars, images = self.costs.share(v)
        self.xml_chars += chars
        self.image_tokens += images

    def opened(self, v: int) -> None:
        ac, ai = self.costs.share(v)
        oc, oi = self.costs.share(v, True)
        self.xml_chars += oc - ac
        self.image_tokens += oi - ai

    def pruned(self, nodes: Sequence[int], previous: Iterable[int]) -> None:
        """``nodes`` left the render; ``previous``: their states before (only ACTIVATED / OPENED ones counted)."""
        for v, st in zip(nodes, previous):
            if st == _ACTIVATED or st == _OPENED:
                chars, images = self.costs.share(int(v), st == _OPENED)
                self.xml_chars -= chars
                self.image_tokens -= images

    # --- checks -------------------------------------------------------------------------------

    def recount(self, node_state: np.ndarray) -> tuple[int, int]:
        """``(xml chars, image tokens)`` summed from scratch over ``node_state`` (invariant checks)."""
        chars, images = self.costs.frame, 0
        for col, value in ((0, _ACTIVATED), (1, _OPENED)):
            nodes = np.flatnonzero(node_state == value)
            c, i = self.costs.shares(nodes, bool(col))
            chars += int(c.sum())
            images += int(i.sum())
        return chars, images

    @property
    def floor(self) -> int:
        """The count of an empty render: the budget cannot hold less."""
        return math.ceil(self.costs.frame / 4) + self.question_tokens


__all__ = ["RenderCosts", "TokenMeter", "fragment_memo"]
