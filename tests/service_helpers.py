"""Shared by the tests/test_service_*.py and test_agent_server.py modules: HTTP calls to a server on loopback,
a toy server, readers that are slow or fail, and the server's own process figures."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from mage_gym.readers.base import ReaderOutput
from mage_gym.readers.errors import ReaderError

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
STOP = '<tool_call>{"name": "stop", "arguments": {}}</tool_call>'
ACTIVATE = '<tool_call>{"name": "activate", "arguments": {"candidates": [1, 3]}}</tool_call>'
TASK = "mmlongbench/toy/elem/k5-m4-M24-T6-B16/s0"


def call(base: str, path: str, body: Any = None, raw: bytes | None = None, timeout: float = 60) -> tuple[int, dict]:
    """(status, JSON reply) of one request; ``raw`` sends bytes as they are."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method="GET" if data is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with NO_PROXY.open(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def toy_server(**limits: Any):
    """A started ChatEnvServer over the toy episodes (``chat`` keywords go to the chat env)."""
    from agent_helpers import toy_chat_env
    from mage_gym.agent.server import ChatEnvServer

    chat = limits.pop("chat", {})
    return ChatEnvServer(lambda: toy_chat_env(**chat), **limits).start()


class SlowReader:
    """Answers after ``seconds``: a reader behind a slow model server."""

    name, answers, uses_images = "slow", True, False

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def read(self, rendered: Any) -> ReaderOutput:
        time.sleep(self.seconds)
        return ReaderOutput(answer="slow answer")


class FailingReader:
    """Raises what a reader whose model server is down raises."""

    name, answers, uses_images = "failing", True, False

    def read(self, rendered: Any) -> ReaderOutput:
        raise ReaderError("the model server refused the connection", cause="ConnectionRefusedError")
