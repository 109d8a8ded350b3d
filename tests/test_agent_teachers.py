"""Teachers through the chat, one format from transcripts to GRPO to benchmark, and the LoRA controller's files.

- a step-level teacher's ``"search"`` becomes ``search(<the question>)`` when the env allows a search, else
  ``stop``; the oracle searches or makes room when no gold is listed;
- the TRL env's opening state does not repeat the prompt's intro, and its results come back worded as in the
  transcripts (``tool`` turns);
- a model's text reply becomes structured tool calls only when every call in it parses;
- two LoRA adapters stacked into one (rank r1 + r2) give the same model as applying them in turn, an adapter
  trained on an adapter is saved stacked with its lineage beside its config, and a reader built on an adapter
  folder loads its base with the adapter merged;
- every shipped controller name resolves to an adapter on smollm2 that peft loads without a warning.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent_helpers import toy_chat_env


def test_a_search_choice_becomes_a_search_of_the_question_or_a_stop() -> None:
    from mage_gym.agent.transcripts import step_actor

    env = toy_chat_env(numeric_obs_in_info=True)
    messages, info = env.reset(options={"task": str(env.task_id(env.episode_ids[0]))})
    actor = step_actor(env, lambda obs, mask: "search")
    reply = actor(messages, info)
    assert reply["name"] == "search" and reply["arguments"]["query"] == env.view.question
    no_search = dict(info, action_mask=np.asarray(info["action_mask"]).copy())
    from mage_gym.env.actions import ActionLayout, Op

    layout = ActionLayout(int(env.inner.get_wrapper_attr("K")))
    layout.block(no_search["action_mask"], Op.SEARCH)[:] = False
    assert actor(messages, no_search)["name"] == "stop"
    with pytest.raises(ValueError):
        step_actor(env, lambda obs, mask: "jump")(messages, info)


def test_several_choices_become_one_reply_of_several_calls() -> None:
    """The oracle's prune and the activation it makes room for: one reply; an unlisted activation is left out."""
    from mage_gym.agent.transcripts import step_actor
    from mage_gym.env.actions import ActionLayout, Op

    env = toy_chat_env(numeric_obs_in_info=True)
    messages, info = env.reset(options={"task": str(env.task_id(env.episode_ids[0]))})
    layout = ActionLayout(int(env.inner.get_wrapper_attr("K")))
    ids = env.inner.get_wrapper_attr("slot_node_ids")()
    cands, held = env.visible_ids()
    held_slot = next(i for i, n in enumerate(ids) if n in held and n.count(":") == 1)  # an active page
    cand_slot = next(i for i, n in enumerate(ids) if n in cands)
    hidden = [i for i, n in enumerate(ids) if n is not None and n not in cands and n not in held]
    prune, follow = layout.encode(Op.PRUNE, held_slot), layout.encode(Op.ACTIVATE_NODE, cand_slot)
    reply = step_actor(env, lambda obs, mask: [prune, follow])(messages, info)
    assert [c["name"] for c in reply] == ["prune", "activate"]
    assert reply[0]["arguments"]["ids"] == [ids[held_slot]]
    assert reply[1]["arguments"]["candidates"] == [env.view.number(ids[cand_slot])]
    if hidden:
        extra = layout.encode(Op.ACTIVATE_NODE, hidden[0])
        assert [c["name"] for c in step_actor(env, lambda obs, mask: [prune, extra])(messages, info)] == ["prune"]
    assert step_actor(env, lambda obs, mask: [0, follow])(messages, info)["name"] == "stop"


