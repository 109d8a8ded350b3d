"""The trace records a report is built from: episodes split from JSONL traces, their replay, document views.

Why its own module: :mod:`mage_gym.report.data` (the report's rows) and
:mod:`mage_gym.report.turns` (per-turn views of conversations) both read
these records; keeping them here lets each import them without importing
the other. The replay rules are described in :mod:`mage_gym.report.data`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from mage_gym.graph.graph import EvidenceGraph

#: New node state implied by each successful operation.
STATE_OF_OP: dict[str, str] = {
    "ActivatePage": "activated", "ActivateNode": "activated", "SearchEvidence": "activated",
    "OpenNode": "opened", "PruneNode": "pruned",
}
STATES: tuple[str, ...] = ("unvisited", "activated", "opened", "pruned")

class TraceFormatError(ValueError):
    """A trace episode is unusable (no reset record, unknown operation ...)."""


@dataclass(frozen=True)
class TraceEpisode:
    """The records of one episode of one policy, as read from a trace file."""

    policy: str
    records: tuple[dict[str, Any], ...]
    source: str = ""  # the file it came from (messages only)

    def __post_init__(self) -> None:
        if not self.records or self.records[0].get("kind") != "reset":
            raise TraceFormatError(f"{self.source or 'trace'}: an episode must start with a reset record")

    @property
    def reset(self) -> dict[str, Any]:
        return self.records[0]

    @property
    def end(self) -> dict[str, Any] | None:
        last = self.records[-1]
        return last if last.get("kind") == "end" else None

    @property
    def episode_id(self) -> str:
        return str(self.reset["episode_id"])

    @property
    def doc_id(self) -> str:
        return str(self.reset.get("doc_id", ""))


def split_episodes(records: Iterable[dict[str, Any]], policy: str, source: str = "") -> list[TraceEpisode]:
    """Cut a record stream (one trace file) into :class:`TraceEpisode` s at each reset record.

    Records before the first reset (a truncated file) are dropped.
    """
    out: list[list[dict[str, Any]]] = []
    for r in records:
        if r.get("kind") == "reset":
            out.append([r])
        elif out:
            out[-1].append(r)
    return [TraceEpisode(policy, tuple(rs), source) for rs in out]


def read_trace_file(path: str | Path, policy: str) -> list[TraceEpisode]:
    from mage_gym.trace import read_jsonl

    return split_episodes(read_jsonl(path), policy, str(path))


# --- states per step -----------------------------------------------------------------------


@dataclass(frozen=True)
class StepView:
    """One timeline entry: a step record, with the state changes it implies."""

    index: int  # position among the episode's steps (0-based)
    t: int
    round: int
    phase: str  # "policy" or "final_pass"
    op: str
    node_id: str | None
    query: str | None
    ok: bool
    error: str | None
    reason: str | None
    budget_left: dict[str, int]
    changes: tuple[tuple[str, str], ...]  # (node id, new state)
    turn: int = 0  # the conversation turn (question) the step belongs to

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "t": self.t, "round": self.round, "phase": self.phase, "op": self.op,
                "node_id": self.node_id, "query": self.query, "ok": self.ok, "error": self.error,
                "reason": self.reason, "budget_left": dict(self.budget_left),
                "changes": [list(c) for c in self.changes], "turn": self.turn}


@dataclass(frozen=True)
class TurnStart:
    """A conversation's next question: the state it starts from replaces the replayed one."""

    turn: int
    question: str
    after_step: int  # number of steps before it (it applies before step ``after_step``)
    states: dict[str, str]  # every non-unvisited node right after the turn started
    carried: bool  # the previous working subgraph carried over (False: the env ran with carry_over=False)

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "question": self.question, "after_step": self.after_step,
                "states": dict(self.states), "carried": self.carried}


