"""The end of an episode: reward components and evidence metrics, the one place the env opens the gold.

Why one function: the terminal reward, ``info["reward_components"]``,
``info["metrics"]`` and the trace's ``end`` record all come from the
:class:`Outcome` built here, so a new metric is added here and nowhere else;
and the gold is read only here (plus the privileged view), after the last
decision.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mage_gym import reward as R
import numpy as np

from mage_gym.coverage import Coverage, cover
from mage_gym.env.episodes import SealedGold
from mage_gym.env.state import Counters
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.readers.base import ReaderOutput, RenderedInput


@dataclass(frozen=True)
class Outcome:
    """What an episode's end gives: the terminal reward, its components and the metrics."""

    reward: float
    components: dict[str, Any]
    metrics: dict[str, Any]


def score_episode(graph: EvidenceGraph, gold: SealedGold, rendered: RenderedInput, output: ReaderOutput,
                  reader_answers: bool, counters: Counters, cfg: R.RewardConfig, op_cap: int, call_cap: int,
                  stop_reason: str) -> Outcome:
    """Support, noise, cost and the metrics of the rendered reader input against the episode's gold.

    ``reader_answers``: the reader gives answer text (support is the benchmark
    score of the answer), else support is the gold coverage (oracle reader).
    """
    opened_gold = gold._open()
    episode, evidence = opened_gold.episode, opened_gold.evidence
    opened, pages = R.rendered_masks(graph, rendered)
    covered = cover(evidence, opened, pages, graph.node_page)  # the one rule: support, page recall, all covered
    support = R.answer_support(episode, output.answer) if reader_answers else R.oracle_support(episode, covered)
    is_gold = opened_gold.node_mask(graph)
    noise = R.noise(graph, evidence, rendered, is_gold)
    c = counters
    calls = c.reader_calls + c.evaluator_calls
    cost, parts = R.cost(rendered.tokens, c.operations, calls, cfg, op_cap, call_cap)
    total = R.total_reward(support, noise, cost, cfg)
    components = {
        "reward": total, "support": support, "noise": noise, "cost": cost, **parts,
        "lambda_noise": cfg.lambda_noise, "lambda_cost": cfg.lambda_cost,
        "gold_coverage": covered.support,
    }
    metrics = R.episode_metrics(graph, evidence, rendered, covered, opened, is_gold)
    if getattr(graph, "documents", None) and evidence.level != "none":  # a union of several documents
        metrics["per_document_recall"] = per_document_recall(graph, covered)
    metrics.update({
        "operations": c.operations, "reader_calls": c.reader_calls, "evaluator_calls": c.evaluator_calls,
        "stop_reason": stop_reason, "steps": c.steps, "rounds": c.round, "activations": c.acts_used,
        "opens": c.opens_used, "searches": c.searches, "invalid_actions": c.invalid,
    })
    return Outcome(total, components, metrics)


def per_document_recall(graph: EvidenceGraph, covered: Coverage) -> dict[str, float | None]:
    """Page recall of each document's own gold pages (None for a document with no gold in the episode).

    ``graph`` is a :class:`~mage_gym.graph.union.UnionGraph` (``documents`` and ``doc_of_page``).
    """
    doc_of_page = np.asarray(graph.doc_of_page)
    pages = np.asarray(covered.pages, dtype=np.intp)
    out: dict[str, float | None] = {}
    for j, doc in enumerate(graph.documents):
        sel = doc_of_page[pages] == j if len(pages) else np.zeros(0, dtype=bool)
        out[doc.doc_id] = float(covered.page_covered[sel].mean()) if sel.any() else None
    return out
