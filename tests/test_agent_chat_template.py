"""The ChatML tool template and its response template (SmolLM2's missing piece), and the TRL environment class."""
from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

import trl  # noqa: E402,F401  (the llm-train extra: a broken install fails, never skips)

from mage_gym._compat import ensure_torchvision  # noqa: E402

ensure_torchvision()

from agent_helpers import bpe_chat_tokenizer, toy_chat_env  # noqa: E402
from mage_gym.agent.chat_template import CHATML_TOOLS_TEMPLATE, knows_tool_calls, prepare_tokenizer  # noqa: E402
from mage_gym.agent.parse import parse_message  # noqa: E402
from mage_gym.agent.tasks import task_rows  # noqa: E402
from mage_gym.agent.tools import TOOLS, TOOLS_BY_NAME  # noqa: E402
from mage_gym.agent.prompts import user_intro  # noqa: E402
from mage_gym.agent.chat_env import text_of  # noqa: E402
from mage_gym.agent.trl_env import (  # noqa: E402
    MageToolEnv, environment_factory, episode_ended, mask_turns_after, refused_calls,
)
from mage_gym.bench.synthetic import hash_query_fn  # noqa: E402
from mage_gym.testing import toy_episodes  # noqa: E402

CONVO = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "Q"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"type": "function", "function": {"name": "activate", "arguments": {"candidates": [1, 2]}}},
             {"type": "function", "function": {"name": "stop", "arguments": "{}"}}]},
         {"role": "tool", "name": "activate", "content": "RESULT"}]


@pytest.fixture(scope="module")
def tok():
    return bpe_chat_tokenizer()