@dataclass(frozen=True)
class Replay:
    initial: dict[str, str]  # node id -> state after reset (entry pages)
    steps: tuple[StepView, ...]
    final: dict[str, str]  # after the last step (unvisited nodes omitted)
    mismatch: tuple[str, ...]  # node ids whose replayed final state differs from the end record
    turn_starts: tuple[TurnStart, ...] = ()
    turn_mismatch: dict[int, tuple[str, ...]] = field(default_factory=dict)  # turn -> nodes differing at turn_end


def _diff(recorded: Mapping[str, Any], replayed: Mapping[str, str]) -> tuple[str, ...]:
    rec = {str(k): str(v) for k, v in recorded.items()}
    return tuple(sorted(n for n in set(rec) | set(replayed) if rec.get(n) != replayed.get(n)))


def _turn_start(record: Mapping[str, Any], state: Mapping[str, str], turn: int, after_step: int) -> TurnStart:
    """The state a new question starts from: the carried working set (opened kept) and its entry pages."""
    working = [str(n) for n in record.get("working_set") or []]
    held = {n: s for n, s in state.items() if s in ("activated", "opened")}
    carried = set(held) <= set(working)
    new = {n: "activated" for n in working}
    if carried:
        new.update({n: "opened" for n in working if held.get(n) == "opened"})
    return TurnStart(turn, str(record.get("question") or ""), after_step, new, carried)


def replay_states(trace: TraceEpisode) -> Replay:
    """Recompute node states step by step from a trace (see module docstring)."""
    state: dict[str, str] = {str(p): "activated" for p in trace.reset.get("entry_pages", [])}
    initial = dict(state)
    steps: list[StepView] = []
    turn = 0
    turn_starts: list[TurnStart] = []
    turn_mismatch: dict[int, tuple[str, ...]] = {}
    for r in trace.records[1:]:
        kind = r.get("kind")
        if kind == "turn_end":
            if "final_states" in r:
                turn_mismatch[int(r.get("turn", turn))] = _diff(r["final_states"], state)
            continue
        if kind == "turn_start":
            turn = int(r.get("turn", turn + 1))
            ts = _turn_start(r, state, turn, len(steps))
            turn_starts.append(ts)
            state = dict(ts.states)
            continue
        if kind != "step":
            continue
        op = str(r.get("op"))
        ok = bool(r.get("ok"))
        changed = [str(n) for n in (r.get("changed") or [])]
        if ok and changed and op not in STATE_OF_OP:
            raise TraceFormatError(f"{trace.source}: step {r.get('t')} changed nodes with unknown operation {op!r}")
        new = STATE_OF_OP.get(op)
        changes = tuple((n, new) for n in changed) if ok and new else ()
        for n, s in changes:
            state[n] = s
        steps.append(StepView(
            index=len(steps), t=int(r.get("t", len(steps))), round=int(r.get("round", 0)),
            phase=str(r.get("phase") or "policy"), op=op, node_id=r.get("node_id"), query=r.get("query"),
            ok=ok, error=r.get("error"), reason=r.get("reason"),
            budget_left={str(k): int(v) for k, v in (r.get("budget_left") or {}).items()}, changes=changes,
            turn=turn,
        ))
    final = {n: s for n, s in state.items() if s != "unvisited"}
    mismatch: tuple[str, ...] = ()
    end = trace.end
    if end is not None and "final_states" in end:
        mismatch = _diff(end["final_states"], final)
    return Replay(initial, tuple(steps), final, mismatch, tuple(turn_starts), turn_mismatch)


def states_at(replay: Replay, step: int) -> dict[str, str]:
    """Node states after step ``step`` (-1: right after reset; ``len(steps)``: the end). The browser does the same walk.

    A turn start placed before step ``i`` replaces the state just before step
    ``i`` is applied, so the step that ended a turn shows what that turn's
    reader saw; the end shows every turn start (a trace cut right after one).
    """
    state = dict(replay.initial)
    n = len(replay.steps)
    starts: dict[int, list[TurnStart]] = {}
    for ts in replay.turn_starts:
        starts.setdefault(ts.after_step, []).append(ts)
    for s in replay.steps[: step + 1]:
        for ts in starts.get(s.index, []):
            state = dict(ts.states)
        state.update(dict(s.changes))
    if step >= n:
        for ts in replay.turn_starts:
            if ts.after_step >= n:
                state = dict(ts.states)
    return state


