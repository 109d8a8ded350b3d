"""Mutation score of the modules every claim rests on, with mutmut 3 (issue 44; not part of CI).

Why mutmut 3 (not cosmic-ray): it compiles every mutant of a file into one
copy of the code behind a switch, forks one worker per mutant from a process
that has already imported the project and its tests, and runs only the tests
whose stats run touched the mutated function. cosmic-ray starts the test
command afresh for every mutant, which costs a torch import (seconds) each
time on this project. Tried on ``mage_gym/reward.py`` first: 328 mutants in
90 s on two loaded cores.

What runs, per module of :data:`MODULES`: a scratch copy of the repository
under ``--out``/work/<module>/ with a ``[tool.mutmut]`` section that mutates
that module alone and selects that module's tests (the tests that exercise
it, fast ones: a mutant whose function no selected test reaches counts as
"no tests", i.e. not killed). ``mutmut run``, then ``mutmut results`` and
``mutmut show`` for every mutant not killed. Score = killed / (mutants -
skipped), where a timeout or a crash of the tests counts as killed (the
tests noticed) and "no tests" and "survived" do not.

Every survivor must be accounted for: ``--survivors FILE`` (default
``docs/results/mutation_score/survivors.md``) is a reviewed list, one table
row per survivor whose first cell is the mutant's name and last cell says why
it is equivalent (or which test was added); results.json lists the survivors
that file does not cover (no row, or a row with an empty verdict) under
``unreviewed``, and counts the verdicts by their first words (``verdicts``).
``--rewrite-survivors`` rewrites that file's tables from results.json: one
row per survivor of the current runs, its verdict kept from the old row
(empty for a new survivor, to be written by reviewing its diff); rows of
mutants the tests now kill are dropped.

Run (from the repo root; two workers, niced, ~10-20 min for all modules on two shared cores)::

    nice -n 15 .venv/bin/python experiments/perf/mutation_score.py                  # -> outputs/mutation_score/
    nice -n 15 .venv/bin/python experiments/perf/mutation_score.py --modules reward coverage --workers 1
    # after review: the survivors file's tables follow results.json (verdicts kept, new survivors added)
    .venv/bin/python experiments/perf/mutation_score.py --modules --rewrite-survivors

Install the tool with the ``dev`` extra (``mutmut``). Real data (tests that
read ``../shared/data``) is passed to the copies through ``MAGE_GYM_DATA``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COPIED = ("mage_gym", "policies", "conf", "experiments", "tests")


@dataclass(frozen=True)
class Target:
    """One module (or package) to mutate and the tests that exercise it."""

    paths: tuple[str, ...]  # mutmut only_mutate globs, relative to the repo root
    tests: tuple[str, ...]  # pytest arguments selecting this module's tests


MODULES: dict[str, Target] = {
    "reward": Target(("mage_gym/reward.py",),
                     ("tests/test_reward.py", "tests/test_reward_rules.py", "tests/test_coverage.py", "tests/test_env.py",
                      "tests/test_wrappers.py", "tests/test_render.py")),
    "coverage": Target(("mage_gym/coverage.py",),
                       ("tests/test_coverage.py", "tests/test_coverage_rules.py", "tests/test_item_support.py", "tests/test_reward.py",
                        "tests/test_reward_rules.py", "tests/test_render.py", "tests/test_env.py")),
    "render": Target(("mage_gym/render.py",),
                     ("tests/test_render.py", "tests/test_render_rules.py", "tests/test_coverage.py", "tests/test_reward.py",
                      "tests/test_union_graph.py", "tests/test_images.py", "tests/test_env_crossdoc.py",
                      # node_share and frame_chars: the token budget's per-node shares, checked against renders
                      "tests/test_token_budget.py")),
    "bench/equal_cost": Target(("mage_gym/bench/equal_cost.py",),
                               ("tests/test_equal_cost.py", "tests/test_learned_report.py",
                                "tests/test_aggregate_seeds.py", "tests/test_operating_budget.py",
                                "tests/test_item_support.py")),
    "env/actions": Target(("mage_gym/env/actions.py",),
                          ("tests/test_action_rules.py", "tests/test_env.py", "tests/test_env_properties.py",
                           "tests/test_env_no_gold.py",
                           "tests/test_state_fast_paths.py", "tests/test_headroom_slots.py",
                           "tests/test_token_budget.py")),
    "env/privileged": Target(("mage_gym/env/privileged.py",),
                             ("tests/test_env_sealed_gold.py", "tests/test_oracle.py", "tests/test_wrappers.py",
                              "tests/test_env_conversation.py", "tests/test_env_crossdoc.py")),
    "agent/trl_env": Target(("mage_gym/agent/trl_env.py",), ("tests/test_agent_chat_template.py",)),
    "agent/parse": Target(("mage_gym/agent/parse.py",),
                          ("tests/test_agent_parse.py", "tests/test_agent_parse_rules.py", "tests/test_agent_chat_env.py",
                           # 90 s under load, and it reads images, not the parser's rules
                           "--deselect", "tests/test_agent_chat_env.py::test_vision_parts_and_their_openai_form")),
    "retrieval/rerank": Target(("mage_gym/retrieval/rerank.py",), ("tests/test_rerank.py", "tests/test_rerank_rules.py")),
    "scoring": Target(("mage_gym/scoring/*",), ("tests/test_scoring.py", "tests/test_scoring_rules.py",
                                                "tests/test_scoring_runs.py", "tests/test_extract.py")),
}

#: mutmut's statuses that mean the tests noticed the mutant
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
ROW = re.compile(r"^\|\s*`?([\w.ǁ]+__mutmut_\d+)`?\s*\|")


#: a verdict's category: the words before its first colon (the survivors file's legend)
CATEGORIES = ("equivalent", "message text", "killable, no test")


def reviewed_verdicts(path: Path) -> dict[str, str]:
    """Mutant name -> verdict (last table cell) for each row of the survivors file whose verdict is written."""
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if (m := ROW.match(line)) and (verdict := line.rstrip().rstrip("|").rsplit(" | ", 1)[-1].strip()):
            out[m.group(1)] = verdict
    return out


def category(verdict: str) -> str:
    """The verdict's category (:data:`CATEGORIES`), or "other" for a verdict that names none."""
    return next((c for c in CATEGORIES if verdict.startswith(c)), "other")