def test_renders_tools_calls_and_results_and_trl_accepts_it(tok):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    text = tok.apply_chat_template(CONVO, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nSYS\n\nTools you can call")
    assert '<tool_call>\n{"name": "activate", "arguments": {"candidates": [1, 2]}}\n</tool_call>' in text
    assert '<tool_call>\n{"name": "stop", "arguments": {}}\n</tool_call><|im_end|>\n<|im_start|>tool\nRESULT' in text
    assert text.endswith("<|im_start|>assistant\n")
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    assert not knows_tool_calls(tok) and tok.response_template  # TRL does not know it: the response template is ours
    # what the template writes, the env's parser reads back
    block = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert [c.name for c in parse_message(block).calls] == ["activate", "stop"]


def test_response_template_parses_generated_calls(tok):
    parsed = tok.parse_response('<tool_call>\n{"name": "open", "arguments": {"ids": ["d:p1:e2"]}}\n</tool_call>'
                                "<|im_end|>", prefix="")
    assert parsed["tool_calls"][0]["function"] == {"name": "open", "arguments": {"ids": ["d:p1:e2"]}}
    assert tok.parse_response("plain words<|im_end|>", prefix="")["content"] == "plain words"


def test_assistant_mask_covers_exactly_what_the_assistant_writes(tok):
    out = tok.apply_chat_template(CONVO, tools=TOOLS, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    said = tok.decode([i for i, m in zip(ids, mask) if m])
    assert said.startswith("<tool_call>") and said.endswith("</tool_call><|im_end|>") and "RESULT" not in said


def test_known_templates_are_kept_unknown_ones_replaced(tok):
    from trl.chat_template_utils import qwen3_chat_template

    tok.chat_template = qwen3_chat_template
    del tok.response_template
    prepare_tokenizer(tok)
    assert tok.chat_template == qwen3_chat_template  # TRL knows Qwen3: its own template stays
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # SmolLM2-like: no tool calls
    prepare_tokenizer(tok)
    assert tok.chat_template == CHATML_TOOLS_TEMPLATE and tok.response_template["start_anchor"]


def test_trl_sees_the_same_tools_as_TOOLS():
    from transformers.utils import get_json_schema

    env = MageToolEnv(lambda: toy_chat_env())
    public = [n for n, _ in inspect.getmembers(MageToolEnv, predicate=inspect.isfunction)
              if not n.startswith("_") and n not in ("reset", "get_reward")
              and "__mutmut_" not in n]  # experiments/perf/mutation_score.py's copies of the methods
    assert sorted(public) == sorted(TOOLS_BY_NAME)
    for name in public:  # what TRL renders into the prompt is exactly what SFT transcripts and evaluation render
        assert get_json_schema(getattr(env, name)) == TOOLS_BY_NAME[name]


def test_tool_env_runs_calls_as_trl_does_and_owns_the_reward():
    factory = environment_factory(episodes=toy_episodes(), query_fn=hash_query_fn(16), K=16, retriever="bm25")
    a, b = factory(), factory()
    row = task_rows([p.episode for p in toy_episodes()], "mmlongbench", tools_in_prompt=False)[0]
    assert "<candidates>" in a.reset(**row) and "<candidates>" in b.reset(**row)
    tools = {n: getattr(a, n) for n in TOOLS_BY_NAME}  # TRL calls tool_dict[name](**arguments)
    assert "activated" in tools["activate"](**{"candidates": [1]})
    assert "no candidate was shown" in tools["activate"](**{"candidates": [77]})
    assert "unknown id" in tools["open"](**{"ids": ["nope"]})
    assert "stopped" in tools["stop"]()
    assert "episode is over" in tools["stop"]()
    ra, rb = a.get_reward(), b.get_reward()  # b never stopped: stopped for it, truncated
    assert a.get_reward() == ra and b._episode_info()["stop_reason"] == "rollout_end"
    assert a._episode_info()["stats"] == {"tool_calls": 4.0, "format_errors": 0.0, "invalid_calls": 3.0,
                                          "stopped": 1.0, "tokens_masked_after_end": 0.0}
    assert isinstance(rb, float)


#: scripted rollouts, as TRL runs them: one tool call at a time, by name, with the model's arguments
ROLLOUTS = [
    [("activate", {"candidates": [1, 2]}), ("stop", {})],
    [("search", {"query": "revenue table"}), ("activate", {"candidates": [3]}), ("stop", {}), ("stop", {})],
    [("activate", {"candidates": [1]})],  # never stops: get_reward stops it (truncated)
    [("open", {"ids": ["nope"]}), ("prune", {"ids": ["nope"], "reason": "x"})],
]


def _reference_reward(task: str, calls) -> tuple[float, dict]:
    """The chat env's own terminal reward for the same calls, each call one reply (as TRL sends them)."""
    env = toy_chat_env(max_candidates=16)
    env.reset(options={"task": task})
    total, info, done = 0.0, {}, False
    for name, args in calls:
        if done:
            break
        _, r, terminated, truncated, info = env.step([{"name": name, "arguments": dict(args)}])
        total, done = total + r, terminated or truncated
    if not done:
        _, r, _, _, info = env.finish("rollout_end")
        total += r
    return total, info


def _scripted_rollouts() -> list[tuple[dict, list, MageToolEnv]]:
    """Each of :data:`ROLLOUTS` played on its own toy task as TRL plays it: ``(row, calls, env)``."""
    factory = environment_factory(episodes=toy_episodes(), query_fn=hash_query_fn(16), K=16, retriever="bm25",
                                  max_candidates=16)
    rows = task_rows([p.episode for p in toy_episodes()], "mmlongbench", tools_in_prompt=False)
    played = []
    for row, calls in zip(rows, ROLLOUTS):
        env = factory()
        env.reset(**row)
        for name, args in calls:
            getattr(env, name)(**args)
        played.append((row, calls, env))
    return played


def test_the_reward_a_trl_rollout_reports_is_the_envs_terminal_reward():
    """What GRPO optimises (get_reward, weight 1 in TRL) equals the env's terminal reward for the same calls."""
    rewards = []
    for row, calls, env in _scripted_rollouts():
        want, info = _reference_reward(row["task"], calls)
        got = env.get_reward()
        assert got == pytest.approx(want, abs=1e-12) and got == pytest.approx(info["reward_components"]["reward"])
        assert env._episode_info()["reward_components"] == info["reward_components"]
        rewards.append(got)
    assert len(set(rewards)) > 1 and all(r != 0.0 for r in rewards)  # the rollouts differ; nothing is a stub 0


def test_env_metrics_writes_one_line_per_rollout_with_its_task_calls_and_outcome(tmp_path):
    """The per-rollout log pairs each rollout with its task, the tools it called, its support and reward."""
    import json

    from agent_helpers import train_llm_module

    played = _scripted_rollouts()
    envs = [env for _, _, env in played]
    log, logged = tmp_path / "rollouts.jsonl", {}
    for _ in range(2):  # appended, batch after batch
        train_llm_module().env_metrics([None] * len(envs), [None] * len(envs), environments=envs,
                                       log_metric=logged.__setitem__, rollout_log=str(log),
                                       trainer_state=SimpleNamespace(global_step=4))
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 2 * len(envs) and {line["step"] for line in lines} == {5}
    for line, (row, calls, env) in zip(lines, played):
        assert line["task"] == row["task"] and line["called"] == [name for name, _ in calls]
        assert line["reward"] == pytest.approx(env.get_reward(), abs=1e-6)
        assert line["support"] == env._episode_info()["reward_components"]["support"]
        assert line["tool_calls"] == env._episode_info()["stats"]["tool_calls"]
    assert [line["stopped"] for line in lines[:len(envs)]] == [1.0, 1.0, 0.0, 0.0]
    assert logged["env/tool_calls"] == pytest.approx(sum(line["tool_calls"] for line in lines[:4]) / 4)


def test_tool_env_counts_what_each_call_did_and_refuses_calls_outside_an_episode():
    factory = environment_factory(episodes=toy_episodes(), query_fn=hash_query_fn(16), K=16, retriever="bm25")
    env = factory()
    assert env.get_reward() == 0.0 and "episode is over" in env.stop()  # before any reset: refused, not a crash
    assert env._episode_info()["stats"]["invalid_calls"] == 1.0
    row = task_rows([p.episode for p in toy_episodes()], "mmlongbench", tools_in_prompt=False)[0]
    with pytest.raises(KeyError, match=r"^\"the dataset row has no 'task' column \(build it with mage_gym"):
        env.reset(**{k: v for k, v in row.items() if k != "task"})
    chat = toy_chat_env(max_candidates=16)
    messages, _ = chat.reset(options={"task": row["task"]})
    opening = env.reset(**row)
    user = text_of([m for m in messages if m["role"] == "user"])
    intro = user_intro(chat.view.question)  # the row's prompt already opens with it: the state follows alone
    assert user.startswith(intro) and opening == "\n\n" + user[len(intro):].lstrip("\n")
    assert "Question:" not in opening and "<question>" in opening
    assert not [m for m in messages if m["role"] == "system"][0]["content"] in opening
    assert "error" in env.activate(candidates="x")  # a malformed argument: a format error
    assert "activated" in env.activate(candidates=[1])
    assert "unknown id" in env.open(ids=[1])  # an id nobody showed: an invalid call
    assert "toy:p0: pruned" in env.prune(ids=["toy:p0"], reason="not needed")
    assert "refused" in env.search(query="")  # invalid
    assert env._episode_info()["stats"] == {"tool_calls": 5.0, "format_errors": 1.0, "invalid_calls": 2.0,
                                            "stopped": 0.0, "tokens_masked_after_end": 0.0}
    env.reset(**row)
    assert env._episode_info()["stats"] == {"tool_calls": 0.0, "format_errors": 0.0, "invalid_calls": 0.0,
                                            "stopped": 0.0, "tokens_masked_after_end": 0.0}


def test_the_refused_call_term_is_minus_each_rollouts_refused_calls_and_nothing_else():
    """grpo.refused_call_penalty's reward function: a call the env refused (unknown id, empty query) or one
    after the episode ended costs 1 each; a format error, a call that did something and stop cost nothing."""
    factory = environment_factory(episodes=toy_episodes(), query_fn=hash_query_fn(16), K=16, retriever="bm25",
                                  max_candidates=16)
    row = task_rows([p.episode for p in toy_episodes()], "mmlongbench", tools_in_prompt=False)[0]
    clean, refusing = factory(), factory()
    for env in (clean, refusing):
        env.reset(**row)
        env.activate(candidates="x")  # malformed: a format error, not a refusal
        env.activate(candidates=[1])
    refusing.open(ids=[1])
    refusing.search(query="")
    for env in (clean, refusing):
        env.stop()
    refusing.prune(ids=["toy:p0"], reason="after the end")
    assert refused_calls(environments=[clean, refusing]) == [0.0, -3.0]
    assert refused_calls(environments=None) == []


def _assistant(name: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                                                                "function": {"name": name, "arguments": {}}}]}


