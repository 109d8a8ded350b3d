"""What every session of one server process shares: how to build a chat env, the documents, a thread pool for
env calls, the limits, and the fault counters.

Why one object: OpenEnv builds an environment per session from a factory that
takes no arguments; every session's environment receives this runtime, so
sessions share documents and threads instead of each holding its own.
"""
from __future__ import annotations

import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Callable

from mage_gym.agent.chat_env import MageChatEnv
from mage_gym.agent.service.documents import SharedDocuments


@dataclass(frozen=True)
class ServiceLimits:
    """Every bound a session or request is held to.

    ``max_sessions``: live sessions per process (WebSocket and HTTP together).
    ``episode_timeout``: seconds from reset to the episode's forced end (the
    reader reads, later calls get ``EPISODE_TIMEOUT``). ``idle_timeout``:
    seconds without a call before a session is closed and its slot freed.
    ``step_timeout`` / ``reset_timeout``: one call's limit (a reset may load a
    document). ``max_request_bytes``: an HTTP body or WebSocket message.
    ``max_action_chars``: one assistant message, as JSON text.
    """

    max_sessions: int = 256
    episode_timeout: float = 600.0
    idle_timeout: float = 300.0
    step_timeout: float = 120.0
    reset_timeout: float = 300.0
    max_request_bytes: int = 1 << 20
    max_action_chars: int = 65536

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"ServiceLimits.{name} must be positive, got {value}")


class FaultCounters:
    """Thread-safe counts of typed errors answered (``errors``) and of session events (``events``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.errors: Counter[str] = Counter()
        self.events: Counter[str] = Counter()

    def error(self, code: str) -> None:
        with self._lock:
            self.errors[code] += 1

    def event(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.events[name] += n

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {"errors": dict(self.errors), "events": dict(self.events)}


class ServiceRuntime:
    """Per-process state of the service; ``make_env()`` builds one :class:`MageChatEnv` (sessions reuse them)."""

    def __init__(self, make_env: Callable[[], MageChatEnv], limits: ServiceLimits | None = None, *,
                 documents: SharedDocuments | None = None, threads: int = 2, label: str = "") -> None:
        if int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.make_env = make_env
        self.limits = limits or ServiceLimits()
        self.documents = documents
        self.label = str(label)
        self.counters = FaultCounters()
        self.executor = ThreadPoolExecutor(max_workers=int(threads), thread_name_prefix="mage-env")
        self.started = time.time()
        self.worker = os.getpid()

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    def process_stats(self) -> dict[str, Any]:
        """This process's resident memory and CPU seconds (Linux ``/proc``; None elsewhere)."""
        rss = cpu = None
        try:
            with open(f"/proc/{self.worker}/status") as f:
                rss = next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))
            fields = open(f"/proc/{self.worker}/stat").read().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, StopIteration, ValueError, IndexError):
            pass
        return {"worker": self.worker, "rss_mb": rss, "cpu_s": cpu, "uptime_s": time.time() - self.started}


__all__ = ["FaultCounters", "ServiceLimits", "ServiceRuntime"]
