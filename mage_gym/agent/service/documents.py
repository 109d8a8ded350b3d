"""Documents shared by every session of a process: one graph per document, at most ``max_documents``, idle ones
evicted.

Why not the env's own provider: :class:`~mage_gym.env.episodes.LazyGraphProvider`
keeps a small LRU of graphs. Under hundreds of sessions on more documents
than it holds, a graph it dropped while sessions still play on it is loaded
again for the next session: two copies of a 500-page document in one process.
A service also needs a bound that does not depend on which sessions happen to
be live, and memory back when a document stops being played.

Here a session *holds* the documents of its episode from its reset until its
next reset or its close (:meth:`SharedDocuments.holding` around the env's
reset, :meth:`SharedDocuments.release` after). A held document is never
evicted and is loaded once however many sessions hold it. A document no
session holds stays cached (warm for the next session) until it has been idle
``idle_s`` seconds or its slot is needed; then it is evicted, with every cache
entry derived from its graph (:func:`mage_gym.cache.release_owner`). A reset
that would need a document beyond ``max_documents`` while all of them are
held fails with :class:`~mage_gym.agent.service.errors.DocumentCapacity`.
"""
from __future__ import annotations

import contextvars
import gc
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from mage_gym.agent.service.errors import DocumentCapacity, DocumentNotBuilt
from mage_gym.cache import purge_dead, release_owner
from mage_gym.data.composite import CompositeEpisode
from mage_gym.data.episode import Episode
from mage_gym.env.episodes import LazyGraphProvider

_HOLDER: contextvars.ContextVar["DocumentHolder | None"] = contextvars.ContextVar("mage_document_holder",
                                                                                 default=None)


@dataclass(eq=False)
class DocumentHolder:
    """One session's claim on documents (the sources its current episode reads)."""

    sources: set[str] = field(default_factory=set)


@dataclass
class _Entry:
    graph: Any
    users: int = 0
    idle_since: float = 0.0


