"""An OpenEnv-style HTTP server for MageRAG-Chat-v0: ``reset`` / ``step`` / ``state`` over JSON, many sessions.

Why: remote RL trainers (verl agent loops, SkyRL, ART, OpenEnv clients) run
their own generation and drive environments over the network, one session
per rollout. This server holds one :class:`~mage_gym.agent.chat_env.MageChatEnv`
per session (all sharing one episode provider, so a document's graph is
loaded once), serialises each session's calls, and ends a session whose
episode runs past ``episode_timeout`` seconds (its env is finished - the
reader reads - and later calls get HTTP 410 saying so).

Endpoints (JSON bodies and replies)::

    POST /reset  {"task": "<task id>"} | {"episode_id": ..., "seed": ...}
                 -> {"session_id", "observation": [messages], "info"}
    POST /step   {"session_id", "action": <assistant message: text, message dict or tool-call list>}
                 -> {"observation", "reward", "terminated", "truncated", "done", "info"}
    GET  /state?session_id=...  -> {"session_id", "task", "done", "replies", "age_s"}
    POST /close  {"session_id"}  -> {"closed": true}
    GET  /health -> {"ok": true, "sessions": n, "dataset": ...}

Bad requests get 400 with the reason, unknown sessions 404, expired ones
410; an action the env cannot read is not an error (the env answers it).
Images in observations (``vision``) travel as ``image_url`` data URIs.

Start (stdlib only, loopback by default)::

    python -m mage_gym.agent.server --dataset synth --split test --parser fast --port 8090
"""
from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from mage_gym.agent.chat_env import MageChatEnv, to_openai_messages
from mage_gym.jsonio import json_default


@dataclass
class Session:
    env: MageChatEnv
    started: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False
    expired: bool = False
    replies: int = 0


