"""Train an LLM evidence controller through MageRAG-Chat-v0's tool calls with TRL: SFT on transcripts, then GRPO.

Run (from the repo root)::

    # 1. transcripts of the privileged teacher (experiments/export_transcripts.py), then SFT on them
    .venv/bin/python experiments/train_llm.py algo=sft sft.transcripts=outputs/transcripts/<run>/transcripts.jsonl
    # 2. GRPO from the SFT model on the env's tasks (group rollouts, reward = the env's own reward)
    .venv/bin/python experiments/train_llm.py algo=grpo model=outputs/train_llm/<sft run>/model \
        dataset=synth dataset.root=data_out/synth/train24_s6 dataset.split=train env.parser=fast

``algo=grpo``: ``trl.GRPOTrainer(environment_factory=...)`` (TRL 1.16). The
train split's episodes become tasks (:func:`mage_gym.agent.task_rows`, no
gold); each rollout is one :class:`mage_gym.agent.trl_env.MageToolEnv` whose
methods are the tools; ``grpo.group_size`` rollouts replay each task id;
the reward is the env's terminal reward (a rollout without ``stop`` is
stopped and read when it ends). Per step, besides TRL's own figures, the
env's format errors, invalid calls, tokens read, and the share of rollouts
the model stopped itself are logged (``env/*``). ``algo=sft``:
``trl.SFTTrainer`` on the transcripts' ``messages`` + ``tools`` (loss on the
assistant turns only when the chat template marks them).

``model=smollm2`` is the embedded SmolLM2-135M (its tokenizer gets the
ChatML tool template, :mod:`mage_gym.agent.chat_template`); any local HF
folder works the same (a Qwen3 checkpoint keeps its own template; on a GPU
add ``device=cuda dtype=bfloat16 grpo.use_vllm=true``: not measured here).
``logger=wandb`` (default) logs offline unless ``WANDB_MODE`` says otherwise.

Writes into the Hydra run directory: ``model/`` (weights + tokenizer),
``results.json`` (settings, per-step curves, seconds), ``rollouts.jsonl`` (GRPO: one line per rollout,
:func:`rollout_record`), TRL's ``trainer/``.
"""
from __future__ import annotations

import json
import os
import time
from functools import partial
from pathlib import Path
from typing import Any, Mapping

import hydra
from omegaconf import DictConfig

from mage_gym.bench.config import (ConfigError, exit_on_config_error, plain, quiet_libraries, run_dir, section,
                                       set_threads)
from mage_gym.bench.chat import chat_episodes, chat_kwargs, grpo_task_rows
from mage_gym.bench.results import budget_dict

#: log_history keys kept as curves in results.json (TRL's names and ours)
CURVES = ("loss", "reward", "reward_std", "frac_reward_zero_std", "kl", "rewards/MageToolEnv/mean",
          "rewards/refused_calls/mean",
          "env/format_errors", "env/invalid_calls", "env/tokens_read", "env/page_recall", "env/stopped_by_model",
          "env/tool_calls", "env/groups_with_spread", "env/groups_with_outcome_spread", "completions/mean_length",
          "tools/call_frequency", "tools/failure_frequency", "entropy", "grad_norm", "learning_rate", "step_time",
          "mean_token_accuracy",
          "heldout/reward", "heldout/recall", "heldout/tokens", "heldout/format_errors", "heldout/stopped")


def rollout_record(info: Mapping[str, Any], reward: float, step: int | None) -> dict[str, Any]:
    """One line of the per-rollout log: which task, what the rollout called, what it found and earned.

    Why: the per-step means cannot say whether short rollouts come from the
    tasks drawn or from the sampler; this log pairs each rollout with its task.
    """
    metrics, stats = info.get("metrics") or {}, info.get("stats") or {}
    return {"step": step, "task": info.get("task"), "reward": round(float(reward), 6),
            "support": (info.get("reward_components") or {}).get("support"),
            "recall": metrics.get("evidence_page_recall"), "tokens": metrics.get("tokens_rendered"),
            "tool_calls": stats.get("tool_calls"), "stopped": stats.get("stopped"),
            "format_errors": stats.get("format_errors"), "called": info.get("called", [])}


