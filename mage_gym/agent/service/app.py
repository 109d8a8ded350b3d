"""The service's ASGI app: OpenEnv's routes (``/ws`` sessions, ``/schema``, ``/metadata``) plus the HTTP session
routes, limits, a reaper and fault counts.

Routes (JSON; every error is ``{"error": "[CODE] ...", "code", "status"}``,
codes in :mod:`mage_gym.agent.service.errors`):

    WS   /ws        OpenEnv's session protocol: one session per connection, what EnvClient speaks
    POST /reset     {"task": id} | {"episode_id", "seed"} -> {"session_id", "observation", "reward", "done"}
    POST /step      {"session_id", "action": <assistant message> | {"message": ...}}
                    -> {"session_id", "observation": {"messages", "info", "terminated", "truncated"},
                        "reward", "done"}
    GET  /state?session_id=...   -> the session's MageChatState
    POST /close     {"session_id"} -> {"closed": true}
    GET  /health    -> {"status": "healthy", "sessions", "max_sessions", "dataset", "worker"}
    GET  /metrics   -> faults answered and session events, sessions, documents, RSS and CPU of this worker
    GET  /schema    OpenEnv's: the action, observation and state JSON schemas

Why HTTP sessions beside ``/ws``: OpenEnv's own HTTP ``/reset`` and ``/step``
build a fresh environment per request (stateless), which cannot play a
multi-step episode; agent loops that speak HTTP (verl, SkyRL, ART) need a
session id. Both kinds live in one table (:mod:`mage_gym.agent.service.sessions`):
one capacity, one reaper.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from typing import Any, AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from mage_gym.agent.service.environment import MageChatEnvironment
from mage_gym.agent.service.errors import InternalError, InvalidRequest, NoRoute, RequestTooLarge, ServiceError
from mage_gym.agent.service.models import MageChatAction, MageChatObservation
from mage_gym.agent.service.openenv_import import openenv_server
from mage_gym.agent.service.runtime import ServiceRuntime
from mage_gym.agent.service.sessions import SessionTable

#: OpenEnv's WebSocket error codes, counted under the service's own.
_WS_CODES = {"INVALID_JSON": "INVALID_REQUEST", "UNKNOWN_TYPE": "INVALID_REQUEST",
             "VALIDATION_ERROR": "INVALID_REQUEST", "CAPACITY_REACHED": "AT_CAPACITY",
             "FACTORY_ERROR": "INTERNAL_ERROR", "SESSION_ERROR": "INTERNAL_ERROR", "EXECUTION_ERROR": "INTERNAL_ERROR"}
_WS_MESSAGE_TOO_BIG = 1009


class LimitsMiddleware:
    """Refuses HTTP bodies over ``max_request_bytes`` (413) before any route reads them, and counts the errors
    OpenEnv's WebSocket loop answers (and messages over the size limit, which close the connection).

    ``make_room`` runs before a WebSocket connection opens its session: on a full server it closes the
    sessions already idle past ``idle_timeout`` that the reaper has not reached yet, as ``POST /reset`` does,
    so both protocols are refused ``AT_CAPACITY`` only when no slot can be freed.
    """

    def __init__(self, app: Any, runtime: ServiceRuntime,
                 make_room: Callable[[], Awaitable[None]] | None = None) -> None:
        self.app = app
        self.runtime = runtime
        self.make_room = make_room

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            from starlette.websockets import WebSocketDisconnect
            from uvicorn.protocols.utils import ClientDisconnected

            if self.make_room is not None:
                await self.make_room()
            try:
                await self.app(scope, self._ws_receive(receive, send), self._ws_send(send))
            except (WebSocketDisconnect, ClientDisconnected):
                pass  # OpenEnv 0.3 closes a socket the client already closed: the session is gone, nothing to say
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: dict, receive: Any, send: Any) -> None:
        limit = self.runtime.limits.max_request_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        chunks: list[bytes] = []
        size = int(declared) if declared and declared.isdigit() else 0
        if size <= limit:
            more, size = True, 0
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                more = message.get("more_body", False)
                if size > limit:
                    break
        if size > limit:
            err = RequestTooLarge(f"the request body is over max_request_bytes={limit}")
            self.runtime.counters.error(err.code)
            await _send_json(send, err.status, err.to_json())
            return
        body = b"".join(chunks)
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _ws_send(self, send: Any) -> Any:
        counters = self.runtime.counters

        async def counted(message: dict) -> None:
            text = message.get("text") if message.get("type") == "websocket.send" else None
            if text and text.startswith('{"type":"error"'):
                try:
                    data = json.loads(text).get("data", {})
                except ValueError:
                    data = {}
                if not str(data.get("message", "")).startswith("["):  # the service's own: counted where raised
                    counters.error(_WS_CODES.get(str(data.get("code")), "INTERNAL_ERROR"))
            await send(message)

        return counted

    def _ws_receive(self, receive: Any, send: Any) -> Any:
        """Count frames over the size limit; answer a JSON frame that is not an object here (OpenEnv 0.3's loop
        would end the session on it) and wait for the next frame."""
        counters = self.runtime.counters

        async def checked() -> dict:
            while True:
                message = await receive()
                if message.get("type") == "websocket.disconnect" and message.get("code") == _WS_MESSAGE_TOO_BIG:
                    counters.error(RequestTooLarge.code)
                text = message.get("text") if message.get("type") == "websocket.receive" else None
                if text is None or text.lstrip().startswith("{"):
                    return message
                try:
                    json.loads(text)
                except ValueError:
                    return message  # not JSON: OpenEnv answers INVALID_JSON and the session goes on
                err = InvalidRequest("a message must be a JSON object {\"type\": ..., \"data\": ...}")
                counters.error(err.code)
                await send({"type": "websocket.send", "text": json.dumps(
                    {"type": "error", "data": {"message": str(err), "code": "VALIDATION_ERROR"}})})

        return checked


async def _send_json(send: Any, status: int, body: dict) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def build_app(runtime: ServiceRuntime) -> Any:
    """The FastAPI app of one worker process serving ``runtime``'s sessions."""
    oe = openenv_server()
    limits = runtime.limits
    server = oe.HTTPEnvServer(functools.partial(MageChatEnvironment, runtime), MageChatAction, MageChatObservation,
                              max_concurrent_envs=limits.max_sessions)
    table = SessionTable(server)
    interval = min(5.0, max(0.05, min(limits.idle_timeout, limits.episode_timeout) / 4))

    async def reap() -> None:
        """Close sessions idle past ``idle_timeout``, finish episodes past ``episode_timeout``, evict idle
        documents."""
        for sid, env in table.items():
            if env.idle_for() > limits.idle_timeout:
                env.close_reason = "idle_timeout"
                with contextlib.suppress(ServiceError):
                    await table.close(sid)
            elif env.overdue():
                with contextlib.suppress(ServiceError):
                    await env.expire()
        if runtime.documents is not None:
            await asyncio.get_running_loop().run_in_executor(runtime.executor, runtime.documents.evict_idle)

    async def make_room() -> None:
        """On a full server, reap now rather than at the next tick (a new session would be refused)."""
        if table.live >= table.capacity:
            await reap()

    async def reaper() -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await reap()
            except Exception as err:  # never let the reaper die: count it and go on
                runtime.counters.event(f"reaper_error_{type(err).__name__}")

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            for sid, env in table.items():
                env.close_reason = "shutdown"
                with contextlib.suppress(Exception):
                    await table.close(sid)
            runtime.shutdown()

    app = FastAPI(title="MageRAG-Chat-v0 (OpenEnv)", lifespan=lifespan,
                  description=__doc__.split("\n\n")[0] if __doc__ else None)
    app.state.runtime, app.state.table, app.state.reap = runtime, table, reap

    @app.exception_handler(ServiceError)
    async def typed_error(_: Request, err: ServiceError) -> JSONResponse:
        if not getattr(err, "counted", False):
            runtime.counters.error(err.code)
        return JSONResponse(err.to_json(), status_code=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def route_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        typed = NoRoute(f"{request.method} {request.url.path}: {err.detail}")
        typed.status = err.status_code
        return await typed_error(request, typed)

    @app.exception_handler(Exception)
    async def untyped_error(request: Request, err: Exception) -> JSONResponse:
        return await typed_error(request, InternalError(f"{type(err).__name__}: {err}"))

    async def body_of(request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError as err:
            raise InvalidRequest(f"the body is not JSON: {err}") from None
        if not isinstance(body, dict):
            raise InvalidRequest("the body must be a JSON object")
        return body

    def reply(sid: str, obs: MageChatObservation) -> dict[str, Any]:
        return {"session_id": sid, **oe.serialize_observation(obs)}

    @app.post("/reset")
    async def reset(request: Request) -> dict[str, Any]:
        body = await body_of(request)
        unknown = sorted(set(body) - {"task", "episode_id", "seed"})
        if unknown:
            raise InvalidRequest(f"reset takes task, episode_id and seed; got {unknown}")
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InvalidRequest(f"seed must be an integer, got {seed!r}")
        for key in ("task", "episode_id"):
            if body.get(key) is not None and not isinstance(body[key], str):
                raise InvalidRequest(f"{key} must be a string")
        await make_room()
        sid, env = await table.open()
        try:
            obs = await env.reset_async(seed=seed, episode_id=body.get("episode_id"), task=body.get("task"))
        except BaseException:
            env.close_reason = "reset_failed"
            await table.close(sid)
            raise
        return reply(sid, obs)

    @app.post("/step")
    async def step(request: Request) -> dict[str, Any]:
        body = await body_of(request)
        if "action" not in body:
            raise InvalidRequest("a step needs 'action' (the assistant message) and 'session_id'")
        sid = str(body.get("session_id", ""))
        env = table.get(sid)
        action = body["action"]
        if isinstance(action, dict) and "message" in action and set(action) <= {"message", "metadata"}:
            action = action["message"]  # OpenEnv's form: {"action": {"message": ...}}
        try:
            typed = MageChatAction(message=action)
        except ValueError as err:
            raise InvalidRequest(f"the action must be text, a message dict or a list of calls: {err}") from None
        obs = await env.step_async(typed)
        table.touch(sid, step=True)
        return reply(sid, obs)

    @app.get("/state")
    async def state(session_id: str = "") -> dict[str, Any]:
        env = table.get(session_id)
        return {"session_id": session_id, **env.state.model_dump()}

    @app.post("/close")
    async def close(request: Request) -> dict[str, Any]:
        sid = str((await body_of(request)).get("session_id", ""))
        await table.close(sid)
        return {"closed": True}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "healthy", "ok": True, "sessions": table.live, "max_sessions": table.capacity,
                "dataset": runtime.label, "worker": runtime.worker}

    @app.get("/metrics")
    async def metrics() -> dict[str, Any]:
        return {**runtime.process_stats(), "sessions": {"live": table.live, "max": table.capacity},
                "documents": runtime.documents.stats() if runtime.documents is not None else None,
                **runtime.counters.snapshot()}

    server.register_routes(app)  # /ws, /schema, /metadata, /mcp; its /reset, /step, /state, /health are shadowed
    app.add_middleware(LimitsMiddleware, runtime=runtime, make_room=make_room)
    return app


__all__ = ["LimitsMiddleware", "build_app"]