def rewrite_survivors(path: Path, modules: dict, verdicts: dict[str, str]) -> None:
    """The survivors file's text up to its first table heading, then one table per module from ``modules``."""
    old = path.read_text(encoding="utf-8") if path.is_file() else "# Surviving mutants\n\n"
    head = old.split("\n## ", 1)[0].rstrip() + "\n"
    parts = [head]
    for key, row in modules.items():
        parts += [f"\n## {key}\n\n", "| mutant | status | change | verdict |\n", "| --- | --- | --- | --- |\n"]
        for nk in row["not_killed"]:
            change = nk["change"].replace("|", "\\|")
            parts.append(f"| `{nk['name']}` | {nk['status']} | `{change}` | {verdicts.get(nk['name'], '')} |\n")
    path.write_text("".join(parts), encoding="utf-8")


def prepare(work: Path, target: Target) -> None:
    """A fresh copy of the repository with a [tool.mutmut] section for this module alone."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
    for name in COPIED:
        shutil.copytree(REPO / name, work / name, ignore=ignore)
    toml = [
        "[tool.pytest.ini_options]",
        'testpaths = ["tests"]',
        'markers = ["real_data: real files", "slow: slow"]',
        "",
        "[tool.mutmut]",
        'source_paths = ["mage_gym"]',
        f"only_mutate = {json.dumps(list(target.paths))}",
        'also_copy = ["policies", "conf", "experiments"]',
        f"pytest_add_cli_args_test_selection = {json.dumps(list(target.tests))}",
        # tests marked slow (entry points in subprocesses, real servers) never see the mutated copy's code
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x", "-m", "not slow"]',
    ]
    (work / "pyproject.toml").write_text("\n".join(toml) + "\n")


def mutmut(work: Path, *args: str, log: Path, env: dict) -> str:
    """One mutmut command in the copy; its output goes to the module's log; a failure stops the run."""
    exe = Path(sys.executable).with_name("mutmut")
    out = subprocess.run([str(exe), *args], cwd=work, env=env, capture_output=True, text=True)
    with log.open("a") as f:
        f.write(f"$ mutmut {' '.join(args)}  (exit {out.returncode})\n{out.stdout[-20000:]}\n{out.stderr[-20000:]}\n")
    if out.returncode != 0:
        raise RuntimeError(f"mutmut {' '.join(args)} failed in {work} (exit {out.returncode}); see {log}")
    return out.stdout


#: run in the copy: every named mutant's diff in one process (``mutmut show`` starts a process per mutant)
DIFFS = """
import json, sys
from mutmut.configuration import config
from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant
config()
names = json.load(sys.stdin)
json.dump({n: get_diff_for_mutant(n, path=find_mutant(n).path) for n in names}, sys.stdout)
"""


def changed_lines(diff: str) -> str:
    """The removed and added lines of a mutant's diff, ``-old`` then ``+new``, joined by `` | ``."""
    return " | ".join(line.rstrip() for line in diff.splitlines()
                      if line.startswith(("-", "+")) and not line.startswith(("---", "+++")))