# --- helpers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DocSpan:
    """One member document of a union graph: its pages are union pages ``page_offset .. + n_pages - 1``."""

    doc_id: str
    page_offset: int
    n_pages: int
    source_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "page_offset": self.page_offset, "n_pages": self.n_pages}


ID_PAGE = re.compile(r"^(.*):p(\d+)(?::|$)")


@dataclass
class DocView:
    """A document as the report needs it: page sizes, and elements of the pages it shows.

    A cross-document episode's document is the union of its members
    (``spans``, in the union's order): page numbers here are union pages, and
    :meth:`locate` / :meth:`page_label` give each page's own document and
    page number (what node ids say: ``DOC:p3``).
    """

    doc_key: str
    doc_id: str
    n_pages: int
    page_sizes: list[tuple[float, float]]  # (width, height) in points
    graph: "EvidenceGraph | None" = None  # for elements and pixels; not serialised
    source_path: str | None = None
    id_prefix: str | None = None  # page node ids are f"{id_prefix}:p{n}" when there is no graph
    spans: tuple[DocSpan, ...] = ()  # member documents of a union (empty for one document)

    def locate(self, page: int) -> tuple[str | None, int]:
        """(member doc id, its own page number) of a page; (None, page) for one document."""
        for sp in self.spans:
            if sp.page_offset <= page < sp.page_offset + sp.n_pages:
                return sp.doc_id, page - sp.page_offset
        return None, page

    def page_label(self, page: int) -> str:
        """How people read a page: ``p3``, or ``DOC p3`` (its own page number) in a union."""
        doc, local = self.locate(page)
        return f"p{local}" if doc is None else f"{doc} p{local}"

    def page_node_id(self, page: int) -> str:
        if self.graph is not None:
            return self.graph.pages[page].node_id
        doc, local = self.locate(page)
        return f"{doc}:p{local}" if doc is not None else f"{self.id_prefix or self.doc_id}:p{page}"

    def union_page(self, doc_id: str, local: int) -> int | None:
        """The page (of this view) of a member's own page ``local``; None when unknown or out of range."""
        if not self.spans:
            return int(local) if doc_id == self.doc_id and 0 <= int(local) < self.n_pages else None
        for sp in self.spans:
            if sp.doc_id == doc_id:
                return sp.page_offset + int(local) if 0 <= int(local) < sp.n_pages else None
        return None

    def page_of(self, node_id: str) -> int | None:
        """The page (of this view) a node id lies on."""
        if self.graph is not None:
            i = self.graph.index_of.get(node_id)
            if i is not None:
                return int(self.graph.node_page[i])
        m = ID_PAGE.match(node_id)
        if m is None:
            return None
        if self.spans:
            return self.union_page(m.group(1), int(m.group(2)))
        return int(m.group(2))

    @property
    def has_pixels(self) -> bool:
        """Toy and synthetic graphs (``<toy>`` sources) and missing files have no pixels."""
        if self.graph is None:
            return False
        paths = [sp.source_path for sp in self.spans] if self.spans else [self.source_path]
        return all(p and not p.startswith("<") and Path(p).exists() for p in paths)

    def elements_on(self, pages: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = {}
        if self.graph is None:
            return out
        for p in sorted(set(pages)):
            if not 0 <= p < self.graph.n_pages:
                continue
            out[p] = [{"id": e.node_id, "type": e.type, "bbox": [round(float(v), 4) for v in e.bbox],
                       "summary": (e.summary or e.text or "")[:160]} for e in self.graph.elements_of_page(p)]
        return out
