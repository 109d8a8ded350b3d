"""experiments/analysis/learned_report.py and equal_cost.delta_over_seeds: arms over seeds, against topk_page at equal cost."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mage_gym.bench.equal_cost import delta_at_equal_cost, delta_over_seeds, needed_ks
from mage_gym.bench import published
from mage_gym.bench.published import HEADROOM_CLOSED, render_result, with_headroom_closed
from experiments.analysis.learned_report import main, parse_arm, report

BUDGET = {"k": 5, "m": 4, "M": 24, "T": 6, "B": 16}
LABEL = "k5 m4 M24 T6 B16"


def _row(policy: str, qid: str, recall: float, tokens: float, k: int = 5) -> dict:
    return {"policy": policy, "budget": {**BUDGET, "k": k}, "episode_id": qid, "reward": recall - 0.1,
            "components": {"support": recall},
            "metrics": {"gold_known": True, "evidence_page_recall": recall, "evidence_all_covered": recall == 1.0,
                        "tokens_rendered": tokens, "pages_rendered": tokens / 1000}}


def _topk(q: str, k: int) -> dict:
    """topk_page's recall rises with k, except at k=5, which sits 0.2 above the line through k=4 and k=6."""
    return _row("topk_page", q, 0.1 * k + (0.2 if k == 5 else 0.0), 1000.0 * k, k)


