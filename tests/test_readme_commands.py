"""Every command and code block in README.md runs as written (issues 31 and 32).

The README's shell commands and Python blocks are read from the README
itself, not copied here, so a command edited there is the command tested.
Each one is either

- run here, as written, from a launch folder laid out like the repository
  (``experiments/``, ``conf/`` ... linked; ``../shared/data`` linked to the
  real data), with size overrides *appended* (a later Hydra override or
  argparse flag wins, so the command's own words all still run), or
- named with the test that already runs it (the paper command against a real
  llama.cpp server, the test suite itself), or
- declared external (a command of another tool that needs a GPU).

A README command with no entry below fails ``test_every_readme_command_is_covered``.
Each command run here is checked for what it produces (:data:`PRODUCES`: a
results.json with the expected fields, a file that exists, a figure in its
range), and each Python block for what it computes (a probe line appended to
the block, :data:`PROBES`). Every case can run alone: a command that reads
what an earlier README command made (the corpus ``train.py`` trains on, the
benchmark run ``report.py`` and ``publish`` read) runs that command first,
once per launch folder (:data:`NEEDS`). Commands that read ``../shared/data``
skip with a reason when it is absent.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
DATA = Path(os.environ.get("MAGE_GYM_DATA", REPO.parent / "shared" / "data"))

SMALL_TRAIN = ("train.total_timesteps=128", "train.eval_freq=128", "train.n_envs=1", "train.eval_episodes=2",
               "train.bc.episodes=4", "train.bc.updates=10", "train.dagger.rounds=1", "train.dagger.updates=10",
               "train.ppo.hparams.n_steps=64", "train.ppo.hparams.batch_size=32", "logger=none", "graph_workers=1")

#: command prefix -> what to append when it runs here (argparse: the last flag wins; Hydra: the last override)
RUN_HERE: dict[str, tuple[str, ...]] = {
    "experiments/build_graphs.py": ("limit=1",),
    "experiments/quality/parser_quality.py": ("limit_docs=1",),
    "experiments/perf/long_pdf.py": ("--pages", "40"),
    "experiments/make_synth.py": (),
    "experiments/train.py": SMALL_TRAIN,
    "experiments/benchmark.py dataset=mmlongbench dataset.limit=3": ("dataset.limit=1", "budgets=[{k: 3}]",
                                                                     "logger=none"),
    "experiments/headroom.py": ("dataset.limit=1",),
    "experiments/report.py": (),
    "-m experiments.results_doc publish": ("--results-root", "published"),
    "-m experiments.results_doc render": ("--results-root", "published", "--out", "published/RESULTS.md"),
}
#: command prefix -> the test that runs it (path::name), with what that test changes
ELSEWHERE: dict[str, str] = {
    "experiments/benchmark.py --config-name paper": "tests/test_answering_readers_entry_point.py::"
                                                    "test_readme_paper_command_reaches_a_real_server_on_a_real_document",
    "bash scripts/run_tests.sh": "the test suite itself (.ci/run runs exactly this command on a clean clone)",
    "bash scripts/run_main.sh": "tests/test_readme_commands.py::test_the_main_job_runs_through_its_entry_point",
}
#: commands of other tools that cannot run on this CPU-only machine, with why
EXTERNAL: dict[str, str] = {
    "vllm serve": "vLLM's own server: needs a GPU and the Qwen3-VL weights; the command that talks to it is tested "
                  "against a real llama.cpp server instead",
}
USES_REAL_DATA = ("../shared/data", "dataset=mmlongbench", '"mmlongbench"', "parser_quality.py")


def readme_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def readme_commands() -> list[str]:
    """Shell commands of the README's bash blocks: continuations joined, comments dropped."""
    commands = []
    for block in readme_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(re.sub(r"\s+", " ", line))
    return commands


def entry_of(command: str) -> tuple[str, str]:
    """(table, prefix) of the longest prefix that matches ``command`` (after ``.venv/bin/python``)."""
    bare = command.removeprefix(".venv/bin/python ")
    matches = [(len(p), table, p) for table, keys in (("run", RUN_HERE), ("elsewhere", ELSEWHERE),
                                                       ("external", EXTERNAL)) for p in keys if bare.startswith(p)]
    if not matches:
        raise KeyError(command)
    _, table, prefix = max(matches)
    return table, prefix


def test_the_readme_has_commands_and_code() -> None:
    assert len(readme_commands()) >= 10 and len(readme_blocks("python")) >= 3


def test_every_readme_command_is_covered() -> None:
    uncovered = []
    for command in readme_commands():
        try:
            entry_of(command)
        except KeyError:
            uncovered.append(command)
    assert not uncovered, f"README commands nobody runs (add them to RUN_HERE or ELSEWHERE): {uncovered}"


