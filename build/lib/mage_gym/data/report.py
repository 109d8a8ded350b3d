"""What a loader found: the episodes plus an account of every defect and skip.

Why a report beside the episodes: third-party annotations are messy (evidence
pages outside the PDF, empty evidence, unparseable fields, missing files). A
loader must never crash on them and never hide them either, so each loader
repairs what it can, flags the episode (flag constants live in
:mod:`mage_gym.data.episode`), and counts everything here. ``dataset_stats``
prints these counts, and tests assert them against the real files.

:func:`check_pages` is the one place where gold pages are range-checked, so
all loaders flag out-of-range pages the same way.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from mage_gym.data.episode import (
    FLAG_ALL_PAGES_OUT_OF_RANGE,
    FLAG_EMPTY_EVIDENCE,
    FLAG_PAGES_OUT_OF_RANGE,
    FLAG_UNANSWERABLE_WITH_EVIDENCE,
    Episode,
)

log = logging.getLogger(__name__)


@dataclass
class LoadReport:
    """Counts of one load. ``skipped`` maps a reason to a number of questions."""

    benchmark: str
    root: str = ""
    documents: int = 0  # documents with at least one loaded episode
    episodes: int = 0
    flagged: int = 0  # episodes carrying at least one flag
    excluded_from_training: int = 0  # answerable episodes without usable gold
    flags: Counter = field(default_factory=Counter)  # flag -> episodes carrying it
    skipped: Counter = field(default_factory=Counter)  # reason -> questions skipped
    counters: Counter = field(default_factory=Counter)  # loader-specific facts (joins, repairs, ...)
    notes: list[str] = field(default_factory=list)  # human-readable remarks, one per odd case

    def skip(self, reason: str, n: int = 1, message: str | None = None) -> None:
        """Count ``n`` skipped questions; log the message once per call (never silent)."""
        self.skipped[reason] += n
        if message:
            log.warning("%s: %s", self.benchmark, message)
            self.notes.append(message)

    def note(self, message: str, counter: str | None = None, warn: bool = False) -> None:
        """Record an odd case (and count it under ``counter``); ``warn`` logs it as a warning."""
        if counter:
            self.counters[counter] += 1
        self.notes.append(message)
        log.log(logging.WARNING if warn else logging.INFO, "%s: %s", self.benchmark, message)

    def finalise(self, episodes: list[Episode]) -> "LoadReport":
        """Fill the totals from the final episode list (after all repairs)."""
        self.episodes = len(episodes)
        self.documents = len({e.doc_id for e in episodes})
        self.flags = Counter(f for e in episodes for f in set(e.flags))
        self.flagged = sum(1 for e in episodes if e.flags)
        self.excluded_from_training = sum(1 for e in episodes if not e.usable_for_training)
        self.counters["unanswerable"] = sum(1 for e in episodes if not e.answerable)
        return self

    def to_dict(self) -> dict:
        return {
            "benchmark": self.benchmark,
            "root": self.root,
            "documents": self.documents,
            "episodes": self.episodes,
            "flagged": self.flagged,
            "excluded_from_training": self.excluded_from_training,
            "flags": dict(sorted(self.flags.items())),
            "skipped": dict(sorted(self.skipped.items())),
            "counters": dict(sorted(self.counters.items())),
            "notes": list(self.notes),
        }


@dataclass
class DatasetLoad:
    """A loader's result: the episodes and the report that accounts for them."""

    episodes: list[Episode]
    report: LoadReport


@dataclass(frozen=True)
class PageCheck:
    """Gold pages after range checking, and the flags the check raised."""

    pages: tuple[int, ...]  # kept, 0-based, sorted unique
    dropped: tuple[int, ...]  # 0-based values outside the document / window
    flags: tuple[str, ...]


def check_pages(pages_0based: Iterable[int], n_pages: int | None, answerable: bool,
                window: tuple[int, int] | None = None) -> PageCheck:
    """Range-check gold pages and classify the annotation defects.

    ``n_pages`` None means "unknown" (no range check). A ``window`` (0-based
    inclusive) narrows the valid range further: gold outside the pages an
    episode may see counts as out of range. Flags:
    some pages dropped -> ``FLAG_PAGES_OUT_OF_RANGE``; every page dropped ->
    ``FLAG_ALL_PAGES_OUT_OF_RANGE``; answerable with no pages at all ->
    ``FLAG_EMPTY_EVIDENCE``; unanswerable listing pages ->
    ``FLAG_UNANSWERABLE_WITH_EVIDENCE``.
    """
    raw = sorted(set(int(p) for p in pages_0based))
    lo, hi = 0, (n_pages - 1 if n_pages is not None else None)
    if window is not None:
        lo = max(lo, window[0])
        hi = window[1] if hi is None else min(hi, window[1])
    kept = tuple(p for p in raw if p >= lo and (hi is None or p <= hi))
    dropped = tuple(p for p in raw if p not in kept)
    flags: list[str] = []
    if not answerable and raw:
        flags.append(FLAG_UNANSWERABLE_WITH_EVIDENCE)
    if dropped:
        flags.append(FLAG_ALL_PAGES_OUT_OF_RANGE if not kept else FLAG_PAGES_OUT_OF_RANGE)
    if answerable and not raw:
        flags.append(FLAG_EMPTY_EVIDENCE)
    return PageCheck(kept, dropped, tuple(flags))


__all__ = ["LoadReport", "DatasetLoad", "PageCheck", "check_pages"]
