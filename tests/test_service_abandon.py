"""1,000 sessions opened and abandoned: every slot comes back and the server's memory stays bounded.

Half are WebSocket sessions whose client vanishes mid-episode (no close
message: the TCP connection is dropped), half HTTP sessions never closed (the
reaper frees them after ``idle_timeout``). The server holds at most 64 live
sessions, so the run only gets through if abandoned slots really come back.
Memory: the server's RSS after the 1,000 against after a first 200 (caches and
allocator warm), bounded by a margin far below what 800 leaked sessions hold
(keeping each closed session's env, a leak put in on purpose, added 48 MB for 800 sessions).
"""
from __future__ import annotations

import asyncio
import json
import time

import pytest

pytest.importorskip("openenv")
from service_helpers import ACTIVATE, call, toy_document_server  # noqa: E402

ROUNDS_WARM, ROUNDS = 200, 1000
RSS_MARGIN_MB = 25.0


async def abandon(base: str, ws_url: str, n: int, first: int,
                  concurrency: int = 16) -> tuple[list[tuple[int, str]], list[int]]:
    """Open ``n`` sessions (even: WebSocket, dropped mid-episode; odd: HTTP, never closed).

    Returns the sessions that failed and the WebSocket ones the server closed before their first reply. The
    second happens when the idle reaper (``idle_timeout`` 0.3 s here) runs before a starved client's reset
    arrives, the server and the clients sharing one loaded process: a server's right, so the client
    reconnects (as a real one would, at most three tries), and the test bounds how often it happens.
    """
    import httpx
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    gate = asyncio.Semaphore(concurrency)
    failures: list[tuple[int, str]] = []
    reaped_before_reset: list[int] = []
    async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=60) as http:

        async def over_websocket(i: int, episode: str) -> dict:
            for _ in range(3):
                ws = await connect(ws_url + "/ws")
                try:
                    await ws.send(json.dumps({"type": "reset", "data": {"episode_id": episode, "seed": i}}))
                    reply = json.loads(await ws.recv())
                except ConnectionClosed:
                    reaped_before_reset.append(i)
                    continue
                try:
                    await ws.send(json.dumps({"type": "step", "data": {"message": ACTIVATE}}))
                    reply = json.loads(await ws.recv())
                except ConnectionClosed:  # reaped mid-episode: abandoned all the same, and counted so
                    pass
                ws.transport.abort()  # gone without a close frame
                return reply
            return {"type": "error", "message": "closed before reset three times"}

        async def one(i: int) -> None:
            episode = f"doc{i % 6}-q{i % 2}"
            async with gate:
                if i % 2 == 0:
                    reply = await over_websocket(i, episode)
                else:
                    r = await http.post("/reset", json={"episode_id": episode, "seed": i})
                    reply = {"type": "observation" if r.status_code == 200 else "error", **r.json()}
                if reply.get("type") != "observation":
                    failures.append((i, str(reply)[:300]))

        await asyncio.gather(*(one(first + i) for i in range(n)))
    return failures, reaped_before_reset


def wait_until_empty(base: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        metrics = call(base, "/metrics")[1]
        if metrics["sessions"]["live"] == 0 and metrics["documents"]["held"] == 0 or time.monotonic() > deadline:
            return metrics
        time.sleep(0.1)


def test_a_thousand_abandoned_sessions_leave_no_slot_and_bounded_memory():
    server, loaded = toy_document_server(6, pool={"max_documents": 6, "idle_s": 0.5}, max_sessions=64,
                                         idle_timeout=0.3)
    try:
        base, ws = server.base_url, server.ws_url
        failures, reaped = asyncio.run(abandon(base, ws, ROUNDS_WARM, 0))
        assert failures == []
        warm = wait_until_empty(base)
        assert warm["sessions"]["live"] == 0
        failures, reaped_late = asyncio.run(abandon(base, ws, ROUNDS - ROUNDS_WARM, ROUNDS_WARM))
        reaped += reaped_late
        done = wait_until_empty(base)
    finally:
        server.stop()
    assert failures == [], f"{len(failures)} sessions were refused: {failures[:3]}"
    assert len(reaped) <= ROUNDS // 20, f"{len(reaped)} WebSocket sessions were closed before their reset"
    assert done["sessions"] == {"live": 0, "max": 64}
    assert done["documents"]["held"] == 0 and done["documents"]["documents"] <= 6
    events = done["events"]
    assert events["closed_mid_episode"] == ROUNDS  # every abandoned episode was seen and released
    assert events["sessions_idle_timeout"] >= ROUNDS // 2 - 64  # HTTP ones (some were closed to make room)
    assert done["rss_mb"] - warm["rss_mb"] < RSS_MARGIN_MB, (warm["rss_mb"], done["rss_mb"])
    assert set(loaded) <= {f"<toy doc{d}>" for d in range(6)}