def env_metrics(prompts: list, completions: list, environments: list | None = None, log_metric: Any = None,
                rollout_log: str | None = None, trainer_state: Any = None, **kwargs: Any) -> list[None]:
    """A reward function that adds nothing to the reward: it logs what the env saw in this batch of rollouts,
    and with ``rollout_log`` (a path) appends one :func:`rollout_record` line per rollout there."""
    if not environments or log_metric is None:
        return [None] * len(prompts)
    rewards = [env.get_reward() for env in environments]  # finishes a rollout that never called stop
    rows = [env._episode_info() for env in environments]
    if rollout_log:
        step = None if trainer_state is None else int(trainer_state.global_step) + 1  # the step these rollouts train
        with open(rollout_log, "a") as f:
            for r, reward in zip(rows, rewards):
                f.write(json.dumps(rollout_record(r, reward, step), default=str) + "\n")
    n = len(rows)
    log_metric("env/format_errors", sum(r["stats"]["format_errors"] for r in rows) / n)
    log_metric("env/invalid_calls", sum(r["stats"]["invalid_calls"] for r in rows) / n)
    log_metric("env/tool_calls", sum(r["stats"]["tool_calls"] for r in rows) / n)
    log_metric("env/stopped_by_model", sum(r["stats"]["stopped"] for r in rows) / n)
    log_metric("env/tokens_masked_after_end", sum(r["stats"].get("tokens_masked_after_end", 0.0) for r in rows) / n)
    log_metric("env/tokens_read", sum(float((r.get("metrics") or {}).get("tokens_rendered") or 0) for r in rows) / n)
    recalls = [(r.get("metrics") or {}).get("evidence_page_recall") for r in rows]  # a metric, never a reward
    recalls = [float(x) for x in recalls if x is not None]
    if recalls:
        log_metric("env/page_recall", sum(recalls) / len(recalls))
    groups: dict[str, list[float]] = {}
    for r, reward in zip(rows, rewards):
        groups.setdefault(str(r.get("task")), []).append(reward)
    log_metric("env/groups_with_spread", sum(max(g) > min(g) for g in groups.values()) / max(1, len(groups)))
    return [None] * len(prompts)


def _report_to(c: Mapping[str, Any], out: Path) -> str:
    name = (section(c, "logger") or {"name": "none"}).get("name", "none")
    if name in (None, "none", False):
        return "none"
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_DIR", str(out))
    os.environ.setdefault("WANDB_PROJECT", (section(c, "logger") or {}).get("project", "mage-gym"))
    return "wandb"


def _peft_config(c: Mapping[str, Any], model_config: Any = None) -> Any:
    lora = section(c, "lora")
    if not lora.get("enabled"):
        return None
    from peft import LoraConfig

    layers = lora.get("last_layers")
    extra: dict[str, Any] = {"target_modules": "all-linear"}
    if layers:  # only the top layers adapt: backward stops below them (half the CPU cost of a whole-model LoRA)
        n = int(model_config.num_hidden_layers)
        extra = {"target_modules": list(LLAMA_LINEAR), "layers_to_transform": list(range(max(0, n - int(layers)), n))}
    return LoraConfig(r=int(lora.get("r", 16)), lora_alpha=int(lora.get("alpha", 32)), task_type="CAUSAL_LM",
                      lora_dropout=float(lora.get("dropout", 0.0)), **extra)


#: the linear layers of a Llama-style block (SmolLM2, Qwen): what ``all-linear`` adapts, named for ``last_layers``
LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _callbacks(c: Mapping[str, Any]) -> list[Any]:
    """A time limit (``max_minutes``): training stops, saves a checkpoint and can resume in a later session."""
    from transformers import TrainerCallback

    limit = c.get("max_minutes")
    if not limit:
        return []

    class TimeLimit(TrainerCallback):
        def __init__(self) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if time.perf_counter() - self.t0 > 60.0 * float(limit):
                control.should_training_stop = True
                control.should_save = True
            return control

    return [TimeLimit()]


