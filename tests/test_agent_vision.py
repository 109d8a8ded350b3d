"""Images through the adapters, end to end with a tiny Qwen3-VL (tests/vl_helpers.py): with ``vision`` on, page
images and crops of opened tables reach the model in tool results over OpenEnv's WebSocket, through verifiers'
evaluation (OpenAI ``image_url`` parts), and through TRL's environment adapter into GRPO.

The episodes: one synthetic 4-page report with tables, budget k=2 (two entry pages, so later pages and opened
tables bring new images); the tiny model reads every conversation with its images and scores a scripted reply.
"""
from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("openenv")
from vl_helpers import TinyVLPolicy, VLChatServer, build_tiny_vl_chat_model  # noqa: E402

CHAT = {"vision": True, "max_candidates": 12, "preview_chars": 40, "K": 16, "retriever": "bm25"}
BUDGET = {"k": 2}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from agent_helpers import one_document_corpus

    return one_document_corpus(tmp_path_factory.mktemp("vision_synth"), pages=4, questions=2)


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> TinyVLPolicy:
    return TinyVLPolicy(build_tiny_vl_chat_model(tmp_path_factory.mktemp("tiny_vl")))


def image_parts(messages: list[dict]) -> int:
    return sum(1 for m in messages if isinstance(m.get("content"), list) for p in m["content"]
               if p.get("type") == "image_url" and p["image_url"]["url"].startswith("data:image/png;base64,"))


def chat_env(corpus):
    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.data.synth.corpus import load_synth

    return MageChatEnv(episodes=load_synth(corpus), parser="fast", dataset="synth", budget=BUDGET, **CHAT)


def test_the_server_carries_page_images_and_table_crops_to_the_model(corpus, policy):
    from mage_gym.agent.server import ChatEnvServer
    from mage_gym.agent.service.client import MageChatClient
    from mage_gym.agent.service.models import MageChatAction

    env = chat_env(corpus)  # built here: the server's sessions share its episodes
    srv = ChatEnvServer(lambda: chat_env(corpus)).start()
    policy.readings.clear()
    try:
        async def play() -> tuple[list[int], float, bool]:
            async with MageChatClient(base_url=srv.base_url) as client:
                result = await client.reset(task=str(env.task_id(env.episode_ids[0])))
                conversation = list(result.observation.messages)
                new_images = [image_parts(conversation)]
                while not result.done:
                    reply = policy.reply(conversation)
                    result = await client.step(MageChatAction(message=reply))
                    conversation += [{"role": "assistant", "content": reply}, *result.observation.messages]
                    new_images.append(image_parts(result.observation.messages))
                return new_images, float(result.reward), result.observation.terminated

        new_images, reward, terminated = asyncio.run(play())
    finally:
        srv.stop()
    assert new_images[0] == 2 and sum(new_images[1:]) >= 1, new_images  # entry pages, then a tool result's crop
    assert terminated and isinstance(reward, float)
    seen = [r.images for r in policy.readings]
    assert seen == sorted(seen) and seen[-1] == sum(new_images[:-1])  # every image reached the model
    assert all(r.image_tokens > 0 for r in policy.readings)


def test_verifiers_sends_tool_result_images_to_a_vision_server_and_records_the_envs_reward(corpus, policy, tmp_path):
    pytest.importorskip("verifiers")
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    from mage_gym.agent import verifiers_env as V

    chat = {k: v for k, v in CHAT.items() if k != "retriever"}
    taskset = {"id": V.PLUGIN_ID, "dataset": "synth", "root": str(corpus), "split": "all", "limit": 1,
               "retriever": "bm25", "budget": BUDGET, "chat": chat}
    server = VLChatServer(policy)
    policy.readings.clear()
    try:
        cfg = EvalConfig(env={"taskset": taskset, "agent": {"max_turns": 4}}, model="tiny-qwen3-vl",
                         client={"type": "eval", "base_url": server.base_url, "api_key_var": "MAGE_NO_KEY"},
                         sampling={"max_tokens": 64}, num_rollouts=1, push=False, rich=None,
                         output_dir=str(tmp_path / "vf"), max_concurrent=1)
        episodes = asyncio.run(run_eval(cfg))
    finally:
        server.stop()
    (trace,) = [t for ep in episodes for t in ep.traces]
    assert trace.ok and not trace.errors, trace.errors
    per_request = [image_parts(m) for m in server.requests]
    assert per_request[0] == 2 and per_request[-1] > per_request[0], per_request  # a tool result brought one more
    assert [r.images for r in policy.readings] == per_request
    mage = trace.info["mage"]
    env = chat_env(corpus)
    env.reset(options={"task": mage["task"]})
    total = 0.0
    for reply in mage["replies"]:
        _, reward, terminated, truncated, _ = env.step(reply)
        total += reward
        if terminated or truncated:
            break
    assert trace.reward == pytest.approx(mage["reward"]) == pytest.approx(total)