def test_the_oracle_reaches_unlisted_gold_through_the_chat() -> None:
    """With one candidate listed, gold is rarely listed: the oracle prunes or searches instead of stopping."""
    from mage_gym.agent.transcripts import record_episode
    from mage_gym.bench.chat import policy_actor
    from policies import REGISTRY

    env = toy_chat_env(numeric_obs_in_info=True, privileged=True, max_candidates=1)
    actor, privileged = policy_actor(env, "oracle", {}, REGISTRY)
    assert privileged
    names, recalls = [], []
    for eid in env.episode_ids:
        t = record_episode(env, actor, task=str(env.task_id(eid)))
        names += [c["function"]["name"] for m in t.messages if m["role"] == "assistant" for c in m["tool_calls"]]
        recalls.append(t.metrics.get("evidence_page_recall"))
    assert {"search", "prune"} & set(names), names
    assert t.invalid_calls == 0 and t.format_errors == 0


def test_the_trl_env_opens_without_repeating_the_intro_and_answers_as_the_transcripts_do() -> None:
    from mage_gym.agent.tasks import task_rows
    from mage_gym.agent.trl_env import MageToolEnv
    from mage_gym.testing import toy_episodes

    env = MageToolEnv(lambda: toy_chat_env())
    row = task_rows([p.episode for p in toy_episodes()], "mmlongbench", tools_in_prompt=False)[0]
    opening = env.reset(**row)
    prompt = row["prompt"][-1]["content"] + opening
    chat = toy_chat_env()
    first, _ = chat.reset(options={"task": row["task"]})
    assert prompt == first[1]["content"]  # exactly the user message the transcripts hold
    text = env.activate([1])
    out, *_ = chat.step({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "activate", "arguments": {"candidates": [1]}}}]})
    assert out[0]["role"] == "tool" and text == out[0]["content"]


def test_text_replies_become_structured_only_when_every_call_parses() -> None:
    from mage_gym.agent.rollout import as_structured

    good = '<tool_call>{"name": "activate", "arguments": {"candidates": [2]}}</tool_call>'
    msg = as_structured(good, 3)
    assert msg["tool_calls"][0]["id"] == "call_3_0"
    assert msg["tool_calls"][0]["function"] == {"name": "activate", "arguments": {"candidates": [2]}}
    bad = good + '<tool_call>{"name": "fly"}</tool_call>'
    assert as_structured(bad, 0) == bad
    assert as_structured("no call", 0) == "no call"


def _random_adapter(model, folder: Path, seed: int, r: int) -> None:
    import torch
    from peft import LoraConfig, get_peft_model

    peft = get_peft_model(model, LoraConfig(r=r, lora_alpha=3 * r, target_modules="all-linear", task_type="CAUSAL_LM"))
    torch.manual_seed(seed)
    for name, p in peft.named_parameters():
        if "lora_" in name:
            p.data.normal_(0, 0.2)
    peft.save_pretrained(str(folder))


def test_two_adapters_stacked_equal_applying_them_in_turn(tmp_path: Path) -> None:
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from agent_helpers import build_tiny_chat_model
    from mage_gym.agent.adapters import read_config, stack

    base_dir = build_tiny_chat_model(tmp_path / "base")
    load = lambda: AutoModelForCausalLM.from_pretrained(base_dir)  # noqa: E731
    _random_adapter(load(), tmp_path / "a1", seed=1, r=2)
    merged = PeftModel.from_pretrained(load(), str(tmp_path / "a1")).merge_and_unload()
    _random_adapter(merged, tmp_path / "a2", seed=2, r=3)
    ids = torch.tensor([[5, 9, 17, 33, 2, 41]])
    turn = PeftModel.from_pretrained(PeftModel.from_pretrained(load(), str(tmp_path / "a1")).merge_and_unload(),
                                     str(tmp_path / "a2")).merge_and_unload()
    stack(tmp_path / "a1", tmp_path / "a2", tmp_path / "both", dtype="float32")
    assert read_config(tmp_path / "both")["r"] == 5
    both = PeftModel.from_pretrained(load(), str(tmp_path / "both")).merge_and_unload()
    with torch.no_grad():
        want, got, plain = turn(ids).logits, both(ids).logits, load()(ids).logits
    assert torch.allclose(want, got, atol=1e-4)
    assert not torch.allclose(want, plain, atol=1e-3)  # the adapters do change the model