def test_the_tests_named_for_readme_commands_exist() -> None:
    for target in ELSEWHERE.values():
        if "::" not in target:
            continue
        path, name = target.split("::")
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        assert name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, target


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder laid out like the repository root (code linked, outputs local), with ../shared/data beside it."""
    root = tmp_path_factory.mktemp("readme")
    launch = root / "repo"
    launch.mkdir()
    for name in ("experiments", "conf", "mage_gym", "policies", "scripts", "docs"):
        (launch / name).symlink_to(REPO / name, target_is_directory=True)
    (launch / ".venv").symlink_to(sys.prefix, target_is_directory=True)  # the environment running the tests
    if DATA.is_dir():
        (root / "shared").mkdir()
        (root / "shared" / "data").symlink_to(DATA, target_is_directory=True)
    return launch


def run_in(launch: Path, argv: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=str(REPO), MAGE_GYM_DATA=str(DATA))
    proc = subprocess.run(argv, cwd=launch, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{shlex.join(argv)}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def needs_data(text: str) -> None:
    if any(marker in text for marker in USES_REAL_DATA) and not DATA.is_dir():
        pytest.skip(f"the README runs this on real data, not found at {DATA} (set MAGE_GYM_DATA)")


BENCHMARK = "experiments/benchmark.py dataset=mmlongbench dataset.limit=3"
#: command prefix -> the README commands (prefixes) whose output it reads, run first when not yet run
NEEDS: dict[str, tuple[str, ...]] = {
    "experiments/train.py": ("experiments/make_synth.py",),
    "experiments/report.py": (BENCHMARK,),
    "-m experiments.results_doc publish": (BENCHMARK,),
    "-m experiments.results_doc render": ("-m experiments.results_doc publish",),
}
_DONE: dict[tuple[Path, str], subprocess.CompletedProcess] = {}


def run_readme_command(launch: Path, prefix: str) -> subprocess.CompletedProcess:
    """The README command with ``prefix`` (plus RUN_HERE's size overrides), once per launch folder, its needs first."""
    if (launch, prefix) in _DONE:
        return _DONE[(launch, prefix)]
    for need in NEEDS.get(prefix, ()):
        run_readme_command(launch, need)
    command = next(c for c in readme_commands() if entry_of(c) == ("run", prefix))
    needs_data(command)
    _DONE[(launch, prefix)] = run_in(launch, shlex.split(command) + list(RUN_HERE[prefix]))
    return _DONE[(launch, prefix)]


def only_results(folder: Path) -> dict:
    """The one results.json of a command's run folder (glob: Hydra names run folders by time)."""
    found = sorted(f for f in folder.glob("*/results.json") if not f.parent.is_symlink())  # not "latest"
    assert len(found) == 1, f"expected one results.json under {folder}, found {found}"
    return json.loads(found[0].read_text())


def _build_graphs(launch: Path) -> None:
    t = only_results(launch / "outputs" / "build_graphs")["totals"]
    assert t["documents"] == 1 and t["built"] + t["cached"] == 1 and t["failed"] == 0
    assert t["pages"] > 0 and t["elements"] > 0 and t["edges"] > 0


def _parser_quality(launch: Path) -> None:
    r = only_results(launch / "outputs" / "parser_quality")
    assert r["parser"] == "fast" and r["documents"] == 1 and r["pages"] > 0
    assert r["overall"]["boxes"] > 0 and 0.0 <= r["overall"]["match_rate"] <= 1.0


def _long_pdf(launch: Path) -> None:
    r = json.loads((launch / "outputs" / "long_pdf" / "results.json").read_text())
    layout = r["long"]["layout"]
    assert 0 < layout["pages_with_line_as_element"] <= 40 and layout["build_seconds"] > 0


def _make_synth(launch: Path) -> None:
    from mage_gym.data.synth import read_manifest

    assert len(read_manifest(launch / "data_out" / "synth" / "tiny_seed0")["docs"]) == 7
    corpus = only_results(launch / "outputs" / "make_synth")["corpus"]
    assert corpus["n_docs"] == 7 and corpus["n_questions"] > 7 and corpus["n_pages"] > 7


def _train(launch: Path) -> None:
    runs = only_results(launch / "outputs" / "train")["runs"]
    learner = runs[0]
    assert learner["training"]["recipe"] == "dagger_ppo" and learner["metrics"]["episodes"] >= 1
    ckpt = Path(learner["checkpoint"]["path"])
    assert (ckpt if ckpt.is_absolute() else launch / ckpt).is_file()
    assert any(r.get("privileged") for r in runs[1:]), "DAgger's teacher row, marked privileged"


def _benchmark(launch: Path) -> None:
    runs = json.loads((launch / "outputs" / "benchmark" / "latest" / "results.json").read_text())["runs"]
    assert {r["policy"] for r in runs} == {"topk_page", "heuristic", "ppo"}
    for r in runs:
        assert r["budget"]["k"] == 3 and r["metrics"]["episodes"] == 1
        assert 0.0 <= r["metrics"]["evidence_page_recall"] <= 1.0 and -2.0 < r["metrics"]["reward"] < 2.0


def _headroom(launch: Path) -> None:
    run = only_results(launch / "outputs" / "headroom")["runs"][0]
    assert run["privileged"] is True and run["metrics"]["episodes"] == 1
    assert 0.0 <= run["metrics"]["topk_recall"] <= run["metrics"]["oracle_recall"] <= 1.0


def _report(launch: Path) -> None:
    out = launch / "outputs" / "benchmark" / "latest" / "report"
    summary = json.loads((out / "results.json").read_text())
    assert (out / "index.html").stat().st_size > 1000 and summary
    assert len(list((out / "episodes").glob("*.html"))) == 1, "one episode page per question"


def _publish(launch: Path) -> None:
    dest = launch / "published" / "my_run"
    prov = json.loads((dest / "provenance.json").read_text())
    assert prov["command"].startswith(".venv/bin/python experiments/benchmark.py") and prov["date"]
    assert json.loads((dest / "results.json").read_text()) == json.loads(
        (launch / "outputs" / "benchmark" / "latest" / "results.json").read_text())


def _render(launch: Path) -> None:
    index = (launch / "published" / "RESULTS.md").read_text()
    assert "my_run" in index and (launch / "published" / "my_run" / "README.md").is_file()


#: command prefix -> the check of what it produced
PRODUCES = {
    "experiments/build_graphs.py": _build_graphs,
    "experiments/quality/parser_quality.py": _parser_quality,
    "experiments/perf/long_pdf.py": _long_pdf,
    "experiments/make_synth.py": _make_synth,
    "experiments/train.py": _train,
    BENCHMARK: _benchmark,
    "experiments/headroom.py": _headroom,
    "experiments/report.py": _report,
    "-m experiments.results_doc publish": _publish,
    "-m experiments.results_doc render": _render,
}

COMMANDS_HERE = [c for c in readme_commands() if entry_of(c)[0] == "run"]


def test_every_command_run_here_has_a_check() -> None:
    assert sorted(PRODUCES) == sorted(RUN_HERE) and all(n in RUN_HERE for needs in NEEDS.values() for n in needs)


@pytest.mark.parametrize("command", COMMANDS_HERE, ids=[c[:60] for c in COMMANDS_HERE])
def test_readme_command_runs_as_written(command: str, launch: Path) -> None:
    """Runs alone (what it reads is made first), then its output is checked."""
    needs_data(command)
    _, prefix = entry_of(command)
    run_readme_command(launch, prefix)
    PRODUCES[prefix](launch)


#: a line appended to each README Python block (found by a phrase of the block) and the check of what it prints
PROBES: dict[str, tuple[str, object]] = {
    "make_env(dataset=": (
        'print("PROBE", json.dumps({"reward": float(reward), "done": bool(done), '
        '"recall": info["evidence_page_recall"], "support": info["reward_components"]["support"]}))',
        lambda r: r["done"] and -2.0 < r["reward"] < 2.0 and 0.0 <= r["support"] <= 1.0
        and (r["recall"] is None or 0.0 <= r["recall"] <= 1.0)),
    "build_graph(": (
        'print("PROBE", json.dumps({"pages": g.n_pages, "elements": len(g.elements), '
        '"nodes": nxg.number_of_nodes(), "crop": list(img.size)}))',
        lambda r: r["pages"] > 0 and r["elements"] > 3 and r["nodes"] == r["pages"] + r["elements"]
        and min(r["crop"]) > 0),
    "load_dataset(\"mmlongbench\", split=\"test\"": (
        'print("PROBE", json.dumps({"n": len(eps), "splits": sorted({e.split for e in eps})}))',
        lambda r: 1 <= r["n"] <= 20 and r["splits"] == ["test"]),
    "paired_delta(": (
        'd = paired_delta([r.reward for r in mine], [r.reward for r in base]); '
        'print("PROBE", json.dumps({"n": [len(mine), len(base)], "mean": d["mean"], "lo": d["lo"], "hi": d["hi"]}))',
        lambda r: r["n"] == [5, 5] and r["lo"] <= r["mean"] <= r["hi"]),
}


def probe_of(code: str) -> tuple[str, object]:
    found = [v for k, v in PROBES.items() if k in code]
    assert len(found) == 1, f"a README Python block has {len(found)} probes: {code[:200]}"
    return found[0]


@pytest.mark.parametrize("index", range(len(readme_blocks("python"))))
def test_readme_python_block_runs(index: int, launch: Path) -> None:
    code = readme_blocks("python")[index]
    needs_data(code)
    line, check = probe_of(code)
    proc = run_in(launch, [sys.executable, "-c", f"{code}\nimport json\n{line}"])
    probe = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("PROBE ")).split(" ", 1)[1])
    assert check(probe), probe


def test_the_main_job_runs_through_its_entry_point(launch: Path) -> None:
    """``bash scripts/run_main.sh`` = set up .venv, then ``experiments/main.py``; this runs the latter, smaller."""
    script = (REPO / "scripts" / "run_main.sh").read_text(encoding="utf-8")
    assert "bash scripts/setup_venv.sh" in script and "exec .venv/bin/python experiments/main.py" in script
    proc = run_in(launch, [sys.executable, "experiments/main.py", *SMALL_TRAIN, "policy.llm_evaluator.limit=1",
                           "policy.llm_evaluator.max_rounds=1"])
    assert "| topk_page |" in proc.stdout and "| llm_evaluator |" in proc.stdout, proc.stdout[-3000:]
