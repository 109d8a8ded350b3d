"""Episode traces + run results -> report data (plain JSON-ready dicts).

Why a separate, pure step: the HTML is only a view; everything a reader of
the report relies on - which node was in which state after which step, what
counts as correct, which pages an episode touched - is decided here, where
unit tests can check it without a browser.

Node states per step are *recomputed from the trace*: a ``step`` record
carries the operation and the ids of the nodes whose state it changed, and
the operation fixes the new state of every changed node (activations and
searches -> ``activated``, OpenNode -> ``opened``, PruneNode -> ``pruned``;
see :mod:`mage_gym.env.actions`). Starting from the reset record's entry
pages and applying the changes in order gives the state after each step; the
result is checked against the ``end`` record's final states and any
disagreement is reported (``replay_mismatch``) rather than hidden.

Conversations (several questions in one episode, :mod:`mage_gym.env.turns`)
add ``turn_end`` and ``turn_start`` records between the steps. A turn start
replaces the state: the next question starts on the carried working subgraph
(the record's ``working_set``: activated, and opened where they were opened
before; pruning marks are lifted) plus its free entry pages. Each turn's end
is checked against its ``turn_end`` final states like the episode's end. The
per-turn view (question, answer, metrics) is built in
:mod:`mage_gym.report.turns`; documents of a union graph (cross-document
episodes) are mapped back to their own page numbers by
:class:`~mage_gym.report.records.DocView`. Trace records and their replay live in
:mod:`mage_gym.report.records`.

Outcome rules (documented in README's report section):
- ``correct``: the reader's answer scored ``support >= 0.5`` (answering
  readers; ``support`` is ``mage_gym.scoring.score``); None for the oracle
  reader, which gives no answer;
- ``covered``: every gold evidence item reached the reader
  (``metrics.evidence_all_covered``); None when gold is unknown.
- a conversation is ``correct`` (``covered``) when every turn is, judged turn
  by turn with the rules above; None when some turn is unknown.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import quote

from mage_gym.report.records import ID_PAGE, DocSpan, DocView, Replay, TraceEpisode, replay_states
from mage_gym.report.turns import document_rows, fill_last_turn_documents, run_outcome, turn_gold, turn_views

if TYPE_CHECKING:  # pragma: no cover
    from mage_gym.data.composite import CompositeEpisode
    from mage_gym.data.episode import Episode
    from mage_gym.graph.graph import EvidenceGraph

CORRECT_THRESHOLD = 0.5
#: Columns of the index that hold numbers (sortable), in display order.
NUMERIC_COLUMNS: tuple[str, ...] = (
    "reward", "support", "noise", "cost", "cost_tokens", "cost_operations", "cost_calls",
    "tokens_rendered", "evidence_page_recall", "element_recall", "steps", "operations",
)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str, max_len: int = 48) -> str:
    """A file-name-safe, unique-enough key: readable prefix plus a short hash of the full text."""
    h = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    stem = _UNSAFE.sub("_", text).strip("._")[:max_len] or "x"
    return f"{stem}-{h}"


def page_scope(evidence_pages: Sequence[int]) -> str:
    n = len(set(evidence_pages))
    return "none" if n == 0 else ("single" if n == 1 else "multi")


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None  # NaN -> None


def _page_of(node_id: str, graph: "EvidenceGraph | None") -> int | None:
    if graph is not None:
        i = graph.index_of.get(node_id)
        if i is not None:
            return int(graph.node_page[i])
    m = re.search(r":p(\d+)(?::|$)", node_id)  # id convention of mage_gym.graph.schema
    return int(m.group(1)) if m else None


# --- the report model ----------------------------------------------------------------------


@dataclass
class RunView:
    """One policy's run on one episode."""

    policy: str
    trace: TraceEpisode
    replay: Replay
    rounds: list[dict[str, Any]]
    round_ends: list[dict[str, Any]]
    reader_input: dict[str, Any] | None
    reader_output: dict[str, Any] | None
    components: dict[str, Any]
    metrics: dict[str, Any]
    answer: str | None
    correct: bool | None
    covered: bool | None
    stop_reason: str | None
    complete: bool
    touched_pages: set[int] = field(default_factory=set)
    turns: list[dict[str, Any]] = field(default_factory=list)  # conversations: mage_gym.report.turns.turn_views

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy, "episode_id": self.trace.episode_id, "seed": self.trace.reset.get("seed"),
            "budget": self.trace.reset.get("budget"), "render_mode": self.trace.reset.get("render_mode"),
            "retriever": self.trace.reset.get("retriever"), "entry_pages": self.trace.reset.get("entry_pages", []),
            "initial": self.replay.initial, "steps": [s.to_dict() for s in self.replay.steps],
            "final": self.replay.final, "replay_mismatch": list(self.replay.mismatch),
            "rounds": self.rounds, "round_ends": self.round_ends, "reader_input": self.reader_input,
            "reader_output": self.reader_output, "components": self.components, "metrics": self.metrics,
            "answer": self.answer, "correct": self.correct, "covered": self.covered,
            "stop_reason": self.stop_reason, "complete": self.complete,
            "turns": self.turns, "turn_starts": [t.to_dict() for t in self.replay.turn_starts],
        }