def test_an_adapter_trained_on_an_adapter_is_saved_stacked_with_its_lineage_beside_its_config(tmp_path: Path) -> None:
    """GRPO from an SFT adapter saves one adapter for the original base; which two it stacks goes to lineage.json."""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    from agent_helpers import build_tiny_chat_model
    from mage_gym.agent.adapters import LINEAGE, read_config, save_trained

    base_dir = build_tiny_chat_model(tmp_path / "base")
    _random_adapter(AutoModelForCausalLM.from_pretrained(base_dir), tmp_path / "sft", seed=1, r=2)
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir),
                                       str(tmp_path / "sft")).merge_and_unload()
    trained = get_peft_model(merged, LoraConfig(r=3, lora_alpha=6, target_modules="all-linear", task_type="CAUSAL_LM"))
    out = save_trained(trained, None, tmp_path / "grpo" / "model", base=str(tmp_path / "sft"), dtype="float32")
    cfg = read_config(out)
    assert cfg["r"] == 5 and cfg["base_model_name_or_path"] == read_config(tmp_path / "sft")["base_model_name_or_path"]
    assert "stacked_from" not in cfg
    assert json.loads((out / LINEAGE).read_text())["stacked_from"] == [str(tmp_path / "sft"),
                                                                      str(tmp_path / "grpo" / "model_own")]


def test_a_reader_on_an_adapter_folder_loads_its_base_with_the_adapter(tmp_path: Path) -> None:
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from transformers import AutoModelForCausalLM

    from agent_helpers import build_tiny_chat_model
    from mage_gym.readers.hf import HFReader

    base_dir = build_tiny_chat_model(tmp_path / "base")
    _random_adapter(AutoModelForCausalLM.from_pretrained(base_dir), tmp_path / "ad", seed=3, r=2)
    cfg = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "../base"  # relative to the adapter's folder
    (tmp_path / "ad" / "adapter_config.json").write_text(json.dumps(cfg))
    plain, adapted = HFReader(str(base_dir)), HFReader(str(tmp_path / "ad"))
    assert adapted.model_dir == base_dir.resolve() and adapted.model_id != plain.model_id
    ids = torch.tensor([[5, 9, 17]])
    with torch.no_grad():
        a, b = plain.load().model(ids).logits, adapted.load().model(ids).logits
    assert not torch.allclose(a, b, atol=1e-3)


def test_replies_reusing_the_conversations_cache_equal_fresh_ones(tmp_path: Path) -> None:
    """A multi-turn episode played with the prefix cache gives the same greedy replies as without it."""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agent_helpers import build_tiny_chat_model
    from mage_gym.agent.rollout import LocalChatModel, play_task

    folder = build_tiny_chat_model(tmp_path / "m", teach='<tool_call>{"name": "activate", "arguments": '
                                                          '{"candidates": [1]}}</tool_call>', steps=40)
    model, tok = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    outcomes = []
    for reuse in (True, False):
        env = toy_chat_env()
        player = LocalChatModel(model, tok, max_new_tokens=24, reuse_prefix=reuse)
        outcomes.append([play_task(env, player, str(env.task_id(e)), max_replies=3) for e in env.episode_ids[:2]])
    assert outcomes[0] == outcomes[1]
    assert any(o["replies"] > 1 for o in outcomes[0])  # later turns did reuse a cached prefix
    assert all(0.0 <= o["support"] <= 1.0 for o in outcomes[0])  # the terminal reward's answer support (screens)


