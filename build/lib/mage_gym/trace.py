"""Episode traces (JSONL) and replay.

Why: comparing controllers means looking at what they did, and a result is
only trusted when it can be reproduced. A trace holds, one JSON object a line:

- ``reset``: episode id, seed, budget, entry pages, ``trace_format`` (absent
  in traces written before it existed; the records are otherwise the same);
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
Records are built from the env's transition events (:class:`TraceRecorder`
observes the env), so the operations inside an LLM round are recorded too.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from mage_gym.jsonio import json_default


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, default=json_default, ensure_ascii=False, allow_nan=False)


#: Version of the record format, in every ``reset`` record. Traces without it (written before the
#: field existed) have the same records; readers accept both.
TRACE_FORMAT = 1


class TraceRecorder:
    """Collects the records of the current episode; appends them to ``path`` when it ends.

    An observer of :class:`~mage_gym.env.env.MageRAGEnv` (``env.add_observer``):
    it turns the env's transition events into the records described above,
    so a new trace field is added here only. Use it through
    :class:`mage_gym.wrappers.TraceRecording` (or the env's ``trace_path=``
    shortcut).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.records: list[dict[str, Any]] = []
        self._last_step: dict[str, Any] | None = None
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

    # --- the env's events -> records ------------------------------------------------------

    def __call__(self, env: Any, event: str, data: Mapping[str, Any]) -> None:
        handler = getattr(self, f"_on_{event}", None)
        if handler is not None:
            handler(env, data)

    @staticmethod
    def _ids(env: Any) -> Any:
        return env.state.gi.node_ids

    def _on_reset(self, env: Any, data: Mapping[str, Any]) -> None:
        public = env.public_episode
        ids = self._ids(env)
        self.start({
            "kind": "reset", "episode": data["episode"], "episode_id": public["episode_id"],
            "doc_id": public["doc_id"], "question": public["question"], "seed": data["seed"],
            "budget": env.budget.to_dict(), "K": env.K, "render_mode": env.render_mode,
            "entry_pages": [ids[p] for p in env.state.activation_order],
            "retriever": getattr(env.retriever, "name", type(env.retriever).__name__),
            "trace_format": TRACE_FORMAT,
        })

    def _on_operation(self, env: Any, data: Mapping[str, Any]) -> None:
        from mage_gym.env.actions import OP_NAMES, Op

        state, ids = env.state, self._ids(env)
        op, node, res, query = data["op"], data["node"], data["result"], data["query"]
        n = len(ids)
        self._last_step = {
            "kind": "step", "episode": env.episode_count, "episode_id": env.episode_id,
            "t": state.counters.steps, "round": state.counters.round, "phase": data["phase"],
            "op": OP_NAMES[op], "node_id": ids[node] if 0 <= node < n else None,
            "slot": data["slot"], "free_text": data["free_text"],
            "query": query.text if op == Op.SEARCH and query else None,
            "reason": data["reason"], "ok": res.ok, "error": res.error,
            "changed": [ids[v] for v in res.changed], "auto_close": data["auto_close"],
        }
        self.add(self._last_step)

    def _on_operation_done(self, env: Any, data: Mapping[str, Any]) -> None:
        if self._last_step is not None:
            self._last_step["budget_left"] = env.state.budget_left()
            self._last_step = None

    def _on_round(self, env: Any, data: Mapping[str, Any]) -> None:
        ids = self._ids(env)
        self.add({"kind": "round", "episode": env.episode_count, "episode_id": env.episode_id,
                  "round": env.state.counters.round, "decision": data["decision"].to_dict(), "raw": data["raw"],
                  "candidates": [ids[v] for v in data["candidates"]]})

    def _on_round_end(self, env: Any, data: Mapping[str, Any]) -> None:
        self.add({"kind": "round_end", "episode": env.episode_count, "episode_id": env.episode_id,
                  "round": data["round"], "reason": data["reason"]})

    def _on_end(self, env: Any, data: Mapping[str, Any]) -> None:
        from mage_gym.render import rendered_summary

        out, outcome = data["reader_output"], data["outcome"]
        self.end({
            "kind": "end", "episode": env.episode_count, "episode_id": env.episode_id,
            "stop_reason": data["reason"], "final_states": final_states(env.state.gi.graph, env.state.node_state),
            "rendered": rendered_summary(data["rendered"]),
            "reader_output": {"answer": out.answer, "raw": out.raw, "cached": out.cached, "error": out.error},
            "reward_components": outcome.components, "metrics": outcome.metrics,
        })


    def _on_turn_end(self, env: Any, data: Mapping[str, Any]) -> None:
        """A conversation turn ended (the reader answered it); the episode goes on with the next question."""
        from mage_gym.render import rendered_summary

        out, outcome = data["reader_output"], data["outcome"]
        self.add({
            "kind": "turn_end", "episode": env.episode_count, "episode_id": env.episode_id, "turn": data["turn"],
            "stop_reason": data["reason"], "final_states": final_states(env.state.gi.graph, env.state.node_state),
            "rendered": rendered_summary(data["rendered"]),
            "reader_output": {"answer": out.answer, "raw": out.raw, "cached": out.cached, "error": out.error},
            "reward_components": outcome.components, "metrics": outcome.metrics,
        })

    def _on_turn_start(self, env: Any, data: Mapping[str, Any]) -> None:
        ids = self._ids(env)
        self.add({"kind": "turn_start", "episode": env.episode_count, "episode_id": env.episode_id,
                  "turn": data["turn"], "question": data["question"],
                  "working_set": [ids[v] for v in env.state.working]})


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
