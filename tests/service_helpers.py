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


def toy_documents(n_docs: int, **pool: Any):
    """(SharedDocuments over ``n_docs`` toy documents, the list of sources it loaded): two questions a document."""
    from mage_gym.agent.service.documents import SharedDocuments
    from mage_gym.data.episode import Episode
    from mage_gym.testing import make_toy_graph

    episodes = []
    for d in range(n_docs):
        for q, question in enumerate(("Which chart shows revenue growth?", "What is the asia risk margin?")):
            episodes.append(Episode(episode_id=f"doc{d}-q{q}", benchmark="mmlongbench", doc_id=f"doc{d}",
                                    source=f"<toy doc{d}>", question=question, answer="12", answer_format="Int",
                                    evidence_pages=(3,)))
    loaded: list[str] = []

    def load(source: str):
        loaded.append(source)
        return make_toy_graph(n_pages=8, elements_per_page=5, doc_id=source.strip("<>").split()[1], dim=16)

    return SharedDocuments(episodes, load=load, **pool), loaded


def toy_document_server(n_docs: int, pool: dict | None = None, threads: int = 8, **limits: Any):
    """A started ChatEnvServer whose sessions share ``toy_documents(n_docs)``; returns (server, loaded sources)."""
    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.agent.server import ChatEnvServer
    from mage_gym.agent.service.runtime import ServiceLimits, ServiceRuntime
    from mage_gym.bench.synthetic import hash_query_fn

    documents, loaded = toy_documents(n_docs, **(pool or {}))

    def make_env() -> MageChatEnv:
        return MageChatEnv(episodes=documents, dataset="mmlongbench", query_fn=hash_query_fn(16), K=16,
                           retriever="bm25", max_candidates=6)

    runtime = ServiceRuntime(make_env, ServiceLimits(**limits), documents=documents, threads=threads,
                             label="mmlongbench")
    return ChatEnvServer(runtime=runtime).start(), loaded


def serve_toy_forever(port: int) -> None:
    """The toy server in the foreground on ``port`` (a subprocess the kill-and-restart test kills)."""
    srv = toy_server(port=port, episode_timeout=60)
    print(f"serving {srv.base_url}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":  # python tests/service_helpers.py PORT
    import sys

    serve_toy_forever(int(sys.argv[1]))
