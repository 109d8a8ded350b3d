"""Several OpenAI-compatible model servers behind the benchmark's Ray actors, with a limit per server.

Why: the paper's setting reads every episode with an 8B vision-language model
behind several vLLM servers. ``executor.servers`` lists their base URLs;
episode actor ``i`` sends its reader's and its LLM evaluator's requests to
``servers[i % n]`` (every OpenAI-compatible backend the actor builds, so one
model served N times stands in for both; a policy object handed in by a
caller keeps its own backend). A thread semaphore per process cannot
bound what one server receives once many actors on many machines talk to it,
so the limit lives in one small Ray actor (:class:`ServerSlots`, no CPU):
every request takes a slot for its server first and gives it back after, and
at most ``executor.server_concurrency`` requests are in flight per server
across the whole cluster. Each slot costs two actor calls (about a
millisecond), nothing next to a model call.

An episode actor whose process dies may die holding slots. Its restarted
process registers itself (:meth:`ServerSlots.register`), which frees what
the dead process held and refuses grants still queued for it, so a crash
never shrinks a server's share for the rest of the run.

Which server answered is invisible in the records: base URLs are not part of
the reader's response-cache key, and a deterministic model gives the same
replies on every server. Response caches stay where they were (per node).
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Mapping, Sequence


class ServerSlots:
    """Request slots per server URL, shared by all actors of a run (wrapped with ``ray.remote`` by the driver).

    Async methods: Ray runs them concurrently on one event loop, so a waiting
    ``acquire`` never blocks a ``release``.
    """

    def __init__(self, limits: Mapping[str, int]) -> None:
        self.limits = {str(u): int(n) for u, n in limits.items()}
        self.held: dict[str, dict[tuple[str, int], int]] = {u: {} for u in self.limits}
        self.current: dict[str, int] = {}  # actor id -> the pid of its live process
        self.peak = {u: 0 for u in self.limits}
        self.granted = {u: 0 for u in self.limits}
        self._cond: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # created inside the actor's event loop
            self._cond = asyncio.Condition()
        return self._cond

    def _in_flight(self, url: str) -> int:
        return sum(self.held[url].values())

    async def register(self, actor: str, pid: int) -> None:
        """``actor`` now runs as process ``pid``: free the slots its earlier processes held."""
        cond = self._condition()
        async with cond:
            self.current[actor] = pid
            for held in self.held.values():
                for holder in [h for h in held if h[0] == actor and h[1] != pid]:
                    del held[holder]
            cond.notify_all()

    async def acquire(self, url: str, actor: str, pid: int) -> bool:
        """Wait for a slot on ``url``; False (nothing held) when ``pid`` is no longer ``actor``'s process."""
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: self._in_flight(url) < self.limits[url])
            if self.current.get(actor, pid) != pid:
                return False
            holder = (actor, pid)
            self.held[url][holder] = self.held[url].get(holder, 0) + 1
            self.granted[url] += 1
            self.peak[url] = max(self.peak[url], self._in_flight(url))
            return True

    async def release(self, url: str, actor: str, pid: int) -> None:
        cond = self._condition()
        async with cond:
            holder = (actor, pid)
            n = self.held[url].get(holder, 0)
            if n > 1:
                self.held[url][holder] = n - 1
            else:
                self.held[url].pop(holder, None)
            cond.notify_all()

    def stats(self) -> dict[str, dict[str, int]]:
        """Per server: slots granted and the most held at once (the run's ``results.json`` keeps them)."""
        return {u: {"requests": self.granted[u], "peak_in_flight": self.peak[u], "limit": self.limits[u]}
                for u in self.limits}


