"""Running the service: on a loopback port in a background thread (:class:`ChatEnvServer`: tests, notebooks), or
in the foreground with one or more uvicorn worker processes (:func:`serve`: the command line).

Why the socket is bound here, before uvicorn starts: connections that arrive
while workers are still starting wait in the listen backlog (2,048) instead of
being refused, and the start-up line a script waits for is printed only once
the port accepts connections.
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable

from mage_gym.agent.chat_env import MageChatEnv
from mage_gym.agent.service.runtime import ServiceLimits, ServiceRuntime

BACKLOG = 2048


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def _uvicorn_config(app: Any, limits: ServiceLimits, **kw: Any) -> Any:
    import uvicorn

    return uvicorn.Config(app, log_level="warning", ws_max_size=limits.max_request_bytes, backlog=BACKLOG,
                          timeout_keep_alive=max(5, int(limits.idle_timeout)), lifespan="on", **kw)


class ChatEnvServer:
    """The service in a background thread on a loopback port.

    ``ChatEnvServer(make_env, episode_timeout=30).start()``: ``make_env()``
    builds one :class:`MageChatEnv` per session (sharing its episodes); limit
    keywords are :class:`ServiceLimits` fields. Or pass a built ``runtime``.
    """

    def __init__(self, make_env: Callable[[], MageChatEnv] | None = None, *, runtime: ServiceRuntime | None = None,
                 host: str = "127.0.0.1", port: int = 0, label: str = "", threads: int = 2,
                 **limits: Any) -> None:
        from mage_gym.agent.service.app import build_app

        if (make_env is None) == (runtime is None):
            raise TypeError("give make_env or runtime")
        self.runtime = runtime or ServiceRuntime(make_env, ServiceLimits(**limits), label=label,  # type: ignore
                                                 threads=threads)
        self.app = build_app(self.runtime)
        self._sock = bind(host, port)
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://{host}:{self.port}"
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def ws_url(self) -> str:
        return "ws" + self.base_url[len("http"):]

    def start(self, timeout: float = 60.0) -> "ChatEnvServer":
        import uvicorn

        self._server = uvicorn.Server(_uvicorn_config(self.app, self.runtime.limits))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True,
                                        name="mage-chat-server")
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the chat-env server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self._sock.close()

    def __enter__(self) -> "ChatEnvServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def app_from_environ() -> Any:
    """The app of one worker process, built from :data:`~mage_gym.agent.service.config.ENV_VAR` (uvicorn's
    factory for ``--workers N``)."""
    from mage_gym.agent.service.app import build_app
    from mage_gym.agent.service.config import ServiceConfig

    return build_app(ServiceConfig.from_environ().runtime())


def serve(config: Any, host: str = "127.0.0.1", port: int = 8090, workers: int = 1,
          announce: Callable[[str], None] = print) -> None:
    """Serve ``config`` (a :class:`~mage_gym.agent.service.config.ServiceConfig`) until interrupted.

    One worker: this process. ``workers > 1``: uvicorn worker processes sharing
    the socket; the kernel hands each new connection to one of them, so a
    WebSocket session stays in the worker that accepted it. An HTTP session's
    requests must reach the worker that opened it: with several workers, use
    ``/ws`` (or one keep-alive connection per session).
    """
    import os

    import uvicorn

    from mage_gym.agent.service.config import ENV_VAR

    sock = bind(host, port)
    n = len(config.episodes())  # fail here, once, on a dataset with no episodes
    if workers <= 1:
        from mage_gym.agent.service.app import build_app

        server = uvicorn.Server(_uvicorn_config(build_app(config.runtime()), config.limits))
        announce(f"MageRAG-Chat-v0 sessions on http://{host}:{sock.getsockname()[1]} ({n} episodes of "
                 f"{config.label}/{config.split}; OpenEnv /ws, HTTP /reset /step /state /close)")
        server.run(sockets=[sock])
        return
    from uvicorn.supervisors import Multiprocess

    os.environ[ENV_VAR] = config.to_json()
    cfg = _uvicorn_config("mage_gym.agent.service.runner:app_from_environ", config.limits, factory=True,
                          workers=int(workers))
    announce(f"MageRAG-Chat-v0 sessions on http://{host}:{sock.getsockname()[1]} ({n} episodes of "
             f"{config.label}/{config.split}; {workers} workers; OpenEnv /ws, HTTP /reset /step /state /close)")
    Multiprocess(cfg, sockets=[sock]).run()


__all__ = ["ChatEnvServer", "app_from_environ", "bind", "serve"]