def test_turns_written_after_stop_leave_the_loss_and_the_turns_before_it_stay():
    """A rollout as TRL keeps it: activate, stop, then two refused calls and a closing message. Only the turns
    after the stop turn are masked, in TRL's tool mask (1: generated, 0: tool result)."""
    factory = environment_factory(episodes=toy_episodes(), query_fn=hash_query_fn(16), K=16, retriever="bm25")
    env = factory()
    env.reset(**task_rows([p.episode for p in toy_episodes()], "mmlongbench", tools_in_prompt=False)[0])
    results = [env.activate(candidates=[1]), env.stop(), env.activate(candidates=[2]), env.stop()]
    assert "episode is over" in results[2] and "episode is over" in results[3]
    chars = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "".join(map(chr, ids)))
    assert [episode_ended(chars, [ord(ch) for ch in text + "<|im_end|>"]) for text in results] == \
        [False, True, False, False]  # only the message that ended the episode says so
    completion = []
    for name, result in zip(["activate", "stop", "activate", "stop"], results):
        completion += [_assistant(name), {"role": "tool", "name": name, "content": result}]
    completion.append({"role": "assistant", "content": "done"})
    mask = [1] * 3 + [0] * 4 + [1] * 2 + [0] * 5 + [1] * 3 + [0] * 2 + [1] * 2 + [0] * 2 + [1] * 1
    masked = env._mask_after_end(mask, completion)
    assert masked == [1] * 3 + [0] * 4 + [1] * 2 + [0] * 5 + [0] * 3 + [0] * 2 + [0] * 2 + [0] * 2 + [0] * 1
    assert env._episode_info()["stats"]["tokens_masked_after_end"] == 6.0

    env.reset(**task_rows([p.episode for p in toy_episodes()], "mmlongbench", tools_in_prompt=False)[0])
    live = [_assistant("activate"), {"role": "tool", "name": "activate", "content": env.activate(candidates=[1])}]
    assert env._mask_after_end([1, 1, 0, 0, 1], live) == [1, 1, 0, 0, 1]  # the episode never ended: unchanged
    assert env._episode_info()["stats"]["tokens_masked_after_end"] == 0.0


