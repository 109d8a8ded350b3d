"""The index opens with the operating-budget table: each controller's delta within topk_page's budget and its
cost ratio at equal evidence, one column per dataset and split, each linking its run's frontier figure."""
from __future__ import annotations

import json
from pathlib import Path

from mage_gym.bench.results_index import PAGE_NAME, SECTIONS, render_docs, section_of
from mage_gym.bench.published import load_published

BUDGET = {"k": 5, "m": 4, "M": 24, "T": 6, "B": 16}


def _cell(mean: float | None, lo: float | None = None, hi: float | None = None, n: int = 100) -> dict:
    return {"mean": mean, "lo": lo, "hi": hi, "n": n, "interpretable": n >= 30}


def _benchmark_run(policy: str, recall: float, tokens: float, op: dict | None = None, ratio: dict | None = None,
                   **extra: object) -> dict:
    run = {"policy": policy, "budget": BUDGET, "dataset": "mmlongbench", "split": "test",
           "metrics": {"episodes": 116, "evidence_page_recall": recall, "tokens_rendered": tokens}, **extra}
    if op is not None:
        run["equal_cost"] = {"baseline": "topk_page", "render_mode": "visual", "ks": [0, 1, 5],
                             "operating_budget": {"k": 5, "tokens": 5300.0}, "delta_recall_at_operating_budget": op,
                             "cost_ratio_recall_at_equal_evidence": ratio,
                             "delta_recall_at_equal_tokens": _cell(0.19, 0.12, 0.26)}
    return run


def _put(root: Path, name: str, runs: list[dict], figure: bool) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"runs": runs}))
    (folder / "provenance.json").write_text(json.dumps({"command": "c", "date": "d", "commit": "abc"}))
    if figure:
        (folder / "frontier.png").write_bytes(b"\x89PNG")


def test_the_first_table_shows_both_claims_and_links_the_frontier(tmp_path: Path) -> None:
    root = tmp_path / "docs" / "results"
    _put(root, "bench_mmlb", [
        _benchmark_run("topk_page", 0.671, 5324.0),
        _benchmark_run("topk_elements", 0.373, 789.0, _cell(-0.298, -0.35, -0.24), _cell(1.83, 1.5, 2.2)),
        _benchmark_run("oracle", 0.95, 5000.0, _cell(0.28, 0.2, 0.33), {**_cell(None), "above_curve": True},
                       privileged=True)], figure=True)
    _put(root, "old_equal_tokens", [{"policy": "heuristic", "budget": BUDGET, "dataset": "synth", "split": "test",
                                     "metrics": {"delta_recall_at_equal_tokens": _cell(0.01, -0.01, 0.03)}}],
         figure=False)
    results = {r.name: r for r in load_published(root)}
    assert section_of(results["bench_mmlb"]) == "operating_budget"
    assert section_of(results["old_equal_tokens"]) == "equal_tokens"
    assert list(SECTIONS)[0] == "operating_budget"
    docs = render_docs(root, root.parent / "RESULTS.md", "gen")
    index = docs[root.parent / "RESULTS.md"]
    first = index.index("## " + SECTIONS["operating_budget"])
    assert first < index.index("## " + SECTIONS["equal_tokens"])
    table = index[first:index.index("## " + SECTIONS["equal_tokens"])]
    assert "[mmlongbench test](results/bench_mmlb/README.md)" in table
    assert "| topk_page: recall · tokens | 0.671 · 5,324 |" in table
    assert "| topk_elements | -0.298 [-0.350, -0.240] · ×1.83 [1.50, 2.20] |" in table
    assert "| oracle (privileged) | +0.280 [+0.200, +0.330] · n/a |" in table
    assert "| recall-token frontier | [figure](results/bench_mmlb/frontier.png) |" in table
    assert "| budget (topk_page's render mode) | k=5 (visual) |" in table
    # the result's own page shows the comparison figures of each run's equal_cost block
    page = docs[root / "bench_mmlb" / PAGE_NAME]
    assert "delta_recall_at_operating_budget" in page and "-0.298 [-0.350, -0.240]" in page