def _checkpointing(c: Mapping[str, Any]) -> dict[str, Any]:
    """TrainingArguments for checkpoints every ``save_every`` steps (the last two kept), so a run resumes."""
    every = int(c.get("save_every") or 0)
    if every <= 0:
        return {"save_strategy": "no"}
    return {"save_strategy": "steps", "save_steps": every, "save_total_limit": 2}


def _resume_from(out: Path, c: Mapping[str, Any]) -> str | None:
    """The newest ``trainer/checkpoint-*`` of this run directory when ``resume`` is on (re-run with the same
    ``hydra.run.dir``), else None."""
    if not c.get("resume", True):
        return None
    ckpts = sorted((out / "trainer").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return str(ckpts[-1]) if ckpts else None


def grpo_batching(g: Mapping[str, Any]) -> dict[str, int]:
    """GRPOConfig's batch keywords: one optimizer step over ``group_size x prompts_per_step`` rollouts, sampled
    at once, its loss passes ``grpo.micro_batch`` rollouts at a time (null: all in one pass).

    Why: the loss pass holds the logits of every rollout in it (49k words per
    token for SmolLM2); measured here, one pass over 12 rollouts of up to 6k
    tokens went past 24 GiB and was killed. Micro-batches accumulate the same
    step's gradient, so they bound memory without changing what is sampled.
    """
    batch = int(g.get("group_size", 4)) * int(g.get("prompts_per_step", 1))
    micro = int(g.get("micro_batch") or batch)
    if micro <= 0 or batch % micro:
        raise ConfigError(f"grpo.micro_batch={micro} must divide group_size x prompts_per_step = {batch}")
    return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": batch // micro,
            "steps_per_generation": batch // micro}


#: grpo.scale_rewards -> GRPOConfig.scale_rewards: what a group's reward differences are divided by
ADVANTAGE_SCALING = {"group": "group", "batch": "batch", "none": "none", True: "group", False: "none"}


def grpo_advantage_scaling(g: Mapping[str, Any]) -> dict[str, str]:
    """GRPOConfig's ``scale_rewards``: ``group`` (TRL's default: each group's differences divided by its own
    standard deviation), ``batch`` (by the whole batch's) or ``none`` (advantages are reward minus group mean).

    Why it is a setting: this env's reward differs between rollouts in two
    sizes, whether the evidence was found (support, tenths to a whole) and
    what the reading cost (a model reply is 0.05 under ``budget=tight``).
    Divided by the group's own spread, a group that differs only in cost
    teaches as hard as one that differs in evidence; measured, that taught
    the student to stop sooner, and ``grpo.require_outcome_spread`` then cut
    such groups out, cost signal and all. With ``none`` (Dr. GRPO's
    advice) every group teaches in proportion to what its rewards differ by.
    """
    value = g.get("scale_rewards", "group")
    key = value.lower() if isinstance(value, str) else value
    if key not in ADVANTAGE_SCALING:
        raise ConfigError(f"grpo.scale_rewards must be group, batch or none, got {value!r}")
    return {"scale_rewards": ADVANTAGE_SCALING[key]}


def grpo_rewards(g: Mapping[str, Any], out: Path) -> tuple[list[Any], list[float]]:
    """TRL's ``reward_funcs`` and ``reward_weights`` besides the env's own reward (which TRL adds from
    ``get_reward`` at weight 1): the logging function at weight 0, and with ``grpo.refused_call_penalty`` > 0
    the gold-free refused-call term at that weight."""
    from mage_gym.agent.trl_env import refused_calls

    funcs: list[Any] = [partial(env_metrics, rollout_log=str(out / "rollouts.jsonl"))]
    weights = [0.0]
    penalty = float(g.get("refused_call_penalty") or 0.0)
    if penalty < 0:
        raise ConfigError(f"grpo.refused_call_penalty must be 0 or more (reward off per refused call), got {penalty}")
    if penalty:
        funcs.append(refused_calls)
        weights.append(penalty)
    return funcs, weights


def screened_rows(rows: list[dict[str, Any]], tasks_from: Any) -> list[dict[str, Any]]:
    """``rows`` (one per task) kept to the tasks whose sampled plays varied in the screen results
    ``tasks_from`` (a path or a list of them, from experiments/screen_tasks.py); all rows when it is empty."""
    if not tasks_from:
        return rows
    from mage_gym.agent.screening import tasks_with_spread

    try:
        keep = set(tasks_with_spread(tasks_from))
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"grpo.tasks_from: {err}") from None
    kept = [r for r in rows if r["task"] in keep]
    if not kept:
        raise ConfigError(f"grpo.tasks_from: none of the {len(keep)} screened tasks with spread is among this run's "
                          f"{len(rows)} tasks (screen the same dataset, split, tags and budget)")
    print(f"grpo.tasks_from: training on {len(kept)} of {len(rows)} tasks (those whose screened plays varied)",
          flush=True)
    return kept


