"""The chat-env server (openenv-core) on loopback: OpenEnv's own clients and the HTTP session routes play full
episodes, concurrent sessions replay a task exactly, and errors say why with a typed code."""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv")
from service_helpers import ACTIVATE, STOP, TASK, call, toy_server  # noqa: E402


@pytest.fixture()
def server():
    srv = toy_server(episode_timeout=30)
    yield srv
    srv.stop()


def play(base: str, task: str, moves: list[str]) -> tuple[list, float]:
    code, r = call(base, "/reset", {"task": task})
    assert code == 200, r
    sid, seen, total = r["session_id"], [r["observation"]["messages"]], 0.0
    for m in moves:
        code, r = call(base, "/step", {"session_id": sid, "action": m})
        assert code == 200, r
        seen.append(r["observation"]["messages"])
        total += r["reward"]
        if r["done"]:
            break
    return seen, total


def test_concurrent_sessions_replay_the_same_task_exactly(server):
    moves = [ACTIVATE, "oops", STOP]
    results: list = [None] * 4

    def worker(i: int) -> None:
        results[i] = play(server.base_url, TASK, moves)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert all(r is not None for r in results) and all(r == results[0] for r in results)
    assert "no tool call found" in json.dumps(results[0][0][2])
    code, health = call(server.base_url, "/health")
    assert code == 200 and health["status"] == "healthy" and health["sessions"] == 4  # ended, not yet closed


def test_openenvs_own_clients_play_full_episodes_with_the_https_reward(server):
    """OpenEnv's GenericEnvClient (unchanged, raw dicts) and the typed MageChatClient over /ws."""
    from openenv.core.generic_client import GenericEnvClient

    from mage_gym.agent.service.client import MageChatClient
    from mage_gym.agent.service.models import MageChatAction

    _, http_total = play(server.base_url, TASK, [ACTIVATE, STOP])
    with GenericEnvClient(base_url=server.base_url).sync() as env:
        first = env.reset(task=TASK)
        assert not first.done and first.observation["messages"][0]["role"] == "system"
        assert env.step({"message": ACTIVATE}).reward == 0.0
        last = env.step({"message": STOP})
        assert last.done and last.observation["terminated"] and last.reward == pytest.approx(http_total)
        assert "reward_components" in last.observation["info"]

    async def typed() -> tuple[float, str | None]:
        async with MageChatClient(base_url=server.base_url) as env:
            await env.reset(task=TASK)
            await env.step(MageChatAction(message=ACTIVATE))
            result = await env.step(MageChatAction(message=STOP))
            return result.reward, (await env.state()).task

    reward, task = asyncio.run(typed())
    assert reward == pytest.approx(http_total) and task == TASK


def test_state_close_and_errors_are_typed(server):
    base = server.base_url
    code, r = call(base, "/reset", {"episode_id": "page", "seed": 3})
    sid = r["session_id"]
    code, st = call(base, f"/state?session_id={sid}")
    assert code == 200 and st["task"] == "mmlongbench/toy/page/k5-m4-M24-T6-B16/s3" and not st["done"]
    assert call(base, "/step", {"session_id": "nope", "action": STOP})[1]["code"] == "SESSION_NOT_FOUND"
    assert call(base, "/step", {"session_id": sid})[1]["code"] == "INVALID_REQUEST"
    assert call(base, "/reset", {"task": "bad/task"})[1]["code"] == "INVALID_TASK"
    code, body = call(base, "/reset", raw=b"{not json")
    assert (code, body["code"]) == (400, "INVALID_REQUEST")
    assert call(base, "/step", {"session_id": sid, "action": STOP})[1]["observation"]["terminated"] is True
    code, body = call(base, "/step", {"session_id": sid, "action": STOP})
    assert (code, body["code"]) == (409, "EPISODE_OVER")
    assert call(base, "/close", {"session_id": sid}) == (200, {"closed": True})
    assert call(base, f"/state?session_id={sid}")[0] == 404
    _, metrics = call(base, "/metrics")
    assert metrics["errors"]["SESSION_NOT_FOUND"] == 2 and metrics["errors"]["INVALID_REQUEST"] == 2
    assert metrics["errors"]["INVALID_TASK"] == 1 and metrics["errors"]["EPISODE_OVER"] == 1
    assert metrics["sessions"]["live"] == 0  # the failed reset released its slot


def test_an_episode_past_its_timeout_is_finished_and_refused():
    srv = toy_server(episode_timeout=0.2)
    try:
        code, r = call(srv.base_url, "/reset", {"episode_id": "elem"})
        time.sleep(0.4)
        code, body = call(srv.base_url, "/step", {"session_id": r["session_id"], "action": STOP})
        assert code == 410 and body["code"] == "EPISODE_TIMEOUT" and "episode_timeout" in body["error"]
        assert call(srv.base_url, f"/state?session_id={r['session_id']}")[1]["expired"] is True
        assert call(srv.base_url, "/metrics")[1]["events"]["episodes_expired"] == 1
    finally:
        srv.stop()


@pytest.mark.slow
def test_the_start_command_serves(tmp_path):
    from mage_gym.data.synth.config import SynthConfig
    from mage_gym.data.synth.corpus import generate_corpus

    generate_corpus(tmp_path, n_docs=1, seed=0, cfg=SynthConfig(min_pages=3, max_pages=3, questions_per_doc=1),
                    workers=1, progress=False)
    from llama_server import free_port

    port = free_port()
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "mage_gym.agent.server", "--dataset", "synth", "--root",
                             str(tmp_path), "--split", "all", "--retriever", "bm25", "--port", str(port)], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "sessions on" in proc.stdout.readline()
        code, r = call(f"http://127.0.0.1:{port}", "/reset", {"seed": 0})
        assert code == 200 and r["observation"]["messages"][0]["role"] == "system"
        code, r = call(f"http://127.0.0.1:{port}", "/step", {"session_id": r["session_id"], "action": STOP})
        assert code == 200 and r["observation"]["terminated"] and "reward_components" in r["observation"]["info"]
    finally:
        proc.kill()
        proc.wait(30)


def test_the_docs_client_block_plays_an_episode(server):
    """docs/LLM_TRAINING.md's OpenEnv client block, as written, with the test server's address."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "LLM_TRAINING.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", doc, flags=re.S) if "MageChatClient" in b)
    assert "http://127.0.0.1:8090" in block
    scope: dict = {}
    exec(compile(block.replace("http://127.0.0.1:8090", server.base_url), "LLM_TRAINING.md", "exec"), scope)  # noqa: S102
    assert isinstance(asyncio.run(scope["play"]()), float)
    assert call(server.base_url, "/metrics")[1]["events"]["episodes_done"] == 2  # the block's run and this one
