"""Faults a trainer's rollouts meet, each answered with a typed error and counted, none crashing the server:
a client gone mid-episode, idle and overdue sessions, malformed and oversize requests (fuzzed), a slow and a
failing reader, and the server killed and restarted."""
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from service_helpers import (  # noqa: E402
    ACTIVATE, STOP, TASK, FailingReader, SlowReader, call, toy_server,
)

TYPED = {400, 404, 405, 409, 410, 413}


def until(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            return value
        time.sleep(0.05)
    return value


def metrics(base: str) -> dict:
    return call(base, "/metrics")[1]


def test_the_session_table_internals_the_service_reads_exist():
    """sessions.py reads openenv-core 0.3's HTTPEnvServer internals: this fails first if a release moves them."""
    from mage_gym.agent.service.openenv_import import openenv_server
    from mage_gym.agent.service.sessions import REQUIRED

    server = openenv_server().HTTPEnvServer
    import inspect

    src = inspect.getsource(server)
    assert all(f"def {name}" in src or f"self.{name} " in src or f"self.{name}:" in src for name in REQUIRED)


def test_a_client_gone_mid_episode_frees_its_slot_and_is_counted():
    from websockets.asyncio.client import connect

    srv = toy_server()
    try:
        async def vanish() -> None:
            ws = await connect(srv.ws_url + "/ws")
            await ws.send(json.dumps({"type": "reset", "data": {"task": TASK}}))
            assert json.loads(await ws.recv())["type"] == "observation"
            await ws.send(json.dumps({"type": "step", "data": {"message": ACTIVATE}}))
            ws.transport.abort()  # mid-step: the server's reply has nowhere to go

        asyncio.run(vanish())
        # OpenEnv drops the session from its table before its close() runs on the session's thread, so wait
        # for the close to be counted, not only for the slot to be free
        m = until(lambda: (x := metrics(srv.base_url))["sessions"]["live"] == 0
                  and "closed_mid_episode" in x["events"] and x)
        assert m and m["events"]["closed_mid_episode"] == 1
        assert call(srv.base_url, "/health")[1]["status"] == "healthy"
    finally:
        srv.stop()


def test_a_full_server_frees_an_idle_slot_for_a_new_session_of_either_protocol_before_refusing():
    """Between reaper ticks a full server still takes a new session when one slot is idle past idle_timeout.

    Driven through Starlette's TestClient outside a ``with`` block, so the app's lifespan (and its reaper)
    never runs: only the on-demand reap can free the slot."""
    from agent_helpers import toy_chat_env
    from starlette.testclient import TestClient

    from mage_gym.agent.service.app import build_app
    from mage_gym.agent.service.runtime import ServiceLimits, ServiceRuntime

    runtime = ServiceRuntime(toy_chat_env, ServiceLimits(max_sessions=1, idle_timeout=0.2))
    client = TestClient(build_app(runtime))
    try:
        assert client.post("/reset", json={"task": TASK}).status_code == 200
        busy = client.post("/reset", json={"task": TASK})
        assert (busy.status_code, busy.json()["code"]) == (503, "AT_CAPACITY")  # nothing idle yet: refused
        time.sleep(0.3)
        with client.websocket_connect("/ws") as ws:  # the HTTP session is idle now: its slot is taken over
            ws.send_text(json.dumps({"type": "reset", "data": {"task": TASK}}))
            assert json.loads(ws.receive_text())["type"] == "observation"
            time.sleep(0.3)
            again = client.post("/reset", json={"task": TASK})  # and the idle WebSocket's slot, over HTTP
            assert again.status_code == 200, again.json()
        events = client.get("/metrics").json()["events"]
        assert events["sessions_idle_timeout"] == 2
    finally:
        runtime.shutdown()


def test_idle_sessions_are_reaped_over_both_protocols_and_later_calls_say_so():
    from mage_gym.agent.service.client import MageChatClient
    from mage_gym.agent.service.errors import SessionNotFound
    from mage_gym.agent.service.models import MageChatAction

    srv = toy_server(idle_timeout=0.3)
    try:
        sid = call(srv.base_url, "/reset", {"task": TASK})[1]["session_id"]

        async def idle_ws() -> str:
            async with MageChatClient(base_url=srv.base_url) as env:
                await env.reset(task=TASK)
                await asyncio.sleep(1.0)
                with pytest.raises(SessionNotFound, match="idle_timeout"):
                    await env.step(MageChatAction(message=STOP))
                return "ok"

        assert asyncio.run(idle_ws()) == "ok"
        code, body = call(srv.base_url, "/step", {"session_id": sid, "action": STOP})
        assert (code, body["code"]) == (404, "SESSION_NOT_FOUND")
        m = metrics(srv.base_url)
        assert m["events"]["sessions_idle_timeout"] == 2 and m["errors"]["SESSION_NOT_FOUND"] == 2
        assert m["sessions"]["live"] == 0
    finally:
        srv.stop()


def test_a_slow_reader_times_out_typed_while_other_sessions_are_served():
    srv = toy_server(step_timeout=0.5, chat={"reader": SlowReader(2.0), "render_mode": "text"})
    try:
        base = srv.base_url
        slow = call(base, "/reset", {"task": TASK})[1]["session_id"]
        other = call(base, "/reset", {"episode_id": "page"})[1]["session_id"]
        code, body = call(base, "/step", {"session_id": slow, "action": STOP})
        assert (code, body["code"]) == (504, "STEP_TIMEOUT")
        code, body = call(base, "/step", {"session_id": other, "action": ACTIVATE})  # served meanwhile
        assert code == 200 and not body["done"]
        assert call(base, f"/state?session_id={slow}")[1]["failed"] is True
        code, body = call(base, "/step", {"session_id": slow, "action": STOP})
        assert (code, body["code"]) == (409, "SESSION_FAILED")
        m = metrics(base)
        assert m["errors"]["STEP_TIMEOUT"] == 1 and m["errors"]["SESSION_FAILED"] == 1
    finally:
        srv.stop()


def test_a_failing_reader_is_a_typed_error_and_the_session_can_start_over():
    srv = toy_server(chat={"reader": FailingReader(), "render_mode": "text"})
    try:
        base = srv.base_url
        sid = call(base, "/reset", {"task": TASK})[1]["session_id"]
        code, body = call(base, "/step", {"session_id": sid, "action": STOP})
        assert (code, body["code"]) == (502, "READER_FAILED") and "refused the connection" in body["error"]
        code, body = call(base, "/step", {"session_id": sid, "action": ACTIVATE})
        assert (code, body["code"]) == (409, "SESSION_FAILED")
        assert metrics(base)["errors"]["READER_FAILED"] == 1
        assert call(base, "/health")[1]["status"] == "healthy"
    finally:
        srv.stop()


def test_oversize_requests_and_actions_are_refused_typed():
    from websockets.asyncio.client import connect

    srv = toy_server(max_request_bytes=4096, max_action_chars=1000)
    try:
        base = srv.base_url
        code, body = call(base, "/reset", raw=b'{"task": "' + b"x" * 10_000 + b'"}')
        assert (code, body["code"]) == (413, "REQUEST_TOO_LARGE")
        sid = call(base, "/reset", {"task": TASK})[1]["session_id"]
        code, body = call(base, "/step", {"session_id": sid, "action": "y" * 2000})
        assert (code, body["code"]) == (413, "REQUEST_TOO_LARGE") and "max_action_chars" in body["error"]

        async def big_frame() -> int | None:
            async with connect(srv.ws_url + "/ws", max_size=None) as ws:
                await ws.send(json.dumps({"type": "step", "data": {"message": "z" * 10_000}}))
                try:
                    await ws.recv()
                except Exception:
                    return ws.close_code
            return None

        assert asyncio.run(big_frame()) == 1009  # message too big: the connection is closed
        m = until(lambda: (x := metrics(base))["errors"].get("REQUEST_TOO_LARGE", 0) == 3 and x)
        assert m, metrics(base)
        assert call(base, "/step", {"session_id": sid, "action": STOP})[0] == 200  # the session survived
    finally:
        srv.stop()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                 max_size=4), max_leaves=12)