def train_grpo(c: Mapping[str, Any], model: Any, tokenizer: Any, out: Path, report_to: str) -> Any:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from mage_gym.agent.trl_env import environment_factory

    g = section(c, "grpo")
    episodes = chat_episodes(c)
    kw = chat_kwargs(c)
    rows = screened_rows(grpo_task_rows(c, episodes, kw), g.get("tasks_from"))
    callbacks = _callbacks(c)
    heldout = _heldout_callback(c, tokenizer)
    if heldout is not None:
        callbacks.append(heldout)
    group = int(g.get("group_size", 4))
    tokenizer.padding_side = "left"
    reward_funcs, reward_weights = grpo_rewards(g, out)
    args = GRPOConfig(
        output_dir=str(out / "trainer"), **grpo_batching(g), **grpo_advantage_scaling(g), num_generations=group,
        max_completion_length=int(g.get("max_completion_length", 768)),
        max_tool_calling_iterations=int(g.get("max_tool_calling_iterations", 8)),
        temperature=float(g.get("temperature", 1.0)), beta=float(g.get("beta", 0.0)), max_steps=int(c["steps"]),
        learning_rate=float(c["learning_rate"]), logging_steps=1, report_to=report_to, **_checkpointing(c),
        use_cpu=c.get("device", "cpu") == "cpu", bf16=_bf16(c), seed=int(c.get("seed", 0)),
        use_vllm=bool(g.get("use_vllm", False)), vllm_mode=g.get("vllm_mode", "colocate"),
        gradient_checkpointing=bool(c.get("gradient_checkpointing", False)),
        dataloader_num_workers=0, reward_weights=reward_weights, run_name=out.name)
    score_labelled_positions_only()
    trainer_class = _masking_after_end(GRPOTrainer) if g.get("mask_after_end", True) else GRPOTrainer
    trainer_class = _outcome_spread_only(trainer_class) if g.get("require_outcome_spread", False) else trainer_class
    trainer_class = _skipping_zero_spread(trainer_class) if g.get("drop_zero_spread", True) else trainer_class
    trainer = trainer_class(model=model, processing_class=tokenizer, args=args, train_dataset=Dataset.from_list(rows),
                          reward_funcs=reward_funcs,
                          environment_factory=environment_factory(episodes=episodes, **kw),
                          peft_config=_peft_config(c, model.config), callbacks=callbacks)
    trainer.tasks_trained = len(rows)
    if heldout is not None:
        heldout.trainer = trainer
    trainer.train(resume_from_checkpoint=_resume_from(out, c))
    return trainer


def _skipping_zero_spread(base: type) -> type:
    """``base`` (TRL's GRPOTrainer) with batches whose advantages are all zero dropped: no forward, no backward,
    no parameter update.

    Why: a group whose rollouts all earn the same reward has zero advantage,
    so its policy-gradient term is zero; TRL would still run the forward and
    backward passes over every rollout (the costliest part of a CPU step
    after generation) and step the optimizer, whose momentum then moves the
    weights on no evidence. Here such a batch returns a loss connected to
    nothing, so no parameter gets a gradient and AdamW leaves them all as
    they are. Counted in ``env/groups_with_spread`` (logged per step) and
    ``dropped_batches`` (results.json).
    """
    import torch

    class SkippingZeroSpread(base):  # type: ignore[misc, valid-type]
        dropped_batches = 0

        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            if not bool(torch.any(inputs["advantages"] != 0)):
                type(self).dropped_batches += 1
                return torch.zeros((), requires_grad=True)
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    return SkippingZeroSpread