@dataclass
class EpisodeView:
    """One episode (question + document) and every policy's run on it."""

    episode_id: str
    slug: str
    doc_key: str
    doc_id: str
    question: str
    benchmark: str | None
    gold_answer: str | None
    answer_format: str | None
    answerable: bool | None
    evidence_pages: list[int]
    evidence_sources: list[str]
    page_scope: str
    gold_nodes: list[str]  # element and page node ids the gold resolves to
    gold_pages: list[int]
    runs: dict[str, RunView]
    touched_pages: list[int]
    kind: str = "single"  # mage_gym.data.composite.KINDS
    turns: list[dict[str, Any]] = field(default_factory=list)  # per question: gold answer, evidence, gold nodes
    documents: list[dict[str, Any]] = field(default_factory=list)  # a union's members: pages, gold pages

    def meta(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id, "slug": self.slug, "doc_key": self.doc_key, "doc_id": self.doc_id,
            "question": self.question, "benchmark": self.benchmark, "gold_answer": self.gold_answer,
            "answer_format": self.answer_format, "answerable": self.answerable,
            "evidence_pages": self.evidence_pages, "evidence_sources": self.evidence_sources,
            "page_scope": self.page_scope, "gold_nodes": self.gold_nodes, "gold_pages": self.gold_pages,
            "touched_pages": self.touched_pages, "policies": list(self.runs),
            "kind": self.kind, "turns": self.turns, "documents": self.documents,
        }


@dataclass
class ReportData:
    episodes: list[EpisodeView]
    docs: dict[str, DocView]
    title: str = "mage-gym episode report"
    run_info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def policies(self) -> list[str]:
        seen: dict[str, None] = {}
        for ep in self.episodes:
            for p in ep.runs:
                seen.setdefault(p, None)
        return list(seen)

    def index_rows(self) -> list[dict[str, Any]]:
        """One row per (episode, policy): what the index table filters and sorts on."""
        rows = []
        for ep in self.episodes:
            for pol, run in ep.runs.items():
                c, m = run.components, run.metrics
                row = {
                    "episode_id": ep.episode_id, "slug": ep.slug, "policy": pol, "doc_id": ep.doc_id,
                    "question": ep.question, "benchmark": ep.benchmark, "answer_format": ep.answer_format or "?",
                    "evidence_sources": ep.evidence_sources, "page_scope": ep.page_scope,
                    "answerable": ep.answerable, "gold_answer": ep.gold_answer, "answer": run.answer,
                    "correct": run.correct, "covered": run.covered, "stop_reason": run.stop_reason,
                    "complete": run.complete, "replay_ok": not run.replay.mismatch,
                    "href": f"episodes/{ep.slug}.html#run={quote(pol, safe='')}",
                    "kind": ep.kind, "n_turns": max(1, len(ep.turns)), "n_documents": max(1, len(ep.documents)),
                }
                for k in NUMERIC_COLUMNS:
                    row[k] = _num(c.get(k, m.get(k)))
                if row["steps"] is None:
                    row["steps"] = float(len(run.replay.steps))
                rows.append(row)
        return rows


# --- building ------------------------------------------------------------------------------

EpisodeLookup = Callable[[str], "Episode | CompositeEpisode | None"]
#: (episode, doc id) -> the graph, or for a composite episode its documents' graphs in ``documents`` order
#: (the report joins them with :func:`mage_gym.graph.union.union_graph`, as the environment does).
GraphLookup = Callable[["Episode | CompositeEpisode | None", str],
                       "EvidenceGraph | Sequence[EvidenceGraph] | None"]


