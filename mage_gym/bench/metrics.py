"""Per-run means and per-group breakdowns of episode results: the numbers every experiment reports.

Why one module: benchmark, training-time evaluation and the main job must
aggregate the same way, or their tables would not be comparable. Means skip
``None`` (a metric that does not apply to an episode); a run's metric is
``None`` when it applies to none of its episodes.

Unanswerable questions are reported apart: their evidence metrics (page
recall, all covered, element recall and precision; :mod:`mage_gym.coverage`)
are ``None``, so those means and their ``n`` (:func:`metric_counts`) are over
the questions with gold only; reward and support, which every episode has
(the oracle reader's support is 1 on an unanswerable question), are over all
episodes, and :func:`breakdown` gives the ``answerable`` and ``unanswerable``
groups separately.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

from mage_gym.data.episode import Episode
from mage_gym.bench.play import EpisodeResult, mean_or_none

METRIC_KEYS: tuple[str, ...] = (
    "episodes", "reward", "support", "noise", "cost", "accuracy", "f1", "evidence_page_recall",
    "evidence_all_covered", "element_recall", "element_precision", "item_support", "gold_pages_by_any_element",
    "pages_rendered", "elements_rendered", "images_rendered", "tokens_rendered", "operations", "reader_calls",
    "evaluator_calls", "wall_s",
)
#: evidence source labels of the benchmarks -> the five evidence types of the plots
EVIDENCE_TYPES: dict[str, str] = {
    "pure-text (plain-text)": "text", "text": "text", "plain-text": "text", "paragraph": "text",
    "table": "table", "chart": "chart", "figure": "figure", "image": "figure",
    "generalized-text (layout)": "layout", "layout": "layout",
}
_SCORED_BENCHMARKS = ("mmlongbench", "longdocurl", "financebench", "synth")
#: Metrics only runs over composite episodes have (results.json ``metrics`` gains them when they apply):
#: ``per_turn`` (conversations): one entry per turn index; ``per_document_recall`` (several documents).
COMPOSITE_METRIC_KEYS: tuple[str, ...] = ("per_turn", "per_document_recall")


def evidence_types(ep: Episode) -> list[str]:
    """The episode's evidence types among text/table/chart/figure/layout (from its source labels)."""
    labels = list(ep.evidence_sources) or [r.type for r in ep.evidence_regions]
    out = []
    for lab in labels:
        t = EVIDENCE_TYPES.get(str(lab).strip().lower())
        if t and t not in out:
            out.append(t)
    return out


def summarise(results: Sequence[EpisodeResult], episodes: Mapping[str, Episode], answers: bool) -> dict[str, Any]:
    """Mean metrics over episodes, keyed by :data:`METRIC_KEYS` (``answers``: the reader gives answer text)."""
    n = len(results)
    m = [r.metrics for r in results]
    c = [r.components for r in results]
    out: dict[str, Any] = {"episodes": n}
    out["reward"] = mean_or_none([r.reward for r in results])
    for key in ("support", "noise", "cost"):
        out[key] = mean_or_none([x.get(key) for x in c])
    if answers and n:
        from mage_gym.scoring import run_metrics

        recs = []
        for r in results:
            ep = episodes[r.episode_id]
            bench = ep.benchmark if ep.benchmark in _SCORED_BENCHMARKS else "mmlongbench"
            for pred, gold, fmt_ in _answers(r, ep):  # one per question (a conversation has several)
                recs.append({"pred": pred, "gold": gold, "answer_format": fmt_, "benchmark": bench})
        rm = run_metrics(recs)
        out["accuracy"], out["f1"] = rm["accuracy"], rm["f1"]
    else:
        out["accuracy"] = out["f1"] = None
    for key in ("evidence_page_recall", "evidence_all_covered", "element_recall", "element_precision",
                "item_support", "gold_pages_by_any_element", "pages_rendered", "elements_rendered", "images_rendered", "tokens_rendered", "operations",
                "reader_calls", "evaluator_calls"):
        out[key] = mean_or_none([x.get(key) for x in m])
    out["wall_s"] = mean_or_none([r.wall_s for r in results])
    summary = {k: out.get(k) for k in METRIC_KEYS}
    turns = per_turn_summary(results)
    if turns is not None:
        summary["per_turn"] = turns
    docs = per_document_summary(results)
    if docs is not None:
        summary["per_document_recall"] = docs
    return summary


