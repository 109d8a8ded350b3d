"""Multi-turn episodes (conversations): what carries from one question to the next, and the final tally.

A conversation is a list of questions asked in order over the same graph.
After each turn's Stop the reader answers that turn's question from the
working subgraph and the turn's reward is paid (the RL signal); then the next
question arrives and the working subgraph *carries over*: activated and opened
nodes stay, pruning marks are lifted (a node pruned as noise for one question
may be evidence for the next). The next question's ``k`` entry pages are
activated for free, as at reset (pages already in the working set cost
nothing and add nothing). Budgets: ``m, M, T, B`` and the step cap apply per
turn (opened nodes carried from earlier turns count towards ``B``, which
bounds what the reader receives); a conversation-wide cap bounds paid activations over all turns
(:attr:`Conversation.cap`, default :data:`DEFAULT_CAP_FACTOR` x ``M``), so a
controller gains by reusing what earlier turns gathered. A reader-token
budget applies to each turn's render, question as asked (history included):
carried nodes are kept in activation order while they fit, the others left
out (``state.tokens.skipped``), and the entry pages after them likewise.

Why a new state per turn: the state's incremental tables (frontier order,
``linker_rel``) are indexed by the question's relevance order; replaying the
working set onto a fresh state for the new question keeps every invariant of
:class:`~mage_gym.env.state.EvidenceState` without special cases.

Gold-derived numbers (metrics) are only reported at the end: the final
``info["metrics"]`` aggregates the turns (:func:`aggregate_outcomes`) and
lists them under ``per_turn``; intermediate steps carry the turn index and
the reader's answer, never metrics.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from mage_gym.env.budget import Budget
from mage_gym.env.outcome import Outcome
from mage_gym.env.state import ACTIVATED, OPENED, EvidenceState
from mage_gym.env.token_budget import TokenMeter

#: Default conversation-wide cap on paid activations, as a multiple of the per-turn ``M``.
DEFAULT_CAP_FACTOR = 2
#: Metrics summed over turns (counts and reader input); every other number is averaged over turns.
SUMMED_METRICS = frozenset({
    "tokens_rendered", "operations", "reader_calls", "evaluator_calls", "steps", "rounds", "activations", "opens",
    "searches", "invalid_actions",
})
#: What ``per_turn`` lists for each turn (besides ``turn`` and the reader's ``answer``).
PER_TURN_KEYS = ("reward", "evidence_page_recall", "tokens_rendered")


def carry_state(old: EvidenceState, budget: Budget, rank_of: np.ndarray,
                meter: TokenMeter | None = None) -> EvidenceState:
    """A fresh state for the next question holding ``old``'s working set (activation order, opened kept).

    ``meter`` (under a token budget, for the new question): a node is carried
    only when it fits, as it was (opened or not); an element whose page was
    left out is left out too. Left-out nodes go to ``meter.skipped``.
    """
    state = EvidenceState.new(old.gi, budget, rank_of)
    state.tokens = meter
    skipped: list[int] = []
    gi = old.gi
    for v in old.working:
        opened = old.node_state[v] == OPENED
        if meter is not None:
            page = int(gi.node_page[v])
            if v != page and state.node_state[page] != ACTIVATED:  # its page was left out
                skipped.append(v)
                continue
            chars, images = meter.costs.share(v, opened)
            if meter.after(chars, images) > meter.limit:
                skipped.append(v)
                continue
        state.activate(v)
        if opened:
            state.open(v)
    if meter is not None:
        meter.skipped = tuple(skipped)
    state.counters.free_acts = len(state.working)  # carried nodes were paid for in earlier turns
    # B bounds the opened nodes the reader gets: carried opened nodes use it up, as if opened this turn
    state.counters.opens_used = min(budget.B, int(np.sum(state.node_state == OPENED)))
    return state


@dataclass
class TurnRecord:
    """One finished turn: its outcome (gold-derived, kept until the end) and the reader's answer."""

    question: str
    answer: str | None
    outcome: Outcome
    stop_reason: str


