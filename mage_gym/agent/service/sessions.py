"""One table of live sessions for the WebSocket and the HTTP routes: OpenEnv's own, reached in one place.

Why OpenEnv's table: its ``HTTPEnvServer`` keeps the WebSocket sessions and
enforces ``max_concurrent_envs`` on them. Opening the HTTP routes' sessions
in the same table makes one slot count and one capacity for both protocols,
and lets the service's reaper close idle sessions of either kind. openenv-core
0.3 has no public method for this, so this class is the only code that touches
``HTTPEnvServer``'s session internals (``_create_session``, ``_destroy_session``,
``_sessions``, ``_update_session_activity``); ``tests/test_service_sessions.py``
fails first if a new openenv-core release changes them.
"""
from __future__ import annotations

from typing import Any

from mage_gym.agent.service.errors import AtCapacity, InternalError, SessionNotFound
from mage_gym.agent.service.openenv_import import openenv_server

REQUIRED = ("_create_session", "_destroy_session", "_sessions", "_update_session_activity")


class SessionTable:
    """Open, find, touch, close and list the sessions of one ``HTTPEnvServer``."""

    def __init__(self, server: Any) -> None:
        missing = [name for name in REQUIRED if not hasattr(server, name)]
        if missing:
            raise RuntimeError(f"this openenv-core's HTTPEnvServer lacks {missing}: the service supports 0.3.x")
        self.server = server

    @property
    def live(self) -> int:
        return len(self.server._sessions)

    @property
    def capacity(self) -> int:
        return int(self.server.max_concurrent_envs)

    async def open(self) -> tuple[str, Any]:
        """A new session (its environment built on its own thread, as OpenEnv builds WebSocket ones)."""
        exc = openenv_server().exceptions
        try:
            return await self.server._create_session()
        except exc.SessionCapacityError as err:
            raise AtCapacity(f"{err.active_sessions} of max_sessions={err.max_sessions} sessions are live; "
                             "close some or retry later") from None
        except exc.EnvironmentFactoryError as err:
            raise InternalError(f"building the session's environment failed: {err.__cause__!r}") from None

    def get(self, session_id: Any) -> Any:
        env = self.server._sessions.get(str(session_id))
        if env is None:
            raise SessionNotFound(f"no live session {str(session_id)[:80]!r}: never opened, closed, reaped after "
                                  "idle_timeout, or held by another worker or a server that restarted since; "
                                  "reset for a new one")
        return env

    def touch(self, session_id: str, step: bool = False) -> None:
        self.server._update_session_activity(session_id, increment_step=step)

    async def close(self, session_id: str) -> None:
        """Close ``session_id`` (its environment's ``close`` releases what it holds)."""
        self.get(session_id)
        await self.server._destroy_session(session_id)

    def items(self) -> list[tuple[str, Any]]:
        """(session id, environment) of every live session; an environment still being built is left out."""
        return [(sid, env) for sid, env in list(self.server._sessions.items()) if env is not None]


__all__ = ["SessionTable"]
