"""Chat transcripts of whole episodes (JSONL in the ``messages`` form SFTTrainer reads), and teachers that write them.

Why: a 135M model does not call tools on its own; a warm start by
supervised fine-tuning on good episodes comes before RL (the SFT -> GRPO
recipe). A transcript is recorded by playing the chat env itself, so its
observations are exactly what the env sends (no gold: the env's messages are
built from the public text view) and its assistant turns are tool calls the
env accepted.

A step-level policy (the privileged oracle, the DAgger student) becomes a
chat actor through :func:`step_actor`: it sees the inner env's numeric
observation and a mask restricted to what the chat shows (candidates listed,
evidence held, stop; no slot search, whose query the chat cannot express),
and each of its actions is written as one tool call.

Rows: ``{"messages": [...], "tools": "<TOOLS as JSON>", "task": id,
"reward": r, "source": name, "privileged": bool, ...}``. Tool-call arguments
are JSON strings (the OpenAI wire form), so rows of different tools share one
Arrow schema when ``datasets`` reads the file.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from mage_gym.agent.tools import TOOLS

#: ``actor(messages_so_far, info) -> assistant message`` (dict with ``tool_calls``, or text).
Actor = Callable[[list[dict[str, Any]], Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Transcript:
    """One episode as a chat, with its outcome (the outcome is for filtering, never shown to a model)."""

    task: str
    messages: list[dict[str, Any]]
    reward: float
    source: str
    privileged: bool
    terminated: bool
    components: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    format_errors: int = 0
    invalid_calls: int = 0

    def row(self) -> dict[str, Any]:
        """The JSONL row (SFTTrainer reads ``messages`` and ``tools``)."""
        out = asdict(self)
        out["messages"] = [_wire(m) for m in self.messages]
        out["tools"] = json.dumps(TOOLS)
        return out


def _wire(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as stored: text content, tool-call arguments as JSON strings, no image parts."""
    out = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")}
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    elif content is None:
        out["content"] = ""
    if out.get("tool_calls"):
        calls = []
        for c in out["tool_calls"]:
            fn = dict(c.get("function", c))
            if not isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.dumps(fn.get("arguments") or {})
            calls.append({"type": "function", "id": c.get("id"), "function": {"name": fn["name"],
                                                                                "arguments": fn["arguments"]}})
        out["tool_calls"] = calls
    return out


def record_episode(env: Any, actor: Actor, task: str | None = None, source: str = "actor",
                   privileged: bool = False, max_replies: int | None = None) -> Transcript:
    """Play one episode of a :class:`~mage_gym.agent.chat_env.MageChatEnv` with ``actor``; return its transcript."""
    messages, info = env.reset(options={"task": task} if task else None)
    convo = list(messages)
    reward, done, terminated = 0.0, False, False
    limit = max_replies or env.task.budget.max_steps + 1
    replies = 0
    last: Mapping[str, Any] = info
    while not done:
        reply = actor(convo, last) if replies < limit else {"name": "stop", "arguments": {}}
        replies += 1
        obs, r, terminated, truncated, last = env.step(reply)
        convo.append(assistant_message(reply))
        convo.extend(obs)
        reward += float(r)
        done = terminated or truncated
    return Transcript(task=str(env.task), messages=convo, reward=reward, source=source, privileged=privileged,
                      terminated=bool(terminated), components=dict(last.get("reward_components", {})),
                      metrics={k: v for k, v in dict(last.get("metrics", {})).items() if _plain(v)},
                      format_errors=int(last.get("format_errors_total", 0)),
                      invalid_calls=int(last.get("invalid_calls_total", 0)))


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def assistant_message(reply: Any) -> dict[str, Any]:
    """The assistant message a reply stands for (tool-call dicts become ``tool_calls`` with ids)."""
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}
    if isinstance(reply, Mapping) and reply.get("role") == "assistant":
        return dict(reply)
    calls = [reply] if isinstance(reply, Mapping) else list(reply)
    out = []
    for i, c in enumerate(calls):
        fn = c.get("function", c)
        out.append({"type": "function", "id": c.get("id") or f"call_{i}",
                    "function": {"name": fn["name"], "arguments": dict(fn.get("arguments") or {})}})
    return {"role": "assistant", "content": "", "tool_calls": out}