def test_trl_tool_results_carry_images_in_the_form_trl_gives_a_vlm(corpus, policy):
    """MageToolEnv's reset and tool results are TRL 1.16's multimodal content (text then PIL image blocks); the
    conversation TRL builds from them (tool messages with images) renders with Qwen3-VL's template and the
    model reads every image."""
    from PIL import Image

    from mage_gym.agent.trl_env import environment_factory
    from mage_gym.data.synth.corpus import load_synth

    make = environment_factory(episodes=load_synth(corpus), parser="fast", dataset="synth", budget=BUDGET, **CHAT)
    env = make()
    task = str(env._env.task_id(env._env.episode_ids[0]))
    opening = env.reset(task=task)
    assert isinstance(opening, list) and opening[0]["type"] == "text"
    assert [type(b["image"]) for b in opening[1:]] and all(isinstance(b["image"], Image.Image) for b in opening[1:])
    conversation = [{"role": "user", "content": opening}]
    results = []
    for name in ("activate", "open", "stop"):
        reply = json.loads(policy.reply(_for_policy(conversation)).split("\n")[1])
        assert reply["name"] == name, reply
        result = getattr(env, name)(**reply["arguments"])
        results.append(result)
        conversation += [{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": reply["arguments"]}}]},
            {"role": "tool", "name": name, "content": result}]
    assert isinstance(results[1], list) and isinstance(results[1][1]["image"], Image.Image)  # the opened table
    assert isinstance(results[2], str)  # stop: no image
    assert isinstance(env.get_reward(), float) and env._episode_info()["stats"]["stopped"] == 1.0
    before_stop = sum(len(c) - 1 for c in (opening, results[0], results[1]) if isinstance(c, list))
    assert policy.readings[-1].images == before_stop and policy.readings[-1].image_tokens > 0


def _for_policy(conversation: list[dict]) -> list[dict]:
    """TRL's messages as the policy reads them (tool-call arguments as JSON text)."""
    out = []
    for m in conversation:
        if m.get("tool_calls"):
            calls = [{"type": "function", "function": {"name": c["function"]["name"],
                                                       "arguments": json.dumps(c["function"]["arguments"])}}
                     for c in m["tool_calls"]]
            out.append({"role": "assistant", "content": "", "tool_calls": calls})
        else:
            out.append(m)
    return out


@pytest.mark.slow
def test_grpo_trains_a_tiny_qwen3vl_that_reads_the_envs_page_images(corpus, tmp_path):
    """TRL's GRPOTrainer with ``environment_factory`` and a VLM: the reset's page images (TRL's multimodal
    content) go through TRL's processor into generation and into the loss's forward pass. (The random model
    writes no tool call, so tool-result images are the test above's: same adapter, same content form.)"""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    from datasets import Dataset
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl import GRPOConfig, GRPOTrainer

    from mage_gym.agent.tasks import task_rows
    from mage_gym.agent.trl_env import environment_factory
    from mage_gym.data.synth.corpus import load_synth

    model_dir = build_tiny_vl_chat_model(tmp_path / "model")
    episodes = load_synth(corpus)
    rows = task_rows(episodes, "synth", budget=BUDGET, seeds=[0], split="all", tools_in_prompt=False)[:1]
    processor = AutoProcessor.from_pretrained(model_dir)
    processor.tokenizer.padding_side = "left"
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    images_seen: list[int] = []
    model.model.visual.register_forward_pre_hook(
        lambda module, args, kwargs: images_seen.append(int((kwargs.get("grid_thw") if "grid_thw" in kwargs
                                                             else args[1]).shape[0])), with_kwargs=True)
    config = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, num_generations=2,
                        max_completion_length=16, max_tool_calling_iterations=1, max_steps=1, learning_rate=1e-4,
                        logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
                        dataloader_num_workers=0, beta=0.0)
    trainer = GRPOTrainer(model=model, processing_class=processor, args=config, train_dataset=Dataset.from_list(rows),
                          environment_factory=environment_factory(episodes=episodes, parser="fast", dataset="synth",
                                                                  budget=BUDGET, **CHAT))
    trainer.train()
    logged = trainer.state.log_history[0]
    assert images_seen and all(n == 2 * 2 for n in images_seen), images_seen  # 2 rollouts x the 2 entry pages
    assert "rewards/MageToolEnv/mean" in logged and logged["completions/mean_length"] > 0
