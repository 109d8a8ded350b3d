"""Benchmarks with an answering reader, run as a user runs them: ``experiments/benchmark.py`` in a subprocess.

Issue 31: every benchmark with an answering reader failed before its first
episode (the response cache made ``gym.make``'s spec copy fail), and no test
met it because the tests passed configs in memory with the cache off. Here:

- the README's paper command, with the flags the README gives for a
  text-only server, against a real llama.cpp server on loopback, on a real
  MMLongBench-Doc document; the server's own access log and a logging proxy
  (evaluator vs reader requests) are checked against ``results.json``;
- ``reader=smollm2`` (the README's embedded reader) on the generated synthetic
  corpus and on a real document, and ``reader=hf`` with a tiny local model:
  answers are scored (accuracy / F1 are numbers, not null).

Real-document tests skip only when ``../shared/data`` is absent.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from llama_server import LlamaServer, LoggingProxy
from tiny_models import build_tiny_causal

REPO = Path(__file__).resolve().parents[1]
README_URL = "http://127.0.0.1:8000/v1"

pytestmark = pytest.mark.slow


def readme_paper_command() -> list[str]:
    """The README's paper command and its text-only flags, as the README writes them (``\\`` joined)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"(\.venv/bin/python experiments/benchmark\.py --config-name paper[^`]*?)\n```", text, re.S)
    assert block, "the README no longer shows the paper command"
    words = shlex.split(block.group(1).replace("\\\n", " "))
    text_only = re.search(r"text-only server.*?\badd\s+`(reader\.vision=false[^`]*)`", text, re.S)
    assert text_only, "the README no longer gives the text-only flags"
    return words + shlex.split(text_only.group(1))