def _run(tmp: Path, name: str, ppo: list[dict], extra_policies: dict[str, list[dict]] | None = None,
         modes: dict[str, str] | None = None, checkpoint: str = "abc") -> Path:
    """A benchmark run folder: topk_page at k=5 in episodes.jsonl (the plan), the other k in topk_curve.jsonl."""
    d = tmp / name
    d.mkdir()
    qids = [r["episode_id"] for r in ppo]
    plays = {"topk_page": [_topk(q, 5) for q in qids], "ppo": ppo, **(extra_policies or {})}
    rows = [r for policy_rows in plays.values() for r in policy_rows]
    (d / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curve = [{**_topk(q, k), "render_mode": "visual"} for k in (1, 2, 3, 4, 6, 7, 8) for q in qids]
    (d / "topk_curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve))
    runs = [{"policy": p, "budget": BUDGET, "dataset": "synth", "split": "test", "metrics": {},
             **({"checkpoint": {"sha256": checkpoint}} if p == "ppo" else {}),
             **({"privileged": True} if p == "oracle" else {})} for p in plays]
    (d / "results.json").write_text(json.dumps({"runs": runs}))
    stats = {f"{p} | {LABEL}": {"render_mode": (modes or {}).get(p, "visual")} for p in plays}
    (d / "breakdown.json").write_text(json.dumps({"policy_stats": stats}))
    return d


def test_min_k_extends_a_curve_that_already_covers_the_means() -> None:
    mine = [[_row("p", "a", 0.5, 1500.0)]]
    curve = {k: {"a": _row("topk_page", "a", 0.1 * k, 1000.0 * k, k)} for k in (1, 2)}
    assert needed_ks(mine, curve, max_k=20) is None  # k=2 reaches 1500 tokens
    assert needed_ks(mine, curve, max_k=20, min_k=4) == 3
    assert needed_ks(mine, curve, max_k=2, min_k=4) is None  # never past max_k


def test_the_curve_reaches_the_policys_cost_on_its_questions_with_gold() -> None:
    # the policy reads 1,000 tokens on a question without gold and 3,000 on one with gold: its mean over all
    # questions (2,000) is reached at k=2, but the recall delta averages over the gold question only
    no_gold = {**_row("p", "a", 0.0, 1000.0), "metrics": {"evidence_page_recall": None, "tokens_rendered": 1000.0,
                                                          "pages_rendered": 1.0}}
    mine = [[no_gold, _row("p", "b", 0.5, 3000.0)]]
    curve = {k: {q: _row("topk_page", q, 0.1 * k, 1000.0 * k, k) for q in "ab"} for k in (1, 2)}
    assert needed_ks(mine, curve, max_k=20) == 3
    curve[3] = {q: _row("topk_page", q, 0.3, 3000.0, 3) for q in "ab"}
    assert needed_ks(mine, curve, max_k=20) is None


def test_one_seed_is_exactly_the_single_run_delta() -> None:
    rng = np.random.default_rng(0)
    cm, cc = rng.uniform(0, 1, (6, 40)), np.arange(1, 7)[:, None] * 1000.0 + rng.uniform(0, 50, (6, 40))
    pm, pc = rng.uniform(0, 1, 40), rng.uniform(2500, 3500, 40)
    one = delta_over_seeds([(pm, pc, cm, cc)], n_boot=300, seed=3)
    single = delta_at_equal_cost(pm, pc, cm, cc, n_boot=300, seed=3)
    assert (one["mean"], one["lo"], one["hi"], one["n"]) == (single["mean"], single["lo"], single["hi"], single["n"])
    assert one["seeds"] == 1 and one["topk_at_costs"] == [single["topk_at_cost"]]


def test_seed_mean_and_its_interval_over_questions() -> None:
    rng = np.random.default_rng(1)
    cm = np.tile(np.linspace(0.1, 0.8, 8)[:, None], (1, 60)) + rng.normal(0, 0.05, (8, 60))
    cc = np.tile(np.arange(1, 9)[:, None] * 1000.0, (1, 60))
    pc = np.full(60, 5000.0)
    a = (cm[4] + 0.1, pc, cm, cc)  # 0.1 above top-k at k=5
    b = (cm[4] + 0.3, pc, cm, cc)  # 0.3 above
    res = delta_over_seeds([a, b], n_boot=500)
    assert res["mean"] == pytest.approx(0.2)
    assert res["lo"] == pytest.approx(0.2) and res["hi"] == pytest.approx(0.2)  # paired: the same shift everywhere
    outside = delta_over_seeds([a, (cm[4], pc * 10, cm, cc)])  # one seed beyond the curve: no mean
    assert outside["mean"] is None and outside["topk_at_costs"][1] is None
    with pytest.raises(ValueError, match="shapes differ"):
        delta_over_seeds([a, (cm[4][:10], pc, cm, cc)])


def test_arms_are_named_compared_on_the_plans_own_k_and_averaged(tmp_path: Path) -> None:
    hops = {f"s{i}": 1 for i in range(30)} | {f"b{i}": 2 for i in range(30)}
    # imitation: topk_page's own k=5 recall (0.7) on single-hop questions, +0.2 on bridge ones; seed 1 adds 0.1
    imitation = [_run(tmp_path, f"imit{s}", [_row("ppo", q, 0.7 + 0.1 * s + (0.2 if h == 2 else 0.0), 5000.0)
                                             for q, h in hops.items()],
                      {"oracle": [_row("oracle", q, 1.0, 5000.0) for q in hops]} if s == 0 else None,
                      checkpoint=f"imit{s}") for s in (0, 1)]
    ppo = [_run(tmp_path, "ppo0", [_row("ppo", q, 0.5, 5000.0) for q in hops], checkpoint="ppo0")]
    res = report([("imitation", imitation), ("imitation+ppo", ppo)], hops, n_boot=200)
    by = {(r["policy"], r["subset"]): r for r in res["runs"]}
    assert [r["policy"] for r in res["runs"] if r["subset"] == "all"] == [
        "topk_page", "imitation", "imitation+ppo", "oracle"]
    imit = by[("imitation", "all")]
    assert imit["seeds"] == 2 and imit["checkpoints"] == ["imit0", "imit1"] and imit["render_mode"] == "visual"
    # against k=5's own 0.7 (episodes.jsonl), not the 0.5 of a line through k=4 and k=6
    assert imit["metrics"]["delta_recall_at_equal_tokens"]["mean"] == pytest.approx(0.15)
    assert imit["per_seed"]["delta_recall_at_equal_tokens"] == pytest.approx([0.1, 0.2])
    assert by[("imitation", "bridge")]["metrics"]["delta_recall_at_equal_tokens"]["mean"] == pytest.approx(0.25)
    assert by[("imitation", "single_hop")]["metrics"]["delta_recall_at_equal_tokens"]["mean"] == pytest.approx(0.05)
    assert by[("imitation", "bridge")]["metrics"]["episodes"] == 30
    assert by[("imitation+ppo", "all")]["metrics"]["delta_recall_at_equal_tokens"]["mean"] == pytest.approx(-0.2)
    assert by[("oracle", "all")]["privileged"] and by[("oracle", "all")]["seeds"] == 1
    assert by[("topk_page", "all")]["metrics"]["evidence_page_recall"] == pytest.approx(0.7)
    assert "delta_recall_at_equal_tokens" not in by[("topk_page", "all")]["metrics"]
    assert res["subsets"] == {"single_hop": 30, "bridge": 30}
    # the docs derive the headroom share from the {"mean", "lo", "hi"} cells
    shares = {r["policy"]: r["metrics"].get(HEADROOM_CLOSED) for r in with_headroom_closed(res["runs"])
              if r["subset"] == "all"}
    assert shares["imitation"] == pytest.approx(0.15 / 0.3)
    # ... and show each delta as one "mean [lo, hi]" cell, not again as a table of its own per row
    out = tmp_path / "published"
    out.mkdir()
    (out / "results.json").write_text(json.dumps(res))
    (out / "provenance.json").write_text(json.dumps({"command": "c", "date": "d", "commit": "x"}))
    md = "\n".join(render_result("report", out))
    assert "| imitation | synth | test | all | k=5 m=4 M=24 T=6 B=16 | visual | 60 |" in md
    assert "0.150 [" in md and "| interpretable |" not in md
    small = {"mean": 0.1, "lo": 0.0, "hi": 0.2, "n": 7, "interpretable": False}
    assert published.format_cell(small) == "0.100 [0.000, 0.200] (n=7: under 30)"  # a small test set says so


def test_a_curve_in_another_render_mode_is_not_used(tmp_path: Path) -> None:
    qs = [f"q{i}" for i in range(30)]
    run = _run(tmp_path, "text", [_row("ppo", q, 0.7, 5000.0) for q in qs], modes={"ppo": "text"})
    row = next(r for r in report([("imitation", [run])])["runs"] if r["policy"] == "imitation")
    assert row["render_mode"] == "text"
    assert row["metrics"]["delta_recall_at_equal_tokens"]["mean"] is None  # topk_page was only played visually
    visual = _run(tmp_path, "visual", [_row("ppo", q, 0.7, 5000.0) for q in qs])
    with pytest.raises(ValueError, match="different render modes"):
        report([("imitation", [run, visual])])


def test_an_elements_student_is_compared_with_whole_page_images_below_one_page(tmp_path: Path) -> None:
    # an elements-mode student reading 500 tokens (half a page): topk_page's visual curve, between k=0 and k=1
    qs = [f"q{i}" for i in range(30)]
    run = _run(tmp_path, "elements", [_row("ppo", q, 0.3, 500.0) for q in qs], modes={"ppo": "elements"})
    row = next(r for r in report([("imitation", [run])])["runs"] if r["policy"] == "imitation")
    assert row["render_mode"] == "elements"
    # topk_page at 500 tokens: half of k=1's 0.1 recall (the curve's floor is k=0: nothing read, recall 0)
    assert row["metrics"]["delta_recall_at_equal_tokens"]["mean"] == pytest.approx(0.3 - 0.05)


def test_cli_names_a_bad_arm_and_a_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_arm("a+b=x,y") == ("a+b", [Path("x"), Path("y")])
    with pytest.raises(SystemExit):
        main(["--arm", "imitation", "--out", str(tmp_path / "o")])
    assert "LABEL=RUN_DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--arm", f"imitation={tmp_path / 'nowhere'}", "--out", str(tmp_path / "o")])
    assert "benchmark run folder" in capsys.readouterr().err