def test_a_knob_setting_read_at_the_budget_gets_a_row_of_its_own(tmp_path: Path) -> None:
    root = tmp_path / "docs" / "results"
    capped = {**BUDGET, "k": 8, "tokens": 5300}
    _put(root, "knobs", [
        _benchmark_run("topk_elements", 0.40, 800.0, _cell(-0.27, -0.33, -0.21), _cell(1.9, 1.6, 2.3)),
        _benchmark_run("topk_page", 0.671, 5324.0),
        {**_benchmark_run("topk_elements", 0.62, 5100.0, _cell(-0.05, -0.1, 0.0), _cell(0.9, 0.8, 1.0)),
         "budget": capped},
        {**_benchmark_run("heuristic", 0.5, 5000.0), "budget": capped}], figure=False)  # no figure: no row
    index = render_docs(root, root.parent / "RESULTS.md", "gen")[root.parent / "RESULTS.md"]
    assert "| topk_page: recall · tokens | 0.671 · 5,324 |" in index  # the column is topk_page's budget
    assert "| topk_elements | -0.270 [-0.330, -0.210] · ×1.90 [1.60, 2.30] |" in index
    assert "| topk_elements (k=8 tokens=5300) | -0.050 [-0.100, +0.000] · ×0.90 [0.80, 1.00] |" in index
    assert "heuristic" not in index and "recall-token frontier" not in index


def test_a_run_on_val_only_chose_settings_and_is_listed_not_tabled(tmp_path: Path) -> None:
    """Settings are chosen on val and reported on test: a val-only run is not a column of the first table."""
    root = tmp_path / "docs" / "results"
    val = [{**_benchmark_run("topk_elements", 0.40, 800.0, _cell(-0.27, -0.33, -0.21), _cell(1.9, 1.6, 2.3)),
            "split": "val"}, {**_benchmark_run("topk_page", 0.752, 5489.0), "split": "val"}]
    _put(root, "choice_on_val", val, figure=False)
    _put(root, "on_test", [_benchmark_run("topk_elements", 0.37, 790.0, _cell(-0.30, -0.38, -0.23), _cell(2.4, 2.1, 2.8)),
                           _benchmark_run("topk_page", 0.671, 5324.0)], figure=False)
    results = load_published(root)
    assert {r.name: section_of(r) for r in results} == {"choice_on_val": "other", "on_test": "operating_budget"}
    index = render_docs(root, root.parent / "RESULTS.md", "gen")[root.parent / "RESULTS.md"]
    first, other = (index.split(f"## {SECTIONS[name]}")[1].split("\n## ")[0] for name in ("operating_budget", "other"))
    assert "on_test" in first and "choice_on_val" not in first and "0.752" not in index
    assert "[choice_on_val](results/choice_on_val/README.md)" in other


def test_a_headroom_run_without_its_slot_reach_says_not_run(tmp_path: Path) -> None:
    """headroom.py with slot_reach.enabled=false measures no slot reach: the index says so instead of n/a."""
    root = tmp_path / "docs" / "results"
    metrics = {"episodes": 419, "topk_recall": 0.706, "oracle_recall": 0.888,
               "reach_1hop": {"any": 0.846}, "chance_1hop": {"any": 0.784}}
    _put(root, "headroom_x", [{"dataset": "mmlongbench", "split": "all", "budget": BUDGET, "metrics": metrics}],
         figure=False)
    index = render_docs(root, root.parent / "RESULTS.md", "gen")[root.parent / "RESULTS.md"]
    row = next(line for line in index.splitlines() if line.startswith("| [headroom_x]"))
    assert row.endswith("| 0.846 (0.784) | not run |")


def test_a_run_over_several_k_is_shown_at_the_default_k_and_no_k_is_taken_for_a_knob(tmp_path: Path) -> None:
    """The main job plays k=2, 5, 8, each with topk_page uncapped: three operating points, not knob settings."""
    root = tmp_path / "docs" / "results"
    runs = []
    for k, recall in ((2, 0.61), (5, 0.83), (8, 0.94)):
        b = {**BUDGET, "k": k}
        runs += [{**_benchmark_run("heuristic", recall, 1000.0 * k, _cell(k / 100, 0.0, 0.1), _cell(1.0, 0.9, 1.1)),
                  "budget": b}, {**_benchmark_run("topk_page", recall, 1000.0 * k), "budget": b}]
    _put(root, "several_k", runs, figure=False)
    index = render_docs(root, root.parent / "RESULTS.md", "gen")[root.parent / "RESULTS.md"]
    assert "| budget (topk_page's render mode) | k=5 (visual) |" in index
    assert "| heuristic | +0.050 [+0.000, +0.100] · ×1.00 [0.90, 1.10] |" in index
    assert "heuristic (k=" not in index
