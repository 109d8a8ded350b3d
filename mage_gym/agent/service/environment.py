"""MageRAG-Chat-v0 as an OpenEnv ``Environment``: one per session, with the service's limits and typed errors.

Why a wrapper and not the chat env itself: OpenEnv's server calls
``reset_async`` / ``step_async`` on its event loop. Here each call runs on the
runtime's thread pool under the call's time limit, one call at a time per
session, and every failure becomes a typed error
(:mod:`mage_gym.agent.service.errors`) that is counted. A session holds the
documents of its episode (:class:`~mage_gym.agent.service.documents.SharedDocuments`)
until its next reset or its close, and its close releases everything: the
documents, the env, the slot.

States: a session is *idle* before its first reset; *playing* after a reset;
*done* after the episode ends (a step gets ``EPISODE_OVER``); *expired* after
``episode_timeout`` (the episode was finished; ``EPISODE_TIMEOUT``); *failed*
after a call raised or timed out (``SESSION_FAILED`` until a reset, which
builds a fresh env); *closed* at the end (``SESSION_NOT_FOUND``).
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable, Mapping

from mage_gym.agent.chat_env import MageChatEnv, to_openai_messages
from mage_gym.agent.service.documents import DocumentHolder
from mage_gym.agent.service.errors import (
    DocumentCapacity, DocumentNotBuilt, EpisodeOver, EpisodeTimeout, InternalError, InvalidRequest, InvalidTask,
    ReaderFailed, RequestTooLarge, ServiceError, SessionFailed, SessionNotFound, StepTimeout,
)
from mage_gym.agent.service.models import MageChatAction, MageChatObservation, MageChatState
from mage_gym.agent.service.openenv_import import openenv_server
from mage_gym.agent.service.runtime import ServiceRuntime
from mage_gym.jsonio import json_default

_Environment = openenv_server().interfaces.Environment


def _jsonable(info: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(dict(info), default=json_default))


class MageChatEnvironment(_Environment):
    """One session's environment (see the module docstring for its states)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # sessions share only thread-safe, read-only data (graphs, indexes)

    def __init__(self, runtime: ServiceRuntime) -> None:
        super().__init__()
        self.runtime = runtime
        self._env: MageChatEnv | None = None
        self._holder = DocumentHolder()
        self._lock = asyncio.Lock()
        self._task: str | None = None
        self._episode_id: str | None = None
        self._started = 0.0
        self._last_call = time.monotonic()
        self._playing = False
        self._done = False
        self._expired = False
        self._failed: str | None = None
        self._closed = False
        self._busy = False
        self._replies = 0
        self.close_reason = "closed"

    # --- what the server's reaper reads ------------------------------------------------------------

    def idle_for(self) -> float:
        """Seconds since the last call ended (0 while a call runs)."""
        return 0.0 if self._busy else time.monotonic() - self._last_call

    def overdue(self) -> bool:
        """Playing for longer than ``episode_timeout``."""
        return self._playing and time.monotonic() - self._started > self.runtime.limits.episode_timeout

    async def expire(self) -> None:
        """Finish an overdue episode (the reader reads what was gathered); later steps get ``EPISODE_TIMEOUT``."""
        async with self._lock:
            if self.overdue() and not self._closed:
                await self._run(self._finish_sync, timeout=self.runtime.limits.step_timeout)

    # --- OpenEnv's interface -------------------------------------------------------------------

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, task: str | None = None,
                          **unknown: Any) -> MageChatObservation:
        if unknown:
            raise self._count(InvalidRequest(f"reset takes task, episode_id and seed; got {sorted(unknown)}"))
        async with self._lock:
            self._check_open()
            return await self._run(self._reset_sync, seed, episode_id, task,
                                   timeout=self.runtime.limits.reset_timeout)

    async def step_async(self, action: MageChatAction, timeout_s: float | None = None,
                         **unused: Any) -> MageChatObservation:
        async with self._lock:
            self._check_step(action)
            if self.overdue():
                await self._run(self._finish_sync, timeout=self.runtime.limits.step_timeout)
                self._check_step(action)
            limit = self.runtime.limits.step_timeout
            return await self._run(self._step_sync, action.message,
                                   timeout=min(limit, float(timeout_s)) if timeout_s else limit)

    def reset(self, seed: int | None = None, episode_id: str | None = None, task: str | None = None,
              **unknown: Any) -> MageChatObservation:
        """Synchronous reset (in-process use; the server calls :meth:`reset_async`)."""
        if unknown:
            raise self._count(InvalidRequest(f"reset takes task, episode_id and seed; got {sorted(unknown)}"))
        self._check_open()
        return self._guarded(self._reset_sync, seed, episode_id, task)

    def step(self, action: MageChatAction, timeout_s: float | None = None, **unused: Any) -> MageChatObservation:
        """Synchronous step (in-process use; the server calls :meth:`step_async`)."""
        self._check_step(action)
        if self.overdue():
            self._finish_sync()
            self._check_step(action)
        return self._guarded(self._step_sync, action.message)

    @property
    def state(self) -> MageChatState:
        return MageChatState(episode_id=self._episode_id, step_count=self._replies, task=self._task,
                             done=self._done, expired=self._expired, failed=self._failed is not None,
                             replies=self._replies, age_s=time.monotonic() - self._started if self._task else 0.0)

    def close(self) -> None:
        """Release everything: the documents, the env; counted when an episode was still being played."""
        if self._closed:
            return
        self._closed = True
        counters = self.runtime.counters
        if self._playing:
            counters.event("closed_mid_episode")
        counters.event(f"sessions_{self.close_reason}")
        if self.runtime.documents is not None:
            self.runtime.documents.release(self._holder)
        env, self._env = self._env, None
        if env is not None and not self._busy:  # a timed-out call may still run on it: let it finish, then drop
            env.close()

    # --- the calls, on a worker thread ----------------------------------------------------------

    def _reset_sync(self, seed: int | None, episode_id: str | None, task: str | None) -> MageChatObservation:
        if self._failed is not None or self._env is None:
            self._env = self.runtime.make_env()  # a failed env is not trusted again
            self._failed = None
        options = {"task": task} if task is not None else ({"episode_id": episode_id} if episode_id else {})
        docs = self.runtime.documents
        if docs is not None:
            docs.release(self._holder)
        self._playing = self._done = self._expired = False
        try:
            if docs is not None:
                with docs.holding(self._holder):
                    messages, info = self._env.reset(seed=seed, options=options or None)
            else:
                messages, info = self._env.reset(seed=seed, options=options or None)
        except ServiceError:
            raise
        except (KeyError, ValueError, TypeError) as err:  # the env's answer to a task it does not play
            raise InvalidTask(str(err).strip("'\"")) from None
        self._task, self._episode_id = str(info.get("task")), str(info.get("episode_id"))
        self._started = time.monotonic()
        self._playing, self._replies = True, 0
        return MageChatObservation(messages=to_openai_messages(messages), info=_jsonable(info), done=False,
                                   reward=None)

    def _step_sync(self, message: Any) -> MageChatObservation:
        assert self._env is not None
        messages, reward, terminated, truncated, info = self._env.step(message)
        self._replies += 1
        return self._after(messages, reward, terminated, truncated, info)

    def _finish_sync(self) -> MageChatObservation:
        assert self._env is not None
        messages, reward, terminated, truncated, info = self._env.finish("episode_timeout")
        self._expired = True
        self.runtime.counters.event("episodes_expired")
        return self._after(messages, reward, terminated, truncated, info)

    def _after(self, messages: Any, reward: float, terminated: bool, truncated: bool,
               info: Mapping[str, Any]) -> MageChatObservation:
        done = bool(terminated or truncated)
        if done:
            self._playing, self._done = False, True
            self.runtime.counters.event("episodes_done")
        return MageChatObservation(messages=to_openai_messages(messages), info=_jsonable(info), done=done,
                                   reward=float(reward), terminated=bool(terminated), truncated=bool(truncated))

    # --- guards ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise self._count(SessionNotFound(f"this session was closed ({self.close_reason}); open a new one"))

    def _check_step(self, action: Any) -> None:
        self._check_open()
        if not isinstance(action, MageChatAction):
            raise self._count(InvalidRequest("a step takes a MageChatAction ({'message': <assistant message>})"))
        if self._failed is not None:
            raise self._count(SessionFailed(f"an earlier call failed ({self._failed}); reset to play again"))
        if self._expired:
            raise self._count(EpisodeTimeout(
                f"the episode ran past episode_timeout={self.runtime.limits.episode_timeout:g} s and was finished "
                "(the reader read what was gathered); reset for a new one"))
        if not self._playing:
            raise self._count(EpisodeOver("no episode is being played; reset for a new one" if not self._done
                                          else "the episode is over; reset for a new one"))
        size = len(action.message) if isinstance(action.message, str) else \
            len(json.dumps(action.message, default=str))
        if size > self.runtime.limits.max_action_chars:
            raise self._count(RequestTooLarge(f"the action is {size} characters; the limit is "
                                              f"max_action_chars={self.runtime.limits.max_action_chars}"))

    def _count(self, err: ServiceError) -> ServiceError:
        if not getattr(err, "counted", False):
            self.runtime.counters.error(err.code)
            err.counted = True  # type: ignore[attr-defined]  # the app's handler must not count it again
        return err

    def _typed(self, err: BaseException) -> ServiceError:
        """The typed error for an exception a call raised; the session is failed unless the env answered
        a bad request."""
        if isinstance(err, ServiceError):
            if not isinstance(err, (InvalidTask, InvalidRequest, DocumentCapacity, DocumentNotBuilt)):
                self._failed, self._playing = err.code, False
            return self._count(err)
        from mage_gym.readers.errors import ReaderError

        self._playing = False
        if isinstance(err, ReaderError):
            self._failed = ReaderFailed.code
            return self._count(ReaderFailed(f"the reader failed: {err}"))
        self._failed = InternalError.code
        return self._count(InternalError(f"{type(err).__name__}: {err}"))

    def _guarded(self, fn: Callable[..., MageChatObservation], *args: Any) -> MageChatObservation:
        self._busy = True
        try:
            return fn(*args)
        except Exception as err:
            raise self._typed(err) from err
        finally:
            self._busy = False
            self._last_call = time.monotonic()

    async def _run(self, fn: Callable[..., MageChatObservation], *args: Any, timeout: float) -> MageChatObservation:
        """``fn(*args)`` on the runtime's threads within ``timeout`` seconds; every failure typed and counted."""
        loop = asyncio.get_running_loop()
        self._busy = True
        future = loop.run_in_executor(self.runtime.executor, self._call_in_thread, fn, args)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            self._failed, self._playing = StepTimeout.code, False
            future.add_done_callback(lambda _: self._call_ended())  # the thread runs on; the session waits for it
            raise self._count(StepTimeout(f"the call ran past {timeout:g} s (step_timeout / reset_timeout); "
                                          "the session is failed: reset for a new episode")) from None
        except Exception as err:
            raise self._typed(err) from err
        finally:
            if future.done():
                self._call_ended()

    def _call_in_thread(self, fn: Callable[..., MageChatObservation], args: tuple) -> MageChatObservation:
        return fn(*args)

    def _call_ended(self) -> None:
        self._busy = False
        self._last_call = time.monotonic()
        if self._closed and self._env is not None:
            env, self._env = self._env, None
            env.close()


__all__ = ["MageChatEnvironment"]