def _answers(r: EpisodeResult, ep: Any) -> list[tuple[Any, str, str]]:
    """(prediction, gold answer, format) per question of an episode; a conversation's come from ``per_turn``."""
    turns = getattr(ep, "turns", None)
    if turns is None:
        return [(r.answer, ep.answer, ep.answer_format)]
    preds = [t.get("answer") for t in r.metrics.get("per_turn") or []] or [r.answer]
    return [(p, t.answer, t.answer_format) for p, t in zip(preds, turns)]


def per_turn_summary(results: Sequence[EpisodeResult]) -> list[dict[str, Any]] | None:
    """Per turn index: episodes reaching it, mean reward, page recall and reader tokens (None: no conversations)."""
    lists = [r.metrics.get("per_turn") for r in results if r.metrics.get("per_turn")]
    if not lists:
        return None
    out = []
    for i in range(max(len(x) for x in lists)):
        rows = [x[i] for x in lists if len(x) > i]
        out.append({"turn": i, "episodes": len(rows),
                    **{k: mean_or_none([t.get(k) for t in rows])
                       for k in ("reward", "evidence_page_recall", "tokens_rendered")}})
    return out


def per_document_summary(results: Sequence[EpisodeResult]) -> dict[str, Any] | None:
    """Page recall of each document's own gold in cross-document episodes (None: no such episodes).

    ``mean``: over (episode, document) pairs with gold; ``min``: mean over
    episodes of the worst document (did the controller find evidence in every
    document?); ``by_position``: mean per document position in the episode
    (does entry retrieval favour one document?); ``pairs`` / ``episodes``: counts.
    """
    dicts = [r.metrics.get("per_document_recall") for r in results if r.metrics.get("per_document_recall")]
    dicts = [{k: v for k, v in d.items() if v is not None} for d in dicts]
    dicts = [d for d in dicts if d]
    if not dicts:
        return None
    width = max(len(d) for d in dicts)
    by_pos = [mean_or_none([list(d.values())[j] for d in dicts if len(d) > j]) for j in range(width)]
    return {"mean": mean_or_none([v for d in dicts for v in d.values()]),
            "min": mean_or_none([min(d.values()) for d in dicts]), "by_position": by_pos,
            "pairs": sum(len(d) for d in dicts), "episodes": len(dicts)}


def metric_counts(results: Sequence[EpisodeResult], answers: bool) -> dict[str, int]:
    """How many episodes each mean of :func:`summarise` is over (a metric skips episodes where it is None).

    Why: a recall over 12 answerable questions and a reward over 40 episodes
    must not read as equally solid; ``results.json`` carries these as ``n``.
    """
    n = len(results)
    out: dict[str, int] = {"episodes": n, "reward": n, "wall_s": n}
    for key in ("support", "noise", "cost"):
        out[key] = sum(r.components.get(key) is not None for r in results)
    for key in ("accuracy", "f1"):
        out[key] = n if answers else 0
    for key in METRIC_KEYS:
        if key not in out:
            out[key] = sum(r.metrics.get(key) is not None for r in results)
    return {k: out[k] for k in METRIC_KEYS}


def breakdown(results: Sequence[EpisodeResult], episodes: Mapping[str, Episode]) -> dict[str, dict[str, Any]]:
    """Evidence recall and reward per evidence type, for single- vs multi-page questions, answerable or not."""
    groups: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        ep = episodes[r.episode_id]
        if not ep.answerable:
            groups["unanswerable"].append(r)
            continue
        groups["answerable"].append(r)
        kind = getattr(ep, "kind", None)
        if kind is not None:  # a composite episode: cross_document / conversation / both
            groups[f"kind:{kind}"].append(r)
        for t in evidence_types(ep):
            groups[f"type:{t}"].append(r)
        groups["multi_page" if ep.multi_page else "single_page"].append(r)
    return {g: {"episodes": len(rs),
                "support": mean_or_none([r.components.get("support") for r in rs]),
                "evidence_page_recall": mean_or_none([r.metrics.get("evidence_page_recall") for r in rs]),
                "evidence_all_covered": mean_or_none([r.metrics.get("evidence_all_covered") for r in rs]),
                "element_recall": mean_or_none([r.metrics.get("element_recall") for r in rs]),
                "reward": mean_or_none([r.reward for r in rs]),
                "tokens_rendered": mean_or_none([r.metrics.get("tokens_rendered") for r in rs])}
            for g, rs in sorted(groups.items())}
