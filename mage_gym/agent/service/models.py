"""The chat env's typed OpenEnv wire models: what ``/ws``, ``/step`` and ``/schema`` speak.

Why OpenEnv's base classes: its ``EnvClient``, web tooling and trainers built
on them read ``done``, ``reward`` and the observation fields from these
models (``/schema`` publishes their JSON schemas), so a client written for
any OpenEnv environment plays this one unchanged.

- :class:`MageChatAction`: one assistant message, in any form
  :func:`mage_gym.agent.parse.parse_message` reads (text with tool calls, a
  message dict with OpenAI ``tool_calls``, a list of tool-call dicts).
- :class:`MageChatObservation`: the new chat messages (images as OpenAI
  ``image_url`` data URIs), the env's ``info`` (JSON), ``terminated`` and
  ``truncated`` beside OpenEnv's ``done`` and ``reward``.
- :class:`MageChatState`: the session's task and counters (no gold).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from pydantic import Field

from mage_gym.agent.service.openenv_import import openenv_server

_types = openenv_server().types


class MageChatAction(_types.Action):
    """One assistant message (text, an OpenAI message dict, or a list of tool-call dicts)."""

    message: Union[str, Dict[str, Any], List[Any]] = Field(
        ..., description="The assistant message: <tool_call> text, an OpenAI message dict, or tool-call dicts")


class MageChatObservation(_types.Observation):
    """The chat messages a step (or reset) produced, with the env's info."""

    messages: List[Dict[str, Any]] = Field(default_factory=list,
                                           description="New chat messages; images as image_url data URIs")
    info: Dict[str, Any] = Field(default_factory=dict, description="The env's info (task, process figures, "
                                 "reward components and metrics at the end); never gold")
    terminated: bool = Field(default=False, description="Ended by stop or the budget's last round")
    truncated: bool = Field(default=False, description="Ended by the step cap, a rollout end or a timeout")


class MageChatState(_types.State):
    """A session's task and counters."""

    task: Optional[str] = Field(default=None, description="The task id being played (None before reset)")
    done: bool = False
    expired: bool = Field(default=False, description="Finished by the episode timeout")
    failed: bool = Field(default=False, description="A call failed or timed out; reset to go on")
    replies: int = 0
    age_s: float = Field(default=0.0, description="Seconds since the episode's reset")


__all__ = ["MageChatAction", "MageChatObservation", "MageChatState"]