FIELDS = st.fixed_dictionaries({}, optional={"task": JSON | st.just(TASK), "seed": JSON, "episode_id": JSON,
                                             "session_id": JSON, "action": JSON | st.just(STOP)})


@pytest.fixture(scope="module")
def fuzz_server():
    srv = toy_server(max_request_bytes=8192, idle_timeout=5)
    yield srv
    srv.stop()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/reset", "/step", "/close"]), body=FIELDS | JSON,
       raw=st.none() | st.binary(max_size=64))
def test_malformed_http_requests_get_typed_errors_never_a_crash(fuzz_server, path, body, raw):
    base = fuzz_server.base_url
    code, reply = call(base, path, body=body, raw=raw, timeout=30)
    if code != 200:
        assert code in TYPED and reply["code"] and reply["error"].startswith(f"[{reply['code']}]"), (code, reply)
    elif path != "/close":
        call(base, "/close", {"session_id": reply["session_id"]})
    assert call(base, "/health")[0] == 200


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(st.one_of(st.text(max_size=40), JSON.map(json.dumps),
                                 st.builds(lambda t, d: json.dumps({"type": t, "data": d}),
                                           st.sampled_from(["reset", "step", "state", "nope"]), JSON)),
                       min_size=1, max_size=4))
def test_malformed_websocket_messages_get_typed_errors_never_a_crash(fuzz_server, frames):
    from websockets.asyncio.client import connect

    async def send_all() -> list[dict]:
        out = []
        async with connect(fuzz_server.ws_url + "/ws") as ws:
            for frame in frames:
                if '"close"' in frame:  # a close message ends the session: not what this test sends
                    continue
                await ws.send(frame)
                out.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        return out

    for reply in asyncio.run(send_all()):
        assert reply["type"] in ("observation", "state", "error"), reply
        if reply["type"] == "error":
            assert reply["data"]["code"] and reply["data"]["message"], reply
    assert call(fuzz_server.base_url, "/health")[0] == 200


