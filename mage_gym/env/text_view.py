"""The text view of the state for LLM policies (beside the observation, never inside it).

Why XML-like text: an LLM evaluator reads the question, the evidence gathered
so far (summaries, opened content), the recent operations and numbered
candidates, and answers with a structured round decision
(:class:`~mage_gym.env.env.RoundDecision`). Every piece of document text is
XML-escaped, so a document cannot forge tags (e.g. a fake ``</candidates>``).

Candidates are the frontier slots (the same ``K`` slots the learned policy
sees, minus the working set), numbered from 1 in slot order; a round decision
activates candidates by these numbers. Nodes to open or prune are named by
their ``id`` from ``<evidence_state>``.

Under a reader-token budget the ``<budget>`` line also says ``tokens_left``
and ``token_budget`` (the render's reader tokens left, and the cap).
"""
from __future__ import annotations

from collections import deque
from typing import Iterable, Sequence

import numpy as np

from mage_gym.env.graph_index import GraphIndex
from mage_gym.env.state import ACTIVATED, OPENED, STATE_NAMES, EvidenceState
from mage_gym.graph.schema import EDGE_KINDS
from mage_gym.graph.union import page_label
from mage_gym.render import esc

PREVIEW_CHARS = 160
OPENED_CHARS = 1200
SUMMARY_CHARS = 300


def frontier_candidates(state: EvidenceState, slots: np.ndarray) -> list[int]:
    """Node indices of the numbered candidates (candidate ``i`` is element ``i - 1``)."""
    nw = min(len(state.working), len(slots))
    return [int(v) for v in slots[nw:] if v >= 0]


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _node_fragment(gi: GraphIndex, v: int, st: int) -> str:
    el = gi.graph.elements[v - gi.n_pages]
    name = STATE_NAMES[st]
    if st == OPENED:
        body = el.table_markdown if (el.type == "table" and el.table_markdown) else el.text
        inner = f"<content>{esc(_clip(body, OPENED_CHARS))}</content>"
    else:
        inner = f"<summary>{esc(_clip(el.summary or el.text, SUMMARY_CHARS))}</summary>"
    return f'    <node id="{esc(el.node_id)}" type="{esc(el.type)}" state="{name}">{inner}</node>'


def _page_attrs(gi: GraphIndex, p: int, name: str) -> str:
    """``number="3"``; on a union of documents the page's own number and its document: ``number="3" doc="B"``."""
    number, doc = page_label(gi.graph, p)
    return f'{name}="{number}"' if doc is None else f'{name}="{number}" doc="{esc(doc)}"'


def build_text_view(state: EvidenceState, question: str, slots: np.ndarray,
                    recent: Iterable[tuple[str, str, bool, str | None]],
                    history: Sequence[tuple[str, str | None]] = ()) -> str:
    """The view; ``history``: a conversation's earlier questions and the reader's answers (never gold)."""
    gi, b, c = state.gi, state.budget, state.counters
    st = state.node_state
    lines = ["<mage_state>", f"  <question>{esc(question)}</question>"]
    if history:
        lines.append("  <conversation>")
        for i, (q, a) in enumerate(history):
            answer = "" if a is None else esc(a)
            lines.append(f'    <turn n="{i + 1}"><question>{esc(q)}</question><answer>{answer}</answer></turn>')
        lines.append("  </conversation>")
    tokens = "" if state.tokens is None else \
        f' tokens_left="{state.tokens.left}" token_budget="{state.tokens.limit}"'
    lines.append(
        f'  <budget round="{min(c.round + 1, b.T)}" rounds="{b.T}" activations_left_in_round="{state.round_left}" '
        f'activations_left="{state.acts_left}" opens_left="{state.opens_left}" '
        f'steps_used="{c.steps}" step_cap="{b.max_steps}"{tokens}/>'
    )
    lines.append("  <evidence_state>")
    pages = sorted({int(gi.node_page[v]) for v in state.working})
    for p in pages:
        page = gi.graph.pages[p]
        number = _page_attrs(gi, p, "number")
        if st[p] == ACTIVATED:
            lines.append(f'  <page id="{esc(page.node_id)}" {number} state="activated">')
            lines.append(f"    <summary>{esc(_clip(page.summary or page.text, SUMMARY_CHARS))}</summary>")
        else:
            lines.append(f'  <page id="{esc(page.node_id)}" {number} state="{STATE_NAMES[st[p]]}">')
        for v in range(int(gi.page_lo[p]), int(gi.page_hi[p])):
            if st[v] == ACTIVATED or st[v] == OPENED:
                lines.append(_node_fragment(gi, v, int(st[v])))
        lines.append("  </page>")
    lines.append("  </evidence_state>")
    lines.append("  <recent_trace>")
    for op, target, ok, err in recent:
        attrs = f'op="{op}" target="{esc(target)}" ok="{str(ok).lower()}"'
        if err:
            attrs += f' error="{esc(err)}"'
        lines.append(f"    <step {attrs}/>")
    lines.append("  </recent_trace>")
    lines.append("  <candidates>")
    cands = frontier_candidates(state, slots)
    if cands:
        rel = state.relation_bits(np.asarray(cands, dtype=np.int64))
    for i, v in enumerate(cands):
        kinds = [EDGE_KINDS[k] for k in np.flatnonzero(rel[i])]
        p = int(gi.node_page[v])
        if not gi.is_page[v] and st[p] == ACTIVATED and "containment" not in kinds:
            kinds.insert(0, "containment")
        node = gi.graph.pages[v] if gi.is_page[v] else gi.graph.elements[v - gi.n_pages]
        preview = _clip(node.summary or node.text, PREVIEW_CHARS)
        page_state = "activated" if st[p] == ACTIVATED else "not_activated"
        page_attr = _page_attrs(gi, p, "page")
        lines.append(
            f'    <candidate n="{i + 1}" id="{esc(node.node_id)}" type="{esc(gi.node_type(v))}" {page_attr} '
            f'page_state="{page_state}" relation="{",".join(kinds)}"><preview>{esc(preview)}</preview></candidate>'
        )
    lines.append("  </candidates>")
    lines.append("</mage_state>")
    return "\n".join(lines)


def recent_buffer(n: int = 12) -> deque:
    return deque(maxlen=n)