def test_a_reused_prefix_goes_to_generate_under_the_cache_name_transformers_declares(tmp_path: Path) -> None:
    """The second reply hands its cached prefix to ``generate`` under the installed transformers' own name for it
    (``cache`` where declared: the old ``past_key_values`` warns there and goes in v6), and gets the same text."""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    from agent_helpers import build_tiny_chat_model
    from mage_gym.agent.rollout import LocalChatModel

    folder = build_tiny_chat_model(tmp_path / "m")
    model, tok = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    declared = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"
    passed: list[set[str]] = []
    real_generate = model.generate

    def spy(*args: object, **kw: object) -> object:
        passed.append({k for k in kw if k in ("cache", "past_key_values")})
        return real_generate(*args, **kw)

    model.generate = spy
    env = toy_chat_env()
    messages, _ = env.reset(options={"task": str(env.task_id(env.episode_ids[0]))})
    player = LocalChatModel(model, tok, max_new_tokens=4)
    first = player.reply(messages)
    convo = [*messages, {"role": "assistant", "content": first}, {"role": "user", "content": "go on"}]
    second = player.reply(convo)
    assert passed == [set(), {declared}]
    assert second == LocalChatModel(model, tok, max_new_tokens=4, reuse_prefix=False).reply(convo)


def test_a_reply_inside_a_trainers_bf16_autocast_decodes_in_the_weights_dtype(tmp_path: Path) -> None:
    """Generation leaves CPU autocast off (it recasts every weight on each decoding step): fp32 activations."""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agent_helpers import build_tiny_chat_model
    from mage_gym.agent.rollout import LocalChatModel

    folder = build_tiny_chat_model(tmp_path / "m")
    model, tok = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    seen: list[torch.dtype] = []
    model.model.layers[0].mlp.down_proj.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    env = toy_chat_env()
    messages, _ = env.reset(options={"task": str(env.task_id(env.episode_ids[0]))})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        LocalChatModel(model, tok, max_new_tokens=3).reply(messages)
    assert seen and set(seen) == {torch.float32}


def test_the_fused_head_scores_only_labelled_positions_with_the_same_loss() -> None:
    """After score_labelled_positions_only, TRL's fused LM head on a CPU projects only the rows that carry a
    label (the others are never multiplied by the vocabulary), and the loss is the full head's."""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    import torch
    import trl.trainer.utils as trl_utils
    from transformers import LlamaConfig, LlamaForCausalLM

    from agent_helpers import train_llm_module

    entry = train_llm_module()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    ids = torch.randint(0, 300, (1, 40))
    labels = torch.full_like(ids, -100)
    labels[0, 30:36] = ids[0, 30:36]
    original = trl_utils._use_triton
    seen: list[int] = []
    real_apply = trl_utils._ChunkedLogProbFunction.apply

    def spy(hidden, *rest):
        seen.append(hidden.shape[0])
        return real_apply(hidden, *rest)

    trl_utils._ChunkedLogProbFunction.apply = spy
    try:
        full = model(input_ids=ids, labels=labels, fused_lm_head=True).loss
        entry.score_labelled_positions_only()
        compact = model(input_ids=ids, labels=labels, fused_lm_head=True).loss
    finally:
        trl_utils._use_triton = original
        trl_utils._ChunkedLogProbFunction.apply = real_apply
    assert seen == [39, 6]  # every shifted position, then only the six labelled ones
    assert torch.allclose(full, compact, atol=1e-5)


# --- the guide's new entry points, at test scale --------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


def _run(args: list[str], timeout: int = 900) -> None:
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               WANDB_MODE="offline", TRL_EXPERIMENTAL_SILENCE="1")
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from agent_helpers import one_document_corpus

    return one_document_corpus(tmp_path_factory.mktemp("teacher_synth"), pages=6, questions=4)