def _masking_after_end(base: type) -> type:
    """``base`` (TRL's GRPOTrainer) ending each rollout at its episode's end: no turn is generated after the
    message that ended it, and any turn written after the end is taken out of the loss (TRL's tool mask).

    Why: TRL 1.16's tool loop ends a rollout only when the model writes a
    message without a call, so a model taught to end at its ``stop`` call
    writes refused calls until ``max_tool_calling_iterations``. Those turns
    change nothing in the episode, yet each costs a generation round over
    the whole conversation and would carry the rollout's advantage
    (llm_grpo_smollm2_cpu: 1.9-3.0 refused calls per rollout; with 10 rounds
    allowed, one step on the same task took 795 s before and 185 s after).
    Counted in ``env/tokens_masked_after_end`` (per rollout) and
    ``turns_not_generated_after_end`` (results.json).
    """

    from mage_gym.agent.trl_env import episode_ended

    class MaskingAfterEnd(base):  # type: ignore[misc, valid-type]
        turns_not_generated = 0  # tool-loop turns not generated because their episode had ended

        def _generate_single_turn(self, prompt_ids: list, images: Any, multimodal_fields: Any, num_generations: int,
                                  has_tool_images: bool = False) -> Any:
            """The tool loop's next turn for each rollout whose episode goes on; none for one that ended (TRL
            then leaves it out of further rounds). Text rollouts only: with images the call goes through."""
            ended = [num_generations == 1 and not images and not multimodal_fields
                     and episode_ended(self.processing_class, ids) for ids in prompt_ids]
            if not any(ended):
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                     has_tool_images)
            type(self).turns_not_generated += sum(ended)
            live = [i for i, e in enumerate(ended) if not e]
            ids: list = [[] for _ in prompt_ids]
            logprobs: list | None = [[] for _ in prompt_ids]  # empty lists suit both TRL paths when none is live
            if live:
                got, got_logprobs = super()._generate_single_turn([prompt_ids[i] for i in live], images,
                                                                  multimodal_fields, num_generations, has_tool_images)
                for j, i in enumerate(live):
                    ids[i] = got[j]
                    if got_logprobs is not None:
                        logprobs[i] = got_logprobs[j]
                logprobs = logprobs if got_logprobs is not None else None
            return ids, logprobs

        def _tool_call_loop(self, *args: Any, **kwargs: Any) -> Any:
            out = super()._tool_call_loop(*args, **kwargs)
            tool_mask, completions = out[0], out[1]
            for i, env in enumerate(self.environments or []):
                tool_mask[i] = env._mask_after_end(tool_mask[i], completions[i])
            return out

    return MaskingAfterEnd


def _outcome_spread_only(base: type) -> type:
    """``base`` (TRL's GRPOTrainer) learning only from groups whose outcome varies: a group whose rollouts all
    reach the same answer support (the support term of the env's reward) gets zero advantages, even when their
    rewards differ in cost and noise.

    Why: measured in llm_grpo_smollm2_cpu, the SFT student's sampled
    rollouts mostly find the same evidence, so a group's reward spread was
    the cost of extra calls; standardised, that small spread became a
    full-size "stop sooner" signal, and the student learned to stop at its
    first reply. This is the issue's "keep tasks where the SFT model's
    outcome varies", applied per group as it is sampled. Uses the env's own
    reward terms, never the policy's input. One process: groups are blocks
    of ``num_generations`` consecutive rollouts of the local batch. Logged as
    ``env/groups_with_outcome_spread``.
    """
    from mage_gym.agent.trl_env import outcome_spread

    class OutcomeSpreadOnly(base):  # type: ignore[misc, valid-type]
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            out = super()._generate_and_score_completions(inputs)
            envs, group = self.environments or [], int(self.num_generations)
            if envs and len(envs) == len(out["advantages"]) and len(envs) % group == 0:
                keep = outcome_spread(envs, group)
                for g, kept in enumerate(keep):
                    if not kept:
                        out["advantages"][g * group:(g + 1) * group] = 0
                self._metrics["train"]["env/groups_with_outcome_spread"].append(sum(keep) / len(keep))
            return out

    return OutcomeSpreadOnly


