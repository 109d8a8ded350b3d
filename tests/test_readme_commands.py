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
Commands that read ``../shared/data`` skip with a reason when it is absent.
"""
from __future__ import annotations

import ast
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


COMMANDS_HERE = [c for c in readme_commands() if entry_of(c)[0] == "run"]


@pytest.mark.parametrize("command", COMMANDS_HERE, ids=[c[:60] for c in COMMANDS_HERE])
def test_readme_command_runs_as_written(command: str, launch: Path) -> None:
    """In README order, so a command finds what the ones before it made (corpus, run folders)."""
    needs_data(command)
    _, prefix = entry_of(command)
    argv = shlex.split(command) + list(RUN_HERE[prefix])
    proc = run_in(launch, argv)
    if "benchmark.py" in command:
        assert (launch / "outputs" / "benchmark" / "latest" / "results.json").is_file(), proc.stdout[-2000:]
    if "publish" in command:
        assert (launch / "published" / "my_run" / "provenance.json").is_file()


@pytest.mark.parametrize("index", range(len(readme_blocks("python"))))
def test_readme_python_block_runs(index: int, launch: Path) -> None:
    code = readme_blocks("python")[index]
    needs_data(code)
    run_in(launch, [sys.executable, "-c", code])


def test_the_main_job_runs_through_its_entry_point(launch: Path) -> None:
    """``bash scripts/run_main.sh`` = set up .venv, then ``experiments/main.py``; this runs the latter, smaller."""
    script = (REPO / "scripts" / "run_main.sh").read_text(encoding="utf-8")
    assert "bash scripts/setup_venv.sh" in script and "exec .venv/bin/python experiments/main.py" in script
    proc = run_in(launch, [sys.executable, "experiments/main.py", *SMALL_TRAIN, "policy.llm_evaluator.limit=1",
                           "policy.llm_evaluator.max_rounds=1", "budgets=[{k: 2}]"])
    assert "| topk_page |" in proc.stdout and "| llm_evaluator |" in proc.stdout, proc.stdout[-3000:]
