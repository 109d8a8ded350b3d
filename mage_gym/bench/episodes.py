"""Episodes of a ``dataset`` config node, and their graphs built (or found in the cache) before any env runs.

Why graphs first: an env builds a missing graph lazily inside ``reset``,
one document at a time and without workers; building the corpus up front
uses the worker pool, shows progress, and drops the episodes of documents
that fail instead of failing mid-benchmark.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from mage_gym.data.episode import Episode

log = logging.getLogger("experiments.episodes")


def episode_of(item: Any) -> Any:
    """The Episode (or CompositeEpisode) of an episode or of a pre-built pair (``EnvEpisode``)."""
    from mage_gym.data.composite import CompositeEpisode

    return item if isinstance(item, (Episode, CompositeEpisode)) else item.episode


def load_episodes(ds: Mapping[str, Any], split: str | None = None, limit: int | None | str = "cfg",
                  usable_only: bool = False) -> list[Episode]:
    """Episodes of a ``dataset`` node (name, root, split, limit, seed); ``split``/``limit`` override the node's."""
    from mage_gym.data.registry import load_dataset

    # e.g. +dataset.task_tags=[bridge]; +dataset.cached_only=fast: documents whose graph that parser already built
    tags, skip, cached = ds.get("task_tags"), ds.get("exclude_tags"), ds.get("cached_only")
    n = ds.get("limit") if limit == "cfg" else limit
    filtered = bool(tags or skip or cached)
    eps = load_dataset(ds["name"], root=ds.get("root"), split=split or ds.get("split", "all"),
                       limit=None if filtered else n, seed=int(ds.get("seed", 0)))
    if cached:
        from mage_gym.graph.build import is_cached

        eps = [e for e in eps if is_cached(e.source, str(cached))]
    if filtered:  # the limit counts the questions kept, spread over the split
        eps = by_tags(eps, tags, skip, n)
    if usable_only:
        eps = [e for e in eps if e.usable_for_training]
    return eps


def by_tags(episodes: Sequence[Any], tags: Sequence[str] | None, skip: Sequence[str] | None,
            limit: int | None = None) -> list[Any]:
    """Episodes with one of ``tags`` and none of ``skip`` (the generator's question kinds: ``bridge``,
    ``unanswerable``...), then at most ``limit`` of them spread evenly over the list (not its first documents)."""
    def kinds(e: Any) -> set[str]:
        return set(getattr(e, "task_tags", ()) or ())

    out = [e for e in episodes if (not tags or kinds(e) & set(tags)) and not (skip and kinds(e) & set(skip))]
    if limit is not None and len(out) > int(limit):
        step = len(out) / int(limit)
        out = [out[int(i * step)] for i in range(int(limit))]
    return out


def prepare_graphs(episodes: Sequence[Any], parser: str = "layout", workers: int = 1,
                   graph_kwargs: Mapping[str, Any] | None = None) -> list[Any]:
    """Build (or find cached) the graph of every document; drop the episodes whose document fails.

    Pre-built (Episode, graph) pairs are returned as they are.
    """
    from mage_gym.bench.corpus import build_corpus

    from mage_gym.data.composite import CompositeEpisode, episode_sources

    if any(not isinstance(e, (Episode, CompositeEpisode)) for e in episodes):
        return list(episodes)
    sources = sorted({s for e in episodes for s in episode_sources(e)})
    if not sources:
        return []
    kw = dict(graph_kwargs or {})
    res = build_corpus({"files": sources, "parser": parser, "parser_cfg": kw.get("parser_cfg") or {},
                        "edge_cfg": kw.get("edge_cfg") or {}, "embed_cfg": kw.get("embed_cfg") or {},
                        "max_pages": kw.get("max_pages"), "workers": int(workers), "cache_dir": kw.get("cache_dir")})
    failed = set()
    for d in res["documents"]:
        if d.get("error"):
            log.warning("graph of %s failed: %s", d["path"], d["error"])
            failed.add(d["path"])
    return [e for e in episodes if not failed.intersection(episode_sources(e))]
