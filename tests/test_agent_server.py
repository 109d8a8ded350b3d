"""The OpenEnv-style server on loopback: concurrent sessions replay tasks exactly; timeouts and bad requests say why."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agent_helpers import toy_chat_env
from mage_gym.agent.server import ChatEnvServer

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
STOP = '<tool_call>{"name": "stop", "arguments": {}}</tool_call>'


def call(base: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with NO_PROXY.open(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture()
def server():
    srv = ChatEnvServer(lambda: toy_chat_env(), episode_timeout=30).start()
    yield srv
    srv.stop()


def play(base: str, task: str, moves: list[str]) -> tuple[list, float]:
    code, r = call(base, "/reset", {"task": task})
    assert code == 200, r
    sid, seen, total = r["session_id"], [r["observation"]], 0.0
    for m in moves:
        code, r = call(base, "/step", {"session_id": sid, "action": m})
        assert code == 200, r
        seen.append(r["observation"])
        total += r["reward"]
        if r["done"]:
            break
    return seen, total


def test_concurrent_sessions_replay_the_same_task_exactly(server):
    task = "mmlongbench/toy/elem/k5-m4-M24-T6-B16/s0"
    moves = ['<tool_call>{"name": "activate", "arguments": {"candidates": [1, 3]}}</tool_call>', "oops", STOP]
    results: list = [None] * 4

    def worker(i: int) -> None:
        results[i] = play(server.base_url, task, moves)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert all(r is not None for r in results) and all(r == results[0] for r in results)
    assert "no tool call found" in json.dumps(results[0][0][2])
    code, health = call(server.base_url, "/health")
    assert code == 200 and health["ok"] and health["sessions"] == 0  # all four episodes ended


def test_state_close_and_errors(server):
    base = server.base_url
    code, r = call(base, "/reset", {"episode_id": "page", "seed": 3})
    sid = r["session_id"]
    code, st = call(base, f"/state?session_id={sid}")
    assert code == 200 and st["task"] == "mmlongbench/toy/page/k5-m4-M24-T6-B16/s3" and not st["done"]
    assert call(base, "/step", {"session_id": "nope", "action": STOP})[0] == 404
    assert call(base, "/step", {"session_id": sid})[0] == 400
    assert call(base, "/reset", {"task": "bad/task"})[0] == 400
    req = urllib.request.Request(base + "/reset", data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        NO_PROXY.open(req, timeout=30)
    assert err.value.code == 400
    assert call(base, "/step", {"session_id": sid, "action": STOP})[1]["terminated"] is True
    assert call(base, "/step", {"session_id": sid, "action": STOP})[0] == 409
    assert call(base, "/close", {"session_id": sid}) == (200, {"closed": True})
    assert call(base, f"/state?session_id={sid}")[0] == 404


def test_an_episode_past_its_timeout_is_finished_and_refused():
    srv = ChatEnvServer(lambda: toy_chat_env(), episode_timeout=0.2).start()
    try:
        code, r = call(srv.base_url, "/reset", {"episode_id": "elem"})
        time.sleep(0.4)
        code, body = call(srv.base_url, "/step", {"session_id": r["session_id"], "action": STOP})
        assert code == 410 and "episode_timeout" in body["error"]
        assert call(srv.base_url, f"/state?session_id={r['session_id']}")[1]["expired"] is True
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
        assert code == 200 and r["observation"][0]["role"] == "system"
        code, r = call(f"http://127.0.0.1:{port}", "/step", {"session_id": r["session_id"], "action": STOP})
        assert code == 200 and r["terminated"] and "reward_components" in r["info"]
    finally:
        proc.kill()
        proc.wait(30)
