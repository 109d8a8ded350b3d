"""Episodes whose gold fields raise when read: the test helper behind every "gold is sealed" check.

Why a helper of its own: the sealed-gold tests (tests/test_env_sealed_gold.py) and the imitation tests
(tests/test_dagger.py) must guard the same fields the same way, or one of them would pass while a gold
field leaks. Reading a field of :data:`GOLD_FIELDS` on a :class:`GuardedEpisode` raises :class:`GoldRead`
unless the code runs inside ``with gate():`` (the reward computation, or the privileged teacher).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import gymnasium as gym
import numpy as np

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


#: leaves of the public walk: values, not objects to descend into
LEAF_TYPES = (str, bytes, int, float, bool, type(None), np.ndarray, np.generic)
#: not descended into: classes, functions and modules (code, not this env's state), random generators
#: (their state is compared as a whole: inside lie C pointers that differ between any two processes)
CODE_TYPES = (type, type(len), type(lambda: 0), type(np), np.random.Generator, np.random.BitGenerator)


def public_reach(root: Any, limit: int = 50_000) -> Iterator[tuple[str, Any]]:
    """(path, object) for everything reachable through public attributes, container items and properties.

    Nothing raised while reading an attribute is swallowed: a property that reads a guarded gold field
    raises :class:`GoldRead`, and that is the leak this walk exists to find; any other error is a
    broken walk, and a broken walk must not pass. A walk that would go past ``limit`` objects raises
    too, rather than stop early and miss what lies beyond.
    """
    seen: set[int] = set()
    alive: list[Any] = []  # holds what was visited, so that no id is reused by a later, transient object
    todo: list[tuple[str, Any]] = [("env", root)]
    while todo:
        path, obj = todo.pop()
        if isinstance(obj, LEAF_TYPES):  # values are not deduplicated by identity: interning varies
            yield path, obj
            continue
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        alive.append(obj)
        if len(seen) > limit:
            raise RuntimeError(f"the public walk passed {limit} objects (at {path}): raise the limit")
        yield path, obj
        if isinstance(obj, CODE_TYPES):
            continue
        if isinstance(obj, dict):
            todo += [(f"{path}[{k!r}]", v) for k, v in obj.items()]
            continue
        if isinstance(obj, (list, tuple, set, frozenset)):
            todo += [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
            continue
        for name in dir(obj):
            if name.startswith("_"):
                continue
            try:
                value = getattr(obj, name)
            except GoldRead as err:
                raise GoldRead(f"{path}.{name} reads gold: {err}") from err
            if callable(value) and not isinstance(value, (gym.Env, gym.spaces.Space)):
                continue
            todo.append((f"{path}.{name}", value))


def public_leaves(root: Any) -> set:
    """The set of plain values :func:`public_reach` finds (arrays as dtype, shape and bytes).

    A set, neither a map by path nor a count: which path reaches a shared object first, and how many
    objects share one value, depend on caches (a second env reuses the first one's templates); the set
    of values does not.
    """
    out: set = set()
    for _, obj in public_reach(root):
        if isinstance(obj, (np.ndarray, np.generic)):
            arr = np.asarray(obj)
            out.add((str(arr.dtype), arr.shape, arr.tobytes()))
        elif isinstance(obj, np.random.Generator):
            out.add(repr(obj.bit_generator.state))
        elif isinstance(obj, LEAF_TYPES):
            out.add((type(obj).__name__, obj if obj == obj else "nan"))
    return out