class SharedDocuments(LazyGraphProvider):
    """An episode provider over documents shared by all sessions of a process.

    The env's :class:`~mage_gym.env.episodes.LazyGraphProvider` (episode ids,
    ``get``, conversations and cross-document episodes), with its graphs taken
    from this pool. ``load(source)`` gives a graph; by default ``build_graph(source,
    parser=parser, **graph_kwargs)``, which reads the on-disk graph cache and
    builds what is missing, or with ``prebuilt_only`` ``load_graph``, which
    only reads the cache (a missing graph is
    :class:`~mage_gym.agent.service.errors.DocumentNotBuilt`, not a build of
    minutes inside a reset).
    """

    def __init__(self, episodes: Sequence[Episode | CompositeEpisode], *, parser: str = "fast",
                 graph_kwargs: Mapping[str, Any] | None = None, max_documents: int = 16, idle_s: float = 300.0,
                 prebuilt_only: bool = False, load: Callable[[str], Any] | None = None) -> None:
        episodes = list(episodes)
        need = max((len(e.documents) for e in episodes if isinstance(e, CompositeEpisode)), default=1)
        if int(max_documents) < need:
            raise ValueError(f"max_documents={max_documents} is less than the {need} documents one episode reads")
        super().__init__(episodes, parser=parser, max_graphs=1, graph_kwargs=graph_kwargs)
        self.max_documents = int(max_documents)
        self.idle_s = float(idle_s)
        self.prebuilt_only = bool(prebuilt_only)
        self._load = load or self._build
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._loading: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.loads = self.evictions = self.refusals = 0

    def _graph_for(self, source: Any) -> Any:
        return self._graph(str(source))

    # --- holding ---------------------------------------------------------------------------------

    @contextmanager
    def holding(self, holder: DocumentHolder) -> Iterator[None]:
        """Documents loaded inside this block (an env's reset) are held by ``holder`` until :meth:`release`."""
        token = _HOLDER.set(holder)
        try:
            yield
        finally:
            _HOLDER.reset(token)

    def release(self, holder: DocumentHolder) -> None:
        """``holder`` plays none of its documents any more: they become idle (cached, evictable)."""
        now = time.monotonic()
        with self._lock:
            for source in holder.sources:
                entry = self._entries.get(source)
                if entry is not None and entry.users > 0:
                    entry.users -= 1
                    if entry.users == 0:
                        entry.idle_since = now
            holder.sources.clear()

    def evict_idle(self, idle_s: float | None = None) -> list[str]:
        """Evict documents no session has held for ``idle_s`` seconds (default: the pool's); their sources."""
        limit = self.idle_s if idle_s is None else float(idle_s)
        now = time.monotonic()
        with self._lock:
            gone = [(s, e) for s, e in self._entries.items() if e.users == 0 and now - e.idle_since >= limit]
            for s, _ in gone:
                del self._entries[s]
            self.evictions += len(gone)
        _free([e for _, e in gone])
        return [s for s, _ in gone]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            held = sum(e.users > 0 for e in self._entries.values())
            return {"documents": len(self._entries), "held": held, "idle": len(self._entries) - held,
                    "max_documents": self.max_documents, "loads": self.loads, "evictions": self.evictions,
                    "refusals": self.refusals}

    # --- loading ---------------------------------------------------------------------------------

    def _build(self, source: str) -> Any:
        from mage_gym.graph import GraphNotBuiltError, build_graph, load_graph

        if not self.prebuilt_only:
            return build_graph(source, parser=self.parser, **self.graph_kwargs)
        try:
            return load_graph(source, parser=self.parser, **self.graph_kwargs)
        except GraphNotBuiltError as err:
            raise DocumentNotBuilt(f"{err} (this server serves pre-built graphs only)") from None

    def _graph(self, source: str) -> Any:
        holder = _HOLDER.get()
        while True:
            evicted: list[_Entry] = []
            with self._lock:
                entry = self._entries.get(source)
                if entry is not None:
                    self._entries.move_to_end(source)
                    self._claim(entry, source, holder)
                    return entry.graph
                waiting = self._loading.get(source)
                if waiting is None:
                    evicted = self._make_room()
                    waiting = self._loading[source] = threading.Event()
                    mine = True
                else:
                    mine = False
            _free(evicted)
            if not mine:  # another session is loading it: wait, then take the loaded one
                waiting.wait()
                continue
            try:
                graph = self._load(source)
                with self._lock:
                    entry = self._entries[source] = _Entry(graph, idle_since=time.monotonic())
                    self.loads += 1
                    self._claim(entry, source, holder)
                return graph
            finally:
                with self._lock:
                    self._loading.pop(source).set()

    def _claim(self, entry: _Entry, source: str, holder: DocumentHolder | None) -> None:
        """Count ``holder`` as a user of ``source`` once (lock held)."""
        if holder is not None and source not in holder.sources:
            holder.sources.add(source)
            entry.users += 1

    def _make_room(self) -> list[_Entry]:
        """Evict idle documents (least recently used first) until one more fits (lock held); or refuse."""
        out = []
        while len(self._entries) + len(self._loading) >= self.max_documents:
            idle = next((s for s, e in self._entries.items() if e.users == 0), None)
            if idle is None:
                self.refusals += 1
                raise DocumentCapacity(f"all {self.max_documents} document slots are held by live sessions "
                                       "(max_documents); retry when some finish, or raise the cap")
            out.append(self._entries.pop(idle))
            self.evictions += 1
        return out


def _free(entries: Sequence[_Entry]) -> None:
    """Free evicted documents: their graphs and every cache entry derived from them.

    Releasing the graph's entries lets objects die that lived only through
    them (an episode's relevance, the graph's index, some in reference
    cycles), and cache entries *they* own hold the graph's data in turn: so
    collect and purge dead owners' entries until nothing more dies. Evictions
    are rare (a document idle for ``idle_s``, or a full pool), so the
    collections' cost is paid rarely.
    """
    if not entries:
        return
    for entry in entries:
        release_owner(entry.graph)
    for _ in range(8):
        gc.collect()
        if not purge_dead():
            break


__all__ = ["DocumentHolder", "SharedDocuments"]
