"""docs/LLM_TRAINING.md runs as written: its ten lines against a real server, its commands at test scale.

The ten-line block is executed as it stands, with two substitutions a reader
makes too: the server's address (a llama.cpp server with SmolLM2 on a free
loopback port) and ``max_replies`` (2, to keep CPU time short). The shell
commands run through their entry points: the SFT -> GRPO chain in
tests/test_agent_train.py, verifiers' evaluation in tests/test_agent_verifiers.py
and its command line here (``--dry-run``), the benchmark with
``protocol=tools`` here on a tiny local model; the GPU recipe (not runnable
on this machine) is checked for its configuration.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "LLM_TRAINING.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", DOC, flags=re.S)


def bash_commands() -> list[str]:
    out = []
    for lang, body in BLOCKS:
        if lang == "bash":
            out += [c.strip() for c in body.replace("\\\n", " ").splitlines() if c.strip()]
    return out


def sub_env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                WANDB_MODE="offline", TRL_EXPERIMENTAL_SILENCE="1")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from agent_helpers import one_document_corpus

    return one_document_corpus(tmp_path_factory.mktemp("doc_synth"), pages=4, questions=2)


def test_every_command_of_the_doc_is_one_the_tests_run():
    scripts = set()
    for cmd in bash_commands():
        first = cmd.split("#")[0].split()
        if first[:2] == ["nice", "-n"]:  # a long run on a shared machine: the command after the niceness
            first = first[3:]
        if first[:1] == [".venv/bin/pip"]:
            assert "torch==2.13.0" in cmd and "llm-train" in cmd and "verifiers" in cmd
            continue
        target = first[2] if first[1] == "-m" else first[1]
        scripts.add(target)
    assert scripts == {"experiments/make_synth.py", "experiments/export_transcripts.py", "experiments/train_llm.py",
                       "experiments/analysis/plot_llm_training.py", "experiments/benchmark.py",
                       "experiments/teacher_table.py", "experiments/analysis/llm_agreement.py",
                       "experiments/perf/perf_llm_loop.py", "experiments/perf/perf_service.py",
                       "experiments/mix_transcripts.py", "experiments/stop_for_prunes.py",
                       "mage_gym.agent.verifiers_env", "mage_gym.agent.server"}, scripts
    for path in re.findall(r"`((?:mage_gym|experiments|tests|docs)/[\w/.]+)`", DOC):
        assert (REPO / path).exists(), path


PYTHON = [body for lang, body in BLOCKS if lang == "python"]


def test_the_first_example_says_what_to_run_first_and_names_the_shipped_controller():
    first = DOC.index("```python")
    assert "experiments/make_synth.py preset=tiny" in DOC[:first]
    code = PYTHON[0]
    assert code.count("\n") <= 18 and 'root="data_out/synth/tiny_seed0"' in code
    assert '"policies/checkpoints/llm_controller_smollm2"' in code
    assert (REPO / "policies" / "checkpoints" / "llm_controller_smollm2" / "adapter_config.json").is_file()


@pytest.mark.slow
def test_the_ten_lines_with_a_local_model(corpus, tmp_path):
    """The first example as written, the shipped adapter swapped for a tiny model and the corpus for a test one."""
    from agent_helpers import build_tiny_chat_model

    model = build_tiny_chat_model(tmp_path / "model", teach='<tool_call>{"name": "activate", "arguments": '
                                                            '{"candidates": [1]}}</tool_call>', steps=40)
    run = PYTHON[0].replace('"policies/checkpoints/llm_controller_smollm2"', repr(str(model))) \
        .replace('"data_out/synth/tiny_seed0"', repr(str(corpus))).replace("range(8)", "range(2)")
    scope: dict = {}
    exec(compile(run, "LLM_TRAINING.md", "exec"), scope)  # noqa: S102 - the doc's own code
    info = scope["info"]
    assert isinstance(scope["reward"], float) and "reward_components" in info and "format_errors_total" in info
    replies = [m for m in scope["messages"] if m.get("role") == "assistant"]
    assert 1 <= len(replies) <= 2
    assert any(m.get("role") == "tool" for m in scope["messages"]) or info["format_errors_total"] > 0


@pytest.mark.slow
def test_the_ten_lines_against_a_real_server(corpus, monkeypatch):
    from llama_server import LlamaServer

    code = PYTHON[1]
    assert code.count("\n") <= 16 and "max_replies = 8" in code
    monkeypatch.setenv("MAGE_GYM_SYNTH", str(corpus))
    server = LlamaServer(corpus / "server.log", alias="smollm2", n_ctx=8192)
    try:
        run = code.replace("http://127.0.0.1:8080/v1", server.base_url).replace("max_replies = 8", "max_replies = 2") \
            .replace('"data_out/synth/tiny_seed0"', repr(str(corpus)))
        scope: dict = {}
        exec(compile(run, "LLM_TRAINING.md", "exec"), scope)  # noqa: S102 - the doc's own code
    finally:
        server.kill()
    info = scope["info"]
    assert "reward_components" in info and isinstance(scope["reward"], float)
    assert scope["terminated"] or scope["truncated"]
    replies = [m for m in scope["messages"] if m.get("role") == "assistant"]
    assert 1 <= len(replies) <= 2 and len(server.requests(at_least=len(replies))) == len(replies)


def test_the_verifiers_command_line_resolves(tmp_path):
    cmd = next(c for c in bash_commands() if "mage_gym.agent.verifiers_env" in c)
    args = cmd.split()[1:] + ["--dry-run", "--output-dir", str(tmp_path)]
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=sub_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resolved = json.loads(next(tmp_path.rglob("eval.json")).read_text())
    assert resolved["env"]["taskset"]["id"] == "mage_rag_chat" and resolved["env"]["taskset"]["dataset"] == "synth"
    assert resolved["env"]["agent"]["harness"]["id"] == "mage_rag_chat" and resolved["num_rollouts"] == 2


@pytest.mark.slow
def test_the_benchmark_command_with_protocol_tools(corpus, tmp_path):
    from agent_helpers import build_tiny_chat_model

    model = build_tiny_chat_model(tmp_path / "model")
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "experiments/benchmark.py", "dataset=synth", f"dataset.root={corpus}", "env.parser=fast",
         "policies=[topk_page,llm_evaluator]", "policy.llm_evaluator.protocol=tools",
         "policy.llm_evaluator.chat={tools_in_prompt: false}",
         f"policy.llm_evaluator.backend.model={model}", "policy.llm_evaluator.backend.max_new_tokens=16",
         "policy.llm_evaluator.limit=2", "policy.llm_evaluator.max_rounds=2", "policy.llm_evaluator.cache=false",
         "retriever=bm25", "logger=none", "equal_cost.enabled=false", f"hydra.run.dir={out}"],
        cwd=REPO, env=sub_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {r["policy"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    ev = runs["llm_evaluator"]["evaluator"]
    assert ev["rounds"] >= 2 and ev["calls"] == ev["rounds"] and ev["strict"] + ev["lenient"] + ev["fallback"] == \
        ev["rounds"]
    assert runs["llm_evaluator"]["metrics"]["episodes"] == 2


def test_the_gpu_recipe_composes_and_a_missing_model_says_so(tmp_path):
    from hydra import compose, initialize_config_dir

    from mage_gym.bench.config import plain

    cmds = [c for c in bash_commands() if "/models/Qwen3" in c or ("grpo.use_vllm=true" in c)]
    assert len(cmds) == 2
    for cmd in cmds:
        overrides = [a for a in cmd.split()[2:] if "=" in a and "<" not in a]
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
            cfg = plain(compose(config_name="train_llm", overrides=overrides))
        assert cfg["device"] == "cuda" and cfg["dtype"] == "bfloat16"
    proc = subprocess.run([sys.executable, "experiments/train_llm.py", "algo=sft", "model=/models/Qwen3-1.7B",
                           "logger=none", f"hydra.run.dir={tmp_path}"], cwd=REPO, env=sub_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "not 'smollm2' and not a local folder" in proc.stderr


def test_the_doc_types_no_measured_figure():
    """Measured figures live in docs/results/<name> (command, date, commit): the prose only links them.

    The figures left in the prose are specifications, not measurements: SmolLM2's
    8,192-token window, the 5% speed target, 95% intervals, an HTTP status (410),
    model names' digits.
    """
    prose = re.sub(r"```.*?```", "", DOC, flags=re.S)
    prose = re.sub(r"`[^`]*`", "", prose)
    prose = re.sub(r"\]\([^)]*\)", "]", prose)
    figures = {f.rstrip(".,") for f in re.findall(r"(?<![\w.-])\d[\d,.]*%?", prose)}
    assert figures <= {"2", "3", "410", "5%", "8,192", "95%"}, figures
    linked = re.findall(r"\]\((results/[\w/]+?)/?\)", DOC)
    assert {"results/teacher_table_synth", "results/llm_sft_lora_smollm2", "results/perf_agent"} <= set(linked)
    for rel in linked:
        folder = REPO / "docs" / rel
        assert (folder / "results.json").is_file() and (folder / "provenance.json").is_file(), rel


@pytest.mark.slow
def test_the_perf_command_without_a_model(corpus, tmp_path):
    """perf_agent.py's env and token figures (``--no-model``: the generation side needs minutes of CPU)."""
    proc = subprocess.run([sys.executable, "experiments/perf/perf_agent.py", "--dataset", "synth", "--root", str(corpus),
                           "--limit", "1", "--repeats", "1", "--no-model", "--out", str(tmp_path)],
                          cwd=REPO, env=sub_env(), capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["kind"] == "perf_agent" and res["env_ms_per_turn"]["n"] >= 1 and res["env_ms_per_turn"]["median"] > 0
    assert res["tokens"]["observation_per_turn_median"] > 0