def test_the_fuzzed_errors_were_counted(fuzz_server):
    m = metrics(fuzz_server.base_url)
    assert m["errors"].get("INVALID_REQUEST", 0) > 0 and "INTERNAL_ERROR" not in m["errors"], m["errors"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_toy_process(port: int) -> subprocess.Popen:
    here = Path(__file__).resolve().parent
    proc = subprocess.Popen([sys.executable, str(here / "service_helpers.py"), str(port)], cwd=here.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert "serving" in proc.stdout.readline()
    return proc


def test_a_server_killed_mid_episode_and_restarted_gives_clear_errors_and_clean_episodes():
    from mage_gym.agent.service.client import MageChatClient
    from mage_gym.agent.service.errors import ServerUnavailable
    from mage_gym.agent.service.models import MageChatAction

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_toy_process(port)
    try:
        sid = call(base, "/reset", {"task": TASK})[1]["session_id"]
        call(base, "/step", {"session_id": sid, "action": ACTIVATE})

        async def killed_under_the_client() -> str:
            async with MageChatClient(base_url=base) as env:
                await env.reset(task=TASK)
                proc.kill()
                proc.wait(30)
                with pytest.raises(ServerUnavailable, match="reconnect"):
                    await env.step(MageChatAction(message=STOP))
            return "ok"

        assert asyncio.run(killed_under_the_client()) == "ok"
        proc = start_toy_process(port)
        code, body = call(base, "/step", {"session_id": sid, "action": STOP})
        assert (code, body["code"]) == (404, "SESSION_NOT_FOUND") and "restarted" in body["error"]
        replayed = []
        for _ in range(2):  # the new server plays the task from scratch, the same way each time
            new = call(base, "/reset", {"task": TASK})[1]["session_id"]
            call(base, "/step", {"session_id": new, "action": ACTIVATE})
            replayed.append(call(base, "/step", {"session_id": new, "action": STOP})[1]["reward"])
        assert replayed[0] == replayed[1] and metrics(base)["sessions"]["live"] == 2
    finally:
        proc.kill()
        proc.wait(30)
