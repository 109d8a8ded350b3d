"""The LLM-facing side of mage-gym: tool schemas, the chat env, tasks for group rollouts, transcripts, adapters.

Layer: above ``mage_gym.env`` / wrappers / trace, below ``mage_gym.bench`` and
``mage_gym.report``; it never imports ``policies`` or ``experiments``. Trainer
adapters import their trainer lazily (extras ``llm-train``: TRL, datasets,
peft; ``verifiers``).

- :data:`TOOLS` - the controller operations as OpenAI-style function tools;
- :func:`parse_message` - one assistant message -> tool calls (OpenAI
  ``tool_calls``, ``<tool_call>`` text, JSON, the paper's ``<agent_decision>``);
- :class:`MageChatEnv` - ``MageRAG-Chat-v0`` (registered by ``import mage_gym``);
- :class:`TaskId`, :func:`task_rows`, :func:`task_dataset` - replayable tasks;
- :mod:`mage_gym.agent.transcripts` - chat transcripts (SFT data);
- :mod:`mage_gym.agent.trl_env`, :mod:`mage_gym.agent.verifiers_env`,
  :mod:`mage_gym.agent.server` - adapters (the server: an OpenEnv environment,
  :mod:`mage_gym.agent.service`, extra ``serve``).
"""
from __future__ import annotations

from typing import Any

from mage_gym.agent.parse import ParsedCall, ParsedMessage, parse_message
from mage_gym.agent.tools import TOOL_NAMES, TOOLS

_LAZY = {
    "MageChatEnv": "mage_gym.agent.chat_env",
    "make_chat_env": "mage_gym.agent.chat_env",
    "CHAT_ENV_ID": "mage_gym.agent.chat_env",
    "TaskId": "mage_gym.agent.tasks",
    "task_rows": "mage_gym.agent.tasks",
    "task_dataset": "mage_gym.agent.tasks",
    "system_prompt": "mage_gym.agent.prompts",
    "assistant_message": "mage_gym.agent.transcripts",
}


def __getattr__(name: str) -> Any:
    """The chat env and task helpers, imported on first use (they pull in the env)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mage_gym.agent' has no attribute {name!r}")


__all__ = ["CHAT_ENV_ID", "MageChatEnv", "ParsedCall", "ParsedMessage", "TOOLS", "TOOL_NAMES", "TaskId",
           "assistant_message", "make_chat_env", "parse_message", "system_prompt", "task_dataset", "task_rows"]