def test_the_grpo_trainer_generates_no_turn_after_a_rollouts_episode_ended():
    """In TRL's tool loop (one generation per rollout) a rollout whose conversation ends with the episode's
    ending gets an empty turn without reaching the model; the others are generated as before, in order."""
    from agent_helpers import train_llm_module

    seen = []

    class Base:
        processing_class = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "".join(map(chr, ids)))

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            seen.append(list(prompt_ids))
            return [[len(ids)] for ids in prompt_ids], None

    trainer = train_llm_module()._masking_after_end(Base)()
    text = [[ord(ch) for ch in t] for t in ["a: activated", "stop: done\n\nThe episode ended (stop); ...", "b: ok"]]
    ids, logprobs = trainer._generate_single_turn(text, None, {}, 1)
    assert ids == [[len(text[0])], [], [len(text[2])]] and logprobs is None
    assert seen == [[text[0], text[2]]] and type(trainer).turns_not_generated == 1
    ids, _ = trainer._generate_single_turn([text[1]], None, {}, 1)
    assert ids == [[]] and len(seen) == 1  # every rollout ended: the model is not called
    ids, _ = trainer._generate_single_turn([text[1]], None, {}, 4)  # the first turn of a group: always generated
    assert ids == [[len(text[1])]] and len(seen) == 2


def test_the_grpo_trainer_masks_each_rollout_with_its_own_environment():
    from agent_helpers import train_llm_module

    class Env:
        def __init__(self, turns):
            self.turns = turns

        def _mask_after_end(self, mask, completion):
            return mask_turns_after(mask, self.turns)[0]

    class Base:
        def _tool_call_loop(self, *args, **kwargs):
            return [[1, 0, 1, 0, 1], [1, 1, 0, 1]], [[], []], "ids", None, 0, 0, []

    trainer = train_llm_module()._masking_after_end(Base)()
    trainer.environments = [Env(1), Env(5)]
    out = trainer._tool_call_loop()
    assert out[0] == [[1, 0, 0, 0, 0], [1, 1, 0, 1]] and out[2] == "ids"


def test_environment_factory_passes_provider_settings_and_labels_the_dataset():
    eps = [p.episode for p in toy_episodes()]
    env = environment_factory(episodes=eps, parser="fast", max_graphs=2, query_fn=hash_query_fn(16), K=16,
                              retriever="bm25")()
    provider = env._env._provider
    assert (provider.parser, provider.max_graphs) == ("fast", 2)
    assert env._env.dataset == "mmlongbench"  # from the episodes' benchmark
    named = environment_factory(episodes=eps, dataset="mine", query_fn=hash_query_fn(16), K=16, retriever="bm25")()
    assert named._env.dataset == "mine"


class _PayingChat:
    """A chat env that pays on every step and reports no counts: what MageToolEnv must add up, not overwrite."""

    def __init__(self) -> None:
        self.finished = 0
        self.view = SimpleNamespace(question="q?")  # what MageToolEnv reads to drop the prompt's opening line

    def reset(self, options=None):
        return [{"role": "user", "content": "state"}], {}

    def step(self, calls):
        return [{"role": "tool", "content": "ok"}], 0.25, calls[0]["name"] == "stop", False, {}

    def finish(self, reason):
        self.finished += 1
        return [{"role": "user", "content": "end"}], 0.5, False, True, {"stop_reason": reason}