def _run_view(trace: TraceEpisode, graph: "EvidenceGraph | None",
              page_of: Callable[[str], int | None] | None = None) -> RunView:
    page_of = page_of or (lambda nid: _page_of(nid, graph))
    replay = replay_states(trace)
    rounds = [{"round": r.get("round"), "decision": r.get("decision"), "raw": r.get("raw"),
               "candidates": r.get("candidates", []), "after_step": _steps_before(trace, r)}
              for r in trace.records if r.get("kind") == "round"]
    round_ends = [{"round": r.get("round"), "reason": r.get("reason"), "after_step": _steps_before(trace, r)}
                  for r in trace.records if r.get("kind") == "round_end"]
    end = trace.end or {}
    components = dict(end.get("reward_components") or {})
    metrics = dict(end.get("metrics") or {})
    out = end.get("reader_output") or None
    answer = None if not out else out.get("answer")
    support = _num(components.get("support"))
    correct = None if answer is None or support is None else support >= CORRECT_THRESHOLD
    cov = metrics.get("evidence_all_covered")
    covered = None if cov is None else bool(cov)
    turns = turn_views(trace, replay, CORRECT_THRESHOLD)
    if turns:  # a conversation: the end record's numbers are averages over turns, so judge turn by turn
        correct, covered = run_outcome(turns, "correct"), run_outcome(turns, "covered")
    touched: set[int] = set()
    ids = list(replay.initial) + list(replay.final) + [n for ts in replay.turn_starts for n in ts.states]
    ids += [n for s in replay.steps for n in [s.node_id] + [c[0] for c in s.changes] if n]
    for nid in ids:
        p = page_of(nid)
        if p is not None:
            touched.add(p)
    rendered = end.get("rendered")
    for r in trace.records:
        if r.get("kind") in ("turn_end", "end") and r.get("rendered"):
            for im in r["rendered"].get("images", []):
                touched.add(int(im["page"]))
    return RunView(
        policy=trace.policy, trace=trace, replay=replay, rounds=rounds, round_ends=round_ends,
        reader_input=dict(rendered) if rendered else None, reader_output=dict(out) if out else None,
        components=components, metrics=metrics, answer=answer, correct=correct,
        covered=covered, stop_reason=end.get("stop_reason"),
        complete=trace.end is not None, touched_pages=touched, turns=turns,
    )


def _steps_before(trace: TraceEpisode, record: Mapping[str, Any]) -> int:
    """Number of step records before ``record`` in its episode (places rounds on the timeline)."""
    n = 0
    for r in trace.records:
        if r is record:
            return n
        if r.get("kind") == "step":
            n += 1
    return n


def _gold(episode: "Episode | None", graph: "EvidenceGraph | None") -> tuple[list[str], list[int]]:
    if episode is None:
        return [], []
    pages = sorted({int(p) for p in episode.evidence_pages})
    if graph is None:
        return list(episode.gold_node_ids), pages
    from mage_gym.data.gold import resolve_gold

    gold = resolve_gold(episode, graph)
    ids = graph.node_ids
    nodes = sorted({ids[int(n)] for item in gold.items for n in item if 0 <= int(n) < graph.n_nodes})
    return nodes, sorted(set(pages) | {int(p) for p in gold.pages if 0 <= int(p) < graph.n_pages})


def _evidence_types(episode: "Episode") -> list[str]:
    """The benchmark's evidence labels; the generator's region types when it gives none."""
    labels = list(episode.evidence_sources) or [r.type for r in episode.evidence_regions if r.type != "unknown"]
    return list(dict.fromkeys(str(x) for x in labels))


def _doc_view(doc_key: str, doc_id: str, graph: "EvidenceGraph | None", traces: Sequence[TraceEpisode],
              member_ids: Sequence[str] = ()) -> DocView:
    if graph is not None:
        sizes = [(float(p.width), float(p.height)) for p in graph.pages]
        members = getattr(graph, "documents", ()) or ()
        spans = tuple(DocSpan(d.doc_id, d.page_offset, d.n_pages, str(d.source.path)) for d in members) \
            if len(members) > 1 else ()
        return DocView(doc_key, doc_id, graph.n_pages, sizes, graph, str(graph.source.path), spans=spans)
    # no graph: guess the page count and the id prefix from the node ids the traces mention
    ids = [nid for t in traces for r in t.records for nid in _ids_in(r)]
    if len(member_ids) > 1:  # several documents: each one's pages from its own ids, in the episode's order
        spans, off = [], 0
        for d in member_ids:
            local = [int(m.group(2)) for nid in ids if (m := ID_PAGE.match(nid)) and m.group(1) == d]
            n = max(local) + 1 if local else 1
            spans.append(DocSpan(d, off, n))
            off += n
        return DocView(doc_key, doc_id, off, [(612.0, 792.0)] * off, None, None, None, tuple(spans))
    pages = {p for nid in ids if (p := _page_of(nid, None)) is not None}
    prefix = next((m.group(1) for nid in ids if (m := re.match(r"^(.*):p\d+$", nid))), None)
    n = max(pages) + 1 if pages else 1
    return DocView(doc_key, doc_id, n, [(612.0, 792.0)] * n, None, None, prefix)


