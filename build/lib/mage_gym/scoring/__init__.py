"""Benchmark answer scoring: one prediction against one gold answer, and run metrics.

Why it exists: rewards for answering readers and every reported accuracy go
through :func:`score`, so the rules must be the benchmarks' own. Each
benchmark's module documents its rules and the oddities of its official code:

- ``mmlongbench`` (and ``synth``): :mod:`mage_gym.scoring.mmlongbench`
- ``longdocurl``: :mod:`mage_gym.scoring.longdocurl`
- ``financebench``: :mod:`mage_gym.scoring.financebench` (our own rule: the
  benchmark was graded by hand)

``mode="official"`` reproduces the published scorer, oddities included, so
numbers compare with papers; ``mode="lenient"`` fixes formatting traps
(thousands separators, unit words, truncated floats, unbracketed lists,
"not answerable" paraphrases) and is what a reward should prefer when the
reader's formatting is not what is being trained.

:func:`run_metrics` aggregates as MMLongBench-Doc does: accuracy is the mean
score; F1 is the harmonic mean of recall (mean score over answerable
questions) and precision (summed score on answerable questions over the
number of predictions that are not "Not answerable"). LongDocURL results are
also broken down by task tag.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from mage_gym.scoring.financebench import score_financebench
from mage_gym.scoring.longdocurl import score_longdocurl
from mage_gym.scoring.mmlongbench import score_mmlongbench
from mage_gym.scoring.text import NOT_ANSWERABLE, anls, is_not_answerable, levenshtein

__all__ = [
    "BENCHMARKS",
    "MODES",
    "NOT_ANSWERABLE",
    "ScoreRecord",
    "ScoringError",
    "anls",
    "canonical_format",
    "is_not_answerable",
    "levenshtein",
    "run_metrics",
    "score",
]

BENCHMARKS = ("mmlongbench", "longdocurl", "financebench", "synth")
MODES = ("official", "lenient")

# Source spellings -> one internal name. MMLongBench-Doc: Int/Float/Str/List/None;
# LongDocURL: Integer/Float/String/List/None. Python None means "None".
_FORMATS = {"int": "int", "integer": "int", "float": "float", "str": "str", "string": "str",
            "list": "list", "none": "none"}


class ScoringError(ValueError):
    """Bad input to scoring: unknown benchmark, mode or answer format."""


def canonical_format(answer_format: str | None) -> str:
    """"Int"/"Integer" -> "int", ..., "None"/None -> "none"; unknown raises."""
    key = "none" if answer_format is None else str(answer_format).strip().lower()
    try:
        return _FORMATS[key]
    except KeyError:
        raise ScoringError(
            f"unknown answer_format {answer_format!r}; expected one of "
            "Int/Integer, Float, Str/String, List, None"
        ) from None


def score(pred: str | None, gold: Any, answer_format: str | None,
          benchmark: str = "mmlongbench", mode: str = "official") -> float:
    """Score ``pred`` against ``gold`` under ``benchmark``'s rules, in [0, 1].

    ``pred`` is the extracted answer text (``None``, from a reader that gave
    no answer, scores as an empty answer). ``gold`` is the source's answer: a
    string, or for LongDocURL possibly a list or number as its JSON holds it.
    ``answer_format`` uses the source's spelling; FinanceBench ignores it.
    """
    if benchmark not in BENCHMARKS:
        raise ScoringError(f"unknown benchmark {benchmark!r}; expected one of {BENCHMARKS}")
    if mode not in MODES:
        raise ScoringError(f"unknown mode {mode!r}; expected one of {MODES}")
    pred_text = "" if pred is None else str(pred).strip()
    if benchmark == "financebench":
        value = score_financebench(pred_text, "" if gold is None else str(gold))
    else:
        fmt = canonical_format(answer_format)
        gold_value = "" if gold is None else gold
        if benchmark == "longdocurl":
            value = score_longdocurl(pred_text, gold_value, fmt, mode)
        else:
            value = score_mmlongbench(pred_text, gold_value, fmt, mode)
    return min(1.0, max(0.0, float(value)))


@dataclass(frozen=True)
class ScoreRecord:
    """One scored (or to-be-scored) question for :func:`run_metrics`."""

    pred: str | None
    gold: Any
    answer_format: str | None = "Str"
    benchmark: str = "mmlongbench"
    task_tags: tuple[str, ...] = ()
    score: float | None = None  # precomputed; computed with ``mode`` when None


def _as_record(item: ScoreRecord | Mapping[str, Any] | Any) -> ScoreRecord:
    if isinstance(item, ScoreRecord):
        return item
    if isinstance(item, Mapping):
        get = item.get
    else:  # any object with attributes (e.g. a trace row)
        def get(key: str, default: Any = None) -> Any:
            return getattr(item, key, default)
    pred = get("pred", None)
    if pred is None:
        pred = get("prediction", None)
    gold = get("gold", None)
    if gold is None:
        gold = get("answer", None)
    if gold is None:
        raise ScoringError(f"record has no gold answer ('gold' or 'answer'): {item!r}")
    tags = get("task_tags", None)
    if tags is None:
        tag = get("task_tag", None)
        tags = () if tag in (None, "") else (tag,)
    elif isinstance(tags, str):
        tags = (tags,)
    return ScoreRecord(pred=pred, gold=gold, answer_format=get("answer_format", "Str"),
                       benchmark=get("benchmark", "mmlongbench") or "mmlongbench",
                       task_tags=tuple(tags), score=get("score", None))


def _is_unanswerable_gold(record: ScoreRecord) -> bool:
    if isinstance(record.gold, str) and record.gold.strip() == NOT_ANSWERABLE:
        return True
    return record.benchmark != "financebench" and str(record.answer_format).strip().lower() == "none"


def _says_not_answerable(pred: str | None, mode: str) -> bool:
    text = "" if pred is None else str(pred).strip()
    return text == NOT_ANSWERABLE if mode == "official" else is_not_answerable(text)


def _acc_f1(records: Sequence[ScoreRecord], scores: Sequence[float], mode: str) -> dict[str, float]:
    n = len(records)
    if n == 0:
        return {"n": 0, "accuracy": 0.0, "f1": 0.0, "recall": 0.0, "precision": 0.0,
                "n_answerable": 0, "n_predicted_answerable": 0}
    answerable = [s for r, s in zip(records, scores) if not _is_unanswerable_gold(r)]
    predicted = sum(1 for r in records if not _says_not_answerable(r.pred, mode))
    recall = sum(answerable) / len(answerable) if answerable else 0.0
    precision = sum(answerable) / predicted if predicted else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision > 0 else 0.0
    return {"n": n, "accuracy": sum(scores) / n, "f1": f1, "recall": recall,
            "precision": precision, "n_answerable": len(answerable),
            "n_predicted_answerable": predicted}


def run_metrics(records: Iterable[ScoreRecord | Mapping[str, Any] | Any],
                mode: str = "official") -> dict[str, Any]:
    """Accuracy and F1 over a run, overall, per task tag and per benchmark.

    Each record gives ``pred`` (or ``prediction``), ``gold`` (or ``answer``),
    ``answer_format``, ``benchmark`` (default mmlongbench), optionally
    ``task_tag``/``task_tags`` and a precomputed ``score``. Returns ``n``,
    ``accuracy``, ``f1``, ``recall``, ``precision``, ``n_answerable``,
    ``n_predicted_answerable``, ``scores`` (per record, in input order),
    ``by_task_tag`` ({tag: {n, accuracy}}; a record counts under each of its
    tags) and ``by_benchmark`` ({name: the overall fields}).
    """
    rows = [_as_record(r) for r in records]
    scores = [float(r.score) if r.score is not None
              else score(r.pred, r.gold, r.answer_format, r.benchmark, mode) for r in rows]
    result: dict[str, Any] = dict(_acc_f1(rows, scores, mode))
    result["scores"] = scores

    by_tag: dict[str, list[float]] = defaultdict(list)
    for r, s in zip(rows, scores):
        for tag in r.task_tags:
            by_tag[str(tag)].append(s)
    result["by_task_tag"] = {tag: {"n": len(v), "accuracy": sum(v) / len(v)}
                             for tag, v in sorted(by_tag.items())}

    by_bench: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_bench[r.benchmark].append(i)
    result["by_benchmark"] = {
        name: _acc_f1([rows[i] for i in idx], [scores[i] for i in idx], mode)
        for name, idx in sorted(by_bench.items())
    }
    return result