@pytest.mark.slow
def test_the_teacher_table_plays_each_teacher_both_ways(corpus, tmp_path):
    out = tmp_path / "tt"
    _run(["experiments/teacher_table.py", "env.parser=fast", "retriever=bm25", "torch_threads=1", "logger=none",
          "budget=tight", "teachers=[oracle,graph_follower]", f"sets.synth_bridge.root={corpus}",
          "sets.synth_bridge.split=all", f"sets.synth_single.root={corpus}", "sets.synth_single.split=all",
          "sets.mmlongbench.enabled=false", "sets.financebench.enabled=false", f"hydra.run.dir={out}"])
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert {(r["dataset"], r["policy"]) for r in runs} >= {("synth_single", "oracle"), ("synth_single", "graph_follower")}
    oracle = next(r for r in runs if r["policy"] == "oracle")
    assert oracle["privileged"] is True and not next(r for r in runs if r["policy"] == "graph_follower")["privileged"]
    m = oracle["metrics"]
    assert m["tokens_env"] > 0 and m["tokens_chat"] > 0 and "mean" in m["delta_tokens_chat_minus_env"]


def test_the_agreement_interval_resamples_whole_episodes() -> None:
    """Ten hits in one episode and ten misses in another: resampling episodes spans 0 to 1 (resampling the
    twenty turns as if independent would give a narrow band around 0.5)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "experiments" / "analysis" / "llm_agreement.py"
    spec = importlib.util.spec_from_file_location("llm_agreement_entry", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.episode_interval([[10, 10, 10], [0, 10, 10]], 0) == [0.0, 1.0]
    assert module.episode_interval([[10, 10, 10], [0, 10, 10]], 1) == [1.0, 1.0]
    assert module.episode_interval([], 0) is None

@pytest.mark.slow
def test_agreement_and_the_controller_in_the_benchmark(corpus, tmp_path):
    from agent_helpers import build_tiny_chat_model

    model = build_tiny_chat_model(tmp_path / "model", teach='<tool_call>{"name": "stop", "arguments": {}}</tool_call>',
                                  steps=40)
    common = [f"dataset.root={corpus}", "env.parser=fast", "retriever=bm25", "torch_threads=1", "logger=none"]
    _run(["experiments/export_transcripts.py", "dataset=synth", *common, "policy_name=oracle", "budget=tight",
          f"hydra.run.dir={tmp_path / 'tx'}"])
    untrained = build_tiny_chat_model(tmp_path / "untrained")
    _run(["experiments/analysis/llm_agreement.py", "--model", str(model), "--transcripts",
          str(tmp_path / "tx" / "transcripts.jsonl"), "--limit", "2", "--max-turns", "2", "--max-new-tokens", "16",
          "--baseline", str(untrained), "--baseline-limit", "1", "--out", str(tmp_path / "agree")])
    models = json.loads((tmp_path / "agree" / "results.json").read_text())["models"]
    res, base = models[str(model)], models[str(untrained)]
    assert res["turns"] >= 2 and 0 <= res["exact"] <= res["tool"] <= 1
    assert res["episodes"] == 2 and base["episodes"] == 1 and base["turns"] < res["turns"]
    assert [sum(e[2] for e in res["per_episode"]), len(base["per_episode"])] == [res["turns"], 1]
    lo, hi = res["exact_interval"]
    assert lo <= res["exact"] <= hi and res["tool_interval"][0] <= res["tool"] <= res["tool_interval"][1]
    out = tmp_path / "bench"
    _run(["experiments/benchmark.py", "dataset=synth", *common, "budget=tight", "dataset.limit=2",
          "policies=[topk_page,llm_controller]", f"policy.llm_controller.backend.model={model}",
          "policy.llm_controller.backend.max_new_tokens=16", f"hydra.run.dir={out}"])
    runs = {r["policy"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    ev = runs["llm_controller"]["evaluator"]
    assert runs["llm_controller"]["metrics"]["episodes"] == 2 and ev["calls"] >= 2
    assert "equal_cost" in runs["llm_controller"]


@pytest.mark.slow
def test_the_llm_loop_speed_script_at_toy_sizes(tmp_path):
    _run(["experiments/perf/perf_llm_loop.py", "--prompt-tokens", "16", "--new-tokens", "2", "--train-tokens", "16",
          "--repeats", "1", "--threads", "1", "--out", str(tmp_path)])
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res["dtypes"]) == {"float32", "bfloat16"}
    for v in res["dtypes"].values():  # decoding timed inside generate: one rate per token after the first
        assert v["train_tok_s"] > 0 and v["decode_s"] > 0 and v["prefill_s"] > 0
        assert v["generation_tok_s"] == pytest.approx(1 / v["decode_s"])  # 2 new tokens: one decoding step
        assert v["prefill_tok_s"] == pytest.approx(16 / v["prefill_s"])
    assert set(res["faster"].values()) <= {"float32", "bfloat16"}


def test_the_token_clock_splits_prefill_from_decoding(monkeypatch):
    """Prefill is prompt-to-first-token and decoding first-to-last token, both inside one generate call."""
    import importlib.util
    import time

    spec = importlib.util.spec_from_file_location(
        "perf_llm_loop", Path(__file__).resolve().parents[1] / "experiments/perf/perf_llm_loop.py")
    perf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(perf)
    ticks = iter([10.0, 12.5, 12.75, 13.0, 13.25])  # prompt, then 4 new tokens a quarter second apart
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks))
    clock = perf.TokenClock()
    for _ in range(5):
        clock.put(None)
    clock.end()
    assert clock.prefill_s() == pytest.approx(2.5) and clock.decode_s() == pytest.approx(0.75)


def test_cached_only_keeps_documents_whose_graph_is_built(tmp_path, monkeypatch):
    from agent_helpers import one_document_corpus
    from mage_gym.bench.episodes import load_episodes
    from mage_gym.graph import build_graph
    from mage_gym.graph.build import is_cached

    monkeypatch.setenv("MAGE_GYM_CACHE", str(tmp_path / "cache"))
    root = one_document_corpus(tmp_path / "c", pages=4, questions=3)
    node = {"name": "synth", "root": str(root), "split": "all", "cached_only": "fast"}
    assert load_episodes(node) == []  # nothing built yet: no episode, and no parse started
    source = load_episodes({**node, "cached_only": None})[0].source
    assert not is_cached(source, "fast")
    build_graph(source, parser="fast", progress=False)
    assert is_cached(source, "fast") and not is_cached(source, "layout")
    assert len(load_episodes(node)) == 3


def test_every_shipped_controller_name_resolves_to_an_adapter_on_the_embedded_base() -> None:
    """``backend.model=<name>`` loads from policies/checkpoints: each name's folder holds a LoRA adapter on smollm2."""
    from policies.llm_evaluator import SHIPPED_CONTROLLERS, LLMEvaluatorPolicy

    assert {"smollm2-controller", "smollm2-controller-tokens"} <= set(SHIPPED_CONTROLLERS)
    for name, folder in SHIPPED_CONTROLLERS.items():
        assert LLMEvaluatorPolicy.shipped_model(name) == str(folder)
        cfg = json.loads((folder / "adapter_config.json").read_text())
        assert cfg["base_model_name_or_path"] == "smollm2" and cfg["peft_type"] == "LORA", name
        assert (folder / "adapter_model.safetensors").stat().st_size > 1_000_000, name
    assert LLMEvaluatorPolicy.shipped_model("outputs/x/model") == "outputs/x/model"


def test_shipped_adapters_load_without_a_peft_warning_and_name_their_stages() -> None:
    """peft warns "upgrade PEFT" about config keys it does not know: a stacked adapter's lineage lives beside it."""
    import warnings

    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    from peft import LoraConfig

    from mage_gym.agent.adapters import LINEAGE
    from policies.llm_evaluator import SHIPPED_CONTROLLERS

    for name, folder in SHIPPED_CONTROLLERS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            LoraConfig.from_pretrained(str(folder))
        assert json.loads((folder / LINEAGE).read_text())["stacked_from"], name
