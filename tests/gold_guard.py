"""Episodes whose gold fields raise when read: the test helper behind every "gold is sealed" check.

Why a helper of its own: the sealed-gold tests (tests/test_env_sealed_gold.py) and the imitation tests
(tests/test_dagger.py) must guard the same fields the same way, or one of them would pass while a gold
field leaks. Reading a field of :data:`GOLD_FIELDS` on a :class:`GuardedEpisode` raises :class:`GoldRead`
unless the code runs inside ``with gate():`` (the reward computation, or the privileged teacher).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from mage_gym.data.episode import Episode

#: Episode fields that carry gold (answers, evidence) or are derived from it.
GOLD_FIELDS = frozenset({
    "answer", "answer_format", "answerable", "evidence_pages", "evidence_regions", "evidence_text",
    "gold_node_ids", "evidence_sources", "task_tags", "flags", "extra", "evidence_hops", "hops", "n_hops",
    "usable_for_training", "multi_page",
})


class GoldRead(AssertionError):
    """A gold field was read outside the gate (the reward computation or the privileged teacher)."""


class _Gate:
    open = False


@contextlib.contextmanager
def gate() -> Iterator[None]:
    """Let gold be read inside this block (nested blocks restore the outer state)."""
    before, _Gate.open = _Gate.open, True
    try:
        yield
    finally:
        _Gate.open = before


class GuardedEpisode(Episode):
    """An Episode whose gold fields raise unless the gate is open."""

    def __getattribute__(self, name: str) -> Any:
        if name in GOLD_FIELDS and not _Gate.open:
            raise GoldRead(f"gold field {name!r} read outside the reward and the privileged teacher")
        return object.__getattribute__(self, name)


def open_gate_while_scoring(monkeypatch: Any) -> None:
    """Let the env read gold only inside its episode scoring (``score_episode``): the reward's one door."""
    import mage_gym.env.env as env_module

    score = env_module.score_episode

    def gated(*args: Any, **kw: Any) -> Any:
        with gate():
            return score(*args, **kw)

    monkeypatch.setattr(env_module, "score_episode", gated)