AUTOCASTS = (None, "bfloat16", "auto")


def resolve_autocast(c: Mapping[str, Any]) -> tuple[str | None, dict[str, float] | None]:
    """``autocast`` as trained: ``auto`` becomes ``bfloat16`` where bf16 matmuls measure faster than fp32 on the
    training device (:func:`mage_gym.device.faster_compute_dtype`), else None (fp32); returns the choice and,
    for ``auto``, the matmul rates (GFLOP/s) it was made from, so results.json says why."""
    choice = c.get("autocast")
    if choice not in AUTOCASTS:
        raise ConfigError(f"autocast={choice!r}: choose null (fp32), bfloat16 or auto (the faster, timed here)")
    if choice != "auto":
        return choice, None
    from mage_gym.device import faster_compute_dtype, matmul_rates

    device = str(c.get("device", "cpu"))
    return ("bfloat16" if faster_compute_dtype(device) == "bfloat16" else None), matmul_rates(device)


def _bf16(c: Mapping[str, Any]) -> bool:
    """bf16 compute: ``dtype=bfloat16`` (weights in bf16) or ``autocast=bfloat16`` (fp32 weights, bf16 matmuls:
    the CPU recipe where experiments/perf/perf_llm_loop.py measures it faster than fp32 on that CPU)."""
    return c.get("dtype") == "bfloat16" or c.get("autocast") == "bfloat16"


def _heldout_callback(c: Mapping[str, Any], tokenizer: Any) -> Any:
    """Every ``grpo.eval_every`` steps (and before the first): the current model plays ``grpo.eval_tasks``
    held-out tasks (``grpo.eval_split``, the same tags) greedily through the chat env; logged as heldout/*."""
    from transformers import TrainerCallback

    g = section(c, "grpo")
    every, n = int(g.get("eval_every") or 0), int(g.get("eval_tasks") or 0)
    if every <= 0 or n <= 0:
        return None
    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.agent.rollout import LocalChatModel, play_task

    ds = {**section(c, "dataset"), "split": g.get("eval_split", "val"), "limit": n}
    episodes = chat_episodes({**c, "dataset": ds})
    env = MageChatEnv(episodes=episodes, **chat_kwargs(c))
    tasks = [str(env.task_id(e.episode_id)) for e in episodes]

    class HeldOut(TrainerCallback):
        trainer: Any = None

        def _run(self, state: Any, model: Any) -> None:
            player = LocalChatModel(model, tokenizer, max_new_tokens=int(g.get("eval_max_new_tokens", 64)))
            res = [play_task(env, player, t) for t in tasks]  # greedy, decoded in fp32 (LocalChatModel)
            recalls = [r["recall"] for r in res if r["recall"] is not None]
            logs = {"heldout/reward": sum(r["reward"] for r in res) / len(res),
                    "heldout/recall": sum(recalls) / max(1, len(recalls)),
                    "heldout/tokens": sum(float(r["tokens"] or 0) for r in res) / len(res),
                    "heldout/format_errors": sum(r["format_errors"] for r in res) / len(res),
                    "heldout/stopped": sum(r["stopped"] for r in res) / len(res)}
            state.log_history.append({**logs, "step": state.global_step, "heldout/per_task": res})
            print(json.dumps({"step": state.global_step, **logs}), flush=True)

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if state.global_step == 0:
                self._run(state, model)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if state.global_step % every == 0 or state.global_step >= state.max_steps or control.should_training_stop:
                self._run(state, model)

    return HeldOut()