def test_the_rollout_reward_is_the_sum_of_what_the_env_paid_and_a_rollout_ends_once():
    chat = _PayingChat()
    env = MageToolEnv(lambda: chat)
    env.reset(task="t")
    env.activate(candidates=[1])
    env.open(ids=["a"])
    assert env.get_reward() == pytest.approx(0.25 + 0.25 + 0.5) and env.get_reward() == pytest.approx(1.0)
    assert chat.finished == 1 and env._episode_info()["stop_reason"] == "rollout_end"
    assert env._episode_info()["stats"] == {"tool_calls": 2.0, "format_errors": 0.0, "invalid_calls": 0.0,
                                            "stopped": 0.0, "tokens_masked_after_end": 0.0}
    env.reset(task="t")
    env.search(query="q")
    env.stop()
    assert env.get_reward() == pytest.approx(0.5) and chat.finished == 1  # stopped by the model: no finish


class _PictureChat:
    """A chat env whose messages carry images, as MageChatEnv's do with vision: what TRL must receive as blocks."""

    def __init__(self) -> None:
        self.view = SimpleNamespace(question="q?")
        self.calls: list[dict] = []
        self.page, self.crop = object(), object()

    def reset(self, options=None):
        content = [{"type": "text", "text": user_intro("q?") + "\n\nstate"}, {"type": "image", "image": self.page},
                   {"type": "image", "image": None}]  # a part without its image: nothing to show
        return [{"role": "system", "content": "rules"}, {"role": "user", "content": content}], {}

    def step(self, calls):
        self.calls += calls
        if calls[0]["name"] == "open":
            return [{"role": "tool", "content": [{"type": "text", "text": "opened"},
                                                 {"type": "image", "image": self.crop}]}], 0.0, False, False, {}
        return [{"role": "tool", "content": "ok"}], 0.0, False, False, {}


def test_tool_env_hands_trl_the_images_as_blocks_after_the_text_and_plain_text_without_images():
    chat = _PictureChat()
    env = MageToolEnv(lambda: chat)
    assert env.reset(task="t") == [{"type": "text", "text": "\n\nstate"}, {"type": "image", "image": chat.page}]
    assert env.open(ids=["a"]) == [{"type": "text", "text": "opened"}, {"type": "image", "image": chat.crop}]
    assert env.activate(candidates=[1]) == "ok"  # no image: the plain string TRL reads as text


def test_tool_env_numbers_its_calls_from_one_in_each_episode():
    """Each call goes to the chat env with an id (a structured call: its result comes back as a tool message);
    the ids count the episode's calls, so a reset starts again at call_1."""
    chat = _PictureChat()
    env = MageToolEnv(lambda: chat)
    env.reset(task="t")
    env.activate(candidates=[1])
    env.search(query="q")
    env.reset(task="t")
    env.stop()
    assert chat.calls == [{"id": "call_1", "name": "activate", "arguments": {"candidates": [1]}},
                          {"id": "call_2", "name": "search", "arguments": {"query": "q"}},
                          {"id": "call_1", "name": "stop", "arguments": {}}]


def test_only_groups_whose_answer_support_differs_keep_their_advantages():
    """A group whose rollouts differ only in cost (the same support) learns nothing under
    grpo.require_outcome_spread; a group whose support differs keeps TRL's advantages as they were."""
    import torch

    from agent_helpers import train_llm_module
    from mage_gym.agent.trl_env import outcome_spread

    def env(support, reward):
        return SimpleNamespace(_info={"reward_components": {"support": support, "reward": reward}})

    envs = [env(0.5, 0.30), env(0.5, 0.25), env(1.0, 0.60), env(0.5, 0.28)]
    assert outcome_spread(envs, 2) == [False, True] and outcome_spread(envs, 4) == [True]

    class Base:
        num_generations = 2
        _metrics = {"train": {"env/groups_with_outcome_spread": []}}

        def _generate_and_score_completions(self, inputs):
            return {"advantages": torch.tensor([0.7, -0.7, 0.9, -0.9])}

    trainer = train_llm_module()._outcome_spread_only(Base)()
    trainer.environments = envs
    out = trainer._generate_and_score_completions(None)
    assert out["advantages"].tolist() == pytest.approx([0.0, 0.0, 0.9, -0.9])
    assert trainer._metrics["train"]["env/groups_with_outcome_spread"] == [0.5]