def step_actor(env: Any, act: Callable[[Any, np.ndarray], "int | str | Sequence[int]"],
               reason: str = "not needed for the question") -> Actor:
    """A chat actor from a step-level policy ``act(numeric_obs, mask) -> flat action`` (or ``"search"``).

    ``act`` may also return several flat actions: one reply of several calls,
    the first checked against the mask, the rest activations of listed
    candidates (the oracle's prune and the activation it makes room for).

    ``env`` must be built with ``numeric_obs_in_info=True``. Each reply is one
    tool call with a fresh id (``call_<reply number>``), so the transcript
    reads as a structured tool-calling chat. ``"search"`` is written as
    ``search(query=<the question>)`` when the budget allows a search (the
    env's own mask says so), else as ``stop``: a query any controller can
    write, so a student imitating it learns when to search, not a query
    built from what it cannot see.
    """
    from mage_gym.env.actions import ActionLayout, Op

    counter = {"n": 0}

    def actor(messages: list[dict[str, Any]], info: Mapping[str, Any]) -> dict[str, Any]:
        inner = env.inner
        layout = ActionLayout(int(inner.get_wrapper_attr("K")))
        slot_ids = inner.get_wrapper_attr("slot_node_ids")()
        cands, held = env.visible_ids()
        mask = np.asarray(info["action_mask"], dtype=bool).copy()
        for a in np.flatnonzero(mask):
            op, slot = layout.decode(int(a))
            if op == Op.STOP:
                continue
            node = slot_ids[slot]
            ok = (op in (Op.ACTIVATE_PAGE, Op.ACTIVATE_NODE) and node in cands) or \
                (op in (Op.OPEN_NODE, Op.PRUNE) and node in held)
            mask[a] = ok
        choice = act(info["numeric_observation"], mask)
        counter["n"] += 1
        cid = f"call_{counter['n']}"
        if isinstance(choice, str):
            if choice != "search":
                raise ValueError(f"a step actor returns a flat action or 'search', got {choice!r}")
            can_search = bool(layout.block(np.asarray(info["action_mask"], dtype=bool), Op.SEARCH).any())
            if can_search and env.view.question:
                return {"id": cid, "name": "search", "arguments": {"query": env.view.question}}
            return {"id": cid, "name": "stop", "arguments": {}}
        if isinstance(choice, (list, tuple)):  # a move and the activation it makes room for, in one reply
            calls = [call(layout, slot_ids, int(choice[0]), bool(mask[int(choice[0])]), f"{cid}_0")]
            if calls[0]["name"] == "stop":
                return calls[0]
            for i, a in enumerate(choice[1:], 1):
                op, slot = layout.decode(int(a))
                if op in (Op.ACTIVATE_PAGE, Op.ACTIVATE_NODE) and slot_ids[slot] in cands:
                    calls.append(call(layout, slot_ids, int(a), True, f"{cid}_{i}"))
            return calls
        return call(layout, slot_ids, int(choice), bool(mask[int(choice)]), cid)

    def call(layout: ActionLayout, slot_ids: list, action: int, valid: bool, cid: str) -> dict[str, Any]:
        """The tool call of flat ``action`` (``stop`` when it is Stop or not ``valid``)."""
        op, slot = layout.decode(action)
        if op == Op.STOP or not valid:
            return {"id": cid, "name": "stop", "arguments": {}}
        node = slot_ids[slot]
        if op in (Op.ACTIVATE_PAGE, Op.ACTIVATE_NODE):
            return {"id": cid, "name": "activate", "arguments": {"candidates": [env.view.number(node)]}}
        if op == Op.OPEN_NODE:
            return {"id": cid, "name": "open", "arguments": {"ids": [node]}}
        return {"id": cid, "name": "prune", "arguments": {"ids": [node], "reason": reason}}

    return actor


def write_jsonl(path: str | Path, transcripts: Iterable[Transcript]) -> int:
    """Write transcripts as JSONL rows; returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w") as f:
        for t in transcripts:
            f.write(json.dumps(t.row(), ensure_ascii=False, default=str) + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def sft_rows(rows: Sequence[Mapping[str, Any]], min_reward: float | None = None,
             terminated_only: bool = True) -> list[dict[str, Any]]:
    """The ``messages`` + ``tools`` rows SFTTrainer trains on, filtered by outcome (the filter reads the reward,
    never the model)."""
    out = []
    for r in rows:
        if terminated_only and not r.get("terminated", True):
            continue
        if min_reward is not None and float(r.get("reward", 0.0)) < min_reward:
            continue
        out.append({"messages": r["messages"], "tools": r["tools"]})
    return out
