"""OpenEnv's ``EnvClient`` for MageRAG-Chat-v0, with the service's typed errors.

Why a subclass: OpenEnv's client turns every server error into a
``RuntimeError`` with the message inside, and a lost connection into
whatever the WebSocket library raises. A trainer running hundreds of
rollouts needs to tell a timed-out episode (drop the rollout) from a full
server (retry later) from a dead one (reconnect): this client raises the
:mod:`~mage_gym.agent.service.errors` class the server named, and
:class:`~mage_gym.agent.service.errors.ServerUnavailable` when the server is
gone. Everything else is OpenEnv's own client (``async with``, ``.sync()``).
"""
from __future__ import annotations

from typing import Any, Dict

from mage_gym.agent.service.errors import (
    AtCapacity, InternalError, InvalidRequest, ServerUnavailable, ServiceError, error_from_message,
)
from mage_gym.agent.service.models import MageChatAction, MageChatObservation, MageChatState
from mage_gym.agent.service.openenv_import import openenv_server

openenv_server()  # OpenEnv's package imports its server on first import: do it without the web UI
from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_client import EnvClient  # noqa: E402

#: OpenEnv's own WebSocket error codes (errors raised outside the environment), as the service's classes.
_OPENENV_CODES: dict[str, type[ServiceError]] = {
    "CAPACITY_REACHED": AtCapacity, "INVALID_JSON": InvalidRequest, "UNKNOWN_TYPE": InvalidRequest,
    "VALIDATION_ERROR": InvalidRequest}


def typed_error(err: BaseException) -> ServiceError:
    """The service error an exception of OpenEnv's client stands for."""
    if isinstance(err, ServiceError):
        return err
    if isinstance(err, RuntimeError) and str(err).startswith("Server error:"):
        text = str(err)
        code = ""
        if text.endswith(")") and " (code: " in text:
            text, code = text[:-1].rsplit(" (code: ", 1)
        return error_from_message(text.removeprefix("Server error: "), default=_OPENENV_CODES.get(code, InternalError))
    return ServerUnavailable(f"lost the server ({type(err).__name__}: {err}); its sessions are gone: reconnect "
                             "and reset")


class MageChatClient(EnvClient[MageChatAction, MageChatObservation, MageChatState]):
    """One session over OpenEnv's WebSocket protocol: ``reset(task=...)``, ``step(MageChatAction(message=...))``."""

    def _step_payload(self, action: MageChatAction | Any) -> Dict[str, Any]:
        if not isinstance(action, MageChatAction):
            action = MageChatAction(message=action)
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[MageChatObservation]:
        obs = MageChatObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                  done=bool(payload.get("done", False)))
        return StepResult(observation=obs, reward=payload.get("reward"), done=bool(payload.get("done", False)))

    def _parse_state(self, payload: Dict[str, Any]) -> MageChatState:
        return MageChatState(**payload)

    async def reset(self, **kwargs: Any) -> StepResult[MageChatObservation]:
        try:
            return await super().reset(**kwargs)
        except Exception as err:
            raise typed_error(err) from err

    async def step(self, action: MageChatAction | Any, **kwargs: Any) -> StepResult[MageChatObservation]:
        try:
            return await super().step(action, **kwargs)
        except Exception as err:
            raise typed_error(err) from err

    async def state(self) -> MageChatState:
        try:
            return await super().state()
        except Exception as err:
            raise typed_error(err) from err

    async def connect(self) -> "MageChatClient":
        try:
            await super().connect()
        except Exception as err:
            raise typed_error(err) from err
        return self


__all__ = ["MageChatClient", "typed_error"]