class ChatEnvServer(ThreadingHTTPServer):
    """The server; ``make_env()`` builds one chat env per session."""

    daemon_threads = True

    def __init__(self, make_env: Callable[[], MageChatEnv], host: str = "127.0.0.1", port: int = 0,
                 episode_timeout: float = 600.0, max_sessions: int = 256, label: str = "") -> None:
        super().__init__((host, port), _Handler)
        self.make_env = make_env
        self.episode_timeout = float(episode_timeout)
        self.max_sessions = int(max_sessions)
        self.label = label
        self.sessions: dict[str, Session] = {}
        self.lock = threading.Lock()
        self.base_url = f"http://{host}:{self.server_address[1]}"
        self._thread: threading.Thread | None = None

    def start(self) -> "ChatEnvServer":
        """Serve from a background thread (tests, notebooks); ``serve_forever()`` blocks instead."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    # --- sessions -------------------------------------------------------------------------------

    def expire(self) -> None:
        """Finish and mark the sessions whose episode outran the timeout."""
        now = time.monotonic()
        with self.lock:
            old = [s for s in self.sessions.values() if not s.done and now - s.started > self.episode_timeout]
        for s in old:
            with s.lock:
                if not s.done:
                    s.env.finish("timeout")
                    s.done = s.expired = True

    def open(self, options: dict[str, Any]) -> tuple[str, Any, dict]:
        self.expire()
        with self.lock:
            live = sum(not s.done for s in self.sessions.values())
            if live >= self.max_sessions:
                raise _HTTPError(503, f"{live} sessions running (max_sessions={self.max_sessions}); close some")
        env = self.make_env()
        seed = options.pop("seed", None)
        obs, info = env.reset(seed=seed, options=options or None)
        sid = uuid.uuid4().hex
        with self.lock:
            self.sessions[sid] = Session(env, time.monotonic())
        return sid, obs, info

    def get(self, sid: str) -> Session:
        with self.lock:
            s = self.sessions.get(str(sid))
        if s is None:
            raise _HTTPError(404, f"no session {sid!r} (reset first)")
        return s


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet; the trainer logs what it needs
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, default=json_default).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError as err:
            raise _HTTPError(400, f"the body is not JSON: {err}") from None
        if not isinstance(body, dict):
            raise _HTTPError(400, "the body must be a JSON object")
        return body

    def _handle(self, fn: Callable[[], dict[str, Any]]) -> None:
        try:
            self._reply(200, fn())
        except _HTTPError as err:
            self._reply(err.status, {"error": str(err)})
        except (KeyError, ValueError, TypeError) as err:
            self._reply(400, {"error": f"{type(err).__name__}: {err}"})

    def do_GET(self) -> None:
        srv: ChatEnvServer = self.server  # type: ignore[assignment]
        url = urlparse(self.path)
        if url.path == "/health":
            self._handle(lambda: {"ok": True, "dataset": srv.label,
                                  "sessions": sum(not s.done for s in srv.sessions.values())})
        elif url.path == "/state":
            def state() -> dict[str, Any]:
                srv.expire()
                sid = (parse_qs(url.query).get("session_id") or [""])[0]
                s = srv.get(sid)
                return {"session_id": sid, "task": str(s.env.task), "done": s.done, "expired": s.expired,
                        "replies": s.replies, "age_s": time.monotonic() - s.started}
            self._handle(state)
        else:
            self._reply(404, {"error": f"no endpoint GET {url.path}"})

    def do_POST(self) -> None:
        srv: ChatEnvServer = self.server  # type: ignore[assignment]
        path = urlparse(self.path).path
        if path == "/reset":
            def reset() -> dict[str, Any]:
                body = self._body()
                options = {k: body[k] for k in ("task", "episode_id", "seed") if body.get(k) is not None}
                sid, obs, info = srv.open(options)
                return {"session_id": sid, "observation": to_openai_messages(obs), "info": info}
            self._handle(reset)
        elif path == "/step":
            def step() -> dict[str, Any]:
                body = self._body()
                if "action" not in body:
                    raise _HTTPError(400, "a step needs 'action' (the assistant message)")
                srv.expire()
                s = srv.get(body.get("session_id", ""))
                with s.lock:
                    if s.expired:
                        raise _HTTPError(410, f"the episode ran past episode_timeout={srv.episode_timeout:g} s; "
                                              "it was finished (the reader read what was gathered)")
                    if s.done:
                        raise _HTTPError(409, "the episode is over; reset for a new one")
                    obs, reward, term, trunc, info = s.env.step(body["action"])
                    s.replies += 1
                    s.done = bool(term or trunc)
                return {"observation": to_openai_messages(obs), "reward": reward, "terminated": term,
                        "truncated": trunc, "done": s.done, "info": info}
            self._handle(step)
        elif path == "/close":
            def close() -> dict[str, Any]:
                sid = self._body().get("session_id", "")
                s = srv.get(sid)
                with srv.lock:
                    srv.sessions.pop(sid, None)
                s.env.close()
                return {"closed": True}
            self._handle(close)
        else:
            self._reply(404, {"error": f"no endpoint POST {path}"})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m mage_gym.agent.server", description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="synth")
    ap.add_argument("--root", default=None)
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--parser", default="fast")
    ap.add_argument("--retriever", default="hybrid")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--episode-timeout", type=float, default=600.0)
    ap.add_argument("--max-sessions", type=int, default=256)
    args = ap.parse_args(argv)
    from mage_gym.data.registry import NoEpisodesError, require_episodes
    from mage_gym.env.episodes import as_provider

    try:
        episodes = require_episodes(args.dataset, root=args.root, split=args.split, limit=args.limit)
    except NoEpisodesError as e:
        raise SystemExit(str(e)) from None
    provider = as_provider(episodes, parser=args.parser)
    server = ChatEnvServer(lambda: MageChatEnv(episodes=provider, dataset=args.dataset, retriever=args.retriever),
                           host=args.host, port=args.port, episode_timeout=args.episode_timeout,
                           max_sessions=args.max_sessions, label=args.dataset)
    print(f"MageRAG-Chat-v0 sessions on {server.base_url} ({len(episodes)} episodes of {args.dataset}/{args.split})",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
