"""Gymnasium spaces for chat: a list of chat messages, and one assistant message.

Why custom spaces: a chat observation is a list of role/content messages
whose content may mix text and image parts, and an action is free text or
tool-call dicts; none of Gymnasium's spaces holds those. These say what is
valid (``contains``), so ``check_env`` and wrappers can check it, and sample
actions (random tool calls, some of them malformed) for smoke tests and
property tests.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np
from gymnasium import spaces

from mage_gym.agent.tools import TOOLS

ROLES = ("system", "user", "assistant", "tool")


def _valid_content(content: Any) -> bool:
    if isinstance(content, str):
        return True
    if isinstance(content, list):
        return all(isinstance(p, Mapping) and p.get("type") in ("text", "image", "image_url") for p in content)
    return False


class ChatMessages(spaces.Space[list]):
    """A list of ``{"role", "content"}`` dicts; content is text or a list of text / image parts."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(None, None, seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(isinstance(m, Mapping) and m.get("role") in ROLES
                                           and _valid_content(m.get("content")) for m in x)

    def sample(self, mask: Any = None, probability: Any = None) -> list:
        return [{"role": "user", "content": f"sample {int(self.np_random.integers(1000))}"}]

    def __repr__(self) -> str:
        return "ChatMessages()"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ChatMessages)


class AssistantMessage(spaces.Space[Any]):
    """Text, a message dict, or a list of tool-call dicts.

    ``sample()`` writes one or two ``<tool_call>`` blocks with random
    arguments (candidate numbers 1-20, ids of a made-up document) and, with
    probability ``malformed``, breaks one of them, so a random agent
    exercises the error paths too.
    """

    def __init__(self, malformed: float = 0.2, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(None, None, seed)
        self.malformed = float(malformed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return True
        if isinstance(x, Mapping):
            return True
        return isinstance(x, (list, tuple)) and all(isinstance(c, Mapping) for c in x)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        rng = self.np_random
        blocks = []
        for _ in range(int(rng.integers(1, 3))):
            tool = TOOLS[int(rng.integers(len(TOOLS)))]["function"]["name"]
            args: dict[str, Any] = {
                "activate": lambda: {"candidates": [int(x) for x in rng.integers(1, 21, size=int(rng.integers(1, 4)))]},
                "open": lambda: {"ids": [f"doc:p{int(rng.integers(8))}:e{int(rng.integers(5))}"]},
                "search": lambda: {"query": "revenue growth"},
                "prune": lambda: {"ids": [f"doc:p{int(rng.integers(8))}"], "reason": "off-topic"},
                "stop": lambda: {},
            }[tool]()
            body = json.dumps({"name": tool, "arguments": args})
            if rng.random() < self.malformed:
                body = body[: int(rng.integers(1, len(body)))]  # truncated JSON
            blocks.append(f"<tool_call>{body}</tool_call>")
        return "\n".join(blocks)

    def __repr__(self) -> str:
        return f"AssistantMessage(malformed={self.malformed})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, AssistantMessage) and other.malformed == self.malformed
