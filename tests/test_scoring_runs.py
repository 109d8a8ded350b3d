"""run_metrics by hand: records in every accepted form, accuracy, recall, precision and F1 on a small run.

The run: four MMLongBench questions (three answerable) and one FinanceBench
question whose answer format says "None" but is answerable (FinanceBench has
no unanswerable questions). Scores are given, so the figures are arithmetic:
answerable scores 1, 0, 1 (MMLongBench) and 1 (FinanceBench).
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from mage_gym.scoring import NOT_ANSWERABLE, ScoreRecord, ScoringError, run_metrics


def _run() -> list:
    return [
        {"pred": "12", "gold": "12", "answer_format": "Int", "score": 1.0, "task_tags": ["Chart", "Table"]},
        SimpleNamespace(prediction="no", answer="yes", answer_format="Str", benchmark="mmlongbench", score=0.0,
                        task_tag="Chart"),
        ScoreRecord(pred="3", gold="3", answer_format="Int", task_tags=("Table",), score=1.0),
        {"prediction": NOT_ANSWERABLE, "answer": NOT_ANSWERABLE, "answer_format": "None", "score": 1.0,
         "task_tag": ""},
        {"pred": "1.5", "gold": "1.5", "answer_format": "None", "benchmark": "financebench", "score": 1.0,
         "task_tags": "Numeric"},
    ]


def test_a_small_run_by_hand() -> None:
    m = run_metrics(_run())
    assert m["scores"] == [1.0, 0.0, 1.0, 1.0, 1.0] and m["n"] == 5 and m["accuracy"] == pytest.approx(4 / 5)
    assert m["n_answerable"] == 4 and m["n_predicted_answerable"] == 4
    assert m["recall"] == pytest.approx(3 / 4) and m["precision"] == pytest.approx(3 / 4)
    assert m["f1"] == pytest.approx(3 / 4)
    assert m["by_task_tag"] == {"Chart": {"n": 2, "accuracy": 0.5}, "Numeric": {"n": 1, "accuracy": 1.0},
                                "Table": {"n": 2, "accuracy": 1.0}}
    mm = m["by_benchmark"]["mmlongbench"]
    assert list(m["by_benchmark"]) == ["financebench", "mmlongbench"]
    assert (mm["n"], mm["n_answerable"], mm["n_predicted_answerable"]) == (4, 3, 3)
    assert mm["recall"] == pytest.approx(2 / 3) and mm["precision"] == pytest.approx(2 / 3)
    fb = m["by_benchmark"]["financebench"]
    assert fb == {"n": 1, "accuracy": 1.0, "f1": 1.0, "recall": 1.0, "precision": 1.0, "n_answerable": 1,
                  "n_predicted_answerable": 1}


def test_recall_and_precision_differ_and_the_edges_are_zero() -> None:
    # two answerable questions, one right; three predictions that claim an answer (one on an unanswerable question)
    run = [{"pred": "a", "gold": "a", "score": 1.0}, {"pred": "b", "gold": "c", "score": 0.0},
           {"pred": "x", "gold": NOT_ANSWERABLE, "answer_format": "None", "score": 0.0}]
    m = run_metrics(run)
    assert m["recall"] == pytest.approx(1 / 2) and m["precision"] == pytest.approx(1 / 3)
    assert m["f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    empty = run_metrics([])
    assert empty == {"n": 0, "accuracy": 0.0, "f1": 0.0, "recall": 0.0, "precision": 0.0, "n_answerable": 0,
                     "n_predicted_answerable": 0, "scores": [], "by_task_tag": {}, "by_benchmark": {}}
    silent = run_metrics([{"pred": None, "gold": NOT_ANSWERABLE, "answer_format": "None", "score": 1.0}])
    assert (silent["recall"], silent["precision"], silent["f1"], silent["n_predicted_answerable"]) == (0.0, 0.0, 0.0,
                                                                                                       1)
    wrong = run_metrics([{"pred": "a", "gold": "b", "score": 0.0}])
    assert (wrong["recall"], wrong["precision"], wrong["f1"]) == (0.0, 0.0, 0.0)
    small = run_metrics([{"pred": "a", "gold": "a", "score": 0.25}])
    assert small["f1"] == pytest.approx(0.25)  # recall + precision = 0.5 < 1: F1 is still their harmonic mean


def test_records_without_a_score_are_scored_with_their_benchmark_and_mode() -> None:
    rec = {"pred": "Not answerable.", "gold": NOT_ANSWERABLE, "answer_format": "None"}
    assert run_metrics([rec], mode="official")["n_predicted_answerable"] == 1  # not the exact phrase
    assert run_metrics([rec], mode="lenient")["n_predicted_answerable"] == 0
    assert run_metrics([{"pred": "4", "answer": "4", "answer_format": "Int", "benchmark": None}])["by_benchmark"] \
        .keys() == {"mmlongbench"}
    no_format = run_metrics([SimpleNamespace(pred="None", gold="None")])
    assert no_format["n_answerable"] == 1  # answer format defaults to Str: a gold of "None" is an answer
    with pytest.raises(ScoringError, match="no gold answer"):
        run_metrics([{"pred": "x"}])