def score_labelled_positions_only() -> None:
    """Make TRL's fused LM head project only the positions that carry a label, on every device.

    Why: SFTTrainer's fused head (TRL 1.16, ``add_fused_lm_head``) scores only
    the labelled positions on Triton devices but every position elsewhere
    (a fixed tile shape for compilers such as Neuron's). On a CPU that is the
    whole 49k-word vocabulary for each of ~2k positions of a transcript of
    which ~120 (the assistant turns) carry a label: measured here, 12 s of
    head forward + backward per 2k-token step against 1.3 s for the labelled
    positions alone. The loss and metrics are the same (the other positions
    are zeroed either way); only the choice of rows changes.
    """
    import trl.trainer.utils as trl_utils

    trl_utils._use_triton = lambda device: True  # read only by the fused head's choice of rows (TRL 1.16)


def train_sft(c: Mapping[str, Any], model: Any, tokenizer: Any, out: Path, report_to: str) -> Any:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from mage_gym.agent.transcripts import read_jsonl, sft_rows

    s = section(c, "sft")
    if not s.get("transcripts"):
        raise ConfigError("algo=sft needs sft.transcripts=PATH (a transcripts.jsonl of experiments/export_transcripts.py)")
    path = Path(s["transcripts"])
    if not path.is_file():
        raise ConfigError(f"sft.transcripts={str(path)!r} is not a file")
    rows = sft_rows(read_jsonl(path), min_reward=s.get("min_reward"))
    if s.get("limit"):
        rows = rows[: int(s["limit"])]
    if not rows:
        raise ConfigError(f"{path}: no transcript passes the filter (min_reward={s.get('min_reward')})")
    args = SFTConfig(
        output_dir=str(out / "trainer"), per_device_train_batch_size=int(s.get("batch_size", 2)),
        gradient_accumulation_steps=int(s.get("grad_accum", 1)),
        max_steps=int(c["steps"]) if not s.get("epochs") else -1, num_train_epochs=float(s.get("epochs") or 1),
        learning_rate=float(c["learning_rate"]), logging_steps=1, report_to=report_to, **_checkpointing(c),
        lr_scheduler_type=s.get("scheduler", "linear"), warmup_steps=int(s.get("warmup_steps", 0)),
        use_cpu=c.get("device", "cpu") == "cpu", bf16=_bf16(c), seed=int(c.get("seed", 0)),
        max_length=int(s.get("max_length", 4096)), assistant_only_loss=bool(s.get("assistant_only_loss", True)),
        gradient_checkpointing=bool(c.get("gradient_checkpointing", False)), dataloader_num_workers=0,
        run_name=out.name)
    score_labelled_positions_only()
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         peft_config=_peft_config(c, model.config), callbacks=_callbacks(c))
    trainer.train(resume_from_checkpoint=_resume_from(out, c))
    return trainer