def _ids_in(record: Mapping[str, Any]) -> list[str]:
    ids = list(record.get("entry_pages") or []) + list(record.get("changed") or [])
    ids += list(record.get("working_set") or [])
    if record.get("node_id"):
        ids.append(record["node_id"])
    ids += list((record.get("final_states") or {}).keys())
    return [str(i) for i in ids]


def _is_composite(episode: Any) -> bool:
    from mage_gym.data.composite import CompositeEpisode

    return isinstance(episode, CompositeEpisode)


def _as_graph(found: Any) -> tuple["EvidenceGraph | None", list["EvidenceGraph"] | None]:
    """A lookup's answer -> (the episode's graph, its member graphs or None).

    Several graphs are joined with :func:`mage_gym.graph.union.union_graph`
    (in-memory and on-disk cached, so a union the run built is reused); one
    graph of a composite episode is used as it is, as the environment does.
    """
    if found is None:
        return None, None
    if isinstance(found, (list, tuple)):
        members = list(found)
        if any(g is None for g in members) or not members:
            return None, None
        if len(members) == 1:
            return members[0], members
        from mage_gym.graph.union import union_graph

        return union_graph(members), members
    return found, None


def _mapping_graphs(g_map: Mapping[str, Any]) -> GraphLookup:
    """doc id -> graph mapping as a lookup; a composite episode takes its documents' graphs from it."""

    def lookup(ep: Any, doc: str) -> Any:
        if _is_composite(ep) and all(d in g_map for d in ep.doc_ids):
            return [g_map[d] for d in ep.doc_ids]
        return g_map.get(doc)

    return lookup


