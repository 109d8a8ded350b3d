"""Episode providers: which (question, document graph) an environment plays, with the gold sealed.

Why a provider: the environment must run on pre-built pairs (unit tests, toy
graphs, the generator) and on benchmark episodes whose graphs are built or
loaded from the on-disk cache on first use. Both look the same to the env:
``ids`` and ``get(episode_id) -> LoadedEpisode``. Graphs of a lazy provider
sit in a small LRU so an env cycling through a benchmark does not hold every
document; pre-built pairs share their graph objects between envs in a process.

Why sealed gold: an :class:`~mage_gym.data.episode.Episode` carries the answer
and the evidence. A provider hands the env a :class:`LoadedEpisode` whose
public fields are the :class:`PublicEpisode` (id, document, question, page
window) and the graph; the gold sits in a :class:`SealedGold`, an object with
no public attribute. Only the reward and metrics (:mod:`mage_gym.env.outcome`)
and the privileged view of an env built with ``privileged=True`` open it, and
they do it through the private ``_open``. Gold is resolved onto graph nodes
lazily, at the first opening, so nothing reads a gold field before the
episode's end.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from mage_gym.cache import Cache
from mage_gym.data.composite import CompositeEpisode
from mage_gym.data.episode import Episode
from mage_gym.data.gold import GoldEvidence
from mage_gym.graph.graph import EvidenceGraph


@dataclass(frozen=True, eq=False)
class EnvEpisode:
    """A pre-built pair; ``gold`` is resolved with ``resolve_gold`` when None.

    A :class:`~mage_gym.data.composite.CompositeEpisode` pairs with one graph
    per document (a sequence, in ``documents`` order; one graph for one document).
    """

    episode: Episode | CompositeEpisode
    graph: EvidenceGraph | Sequence[EvidenceGraph]
    gold: GoldEvidence | None = None

    def load(self, cache: dict[str, Gold] | None = None) -> "LoadedEpisode":
        if isinstance(self.episode, CompositeEpisode):
            graphs = [self.graph] if isinstance(self.graph, EvidenceGraph) else list(self.graph)
            if self.gold is not None:
                raise ValueError("a composite episode's gold is given per turn and document, not as gold=")
            return LoadedEpisode.of_composite(self.episode, graphs, cache)
        if not isinstance(self.episode, Episode) or not isinstance(self.graph, EvidenceGraph):
            raise TypeError("pairs must be (Episode, EvidenceGraph[, GoldEvidence]) or "
                            "(CompositeEpisode, [EvidenceGraph, ...])")
        return LoadedEpisode.of(self.episode, self.graph, self.gold, cache)


@dataclass(frozen=True)
class PublicEpisode:
    """What a policy may know about an episode: the task, never its answer or evidence.

    ``page_window`` (LongDocURL's page range given to the reader) is part of
    the task: pages outside it are out of play from the start.
    """

    episode_id: str
    doc_id: str
    question: str
    source: str
    page_window: tuple[int, int] | None = None

    @classmethod
    def of(cls, episode: Episode) -> "PublicEpisode":
        """Read only the public fields of ``episode`` (no gold field is touched)."""
        return cls(episode_id=episode.episode_id, doc_id=episode.doc_id, question=episode.question,
                   source=str(episode.source), page_window=episode.page_window)

    def as_dict(self) -> dict[str, str]:
        """The id, document and question (``Episode.public_view``'s keys)."""
        return {"episode_id": self.episode_id, "doc_id": self.doc_id, "question": self.question}


@dataclass(frozen=True, eq=False)
class Gold:
    """An episode's gold as the reward reads it: the Episode (answer, format) and its resolved evidence."""

    episode: Episode
    evidence: GoldEvidence
    _cache: dict = field(default_factory=dict, repr=False)

    def node_mask(self, graph: EvidenceGraph) -> np.ndarray:
        """bool [n_nodes]: nodes whose rendered tokens are not noise (once per episode; content-only)."""
        mask = self._cache.get("node_mask")
        if mask is None:
            from mage_gym.reward import gold_node_mask

            mask = self._cache["node_mask"] = gold_node_mask(graph, self.evidence)
        return mask


class SealedGold:
    """The gold of one episode, sealed: no public attribute, an opaque repr, resolved on first opening.

    ``_open()`` is for the env's reward/metrics code and its privileged view only.
    """

    __slots__ = ("__episode", "__graph", "__evidence", "__cache", "__gold", "__resolver")

    def __init__(self, episode: Episode, graph: EvidenceGraph, evidence: GoldEvidence | None = None,
                 cache: dict[str, Gold] | None = None,
                 resolver: Callable[[], GoldEvidence] | None = None) -> None:
        self.__episode = episode
        self.__graph = graph
        self.__evidence = evidence
        self.__cache = cache  # provider-level, by episode_id (gold depends on content only)
        self.__gold: Gold | None = None
        self.__resolver = resolver  # composite turns: gold resolved per document, then mapped onto the union

    def __repr__(self) -> str:
        return "SealedGold(<sealed>)"

    def _open(self) -> Gold:
        if self.__gold is None:
            episode = self.__episode
            cached = self.__cache.get(episode.episode_id) if self.__cache is not None else None
            if cached is None:
                evidence = self.__evidence
                if evidence is None and self.__resolver is not None:
                    evidence = self.__resolver()
                if evidence is None:
                    from mage_gym.data.gold import resolve_gold

                    evidence = resolve_gold(episode, self.__graph)
                cached = Gold(episode, evidence)
                if self.__cache is not None:
                    self.__cache[episode.episode_id] = cached
            self.__gold = cached
        return self.__gold


@dataclass(frozen=True)
class FollowUp:
    """A later question of a conversation: public text, sealed gold."""

    question: str
    gold: SealedGold


@dataclass(frozen=True, eq=False)
class LoadedEpisode:
    """One playable episode: its public part, its graph, and its sealed gold.

    A conversation adds ``followups`` (turns 1..n-1; turn 0 is ``public`` and
    ``gold``); a cross-document episode's ``graph`` is the union of its
    documents' graphs (:mod:`mage_gym.graph.union`) and ``documents`` names them.
    """

    public: PublicEpisode
    graph: EvidenceGraph
    gold: SealedGold
    followups: tuple[FollowUp, ...] = ()
    documents: tuple[str, ...] = ()

    @property
    def n_turns(self) -> int:
        return 1 + len(self.followups)

    def turn(self, i: int) -> tuple[str, SealedGold]:
        """Question and sealed gold of turn ``i``."""
        if i == 0:
            return self.public.question, self.gold
        f = self.followups[i - 1]
        return f.question, f.gold

    @classmethod
    def of(cls, episode: Episode, graph: EvidenceGraph, evidence: GoldEvidence | None = None,
           cache: dict[str, Gold] | None = None) -> "LoadedEpisode":
        return cls(PublicEpisode.of(episode), graph, SealedGold(episode, graph, evidence, cache))

    @classmethod
    def of_composite(cls, episode: CompositeEpisode, graphs: Sequence[EvidenceGraph],
                     cache: dict[str, Gold] | None = None) -> "LoadedEpisode":
        """A composite episode on its documents' graphs (in ``episode.documents`` order)."""
        graphs = list(graphs)
        if len(graphs) != len(episode.documents):
            raise ValueError(f"{episode.episode_id}: {len(graphs)} graphs for {len(episode.documents)} documents")
        if len(graphs) == 1:
            graph = graphs[0]
        else:
            from mage_gym.graph.union import union_graph

            graph = union_graph(graphs)
        doc_index = {d.doc_id: j for j, d in enumerate(episode.documents)}
        sealed = []
        for i, turn in enumerate(episode.turns):
            resolver = _turn_resolver(turn.evidence, graphs, graph, doc_index)
            sealed.append(SealedGold(episode.turn_episode(i), graph, cache=cache, resolver=resolver))
        public = PublicEpisode(episode_id=episode.episode_id, doc_id="+".join(episode.doc_ids),
                               question=episode.turns[0].question, source=episode.source)
        followups = tuple(FollowUp(t.question, g) for t, g in zip(episode.turns[1:], sealed[1:]))
        return cls(public, graph, sealed[0], followups, episode.doc_ids)


def _turn_resolver(parts: Sequence[Episode], graphs: Sequence[EvidenceGraph], graph: EvidenceGraph,
                   doc_index: Mapping[str, int]) -> Callable[[], GoldEvidence]:
    """Gold of one turn: each document's part resolved on that document's graph, mapped onto ``graph``."""

    def resolve() -> GoldEvidence:
        from mage_gym.data.gold import merge_gold, remap_gold, resolve_gold

        pieces = []
        for part in parts:
            j = doc_index[part.doc_id]
            ev = resolve_gold(part, graphs[j])
            pieces.append(remap_gold(graph, j, ev) if graph is not graphs[j] else ev)  # type: ignore[arg-type]
        return merge_gold(pieces)

    return resolve


@runtime_checkable
class EpisodeProvider(Protocol):
    @property
    def ids(self) -> list[str]: ...

    def get(self, episode_id: str) -> LoadedEpisode: ...


def max_turns(episodes: Iterable[Episode | CompositeEpisode]) -> int:
    """The most questions any of ``episodes`` asks (1 unless some are conversations)."""
    return max((e.n_turns if isinstance(e, CompositeEpisode) else 1 for e in episodes), default=1)


def provider_max_turns(provider: Any) -> int:
    """``provider.max_turns`` when it says, else 1 (a custom provider of single-question episodes)."""
    return int(getattr(provider, "max_turns", 1) or 1)


def _check_unique(episodes: Sequence[Episode | CompositeEpisode]) -> None:
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
            self._items[p.episode.episode_id] = p.load()
        if not self._items:
            raise ValueError("no episodes given")
        self.max_turns = max((x.n_turns for x in self._items.values()), default=1)

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

    def __init__(self, episodes: Sequence[Episode | CompositeEpisode], parser: str = "layout", max_graphs: int = 4,
                 graph_kwargs: Mapping[str, Any] | None = None) -> None:
        episodes = list(episodes)
        if not episodes:
            raise ValueError("no episodes given")
        _check_unique(episodes)
        self._episodes = {ep.episode_id: ep for ep in episodes}
        self.max_turns = max_turns(episodes)
        self.parser = parser
        # at least one graph, and every document of a cross-document episode at once
        self.max_graphs = max(1, int(max_graphs), max((len(e.documents) for e in episodes
                                                       if isinstance(e, CompositeEpisode)), default=1))
        self.graph_kwargs = dict(graph_kwargs or {})
        self._graphs: Cache[EvidenceGraph] = Cache("env.provider_graphs", self.max_graphs, owned=False)
        self._gold: dict[str, Gold] = {}

    @property
    def ids(self) -> list[str]:
        return list(self._episodes)

    def _graph_for(self, source: str) -> EvidenceGraph:
        from mage_gym.graph import build_graph

        return self._graphs.get(None, str(source), lambda: build_graph(source, parser=self.parser,
                                                                       **self.graph_kwargs))

    def graph_for(self, episode: Episode) -> EvidenceGraph:
        return self._graph_for(episode.source)

    def get(self, episode_id: str) -> LoadedEpisode:
        try:
            ep = self._episodes[episode_id]
        except KeyError:
            raise KeyError(f"unknown episode_id {episode_id!r}") from None
        if isinstance(ep, CompositeEpisode):
            return LoadedEpisode.of_composite(ep, [self._graph_for(s) for s in ep.sources], cache=self._gold)
        return LoadedEpisode.of(ep, self._graph_for(ep.source), cache=self._gold)


class SealedEpisodes:
    """An opaque handle on a provider: what ``env.spec.kwargs["episodes"]`` holds after ``gym.make``.

    Why: ``gym.make`` records its keyword arguments in the env's spec, a public
    attribute, so the Episodes (answers, evidence) passed as ``episodes=`` would
    be one attribute away from any code holding the env. The env swaps them for
    this handle, which :func:`as_provider` accepts (``gym.make(env.spec)`` still
    works) and which shows nothing. Copying it shares the provider.
    """

    __slots__ = ("__provider",)

    def __init__(self, provider: "EpisodeProvider") -> None:
        self.__provider = provider

    def __repr__(self) -> str:
        return "SealedEpisodes(<sealed>)"

    def __copy__(self) -> "SealedEpisodes":
        return self

    def __deepcopy__(self, memo: dict) -> "SealedEpisodes":
        return self

    def _provider(self) -> "EpisodeProvider":
        return self.__provider


class SealedSpec:
    """The ``spec`` attribute of an env that holds episodes: ``gym.make`` records its keywords there, and the
    episodes (with their gold) are swapped for a :class:`SealedEpisodes` handle on the owner's ``_provider``.

    One descriptor for every env class that takes ``episodes=`` (``MageRAG-v0``, ``MageRAG-Chat-v0``).
    """

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else obj.__dict__.get("_sealed_spec")

    def __set__(self, obj: Any, value: Any) -> None:
        if value is not None and isinstance(getattr(value, "kwargs", None), Mapping) and "episodes" in value.kwargs:
            value = replace(value, kwargs={**value.kwargs, "episodes": SealedEpisodes(obj._provider)})
        obj.__dict__["_sealed_spec"] = value


def as_provider(episodes: Any, parser: str = "layout", max_graphs: int = 4,
                graph_kwargs: Mapping[str, Any] | None = None) -> EpisodeProvider:
    """Normalise what a user passes as ``episodes=`` into a provider.

    Accepts a provider, a single :class:`EnvEpisode`, or a sequence of
    :class:`EnvEpisode` / ``(Episode, EvidenceGraph[, GoldEvidence])`` tuples
    (pre-built), or of :class:`Episode` (graphs built lazily), or the
    :class:`SealedEpisodes` handle of an env's spec.
    """
    if isinstance(episodes, SealedEpisodes):
        return episodes._provider()
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
    if all(isinstance(x, (Episode, CompositeEpisode)) for x in items):
        return LazyGraphProvider(items, parser=parser, max_graphs=max_graphs, graph_kwargs=graph_kwargs)
    return PairProvider(items)


def choose_episode_id(ids: Sequence[str], np_random: np.random.Generator, options: Mapping[str, Any] | None) -> str:
    """``options["episode_id"]`` when given, else one drawn with the env's seeded generator."""
    eid = (options or {}).get("episode_id")
    if eid is None:
        eid = ids[int(np_random.integers(len(ids)))]
    return str(eid)