def test_arms_are_also_reported_at_the_operating_budget_and_by_cost_at_equal_evidence(tmp_path: Path) -> None:
    qs = [f"q{i}" for i in range(40)]
    # seed 0 reads 3 pages' tokens for k=5's recall (0.7): 0 at the budget, topk_page needs 5,000 / 3,000 tokens;
    # seed 1 reads 7 pages' tokens for 0.9: over the budget, so read on the curve at 7,000 tokens (0.7)
    seeds = [_run(tmp_path, "s0", [_row("ppo", q, 0.7, 3000.0) for q in qs], checkpoint="s0"),
             _run(tmp_path, "s1", [_row("ppo", q, 0.9, 7000.0) for q in qs], checkpoint="s1")]
    res = report([("arm", seeds)], n_boot=200)
    arm = next(r for r in res["runs"] if r["policy"] == "arm")
    assert arm["per_seed"]["delta_recall_at_operating_budget"] == pytest.approx([0.0, 0.2])
    assert arm["metrics"]["delta_recall_at_operating_budget"]["mean"] == pytest.approx(0.1)
    # topk_page reaches 0.7 first at k=5 (its own point is 0.2 above the line), and 0.9 never
    ratios = arm["per_seed"]["cost_ratio_recall_at_equal_evidence"]
    assert ratios[0] == pytest.approx(5000.0 / 3000.0) and ratios[1] is None
    assert arm["metrics"]["cost_ratio_recall_at_equal_evidence"]["mean"] is None  # one seed beyond the curve
    assert arm["per_seed"]["delta_recall_at_equal_tokens"] == pytest.approx([0.7 - 0.3, 0.9 - 0.7])


def test_the_command_writes_the_report_and_its_frontier_figure(tmp_path: Path, capsys) -> None:
    qs = [f"q{i}" for i in range(30)]
    runs = [_run(tmp_path, f"s{s}", [_row("ppo", q, 0.7 + 0.05 * s, 3000.0) for q in qs], checkpoint=f"s{s}")
            for s in (0, 1)]
    assert main(["--arm", f"arm={runs[0]},{runs[1]}", "--out", str(tmp_path / "o"), "--n-boot", "50"]) == 0
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert {r["policy"] for r in res["runs"]} == {"topk_page", "arm"}
    png = (tmp_path / "o" / "frontier.png").read_bytes()
    assert png[:4] == b"\x89PNG" and len(png) > 10_000
    assert "d_recall@budget=+0.025" in capsys.readouterr().out  # mean of 0.0 and +0.05 at topk_page's k=5