def diffs_of(work: Path, names: list[str], env: dict) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", DIFFS], cwd=work, env=env, input=json.dumps(names),
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"reading the mutants' diffs failed in {work}: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def run_module(key: str, target: Target, out: Path, workers: int, reviewed: dict[str, str],
               resume: bool = False) -> dict:
    work = out / "work" / key.replace("/", "_")
    if not (resume and (work / "mutants").is_dir()):
        prepare(work, target)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the copy's code, not a checkout's
    # one thread per library: each mutant runs in a process forked from one that has used torch and onnxruntime,
    # and a thread pool started before a fork deadlocks the child (seen: workers at 0 CPU for minutes)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    # pytest's temporary folders under the copy: the machine's shared /tmp/pytest-of-<user> is pruned by other runs
    (work / "tmp").mkdir(exist_ok=True)
    env["PYTEST_DEBUG_TEMPROOT"] = str(work / "tmp")
    data = Path(os.environ.get("MAGE_GYM_DATA", REPO.parent / "shared" / "data")).resolve()
    env.update(MAGE_GYM_DATA=str(data), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    log = out / f"{key.replace('/', '_')}.log"
    log.unlink(missing_ok=True)
    t0 = time.time()
    print(f"[mutation] {key}: mutmut run ({', '.join(target.paths)}; {' '.join(target.tests)})", flush=True)
    mutmut(work, "run", "--max-children", str(workers), log=log, env=env)
    seconds = time.time() - t0
    statuses: dict[str, str] = {}
    for line in mutmut(work, "results", "--all", "true", log=log, env=env).splitlines():
        if ": " in line:
            name, status = line.strip().rsplit(": ", 1)
            statuses[name] = status
    if not statuses:
        raise RuntimeError(f"{key}: mutmut produced no mutants (see {log})")
    not_killed = sorted(n for n, s in statuses.items() if s not in KILLED)
    diffs = diffs_of(work, not_killed, env)
    counts: dict[str, int] = {}
    for s in statuses.values():
        counts[s] = counts.get(s, 0) + 1
    tested = len(statuses) - counts.get("skipped", 0)
    killed = sum(c for s, c in counts.items() if s in KILLED)
    row = {"paths": list(target.paths), "tests": list(target.tests), "mutants": len(statuses), "counts": counts,
           "killed": killed, "score": round(killed / tested, 4) if tested else None, "seconds": round(seconds, 1),
           "not_killed": [{"name": n, "status": statuses[n], "change": changed_lines(diffs[n])} for n in not_killed],
           "unreviewed": [n for n in not_killed if n not in reviewed]}
    print(f"[mutation] {key}: {killed}/{tested} killed ({100 * killed / max(tested, 1):.1f} %), "
          f"{len(not_killed)} not killed, {len(row['unreviewed'])} unreviewed, {seconds:.0f} s", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", nargs="*", default=list(MODULES), choices=list(MODULES),
                    help="modules to run (none with --merge: only merge)")
    ap.add_argument("--out", type=Path, default=REPO / "outputs" / "mutation_score")
    ap.add_argument("--workers", type=int, default=2, help="mutants tested at once (forked workers)")
    ap.add_argument("--merge", nargs="*", type=Path, default=[],
                    help="out folders of runs made in parallel: their modules join this one's results.json")
    ap.add_argument("--resume", action="store_true",
                    help="continue a module's unfinished run in its existing scratch copy (mutmut keeps results)")
    ap.add_argument("--survivors", type=Path, default=REPO / "docs" / "results" / "mutation_score" / "survivors.md",
                    help="the reviewed survivors file (one table row per survivor)")
    ap.add_argument("--rewrite-survivors", action="store_true",
                    help="rewrite the survivors file's tables from results.json (verdicts kept)")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    reviewed = reviewed_verdicts(args.survivors)
    results_path = out / "results.json"
    previous = json.loads(results_path.read_text()).get("modules", {}) if results_path.is_file() else {}
    modules = dict(previous)
    for folder in args.merge:
        modules.update(json.loads((folder / "results.json").read_text())["modules"])
    for row in modules.values():  # rows of older runs kept whole diffs; the survivors file may be newer
        for nk in row["not_killed"]:
            if "diff" in nk:
                nk["change"] = changed_lines(nk.pop("diff"))
        row["unreviewed"] = [nk["name"] for nk in row["not_killed"] if nk["name"] not in reviewed]
    for key in args.modules:
        modules[key] = run_module(key, MODULES[key], out, args.workers, reviewed, args.resume)
        write(results_path, modules, reviewed)
    write(results_path, modules, reviewed)
    print(f"[mutation] wrote {results_path}")
    if args.rewrite_survivors:
        rewrite_survivors(args.survivors, modules, reviewed)
        print(f"[mutation] rewrote {args.survivors}")
    return 0


def write(path: Path, modules: dict, verdicts: dict[str, str]) -> None:
    """results.json: per module and in total; a re-run of some modules keeps the others' rows."""
    mutants = sum(m["mutants"] - m["counts"].get("skipped", 0) for m in modules.values())
    killed = sum(m["killed"] for m in modules.values())
    from importlib.metadata import version

    tool = f"mutmut {version('mutmut')}"
    total = {"mutants": mutants, "killed": killed, "score": round(killed / mutants, 4) if mutants else None,
             "not_killed": sum(len(m["not_killed"]) for m in modules.values()),
             "unreviewed": sum(len(m["unreviewed"]) for m in modules.values())}
    counts = {c: 0 for c in (*CATEGORIES, "other")}
    for m in modules.values():
        for nk in m["not_killed"]:
            if nk["name"] in verdicts:
                counts[category(verdicts[nk["name"]])] += 1
    total["verdicts"] = {c: n for c, n in counts.items() if n or c != "other"}
    path.write_text(json.dumps({"experiment": "mutation_score", "tool": tool, "score_rule":
                                "killed (timeouts and crashes included) / (mutants - skipped)",
                                "total": total, "modules": modules}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
