"""A local causal LM playing MageRAG-Chat-v0 in process, and its agreement with a teacher's transcripts.

Why here and not through a reader: a trainer evaluates the model it is
training (held-out reward during GRPO, action agreement after SFT) without
saving and reloading it, and a benchmark of the trained controller must see
the conversation exactly as training did. Both hold when the model's reply
is sent to the env as structured tool calls (:func:`as_structured`): the
results then come back as ``tool`` messages and the conversation renders
through the chat template as the transcripts did (``<tool_call>`` blocks in
the assistant turns, results in ``tool`` turns).
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from mage_gym.agent.tools import TOOLS

#: The chat settings the shipped controller was trained with (conf/train_llm.yaml's ``chat``): eight candidates a
#: turn and clipped texts keep a tight-budget episode within SmolLM2's window; the chat template lists the tools.
TRAINED_CHAT: dict[str, Any] = {"max_candidates": 8, "preview_chars": 100, "summary_chars": 150, "content_chars": 600,
                                "tools_in_prompt": False}


def as_structured(reply: Any, turn: int) -> Any:
    """``reply`` (text from a model) as an assistant message with ``tool_calls`` when every call in it parses.

    A reply with a malformed call is returned as it was, so the env answers
    its error in the usual way; ids are ``call_<turn>_<i>``.
    """
    from mage_gym.agent.parse import parse_message

    if not isinstance(reply, str):
        return reply
    parsed = parse_message(reply)
    if not parsed.calls or parsed.errors:
        return reply
    return {"role": "assistant", "content": "",
            "tool_calls": [c.as_tool_call(f"call_{turn}_{i}") for i, c in enumerate(parsed.calls)]}


@dataclass
class LocalChatModel:
    """A causal LM and its tokenizer (chat template with tools), replying to whole conversations.

    ``reuse_prefix``: the key/value cache of the previous call is kept and
    cut to the prefix the new prompt shares with it (the system message and
    tools, the turns so far), so a turn prefills only what is new. Why: on a
    CPU the prefill of a 2k-token conversation costs far more than the few
    dozen tokens of a tool call. Greedy outputs are the same with or without
    it; call :meth:`forget` when the weights change (a trainer's step).

    Generation never runs under CPU autocast: autocast casts every fp32
    weight to bf16 on each forward, which a one-token decoding step pays in
    full. Measured on this CPU (SmolLM2-135M, 1,000-token prompt, 24 new
    tokens, under load): 33 s to decode in fp32 against 132 s under bf16
    autocast (prefill 32 s against 26 s), so fp32 wins the whole reply.
    """

    model: Any
    tokenizer: Any
    max_new_tokens: int = 64
    template: str | None = None  # a chat template to use instead of the tokenizer's own
    reuse_prefix: bool = True
    _ids: Any = None
    _cache: Any = None

    def forget(self) -> None:
        self._ids = self._cache = None

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> Any:
        from mage_gym.agent.transcripts import _wire

        flat = [_wire(m) for m in messages]
        for m in flat:  # the template takes arguments as mappings or JSON text; keep the transcripts' JSON text
            for c in m.get("tool_calls") or []:
                if isinstance(c["function"]["arguments"], str):
                    c["function"]["arguments"] = json.loads(c["function"]["arguments"] or "{}")
        kw = {"chat_template": self.template} if self.template else {}
        return self.tokenizer.apply_chat_template(flat, tools=TOOLS, add_generation_prompt=True, tokenize=True,
                                                  return_dict=True, return_tensors="pt", **kw)["input_ids"]

    def reply(self, messages: Sequence[Mapping[str, Any]], temperature: float = 0.0) -> str:
        import torch

        tok = self.tokenizer
        device = next(self.model.parameters()).device
        ids = self.prompt_ids(messages).to(device)
        kw: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "do_sample": temperature > 0,
                              "pad_token_id": tok.pad_token_id, "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"),
                              "return_dict_in_generate": True}
        if temperature > 0:
            kw["temperature"] = float(temperature)
        if self.reuse_prefix and self._cache is not None:
            old = self._ids[0, : self._cache.get_seq_length()]
            n = min(len(old), ids.shape[1] - 1)
            same = (old[:n] == ids[0, :n]).int()
            keep = int(same.cumprod(0).sum()) if n > 0 else 0
            if keep > 0:
                cut = self._cache.get_seq_length() - keep
                if cut > 0:
                    self._cache.crop(-cut)
                kw[_cache_name()] = self._cache
        was_training = self.model.training
        self.model.eval()
        try:  # generation in the weights' own dtype, even inside a trainer's bf16 autocast (see the class doc)
            with torch.inference_mode(), torch.autocast(device.type, enabled=False):
                out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kw)
        finally:
            if was_training:
                self.model.train()
        if self.reuse_prefix:
            self._ids, self._cache = out.sequences, getattr(out, _cache_name())
        text = tok.decode(out.sequences[0, ids.shape[1]:], skip_special_tokens=False)
        return text.split("<|im_end|>")[0].strip()


@functools.cache
def _cache_name() -> str:
    """The name ``generate`` gives the KV cache: ``cache`` where the installed transformers declares it (its old
    name ``past_key_values`` still works there, but warns and goes in v6), ``past_key_values`` before that. Looked
    up once: every reply reads it twice."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    return "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"


def play_task(env: Any, model: LocalChatModel, task: str, max_replies: int | None = None,
              temperature: float = 0.0) -> dict[str, Any]:
    """One episode of ``task`` played by ``model`` (greedy by default); the outcome and its figures."""
    messages, info = env.reset(options={"task": task})
    convo = list(messages)
    limit = max_replies or env.task.budget.max_steps + 1
    reward, done, replies, terminated = 0.0, False, 0, False
    while not done:
        if replies >= limit:
            obs, r, terminated, truncated, info = env.finish("max_replies")
        else:
            reply = as_structured(model.reply(convo, temperature), replies)
            replies += 1
            obs, r, terminated, truncated, info = env.step(reply)
            from mage_gym.agent.transcripts import assistant_message

            convo.append(assistant_message(reply))
        convo.extend(obs)
        reward += float(r)
        done = bool(terminated or truncated)
    metrics = dict(info.get("metrics") or {})
    support = (info.get("reward_components") or {}).get("support")
    return {"task": task, "reward": reward, "recall": metrics.get("evidence_page_recall"),
            "support": None if support is None else float(support),
            "tokens": metrics.get("tokens_rendered"), "replies": replies, "stopped": bool(terminated),
            "format_errors": int(info.get("format_errors_total", 0)),
            "invalid_calls": int(info.get("invalid_calls_total", 0))}


def _calls(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, canonical JSON arguments) of each call in an assistant message (text or ``tool_calls``)."""
    from mage_gym.agent.parse import parse_message

    parsed = parse_message(dict(message) if message.get("tool_calls") else (message.get("content") or ""))
    return [(c.name or "", json.dumps(c.arguments, sort_keys=True)) for c in parsed.calls if c.ok]


def agreement(model: LocalChatModel, rows: Sequence[Mapping[str, Any]], max_turns: int | None = None) -> dict[str, Any]:
    """How often ``model``'s greedy reply to each prefix of a teacher's transcripts equals the teacher's reply.

    Per assistant turn of each transcript (``rows``: transcript rows), the
    model answers the conversation before that turn; ``exact``: the same
    calls with the same arguments, ``tool``: the same tool names in order.
    Returns the shares over turns, over whole episodes (every turn exact) and
    per teacher tool, and the count of unparseable replies.
    """
    turns = exact = tool = bad = 0
    episodes_all = 0
    by_tool: dict[str, list[int]] = {}
    examples: list[dict[str, Any]] = []  # the first replies beside the teacher's, to read what differs
    per_episode: list[list[int]] = []  # [exact, same tools, turns] per transcript: intervals resample episodes
    for row in rows:
        msgs = row["messages"]
        all_ok = True
        seen = 0
        counts = [0, 0, 0]
        for i, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            if max_turns is not None and seen >= max_turns:
                break
            seen += 1
            want = _calls(m)
            got_text = model.reply(msgs[:i])
            got = _calls({"content": got_text})
            if len(examples) < 12:
                examples.append({"task": row.get("task"), "teacher": want, "reply": got_text[:300]})
            turns += 1
            hit = got == want
            same_tools = [n for n, _ in got] == [n for n, _ in want]
            exact += hit
            tool += same_tools
            counts[0] += hit
            counts[1] += same_tools
            counts[2] += 1
            bad += not got
            key = want[0][0] if want else "none"
            by_tool.setdefault(key, [0, 0])
            by_tool[key][0] += hit
            by_tool[key][1] += 1
            all_ok &= hit
        episodes_all += all_ok
        per_episode.append(counts)
    return {"turns": turns, "episodes": len(rows), "exact": exact / max(1, turns), "tool": tool / max(1, turns),
            "unparseable": bad / max(1, turns), "episodes_all_exact": episodes_all / max(1, len(rows)),
            "by_teacher_tool": {k: {"exact": v[0] / v[1], "turns": v[1]} for k, v in by_tool.items()},
            "examples": examples, "per_episode": per_episode}
