"""The mutation score's survivors file: which rows count as reviewed, and its tables rewritten from a run."""
from __future__ import annotations

import json

from experiments.perf.mutation_score import main, reviewed_verdicts

A, B, C = "mage_gym.reward.x_f__mutmut_1", "mage_gym.reward.x_f__mutmut_2", "mage_gym.reward.x_g__mutmut_3"


def _module(*names: str) -> dict:
    return {"paths": ["mage_gym/reward.py"], "tests": [], "mutants": 10, "counts": {"killed": 10 - len(names),
            "survived": len(names)}, "killed": 10 - len(names), "score": 0.8, "seconds": 1.0,
            "not_killed": [{"name": n, "status": "survived", "change": f"-    x = {n[-1]} | +    x = None"} for n in names],
            "unreviewed": []}


def test_the_tables_follow_the_run_keep_verdicts_and_leave_new_survivors_unreviewed(tmp_path):
    survivors = tmp_path / "survivors.md"
    survivors.write_text(f"# Survivors\n\nlegend\n\n## reward\n\n| mutant | status | change | verdict |\n| --- | --- | --- | --- |\n"
                         f"| `{A}` | survived | `a → b` | equivalent: no caller passes x |\n"
                         f"| `{C}` | survived | `c → d` | killable, no test: since killed |\n"
                         f"| `{B}` | survived | `e \\| f` |  |\n")
    assert reviewed_verdicts(survivors) == {A: "equivalent: no caller passes x", C: "killable, no test: since killed"}
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"modules": {"reward": _module(A, B)}}))
    assert main(["--out", str(run), "--modules", "--survivors", str(survivors), "--rewrite-survivors"]) == 0
    text = survivors.read_text()
    assert text.startswith("# Survivors\n\nlegend\n\n## reward\n") and C not in text  # C is killed now: its row goes
    assert f"| `{A}` | survived | `-    x = 1 \\| +    x = None` | equivalent: no caller passes x |" in text
    assert f"| `{B}` | survived | `-    x = 2 \\| +    x = None` |  |" in text  # new: its verdict is still to write
    total = json.loads((run / "results.json").read_text())["total"]
    assert total["unreviewed"] == 1 and total["verdicts"] == {"equivalent": 1, "message text": 0, "killable, no test": 0}
    assert json.loads((run / "results.json").read_text())["modules"]["reward"]["unreviewed"] == [B]