def heldout_change(evals: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The last held-out evaluation minus the first (the run's start), paired over tasks, with 95% intervals."""
    if len(evals) < 2:
        return None
    from mage_gym.bench import paired_delta

    first, last = evals[0]["heldout/per_task"], evals[-1]["heldout/per_task"]
    out: dict[str, Any] = {"from_step": evals[0]["step"], "to_step": evals[-1]["step"], "tasks": len(first),
                           "reward": paired_delta([r["reward"] for r in last], [r["reward"] for r in first])}
    pairs = [(b["recall"], a["recall"]) for a, b in zip(first, last) if a["recall"] is not None]
    if pairs:
        out["recall"] = paired_delta([p[0] for p in pairs], [p[1] for p in pairs])
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def grpo_summary(curves: Mapping[str, list]) -> dict[str, Any]:
    """What says whether GRPO could update: the share of groups whose rewards differed (a group without
    spread has no advantage), the steps with any spread, and the KL and grad norm of those steps; with
    ``grpo.require_outcome_spread`` also the share of groups whose support differed (only those teach), the
    steps that had one, and their grad norm."""
    spread = curves.get("env/groups_with_spread") or []
    kl, grad = curves.get("kl") or [None] * len(spread), curves.get("grad_norm") or [None] * len(spread)
    logged = [i for i, v in enumerate(spread) if v is not None]
    moved = [i for i in logged if spread[i] > 0]
    kls = [kl[i] for i in logged if kl[i] is not None]
    grads = [grad[i] for i in moved if grad[i] is not None]
    out = {"steps_logged": len(logged),
           "share_groups_with_spread": _mean([spread[i] for i in logged]),
           "steps_with_spread": len(moved), "kl_last": kls[-1] if kls else None, "kl_max": max(kls, default=None),
           "grad_norm_mean_with_spread": _mean(grads)}
    outcome = curves.get("env/groups_with_outcome_spread") or []
    judged = [i for i, v in enumerate(outcome) if v is not None]
    if judged:  # grpo.require_outcome_spread: only groups whose support varied taught
        taught = [i for i in judged if outcome[i] > 0]
        out.update({"share_groups_with_outcome_spread": _mean([outcome[i] for i in judged]),
                    "steps_with_outcome_spread": len(taught),
                    "grad_norm_mean_with_outcome_spread": _mean([grad[i] for i in taught if grad[i] is not None])})
    return out


def curves(log_history: list[Mapping[str, Any]]) -> dict[str, list]:
    """Per-step values of :data:`CURVES` (None where a step did not log the key)."""
    steps = [h for h in log_history if "step" in h and any(k in h for k in CURVES)]
    out: dict[str, list] = {"step": [int(h["step"]) for h in steps]}
    for key in CURVES:
        values = [h.get(key) for h in steps]
        if any(v is not None for v in values):
            out[key] = [None if v is None else float(v) for v in values]
    return out


@hydra.main(version_base=None, config_path="../conf", config_name="train_llm")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    quiet_libraries()
    c = plain(cfg)
    algo = c["algo"]
    if algo not in ("grpo", "sft"):
        raise ConfigError(f"algo={algo!r}: choose grpo or sft")
    set_threads(c.get("torch_threads"))
    c["autocast"], autocast_rates = resolve_autocast(c)  # after set_threads: timed on the threads that train
    out = run_dir()
    from mage_gym.agent.models import load_model

    t0 = time.perf_counter()
    try:
        model, tokenizer = load_model(str(c["model"]), dtype=c.get("dtype", "float32"), device=c.get("device", "cpu"),
                                      force_template=bool(c.get("force_template")))
    except FileNotFoundError as err:
        raise ConfigError(str(err)) from None
    load_s = time.perf_counter() - t0
    report_to = _report_to(c, out)
    resumed = _resume_from(out, c)
    start_step = int(resumed.rsplit("-", 1)[-1]) if resumed else 0  # this invocation's steps time the run
    t1 = time.perf_counter()
    trainer = (train_grpo if algo == "grpo" else train_sft)(c, model, tokenizer, out, report_to)
    train_s = time.perf_counter() - t1
    if c.get("save_model", True):
        from mage_gym.agent.adapters import save_trained

        save_trained(trainer.model, tokenizer, out / "model", base=str(c["model"]))
    history = list(trainer.state.log_history)
    results = {
        "kind": "train_llm", "algo": algo, "model": str(c["model"]), "dataset": section(c, "dataset"),
        "budget": budget_dict(section(c, "env").get("budget") or {}), "chat": section(c, "chat"), "steps": int(c["steps"]),
        "global_step": int(trainer.state.global_step), "settings": section(c, algo),
        "curves": curves(history), "load_s": load_s, "train_s": train_s,
        "resumed_from_step": start_step,
        "seconds_per_step": train_s / max(1, int(trainer.state.global_step) - start_step),
        "dropped_batches": getattr(trainer, "dropped_batches", None),
        "tasks_trained": getattr(trainer, "tasks_trained", None),
        "advantage_scaling": getattr(trainer.args, "scale_rewards", None) if algo == "grpo" else None,
        "turns_not_generated_after_end": getattr(trainer, "turns_not_generated", None),
        "heldout": [h for h in history if "heldout/reward" in h],
        "lora": section(c, "lora"), "dtype": c.get("dtype"), "autocast": c.get("autocast"),
        "autocast_matmul_gflops": autocast_rates,
        "model_dir": str(out / "model") if c.get("save_model", True) else None,
    }
    results["heldout_change"] = heldout_change(results["heldout"])
    if algo == "grpo":
        results["grpo_summary"] = grpo_summary(results["curves"])
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(json.dumps({k: results[k] for k in ("algo", "model", "global_step", "train_s")}, indent=1))
    print(f"results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
