"""Episode providers: which (question, document graph, gold) an environment plays.

Why a provider: the environment must run on pre-built pairs (unit tests, toy
graphs, the generator) and on benchmark episodes whose graphs are built or
loaded from the on-disk cache on first use. Both look the same to the env:
``ids`` and ``get(episode_id) -> LoadedEpisode``. Graphs of a lazy provider
sit in a small LRU so an env cycling through a benchmark does not hold every
document; pre-built pairs share their graph objects between envs in a process.

Gold (``GoldEvidence``) is resolved lazily and used only for the reward and
end-of-episode metrics; a policy never sees it.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from mage_gym.data.episode import Episode
from mage_gym.data.gold import GoldEvidence
from mage_gym.graph.graph import EvidenceGraph


@dataclass(frozen=True, eq=False)
class EnvEpisode:
    """A pre-built pair; ``gold`` is resolved with ``resolve_gold`` when None."""

    episode: Episode
    graph: EvidenceGraph
    gold: GoldEvidence | None = None


@dataclass(eq=False)
class LoadedEpisode:
    episode: Episode
    graph: EvidenceGraph
    _gold: GoldEvidence | None = None
    _gold_cache: dict | None = None  # provider-level cache by episode_id (gold depends on content only)

    @property
    def gold(self) -> GoldEvidence:
        if self._gold is None:
            from mage_gym.data.gold import resolve_gold

            self._gold = resolve_gold(self.episode, self.graph)
            if self._gold_cache is not None:
                self._gold_cache[self.episode.episode_id] = self._gold
        return self._gold


@runtime_checkable
class EpisodeProvider(Protocol):
    @property
    def ids(self) -> list[str]: ...

    def get(self, episode_id: str) -> LoadedEpisode: ...


def _check_unique(episodes: Sequence[Episode]) -> None:
    seen: set[str] = set()
    for ep in episodes:
        if ep.episode_id in seen:
            raise ValueError(f"duplicate episode_id {ep.episode_id!r}")
        seen.add(ep.episode_id)


class PairProvider:
    """Episodes with their graphs already in memory."""

    def __init__(self, pairs: Iterable[EnvEpisode | tuple]) -> None:
        self._items: dict[str, LoadedEpisode] = {}
        items = [p if isinstance(p, EnvEpisode) else EnvEpisode(*p) for p in pairs]
        _check_unique([p.episode for p in items])
        for p in items:
            if not isinstance(p.episode, Episode) or not isinstance(p.graph, EvidenceGraph):
                raise TypeError("pairs must be (Episode, EvidenceGraph[, GoldEvidence])")
            self._items[p.episode.episode_id] = LoadedEpisode(p.episode, p.graph, p.gold)
        if not self._items:
            raise ValueError("no episodes given")

    @property
    def ids(self) -> list[str]:
        return list(self._items)

    def get(self, episode_id: str) -> LoadedEpisode:
        try:
            return self._items[episode_id]
        except KeyError:
            raise KeyError(f"unknown episode_id {episode_id!r}") from None


class LazyGraphProvider:
    """Episodes whose graphs come from ``mage_gym.graph.build_graph`` (disk-cached) on first use.

    ``graph_kwargs`` go to ``build_graph`` (e.g. ``cache_dir``, ``max_pages``);
    ``max_graphs`` bounds the in-memory LRU of graphs.
    """

    def __init__(self, episodes: Sequence[Episode], parser: str = "layout", max_graphs: int = 4,
                 graph_kwargs: Mapping[str, Any] | None = None) -> None:
        episodes = list(episodes)
        if not episodes:
            raise ValueError("no episodes given")
        _check_unique(episodes)
        self._episodes = {ep.episode_id: ep for ep in episodes}
        self.parser = parser
        self.max_graphs = max(1, int(max_graphs))
        self.graph_kwargs = dict(graph_kwargs or {})
        self._graphs: OrderedDict[str, EvidenceGraph] = OrderedDict()
        self._gold: dict[str, GoldEvidence] = {}
        self._lock = threading.Lock()

    @property
    def ids(self) -> list[str]:
        return list(self._episodes)

    def graph_for(self, episode: Episode) -> EvidenceGraph:
        key = str(episode.source)
        with self._lock:
            g = self._graphs.get(key)
            if g is not None:
                self._graphs.move_to_end(key)
                return g
        from mage_gym.graph import build_graph

        g = build_graph(episode.source, parser=self.parser, **self.graph_kwargs)
        with self._lock:
            self._graphs[key] = g
            while len(self._graphs) > self.max_graphs:
                self._graphs.popitem(last=False)
        return g

    def get(self, episode_id: str) -> LoadedEpisode:
        try:
            ep = self._episodes[episode_id]
        except KeyError:
            raise KeyError(f"unknown episode_id {episode_id!r}") from None
        return LoadedEpisode(ep, self.graph_for(ep), self._gold.get(episode_id), self._gold)


def as_provider(episodes: Any, parser: str = "layout", max_graphs: int = 4,
                graph_kwargs: Mapping[str, Any] | None = None) -> EpisodeProvider:
    """Normalise what a user passes as ``episodes=`` into a provider.

    Accepts a provider, a single :class:`EnvEpisode`, or a sequence of
    :class:`EnvEpisode` / ``(Episode, EvidenceGraph[, GoldEvidence])`` tuples
    (pre-built), or of :class:`Episode` (graphs built lazily).
    """
    if isinstance(episodes, (PairProvider, LazyGraphProvider)) or (
        not isinstance(episodes, (list, tuple)) and isinstance(episodes, EpisodeProvider)
    ):
        return episodes
    if isinstance(episodes, EnvEpisode):
        return PairProvider([episodes])
    if episodes is None:
        raise ValueError("MageRAGEnv needs episodes= (pairs, Episodes or a provider)")
    items = list(episodes)
    if not items:
        raise ValueError("no episodes given")
    if all(isinstance(x, Episode) for x in items):
        return LazyGraphProvider(items, parser=parser, max_graphs=max_graphs, graph_kwargs=graph_kwargs)
    return PairProvider(items)