@dataclass
class Conversation:
    """Progress through the turns of one episode (a single question is a one-turn conversation)."""

    n_turns: int
    cap: int  # paid activations allowed over the whole conversation
    turn: int = 0
    acts_used: int = 0  # paid activations of finished turns
    finished: list[TurnRecord] = field(default_factory=list)

    @classmethod
    def start(cls, n_turns: int, budget: Budget, cap: int | None) -> "Conversation":
        return cls(n_turns=int(n_turns), cap=int(cap) if cap is not None else DEFAULT_CAP_FACTOR * budget.M)

    @property
    def is_conversation(self) -> bool:
        return self.n_turns > 1

    @property
    def last_turn(self) -> bool:
        return self.turn >= self.n_turns - 1

    def turn_budget(self, budget: Budget) -> Budget:
        """The per-turn budget with ``M`` cut to what the conversation-wide cap leaves."""
        left = max(0, self.cap - self.acts_used)
        return budget if left >= budget.M else replace(budget, M=left)

    def history(self) -> list[tuple[str, str | None]]:
        """Earlier questions and the reader's answers (what the text view shows; no gold)."""
        return [(t.question, t.answer) for t in self.finished]


def reader_question(history: Sequence[tuple[str, str | None]], question: str) -> str:
    """What the reader is asked: the question itself, or, in a conversation, the earlier turns then the question.

    Why: a follow-up ("and in the prior year?") cannot be answered alone; the
    reader gets the earlier questions and its own earlier answers (never gold).
    The first turn, and every single-question episode, is the bare question.
    """
    if not history:
        return question
    lines = ["Earlier in this conversation:"]
    for i, (q, a) in enumerate(history):
        lines.append(f"Q{i + 1}: {q}")
        if a:
            lines.append(f"A{i + 1}: {a}")
    lines.append(f"Now answer: {question}")
    return "\n".join(lines)


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None and not isinstance(v, (str, dict, list))]
    return float(np.mean(vals)) if vals else None


def _combine(dicts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for d in dicts for k in d):
        vals = [d.get(key) for d in dicts]
        if key in SUMMED_METRICS:
            out[key] = sum(v for v in vals if v is not None)
        elif all(isinstance(v, (bool, int, float)) or v is None for v in vals):
            out[key] = _mean(vals)
    return out


def aggregate_outcomes(turns: Sequence[TurnRecord]) -> Outcome:
    """The conversation's final outcome: reward = sum of turn rewards (the episode return); tokens and counts
    summed; other numbers averaged over turns; ``per_turn`` lists each turn; ``stop_reason`` is the last turn's."""
    outcomes = [t.outcome for t in turns]
    components = _combine([o.components for o in outcomes])
    components["reward"] = float(sum(o.reward for o in outcomes))
    metrics = _combine([o.metrics for o in outcomes])
    metrics["stop_reason"] = turns[-1].stop_reason
    metrics["turns"] = len(turns)
    metrics["per_turn"] = [
        {"turn": i, "reward": float(t.outcome.reward),
         **{k: t.outcome.metrics.get(k) for k in PER_TURN_KEYS if k != "reward"}, "answer": t.answer}
        for i, t in enumerate(turns)
    ]
    docs = [o.metrics.get("per_document_recall") for o in outcomes if o.metrics.get("per_document_recall")]
    if docs:
        metrics["per_document_recall"] = {d: _mean([x.get(d) for x in docs]) for d in dict.fromkeys(
            k for x in docs for k in x)}
    return Outcome(components["reward"], components, metrics)


__all__ = ["DEFAULT_CAP_FACTOR", "SUMMED_METRICS", "PER_TURN_KEYS", "carry_state", "TurnRecord", "Conversation",
           "reader_question", "aggregate_outcomes"]
