"""The SFT -> GRPO chain of docs/LLM_TRAINING.md through the real entry points, at test scale.

export_transcripts.py (the privileged oracle through MageRAG-Chat-v0) ->
train_llm.py algo=sft on those transcripts -> train_llm.py algo=grpo from the
SFT model on the env's tasks. The model is a tiny randomly initialised Llama
built here with a tokenizer fitted on the env's text (tests/agent_helpers.py);
the documents are a one-document synthetic corpus. Each entry point runs as a
real subprocess, as a user would run it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trl  # noqa: E402,F401  (the llm-train extra: a broken install fails, never skips)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from agent_helpers import one_document_corpus

    return one_document_corpus(tmp_path_factory.mktemp("agent_synth"), pages=6, questions=4)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from agent_helpers import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("tiny_chat_model"))


def run(script: str, *overrides: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               WANDB_MODE="offline", TRL_EXPERIMENTAL_SILENCE="1")
    proc = subprocess.run([sys.executable, f"experiments/{script}", *overrides], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = next(o.split("=", 1)[1] for o in overrides if o.startswith("hydra.run.dir="))
    return json.loads((Path(run_dir) / "results.json").read_text())


def test_export_then_sft_then_grpo_through_the_entry_points(corpus, tiny_model, tmp_path):
    common = [f"dataset.root={corpus}", "env.parser=fast", "retriever=bm25", "torch_threads=1"]
    tx = run("export_transcripts.py", "dataset=synth", *common, "policy_name=oracle", "env.budget.k=2",
             f"hydra.run.dir={tmp_path / 'tx'}")
    assert tx["episodes"] >= 4 and tx["privileged"] is True and tx["mean_tool_calls"] >= 1
    rows = [json.loads(x) for x in Path(tx["path"]).read_text().splitlines()]
    assert all(r["privileged"] and r["messages"][0]["role"] == "system" for r in rows)

    sft = run("train_llm.py", "algo=sft", f"model={tiny_model}", f"sft.transcripts={tx['path']}", "steps=2",
              "sft.batch_size=1", "logger=wandb", "torch_threads=1", "autocast=auto",
              f"hydra.run.dir={tmp_path / 'sft'}")
    assert sft["global_step"] == 2 and len(sft["curves"]["loss"]) == 2
    rates = sft["autocast_matmul_gflops"]  # autocast=auto: timed at start, the faster trained, both kept
    assert sft["autocast"] == ("bfloat16" if rates["bfloat16"] > rates["float32"] else None)
    assert all(v > 0 for v in sft["curves"]["loss"])
    assert (tmp_path / "sft" / "model" / "config.json").is_file()
    assert list((tmp_path / "sft").glob("wandb/offline-run-*")), "logger=wandb logs offline into the run dir"

    grpo = run("train_llm.py", "algo=grpo", f"model={tmp_path / 'sft' / 'model'}", "dataset=synth", *common,
               "env.budget.k=2", "steps=2", "grpo.group_size=2", "grpo.max_completion_length=48",
               "grpo.max_tool_calling_iterations=2", "chat.max_candidates=4", "logger=none",
               "grpo.refused_call_penalty=0.5", "grpo.micro_batch=1", "grpo.scale_rewards=none",
               f"hydra.run.dir={tmp_path / 'grpo'}")
    c = grpo["curves"]
    assert grpo["advantage_scaling"] == "none"  # what TRL's trainer ran with, not only what the config said
    assert grpo["global_step"] == 2 and c["step"] == [1, 2]
    # the env's own reward is what GRPO logs (and optimises), at weight 1, with the env's process figures beside
    # it; the refused-call term (gold-free) enters at its weight and nothing else does
    assert len(c["rewards/MageToolEnv/mean"]) == 2 and all(-2 < r < 2 for r in c["rewards/MageToolEnv/mean"])
    assert all(r <= 0 for r in c["rewards/refused_calls/mean"])  # the term ran (grpo_rewards: its weight)
    assert c["reward"] == pytest.approx([env + 0.5 * refused for env, refused in
                                         zip(c["rewards/MageToolEnv/mean"], c["rewards/refused_calls/mean"])])
    assert all(t > 0 for t in c["env/tokens_read"]) and "env/format_errors" in c
    # micro_batch=1: each step samples its own group of 2 and passes them one at a time (no reuse across steps)
    logged = [json.loads(x)["step"] for x in (tmp_path / "grpo" / "rollouts.jsonl").read_text().splitlines()]
    assert logged == [1, 1, 2, 2]

    # the curves of both runs on one figure, with the points beside it (what docs/results publishes)
    out = tmp_path / "curves"
    proc = subprocess.run([sys.executable, "experiments/analysis/plot_llm_training.py", str(tmp_path / "sft"),
                           str(tmp_path / "grpo"), "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    both = json.loads((out / "results.json").read_text())
    assert [r["algo"] for r in both["runs"]] == ["sft", "grpo"]
    assert both["runs"][1]["curves"]["rewards/MageToolEnv/mean"] == c["rewards/MageToolEnv/mean"]
    assert (out / "llm_training_curves.png").stat().st_size > 1000


def test_screen_tasks_then_grpo_on_the_tasks_that_varied_through_the_entry_points(corpus, tiny_model, tmp_path):
    """screen_tasks.py plays GRPO's own tasks (same ids), the same plays with one worker or two; train_llm.py's
    grpo.tasks_from then trains on the screened tasks that varied and no other."""
    common = [f"model={tiny_model}", "dataset=synth", f"dataset.root={corpus}", "env.parser=fast", "retriever=bm25",
              "env.budget.k=2", "chat.max_candidates=4", "grpo.max_tool_calling_iterations=2", "logger=none"]
    one = run("screen_tasks.py", *common, "screen.samples=2", "screen.max_new_tokens=16", "screen.workers=1",
              "torch_threads=1", f"hydra.run.dir={tmp_path / 'screen1'}")
    two = run("screen_tasks.py", *common, "screen.samples=2", "screen.max_new_tokens=16", "screen.workers=2",
              f"hydra.run.dir={tmp_path / 'screen2'}")
    n = len(one["tasks"])
    assert one["kind"] == "screen_tasks" and n >= 4
    assert one["summary"]["tasks"] == n and one["summary"]["plays"] == 2 * n
    assert one["settings"]["max_replies"] == 2 and one["settings"]["temperature"] == 1.0  # GRPO's own settings
    assert one["tasks"] == two["tasks"]  # seeds per (task, play): the split between workers changes nothing
    assert all(len(t["support"]) == 2 and all(r <= 2 for r in t["replies"]) for t in one["tasks"])

    # the tiny random model's plays need not vary, so mark one screened task as varied and train on it alone
    screen = json.loads((tmp_path / "screen1" / "results.json").read_text())
    chosen = screen["tasks"][1]["task"]
    screen["tasks"][1]["support"] = [0.0, 1.0]
    for t in screen["tasks"][:1] + screen["tasks"][2:]:
        t["support"] = [0.5, 0.5]
    (tmp_path / "marked.json").write_text(json.dumps(screen))
    grpo = run("train_llm.py", "algo=grpo", *common, "steps=1", "grpo.group_size=2",
               "grpo.max_completion_length=32", "torch_threads=1", f"grpo.tasks_from={tmp_path / 'marked.json'}",
               "save_model=false", f"hydra.run.dir={tmp_path / 'grpo'}")
    assert grpo["tasks_trained"] == 1 and grpo["settings"]["tasks_from"] == str(tmp_path / "marked.json")
    logged = [json.loads(x)["task"] for x in (tmp_path / "grpo" / "rollouts.jsonl").read_text().splitlines()]
    assert logged == [chosen, chosen]


def test_the_dagger_students_transcripts(corpus, tmp_path):
    """policy_name=ppo: the shipped DAgger student (hybrid retriever, K=64, as its sidecar says) through the chat."""
    tx = run("export_transcripts.py", "dataset=synth", f"dataset.root={corpus}", "env.parser=fast", "torch_threads=1",
             "policy_name=ppo", "env.budget.k=2", f"hydra.run.dir={tmp_path / 'tx'}")
    rows = [json.loads(x) for x in Path(tx["path"]).read_text().splitlines()]
    assert tx["privileged"] is False and rows and not any(r["privileged"] for r in rows)
    assert all(r["source"] == "ppo" and "The episode ended" in r["messages"][-1]["content"] for r in rows)


def test_the_refused_call_term_enters_grpo_at_its_weight_and_only_when_asked(tmp_path) -> None:
    from agent_helpers import train_llm_module

    from mage_gym.agent.trl_env import refused_calls

    m = train_llm_module()
    funcs, weights = m.grpo_rewards({}, tmp_path)
    assert len(funcs) == 1 and weights == [0.0]  # the logger only: the env's reward alone is optimised
    funcs, weights = m.grpo_rewards({"refused_call_penalty": 0.05}, tmp_path)
    assert funcs[1] is refused_calls and weights == [0.0, 0.05]
    with pytest.raises(m.ConfigError, match="refused_call_penalty"):
        m.grpo_rewards({"refused_call_penalty": -1}, tmp_path)


def test_grpo_micro_batches_split_one_steps_loss_pass_not_its_sampling() -> None:
    from agent_helpers import train_llm_module

    m = train_llm_module()
    whole = {"per_device_train_batch_size": 12, "gradient_accumulation_steps": 1, "steps_per_generation": 1}
    assert m.grpo_batching({"group_size": 6, "prompts_per_step": 2}) == whole  # the default: one pass
    assert m.grpo_batching({"group_size": 6, "prompts_per_step": 2, "micro_batch": 3}) == {
        "per_device_train_batch_size": 3, "gradient_accumulation_steps": 4, "steps_per_generation": 4}
    for bad in (5, -1):
        with pytest.raises(m.ConfigError, match="micro_batch"):
            m.grpo_batching({"group_size": 6, "prompts_per_step": 2, "micro_batch": bad})


def test_grpo_advantage_scaling_reaches_trls_config_and_bad_values_are_refused() -> None:
    from agent_helpers import train_llm_module

    m = train_llm_module()
    assert m.grpo_advantage_scaling({}) == {"scale_rewards": "group"}  # TRL's default, what earlier runs used
    assert m.grpo_advantage_scaling({"scale_rewards": "none"}) == {"scale_rewards": "none"}
    assert m.grpo_advantage_scaling({"scale_rewards": "Batch"}) == {"scale_rewards": "batch"}
    assert m.grpo_advantage_scaling({"scale_rewards": False}) == {"scale_rewards": "none"}  # Hydra's false
    for bad in ("std", None, 2):
        with pytest.raises(m.ConfigError, match="scale_rewards"):
            m.grpo_advantage_scaling({"scale_rewards": bad})
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    from trl import GRPOConfig

    args = GRPOConfig(output_dir="unused", use_cpu=True, report_to=[], num_generations=2,
                      per_device_train_batch_size=2, **m.grpo_advantage_scaling({"scale_rewards": "none"}))
    assert args.scale_rewards == "none"


def test_autocast_auto_trains_in_the_dtype_whose_matmuls_measure_faster(monkeypatch) -> None:
    from agent_helpers import train_llm_module

    import mage_gym.device as device

    m = train_llm_module()
    for rates, chosen in (({"float32": 350.0, "bfloat16": 190.0}, None),
                          ({"float32": 70.0, "bfloat16": 510.0}, "bfloat16")):
        monkeypatch.setattr(device, "matmul_rates", lambda dev, rates=rates: rates)
        assert m.resolve_autocast({"autocast": "auto"}) == (chosen, rates)
    assert m.resolve_autocast({"autocast": "bfloat16"}) == ("bfloat16", None)  # asked for: never timed
    assert m.resolve_autocast({}) == (None, None)
    with pytest.raises(m.ConfigError, match="autocast"):
        m.resolve_autocast({"autocast": "fp16"})


def test_a_batch_without_reward_spread_is_dropped_before_any_pass() -> None:
    """GRPO: a batch whose advantages are all zero never reaches TRL's loss (no forward, no backward) and gives
    no parameter a gradient; a batch with spread does."""
    import torch

    from agent_helpers import train_llm_module

    class Base:
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return "computed"

    trainer = train_llm_module()._skipping_zero_spread(Base)()
    loss = trainer.compute_loss(None, {"advantages": torch.zeros(4)})
    assert float(loss) == 0.0 and loss.requires_grad and loss.grad_fn is None  # connected to no parameter
    assert trainer.dropped_batches == 1
    assert trainer.compute_loss(None, {"advantages": torch.tensor([0.0, 0.5, -0.5, 0.0])}) == "computed"
    assert trainer.dropped_batches == 1


def test_the_grpo_summary_counts_groups_with_spread_and_the_updated_steps() -> None:
    """The share of groups with spread averages the logged steps; grad norms count only steps that had spread."""
    from agent_helpers import train_llm_module

    curves = {"step": [1, 2, 3, 4], "env/groups_with_spread": [0.0, 0.5, None, 1.0],
              "kl": [0.0, 0.01, None, 0.03], "grad_norm": [9.0, 0.2, None, 0.4]}
    s = train_llm_module().grpo_summary(curves)
    assert s["steps_logged"] == 3 and s["steps_with_spread"] == 2 and s["share_groups_with_spread"] == 0.5
    assert s["kl_last"] == 0.03 and s["kl_max"] == 0.03 and abs(s["grad_norm_mean_with_spread"] - 0.3) < 1e-9
    assert train_llm_module().grpo_summary({"step": []})["share_groups_with_spread"] is None
    assert "share_groups_with_outcome_spread" not in s  # not logged: the filter was off
    filtered = {**curves, "env/groups_with_outcome_spread": [0.0, 0.0, None, 1.0]}
    f = train_llm_module().grpo_summary(filtered)
    assert f["share_groups_with_outcome_spread"] == 1 / 3 and f["steps_with_outcome_spread"] == 1
    assert f["grad_norm_mean_with_outcome_spread"] == 0.4 and f["steps_with_spread"] == 2
