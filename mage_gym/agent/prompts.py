"""The chat controller's instructions: role, tools, rules (our own wording, versioned).

Why versioned: what a trained controller learned depends on this text; a
transcript or a task list records :data:`CHAT_PROMPT_VERSION`, so a model is
never evaluated under instructions it was not trained with by accident.

Two variants of the system message: with the tool list written out (any
OpenAI-compatible server, text-only or not: the model answers with
``<tool_call>`` blocks or structured calls), and without it, for a chat
template that renders ``tools=`` itself (TRL, vLLM with a tool parser).
"""
from __future__ import annotations

import json

from mage_gym.agent.tools import TOOLS

CHAT_PROMPT_VERSION = "mage-chat-v2"

ROLE = (
    "You are the evidence controller of a question-answering system over one long document. "
    "A reader will answer the question from the evidence you collect. You see the question, the evidence "
    "held (pages and elements, with summaries), your budget and numbered candidates next to that evidence. "
    "Grow the evidence with tool calls: activate candidates by their number n, open activated elements "
    "whose full content the reader needs, search for other pages, prune what is off-topic, and stop when "
    "the evidence is enough. Every page and opened element costs reader tokens, and every reply costs a call."
)

RULES = (
    "Rules: use only numbers listed under <candidates> and ids shown in the evidence. One reply may hold "
    "several tool calls; they run in order. After each reply you get the results and what changed. "
    "Candidate numbers never change during an episode; <still_listed> names candidates shown before that "
    "are still available."
)

CALL_FORMAT = (
    "Write each tool call as <tool_call>{\"name\": NAME, \"arguments\": {...}}</tool_call>, for example:\n"
    "<tool_call>{\"name\": \"activate\", \"arguments\": {\"candidates\": [2, 5]}}</tool_call>\n"
    "<tool_call>{\"name\": \"stop\", \"arguments\": {}}</tool_call>"
)


def tool_list() -> str:
    """One line per tool: name, arguments with their types, description."""
    lines = []
    for tool in TOOLS:
        fn = tool["function"]
        args = ", ".join(f"{k}: {_type_name(v)}" for k, v in fn["parameters"]["properties"].items())
        lines.append(f"- {fn['name']}({args}): {fn['description']}")
    return "\n".join(lines)


def _type_name(spec: dict) -> str:
    if spec.get("type") == "array":
        return f"list[{_type_name(spec.get('items', {}))}]"
    return {"integer": "int", "string": "str"}.get(spec.get("type", ""), json.dumps(spec))


def system_prompt(tools_in_prompt: bool = True) -> str:
    """The system message; ``tools_in_prompt=False`` when the chat template lists the tools itself."""
    parts = [ROLE, RULES]
    if tools_in_prompt:
        parts += ["Tools:\n" + tool_list(), CALL_FORMAT]
    return "\n\n".join(parts)


def user_intro(question: str) -> str:
    """The first user message's opening line (the observation of the state follows it)."""
    return f"Question: {question}\nThe evidence state follows. Decide with tool calls."