class ClusterSlot:
    """A context manager taking one request slot on one server from :class:`ServerSlots` (in an episode actor).

    Installed with :func:`mage_gym.readers.openai_compat.set_server_limiter`
    where a reader's process-wide semaphore would be.
    """

    def __init__(self, slots: Any, url: str, actor: str, pid: int) -> None:
        self.slots, self.url, self.actor, self.pid = slots, url, actor, pid

    def __enter__(self) -> "ClusterSlot":
        import ray

        if not ray.get(self.slots.acquire.remote(self.url, self.actor, self.pid)):
            raise RuntimeError(f"request slot on {self.url} refused: this process was replaced by a restart")
        return self

    def __exit__(self, *exc: Any) -> None:
        import ray

        ray.get(self.slots.release.remote(self.url, self.actor, self.pid))


def _is_openai(name: Any) -> bool:
    from mage_gym.readers.errors import ReaderConfigError
    from mage_gym.readers.options import canonical_backend

    try:
        return canonical_backend(str(name)) == "openai"
    except ReaderConfigError:
        return False


def point_at(url: str, reader_cfg: Mapping[str, Any], policy_opts: Mapping[str, Any]) -> tuple[dict, dict]:
    """Copies of the ``reader`` node and a policy's options with every OpenAI-compatible backend sent to ``url``.

    The reader node when its ``name`` is an openai backend; a policy's
    ``backend`` node (the LLM evaluator's) when its ``reader`` is.
    """
    reader = dict(reader_cfg)
    if _is_openai(reader.get("name", "oracle")):
        reader["base_url"] = url
    opts = dict(policy_opts)
    backend = opts.get("backend")
    if isinstance(backend, Mapping) and _is_openai(backend.get("reader") or backend.get("name") or "hf"):
        opts["backend"] = {**dict(backend), "base_url": url}
    return reader, opts


def openai_nodes(reader_cfg: Mapping[str, Any], policy_opts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's OpenAI-compatible backend options (the reader node, the evaluator backend), as reader kwargs."""
    nodes = []
    if _is_openai(reader_cfg.get("name", "oracle")):
        nodes.append(dict(reader_cfg))
    backend = policy_opts.get("backend")
    if isinstance(backend, Mapping) and _is_openai(backend.get("reader") or backend.get("name") or "hf"):
        node = dict(backend)
        node["name"] = node.pop("reader", None) or node.get("name")
        nodes.append(node)
    return nodes


def check_servers(urls: Sequence[str], reader_cfg: Mapping[str, Any], policy_opts: Mapping[str, Any]) -> None:
    """Ask every server whether it serves the backends' models (``GET /models``) before any episode.

    The driver already checked the configured ``base_url`` (as in a local
    run); these are the URLs the actors will really use. Raises the reader's
    ``ReaderConfigError`` / ``ReaderUnavailableError`` naming the server.
    """
    from mage_gym.readers import get_reader

    for url in urls:
        reader, opts = point_at(url, reader_cfg, policy_opts)
        for node in openai_nodes(reader, opts):
            node.pop("cache", None)
            get_reader(str(node.pop("name")), **node).validate()


def default_limit(reader_cfg: Mapping[str, Any], policy_opts: Mapping[str, Any]) -> int:
    """The per-server limit when ``executor.server_concurrency`` is null: the backends' ``max_concurrency``.

    The reader node's value, else the evaluator backend's, else the OpenAI
    reader's own default (as the first reader's limit wins in one process).
    """
    from mage_gym.readers.openai_compat import OpenAIReader

    backend = policy_opts.get("backend")
    for node in (reader_cfg, backend if isinstance(backend, Mapping) else {}):
        if node.get("max_concurrency") is not None:
            return int(node["max_concurrency"])
    return int(inspect.signature(OpenAIReader).parameters["max_concurrency"].default)


def start_slots(ray: Any, servers: Sequence[str], limit: int) -> Any:
    """The run's :class:`ServerSlots` actor (no CPU reserved: it only counts)."""
    urls = [str(u).rstrip("/") for u in servers]
    if not urls or len(set(urls)) != len(urls) or limit < 1:
        raise ValueError(f"executor.servers must list distinct URLs and server_concurrency be >= 1, got "
                         f"{list(servers)} and {limit}")
    return ray.remote(ServerSlots).options(num_cpus=0).remote({u: limit for u in urls})
