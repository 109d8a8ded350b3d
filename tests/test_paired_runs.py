"""One policy in two benchmark runs, paired per episode (experiments/analysis/paired_runs.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.analysis.paired_runs import main

BUDGET = {"k": 2, "m": 2, "M": 8, "T": 4, "B": 4}


def _run(root: Path, rows: list[tuple]) -> Path:
    """A run folder whose episodes.jsonl holds (policy, episode, reward, recall, tokens, failed) rows."""
    root.mkdir(parents=True)
    lines = [{"policy": p, "budget": BUDGET, "episode_id": e, "reward": r, "failed": f,
              "metrics": {"evidence_page_recall": rec, "tokens_rendered": tok}} for p, e, r, rec, tok, f in rows]
    (root / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def test_the_change_is_paired_per_episode_over_the_named_policy_only(tmp_path) -> None:
    base = _run(tmp_path / "base", [("llm", "a", 0.1, 0.5, 100, False), ("llm", "b", 0.2, None, 200, False),
                                    ("llm", "c", 0.3, 1.0, 300, False), ("topk", "a", 9.0, 0.0, 1, False),
                                    ("llm", "d", 0.0, 0.0, 0, True)])
    new = _run(tmp_path / "new", [("llm", "c", 0.3, 0.5, 350, False), ("llm", "a", 0.4, 1.0, 100, False),
                                  ("llm", "b", 0.5, None, 200, False), ("llm", "d", 0.0, 0.0, 0, True)])
    res = json.loads(main(["--policy", "llm", "--base", str(base), "--new", str(new),
                           "--out", str(tmp_path / "out")]).read_text())
    assert res["episodes"] == 3  # failed rows and other policies are not paired
    assert res["reward"]["delta"]["mean"] == pytest.approx((0.3 + 0.3 + 0.0) / 3)
    assert res["page_recall"]["delta"]["n"] == 2 and res["page_recall"]["delta"]["mean"] == pytest.approx(0.0)
    assert res["page_recall"]["questions"] == {"higher": 1, "lower": 1, "same": 0}
    assert res["tokens"]["questions"] == {"higher": 1, "lower": 0, "same": 2}
    assert res["reward"]["questions"] == {"higher": 2, "lower": 0, "same": 1}
    assert res["tokens"]["base"] == pytest.approx(200) and res["tokens"]["new"] == pytest.approx(650 / 3)
    lo, hi = res["reward"]["delta"]["lo"], res["reward"]["delta"]["hi"]
    assert lo <= res["reward"]["delta"]["mean"] <= hi and lo < hi


def test_recall_moves_are_split_by_whether_the_new_run_read_more(tmp_path) -> None:
    base = _run(tmp_path / "base", [("llm", "a", 0, 0.5, 100, False), ("llm", "b", 0, 0.5, 100, False),
                                    ("llm", "c", 0, 1.0, 300, False), ("llm", "d", 0, 0.5, 100, False),
                                    ("llm", "e", 0, None, 100, False)])
    new = _run(tmp_path / "new", [("llm", "a", 0, 1.0, 400, False), ("llm", "b", 0, 0.5, 400, False),
                                  ("llm", "c", 0, 0.5, 200, False), ("llm", "d", 0, 0.5, 100, False),
                                  ("llm", "e", 0, None, 900, False)])
    res = json.loads(main(["--policy", "llm", "--base", str(base), "--new", str(new),
                           "--out", str(tmp_path / "out")]).read_text())
    split = res["recall_by_token_change"]  # question e has no gold: no recall to split
    assert split["more_tokens"] == {"higher": 1, "lower": 0, "same": 1}
    assert split["fewer_tokens"] == {"higher": 0, "lower": 1, "same": 0}
    assert split["same_tokens"] == {"higher": 0, "lower": 0, "same": 1}


def test_runs_over_different_episodes_are_refused(tmp_path) -> None:
    base = _run(tmp_path / "base", [("llm", "a", 0.1, 0.5, 100, False), ("llm", "b", 0.2, 0.5, 100, False)])
    new = _run(tmp_path / "new", [("llm", "a", 0.1, 0.5, 100, False)])
    with pytest.raises(ValueError, match="different episodes"):
        main(["--policy", "llm", "--base", str(base), "--new", str(new), "--out", str(tmp_path / "out")])
    with pytest.raises(ValueError, match="no successful episodes"):
        main(["--policy", "other", "--base", str(base), "--new", str(new), "--out", str(tmp_path / "out")])


def test_the_command_runs_as_the_guide_writes_it(tmp_path) -> None:
    import subprocess
    import sys

    base = _run(tmp_path / "base", [("llm_controller", e, 0.1, 0.5, 100, False) for e in "abc"])
    new = _run(tmp_path / "new", [("llm_controller", e, 0.2, 1.0, 150, False) for e in "abc"])
    done = subprocess.run([sys.executable, "-m", "experiments.analysis.paired_runs", "--policy", "llm_controller",
                           "--base", str(base), "--new", str(new), "--out", str(tmp_path / "out")],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["page_recall"]["delta"]["mean"] == pytest.approx(0.5) and res["tokens"]["delta"]["mean"] == 50


def _scored_run(root: Path, rows: list[tuple], weights: tuple[float, float, float] | None) -> Path:
    """A run whose rows carry reward components: (episode, support, noise, tokens part, operations part,
    calls part); ``weights`` (tokens, operations, calls) go in its .hydra/config.yaml (None: no config)."""
    w = weights or (0.5, 0.25, 0.25)
    lines = []
    for e, sup, noi, ct, co, cc in rows:
        cost = w[0] * ct + w[1] * co + w[2] * cc
        comp = {"support": sup, "noise": noi, "cost": cost, "cost_tokens": ct, "cost_operations": co,
                "cost_calls": cc, "lambda_noise": 0.25, "lambda_cost": 1.0}
        comp["reward"] = sup - 0.25 * noi - cost
        lines.append({"policy": "llm", "budget": BUDGET, "episode_id": e, "reward": comp["reward"], "failed": False,
                      "components": comp, "metrics": {"evidence_page_recall": sup, "tokens_rendered": 1000 * ct}})
    root.mkdir(parents=True)
    (root / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if weights:
        (root / ".hydra").mkdir()
        (root / ".hydra" / "config.yaml").write_text(
            f"env:\n  reward:\n    w_tokens: {w[0]}\n    w_ops: {w[1]}\n    w_calls: {w[2]}\n")
    return root


def test_the_reward_change_is_split_into_its_terms_that_sum_to_it(tmp_path) -> None:
    weights = (0.2, 0.3, 0.5)  # not the defaults: read from each run's config
    base = _scored_run(tmp_path / "base", [("a", 0.5, 0.4, 0.1, 0.1, 0.4), ("b", 0.5, 0.4, 0.1, 0.1, 0.4)], weights)
    new = _scored_run(tmp_path / "new", [("a", 1.0, 0.6, 0.2, 0.3, 0.8), ("b", 0.5, 0.6, 0.2, 0.3, 1.0)], weights)
    res = json.loads(main(["--policy", "llm", "--base", str(base), "--new", str(new),
                           "--out", str(tmp_path / "out")]).read_text())
    parts = res["reward_parts"]
    assert parts["support"]["mean"] == pytest.approx(0.25)
    assert parts["noise"]["mean"] == pytest.approx(-0.25 * 0.2)
    assert parts["cost_tokens"]["mean"] == pytest.approx(-0.2 * 0.1)
    assert parts["cost_operations"]["mean"] == pytest.approx(-0.3 * 0.2)
    assert parts["cost_calls"]["mean"] == pytest.approx(-0.5 * 0.5)  # calls 0.4 -> 0.8 and 1.0: +0.5 on average
    assert parts["sum_of_means"] == pytest.approx(res["reward"]["delta"]["mean"])
    assert parts["reading"]["mean"] == pytest.approx(0.25 - 0.05 - 0.02)
    assert parts["moves_and_replies"]["mean"] == pytest.approx(-0.06 - 0.25)

    # a run scored with other weights than its config says is refused, not split wrongly
    (new / ".hydra" / "config.yaml").write_text("env:\n  reward:\n    w_tokens: 0.5\n")
    with pytest.raises(ValueError, match="cost weights"):
        main(["--policy", "llm", "--base", str(base), "--new", str(new), "--out", str(tmp_path / "out2")])