def build_report_data(traces: Iterable[TraceEpisode],
                      episode_for: EpisodeLookup | Mapping[str, "Episode | CompositeEpisode"] | None = None,
                      graph_for: GraphLookup | Mapping[str, "EvidenceGraph"] | None = None,
                      title: str = "mage-gym episode report", run_info: Mapping[str, Any] | None = None,
                      episode_meta: Mapping[str, Mapping[str, Any]] | None = None) -> ReportData:
    """Group traces by episode and build everything the report shows.

    ``episode_for``: episode id -> :class:`~mage_gym.data.episode.Episode`
    or :class:`~mage_gym.data.composite.CompositeEpisode` (gold answer,
    format, evidence); ``graph_for``: (episode, doc_id) -> graph (for a
    composite episode: its documents' graphs, which are joined into their
    union), or a mapping doc_id -> graph. Both may return None: the report
    then shows what the trace alone says (blank pages, no gold outlines).
    ``episode_meta``: per-episode fields from a run's results (e.g. gold answer)
    used when ``episode_for`` knows nothing. When a policy ran the same
    episode twice, the last run is kept (with a warning).
    """
    if isinstance(episode_for, Mapping):
        ep_map = episode_for
        episode_for = lambda eid: ep_map.get(eid)  # noqa: E731
    if isinstance(graph_for, Mapping):
        graph_for = _mapping_graphs(graph_for)
    warnings: list[str] = []
    by_episode: dict[str, dict[str, TraceEpisode]] = {}
    for t in traces:
        runs = by_episode.setdefault(t.episode_id, {})
        if t.policy in runs:
            warnings.append(f"policy {t.policy!r} ran episode {t.episode_id!r} more than once; the last run is shown")
        runs[t.policy] = t
    graphs: dict[str, Any] = {}
    members_of: dict[str, list[Any] | None] = {}
    docs: dict[str, DocView] = {}
    episodes: list[EpisodeView] = []
    for eid, runs in by_episode.items():
        first = next(iter(runs.values()))
        episode = episode_for(eid) if episode_for else None
        composite = _is_composite(episode)
        if composite:  # the trace's doc id: the documents joined (the episode's doc_id is its split group)
            doc_id = "+".join(episode.doc_ids)
            doc_src = "|".join(episode.sources)
            member_ids: list[str] = list(episode.doc_ids)
        else:
            doc_id = episode.doc_id if episode is not None else first.doc_id
            doc_src = str(episode.source) if episode is not None else ""
            member_ids = doc_id.split("+") if episode is None and "+" in doc_id else []
        doc_key = slug(f"{doc_id}|{doc_src}" if doc_src else doc_id)
        if doc_key not in graphs:
            g, members = None, None
            if graph_for is not None:
                try:
                    g, members = _as_graph(graph_for(episode, doc_id))
                except Exception as exc:  # noqa: BLE001 - a missing graph must not stop the report
                    warnings.append(f"no graph for {doc_id!r}: {type(exc).__name__}: {exc}")
            graphs[doc_key], members_of[doc_key] = g, members
        graph, members = graphs[doc_key], members_of[doc_key]
        if graph is not None:
            unknown = [n for t in runs.values() for r in t.records for n in _ids_in(r) if n not in graph.index_of]
            if unknown:
                warnings.append(f"episode {eid!r}: {len(unknown)} node ids of the trace are not in the graph of "
                                f"{doc_id!r} (built with other settings?); boxes are omitted")
                graph, members = None, None
        if doc_key not in docs or (docs[doc_key].graph is None and graph is not None):
            docs[doc_key] = _doc_view(doc_key, doc_id, graph, list(runs.values()), member_ids)
        doc = docs[doc_key]
        views = {pol: _run_view(t, graph, doc.page_of) for pol, t in runs.items()}
        for pol, v in views.items():
            if v.replay.mismatch:
                warnings.append(f"{pol} / {eid}: replayed final states differ from the end record on "
                                f"{len(v.replay.mismatch)} nodes (e.g. {v.replay.mismatch[0]})")
            for turn, diff in sorted(v.replay.turn_mismatch.items()):
                if diff:
                    warnings.append(f"{pol} / {eid}: replayed states at the end of turn {turn} differ from its "
                                    f"turn_end record on {len(diff)} nodes (e.g. {diff[0]})")
        meta = dict((episode_meta or {}).get(eid, {}))
        turns_meta: list[dict[str, Any]] = []
        if composite:
            turns_meta = turn_gold(episode, members, graph, doc)
            if len(turns_meta) > 1:
                for v in views.values():
                    fill_last_turn_documents(v.turns, turns_meta, doc, v.metrics)
            gold_nodes = sorted({n for t in turns_meta for n in t["gold_nodes"]})
            gold_pages = sorted({p for t in turns_meta for p in t["gold_pages"]})
            ev_pages = sorted({p for t in turns_meta for p in t["evidence_pages"]})
        else:
            gold_nodes, gold_pages = _gold(episode, graph)
            ev_pages = sorted({int(p) for p in episode.evidence_pages}) if episode \
                else list(meta.get("evidence_pages", []))
            run_turns = next((v.turns for v in views.values() if v.turns), [])
            if episode is None and run_turns:  # a conversation we have no gold for: its questions from the trace
                turns_meta = [{"turn": t["turn"], "question": t["question"], "gold_answer": None} for t in run_turns]
        touched = set(gold_pages)
        for v in views.values():
            touched |= v.touched_pages
        touched = {p for p in touched if 0 <= p < doc.n_pages}
        kind = episode.kind if composite else ("single" if not (turns_meta or doc.spans) else
                                               ("cross_document_conversation" if turns_meta and doc.spans else
                                                "conversation" if turns_meta else "cross_document"))
        if composite:
            gold_answer: str | None = " | ".join(t.answer for t in episode.turns)
            formats = list(dict.fromkeys(t.answer_format for t in episode.turns))
            answer_format: str | None = formats[0] if len(formats) == 1 else "/".join(formats)
        else:
            gold_answer = episode.answer if episode else meta.get("gold_answer")
            answer_format = episode.answer_format if episode else meta.get("answer_format")
        episodes.append(EpisodeView(
            episode_id=eid, slug=slug(eid), doc_key=doc_key, doc_id=doc_id,
            question=episode.question if episode else str(first.reset.get("question", meta.get("question", ""))),
            benchmark=episode.benchmark if episode else meta.get("benchmark"),
            gold_answer=gold_answer, answer_format=answer_format,
            answerable=episode.answerable if episode else meta.get("answerable"),
            evidence_pages=ev_pages,
            evidence_sources=_evidence_types(episode) if episode else list(meta.get("evidence_sources", [])),
            page_scope=page_scope(ev_pages),
            gold_nodes=gold_nodes, gold_pages=gold_pages, runs=views, touched_pages=sorted(touched),
            kind=kind, turns=turns_meta if len(turns_meta) > 1 else [], documents=document_rows(doc, turns_meta),
        ))
    return ReportData(episodes, docs, title, dict(run_info or {}), warnings)


def outcome_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per policy: rows, correct, incorrect, covered, missed (the index's summary line; tests)."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        c = out.setdefault(r["policy"], {"rows": 0, "correct": 0, "incorrect": 0, "covered": 0, "missed": 0})
        c["rows"] += 1
        if r["correct"] is not None:
            c["correct" if r["correct"] else "incorrect"] += 1
        if r["covered"] is not None:
            c["covered" if r["covered"] else "missed"] += 1
    return out