def run_benchmark(args: list[str], out: Path) -> subprocess.CompletedProcess:
    """``python experiments/benchmark.py ARGS hydra.run.dir=OUT`` from the repository root, as the README runs it."""
    env = dict(os.environ, WANDB_MODE="offline", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [sys.executable, str(REPO / "experiments" / "benchmark.py"), *args, f"hydra.run.dir={out}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def runs_of(out: Path) -> list[dict]:
    return json.loads((out / "results.json").read_text())["runs"]


def role(body: dict) -> str:
    from mage_gym.readers.prompt import ROLE as READER_ROLE
    from policies.llm_prompt import ROLE as EVALUATOR_ROLE

    system = str((body.get("messages") or [{}])[0].get("content", ""))
    return "evaluator" if system.startswith(EVALUATOR_ROLE[:40]) else \
        "reader" if system.startswith(READER_ROLE[:40]) else "other"


#: What this test adds to the README's command, all of it to fit a CI budget on 2 CPU cores with a 135 M
#: model: one question of a real document, the fast parser, the evaluator alone for one round with short
#: replies, no equal-cost curve, no W&B. The response caches stay on (the paper config's default, and what
#: broke ``gym.make``), in new files, so every request still reaches the server. Long client timeouts: a
#: request timed out on a loaded machine is retried, and the counts below would then differ for that reason.
CI_SIZE = ["dataset.limit=1", "env.parser=fast", "policies=[llm_evaluator]", "equal_cost.enabled=false",
           "policy.llm_evaluator.max_rounds=1", "reader.max_tokens=16", "policy.llm_evaluator.backend.max_tokens=48",
           "logger=none", "graph_workers=1", "+reader.timeout=900", "+policy.llm_evaluator.backend.timeout=900"]


@pytest.mark.real_data
def test_readme_paper_command_reaches_a_real_server_on_a_real_document(data_root, tmp_path) -> None:
    cmd = readme_paper_command()
    assert cmd[:4] == [".venv/bin/python", "experiments/benchmark.py", "--config-name", "paper"]
    assert "reader.vision=false" in cmd and "policy.llm_evaluator.backend.vision=false" in cmd
    with LlamaServer(tmp_path / "server.log", n_ctx=8192, threads=2) as server:
        proxy = LoggingProxy(server.base_url, tmp_path / "proxy.jsonl", role)
        try:
            args = [a.replace(README_URL, proxy.base_url) for a in cmd[2:]]
            assert sum(proxy.base_url in a for a in args) == 2  # reader and evaluator both point at the server
            caches = [f"reader.cache={tmp_path / 'reader.sqlite'}",
                      f"policy.llm_evaluator.cache={tmp_path / 'evaluator.sqlite'}"]
            run_benchmark([*args, f"dataset.root={data_root / 'mmlongbench-dev'}", *CI_SIZE, *caches],
                          tmp_path / "run")
            chat_sent = sum(e["path"].endswith("/chat/completions") for e in proxy.entries())
            statuses = server.requests(at_least=chat_sent)
        finally:
            proxy.stop()
    (run,) = runs_of(tmp_path / "run")
    chat = [e for e in proxy.entries() if e["path"].endswith("/chat/completions")]
    by_role = {r: sum(e["role"] == r for e in chat) for r in ("evaluator", "reader", "other")}
    assert statuses == [200] * len(chat) and len(chat) >= 2  # what reached the server: every request answered
    assert by_role["other"] == 0 and all(e["content_is_string"] for e in chat)  # text-only: plain strings
    ev, m = run["evaluator"], run["metrics"]
    assert run["dataset"] == "mmlongbench" and m["episodes"] == 1 and run["failed"]["episodes"] == 0
    assert ev["backend_errors"] == 0 and ev["cache_hits"] == 0
    assert ev["calls"] == ev["requests"] == by_role["evaluator"] >= 1
    assert m["reader_calls"] * m["episodes"] == by_role["reader"] == 1
    assert m["accuracy"] is not None and m["images_rendered"] == 0  # an answer scored; no image was sent


@pytest.fixture(scope="module")
def synth_corpus(tmp_path_factory) -> Path:
    from mage_gym.data.synth import SynthConfig, generate_corpus

    root = tmp_path_factory.mktemp("synth_answering")
    generate_corpus(root, 1, seed=11, cfg=SynthConfig(min_pages=4, max_pages=4, questions_per_doc=2), workers=1,
                    progress=False)
    return root


SMALL = ["policies=[topk_page]", "equal_cost.enabled=false", "budgets=[{k: 2}]", "logger=none", "graph_workers=1",
         "env.parser=fast", "dataset.limit=2"]


def check_answered(out: Path, dataset: str) -> dict:
    (run,) = runs_of(out)
    m = run["metrics"]
    assert run["dataset"] == dataset and run["failed"]["episodes"] == 0 and m["episodes"] >= 1
    assert m["accuracy"] is not None and m["f1"] is not None and m["reader_calls"] == 1.0
    rows = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert all(isinstance(r["answer"], str) for r in rows)  # the reader answered every question
    return run


def test_smollm2_reader_through_the_entry_point_on_the_synthetic_corpus(synth_corpus, tmp_path) -> None:
    run_benchmark(["reader=smollm2", "dataset=synth", f"dataset.root={synth_corpus}", *SMALL], tmp_path)
    check_answered(tmp_path, "synth")


@pytest.mark.real_data
def test_smollm2_reader_through_the_entry_point_on_a_real_document(data_root, tmp_path) -> None:
    run_benchmark(["reader=smollm2", "dataset=mmlongbench", f"dataset.root={data_root / 'mmlongbench-dev'}",
                   *[a for a in SMALL if a != "dataset.limit=2"], "dataset.limit=1"], tmp_path)
    check_answered(tmp_path, "mmlongbench")


def test_hf_reader_with_a_tiny_local_model_through_the_entry_point(synth_corpus, tmp_path) -> None:
    model = build_tiny_causal(tmp_path / "tiny_model")
    run_benchmark(["reader=hf", f"reader.model={model}", "reader.max_new_tokens=4", "dataset=synth",
                   f"dataset.root={synth_corpus}", *SMALL], tmp_path / "run")
    check_answered(tmp_path / "run", "synth")
