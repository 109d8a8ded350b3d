"""Train/val/test splits by document, from a hash (no state, no file to keep).

Why by document: questions about one document share its pages, so a policy
that saw a document in training would be judged on memorised layout if
another question on it landed in test. Why a hash: the split of a document
depends only on ``(seed, doc_id)``, so it is the same on every machine and
stays put when documents are added or removed (unlike shuffling a list).

``u = int(sha256(f"{seed}:{doc_id}")[:16 hex]) / 2**64`` lies in [0, 1); the
cumulative (normalised) ratios cut it into train / val / test.
"""
from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

from mage_gym.data.episode import Episode

SPLITS: tuple[str, ...] = ("train", "val", "test")
ALL = "all"
DEFAULT_RATIOS: tuple[float, float, float] = (0.6, 0.2, 0.2)


def _unit_hash(key: str) -> float:
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return int(digest[:16], 16) / float(1 << 64)


def _normalise(ratios: Sequence[float]) -> tuple[float, ...]:
    r = tuple(float(x) for x in ratios)
    if len(r) != len(SPLITS):
        raise ValueError(f"ratios needs {len(SPLITS)} numbers for {SPLITS}, got {list(ratios)}")
    if any(x < 0 or x != x for x in r) or sum(r) <= 0:
        raise ValueError(f"ratios must be non-negative with a positive sum, got {list(ratios)}")
    total = sum(r)
    return tuple(x / total for x in r)


def assign_split(doc_id: str, seed: int = 0, ratios: Sequence[float] = DEFAULT_RATIOS) -> str:
    """The split (``train``/``val``/``test``) of one document."""
    r = _normalise(ratios)
    u = _unit_hash(f"{seed}:{doc_id}")
    acc = 0.0
    for name, share in zip(SPLITS, r):
        acc += share
        if u < acc and share > 0:
            return name
    # float round-off can leave u just above the last cumulative sum: the last non-empty split
    return next(name for name, share in zip(reversed(SPLITS), reversed(r)) if share > 0)


def label_splits(episodes: Iterable[Episode], seed: int = 0,
                 ratios: Sequence[float] = DEFAULT_RATIOS) -> list[Episode]:
    """Every episode with ``split`` set from its document."""
    cache: dict[str, str] = {}
    out: list[Episode] = []
    for ep in episodes:
        if ep.doc_id not in cache:
            cache[ep.doc_id] = assign_split(ep.doc_id, seed, ratios)
        out.append(ep if ep.split == cache[ep.doc_id] else ep.with_split(cache[ep.doc_id]))
    return out


def select_split(episodes: Iterable[Episode], split: str = ALL, seed: int = 0,
                 ratios: Sequence[float] = DEFAULT_RATIOS) -> list[Episode]:
    """Labelled episodes of one split; ``"all"`` keeps every episode (each still labelled)."""
    if split != ALL and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {(ALL,) + SPLITS}")
    labelled = label_splits(episodes, seed, ratios)
    return labelled if split == ALL else [e for e in labelled if e.split == split]


def limit_episodes(episodes: Sequence[Episode], limit: int | None, seed: int = 0) -> list[Episode]:
    """At most ``limit`` episodes, the same ones every time, kept in their original order.

    Chosen by the smallest ``sha256(f"{seed}:{episode_id}")`` rather than the
    first N, so a small limit samples across documents instead of taking the
    first one or two documents of a file.
    """
    if limit is None or limit >= len(episodes):
        return list(episodes)
    if limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    ranked = sorted(range(len(episodes)), key=lambda i: (_unit_hash(f"{seed}:{episodes[i].episode_id}"), i))
    keep = set(ranked[:limit])
    return [e for i, e in enumerate(episodes) if i in keep]


__all__ = ["SPLITS", "ALL", "DEFAULT_RATIOS", "assign_split", "label_splits", "select_split", "limit_episodes"]
