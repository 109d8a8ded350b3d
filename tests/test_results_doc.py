"""docs/RESULTS.md is generated from published results.json files with their provenance."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.common.published import publish, render
from experiments.results_doc import main

REPO = Path(__file__).resolve().parent.parent


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    runs = [{"policy": "topk_page", "budget": {"k": 5, "m": 3, "M": 9, "T": 3, "B": 12}, "dataset": "synth",
             "split": "test", "metrics": {"episodes": 40, "reward": 0.4567, "evidence_page_recall": 0.61,
                                          "accuracy": None}},
            {"policy": "oracle", "privileged": True, "budget": {"k": 5}, "dataset": "synth", "split": "test",
             "metrics": {"episodes": 40, "reward": 0.7, "evidence_page_recall": 0.93, "accuracy": None}}]
    (run / "results.json").write_text(json.dumps({"runs": runs}))
    (run / "budget_curve.png").write_bytes(b"\x89PNG")
    return run


def test_publish_then_render_cites_command_date_commit_and_numbers(tmp_path: Path) -> None:
    root = tmp_path / "results"
    dest = publish(_run_dir(tmp_path), "bench_synth", "python experiments/benchmark.py dataset=synth", root, REPO,
                   date="2026-12-01")
    prov = json.loads((dest / "provenance.json").read_text())
    assert prov["command"].startswith("python experiments/benchmark.py") and prov["date"] == "2026-12-01"
    assert prov["commit"] and prov["commit"] != "unknown"
    md = render(root, "gen")
    assert "## bench_synth" in md and "python experiments/benchmark.py dataset=synth" in md
    assert "0.457" in md and "0.610" in md and "oracle (privileged)" in md
    assert "accuracy" not in md.split("## bench_synth")[1].split("\n")[5]  # all-null metric left out
    assert "![budget_curve.png](results/bench_synth/budget_curve.png)" in md


def test_render_refuses_results_without_provenance(tmp_path: Path) -> None:
    folder = tmp_path / "results" / "hand_typed"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"x": 1}))
    with pytest.raises(ValueError, match="provenance"):
        render(tmp_path / "results", "gen")


def test_publish_rejects_missing_run_and_bad_name(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        publish(tmp_path / "nope", "x", "cmd", tmp_path / "r", REPO)
    with pytest.raises(ValueError, match="bad result name"):
        publish(_run_dir(tmp_path), "../x", "cmd", tmp_path / "r", REPO)


def test_nested_results_are_flattened_into_field_rows(tmp_path: Path) -> None:
    folder = tmp_path / "results" / "perf"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"steps_per_s": {"median": 5123.4, "runs": [1, 2]}}))
    (folder / "provenance.json").write_text(json.dumps({"command": "c", "date": "d", "commit": "abc"}))
    md = render(tmp_path / "results", "gen")
    assert "| steps_per_s.median | 5,123 |" in md or "| steps_per_s.median | 5123" in md


def test_committed_results_md_matches_the_published_files(tmp_path: Path) -> None:
    """docs/RESULTS.md is exactly what the generator makes of docs/results (nobody edited it by hand)."""
    out = tmp_path / "RESULTS.md"
    assert main(["render", "--out", str(out)]) == 0
    committed = REPO / "docs" / "RESULTS.md"
    assert committed.is_file(), "run `python -m experiments.results_doc render`"
    assert committed.read_text() == out.read_text(), "docs/RESULTS.md is stale: re-run the render command"


def test_the_share_of_the_oracles_headroom_is_derived_per_dataset_split_and_budget() -> None:
    from experiments.common.published import HEADROOM_CLOSED, with_headroom_closed

    def run(policy: str, dataset: str, delta: float | None, privileged: bool = False) -> dict:
        return {"policy": policy, "privileged": privileged, "budget": {"k": 5}, "dataset": dataset, "split": "test",
                "metrics": {"delta_recall_at_equal_tokens": delta}}

    runs = [run("topk_page", "a", None), run("ppo", "a", 0.05), run("oracle", "a", 0.2, privileged=True),
            run("ppo", "b", 0.05), run("oracle", "b", 0.0, privileged=True), run("ppo", "c", 0.05),
            run("heuristic", "d", 0.1), run("oracle", "d", 0.4)]  # d: an older file without the privileged mark
    got = [r["metrics"].get(HEADROOM_CLOSED) for r in with_headroom_closed(runs)]
    # a: 0.05 / 0.2; the oracle itself, topk_page (no delta), b (no headroom) and c (no oracle) get none
    assert got == [None, pytest.approx(0.25), None, None, None, None, pytest.approx(0.25), None]
    assert runs[1]["metrics"] == {"delta_recall_at_equal_tokens": 0.05}  # the input is left as it was


def test_the_headroom_column_is_rendered_after_the_capped_metric_columns(tmp_path: Path) -> None:
    from experiments.common.published import MAX_COLUMNS, _runs_table

    metrics = {f"m{i}": float(i) for i in range(MAX_COLUMNS + 2)}
    runs = [{"policy": "ppo", "dataset": "a", "split": "test", "metrics": {**metrics, "delta_recall_at_equal_tokens": 0.1}},
            {"policy": "oracle", "privileged": True, "dataset": "a", "split": "test",
             "metrics": {**metrics, "delta_recall_at_equal_tokens": 0.4}}]
    head = _runs_table(runs)[0]
    assert head.rstrip(" |").endswith("headroom_closed_at_equal_tokens") and "0.250" in _runs_table(runs)[2]
