"""Episode traces (JSONL) and replay.

Why: comparing controllers means looking at what they did, and a result is
only trusted when it can be reproduced. A trace holds, one JSON object a line:

- ``reset``: episode id, seed, budget, entry pages;
- ``step``: operation, target node id (and slot), search query, whether it was
  accepted, the error otherwise, the budget left after it, the ids of nodes
  whose state changed, and whether the round closed automatically;
- ``round``: an LLM policy's submitted decision and its raw evaluator output;
- ``round_end``: a closed round and why;
- ``end``: stop reason, final node states (every node not UNVISITED), the exact
  rendered reader input (XML and image references, never pixels), the reader
  output, the reward components and metrics.

Every record carries ``episode`` (a counter per environment) and
``episode_id``. :func:`replay` re-runs the recorded operations through the
same transition code and returns the environment in the final state.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np


def _default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, default=_default, ensure_ascii=False, allow_nan=False)


class TraceRecorder:
    """Collects the records of the current episode; appends them to ``path`` when it ends."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.records: list[dict[str, Any]] = []
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def start(self, record: dict[str, Any]) -> None:
        """Begin an episode; an unfinished previous one (reset mid-episode) is written as it stands."""
        if self.path is not None and self.records and self.records[-1].get("kind") != "end":
            self._write(self.records)
        self.records = [record]

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def end(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self.path is not None:
            self._write(self.records)

    def _write(self, records: list[dict[str, Any]]) -> None:
        assert self.path is not None
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(dumps(r) + "\n" for r in records))


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not a JSON line ({err})") from None


def load_traces(path: str | os.PathLike[str]) -> list[list[dict[str, Any]]]:
    """Split a trace file into episodes (each starting with its ``reset`` record)."""
    episodes: list[list[dict[str, Any]]] = []
    for r in read_jsonl(path):
        if r.get("kind") == "reset" or not episodes:
            episodes.append([])
        episodes[-1].append(r)
    return episodes


def replay(trace: Iterable[dict[str, Any]] | str | os.PathLike[str], env: Any) -> Any:
    """Re-run one recorded episode on ``env`` (a ``MageRAGEnv`` over the same episodes).

    ``trace`` is the record list of one episode or a file path (its last
    episode is replayed). Returns the environment, stopped in the final state,
    so callers can compare ``env.state.node_state`` with the recording.
    """
    if isinstance(trace, (str, os.PathLike)):
        episodes = load_traces(trace)
        if not episodes:
            raise ValueError(f"no episode in trace {trace}")
        records = episodes[-1]
    else:
        records = list(trace)
    if not records or records[0].get("kind") != "reset":
        raise ValueError("a trace episode must start with a reset record")
    inner = getattr(env, "unwrapped", env)
    start = records[0]
    inner.reset(seed=start.get("seed"), options={"episode_id": start["episode_id"]})
    if inner.state.activation_order != [inner.graph.index_of[i] for i in start.get("entry_pages", [])]:
        raise ValueError("replay diverged at reset: entry pages differ (different retriever or graph?)")
    for r in records[1:]:
        kind = r.get("kind")
        if kind == "step" and r.get("phase") != "final_pass":
            res = inner.replay_step(r)
            if bool(res.ok) != bool(r.get("ok")):
                raise ValueError(f"replay diverged at step {r.get('t')}: recorded ok={r.get('ok')}, got {res.ok}")
        elif kind == "round":
            inner.replay_round(r)
        elif kind == "round_end" and r.get("reason") == "submitted":
            inner.replay_round_end(r)
        elif kind == "end" and not inner.state.stopped:
            inner.replay_end(r)
    return env


def final_states(graph: Any, node_state: np.ndarray) -> dict[str, str]:
    """Node id -> state name for every node that is not UNVISITED (trace ``end`` records)."""
    from mage_gym.env.state import STATE_NAMES

    ids = graph.node_ids
    return {ids[i]: STATE_NAMES[int(node_state[i])] for i in np.flatnonzero(node_state).tolist()}
