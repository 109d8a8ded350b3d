"""Conversations and document sets in the report: each turn's question, answer and numbers, each turn's gold.

Why a module of its own: single-question, single-document episodes must look
exactly as before, so everything only composite episodes
(:class:`~mage_gym.data.composite.CompositeEpisode`) need is decided here and
:mod:`mage_gym.report.data` only attaches it.

What a trace gives per turn (:mod:`mage_gym.trace`): every turn but the last
ends with a ``turn_end`` record (the reader's answer, its exact input, the
turn's own reward components and metrics); the last turn ends with the
episode's ``end`` record, whose numbers aggregate the turns
(:func:`mage_gym.env.turns.aggregate_outcomes`: reward and counts summed,
other numbers averaged) and whose ``metrics.per_turn`` lists each turn's
reward, page recall and tokens. The last turn's reward, page recall and
tokens are read from ``per_turn``; its other numbers (support, noise, cost,
all-covered, counts) are recovered from the aggregate - ``n * mean - sum of
the earlier turns`` for averages, ``total - earlier`` for sums - and named in
the turn's ``derived`` list. A number is left out when an earlier turn lacks
it (the average then skipped that turn and cannot be undone).

Gold per turn: each turn's evidence is given per document, on the document's
own pages (``Turn.evidence``); it is resolved on the member graph and moved
onto the union exactly as the environment does
(:func:`mage_gym.data.gold.remap_gold`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from mage_gym.data.composite import CompositeEpisode
    from mage_gym.graph.graph import EvidenceGraph
    from mage_gym.report.records import DocView, Replay, TraceEpisode

#: Components of the last turn recovered from the episode's averages.
AVERAGED_COMPONENTS = ("support", "noise", "cost", "cost_tokens", "cost_operations", "cost_calls", "gold_coverage")
#: Metrics of the last turn recovered from the episode's totals or averages (gold-free, never None).
RECOVERED_METRICS = ("pages_rendered", "elements_rendered", "images_rendered", "operations", "reader_calls",
                     "evaluator_calls", "steps", "rounds", "activations", "opens", "searches", "invalid_actions")
#: Settings copied as they are (the same in every turn).
CONSTANT_COMPONENTS = ("lambda_noise", "lambda_cost")
_ROUND = 9  # digits kept of a recovered number (undoes float noise of mean * n)


def _number(v: Any) -> float | None:
    if v is None or isinstance(v, (str, dict, list)):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None


def _back_out(total: Any, earlier: Sequence[Any], n: int, summed: bool) -> float | None:
    """The last turn's value from the episode's sum (``summed``) or mean over ``n`` turns, or None."""
    t = _number(total)
    vals = [_number(v) for v in earlier]
    if t is None or any(v is None for v in vals):
        return None
    rest = sum(v for v in vals if v is not None)
    return round((t if summed else t * n) - rest, _ROUND)


def _last_turn_numbers(end: Mapping[str, Any], earlier: Sequence[Mapping[str, Any]], turn: int
                       ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(components, metrics, derived keys) of the last turn from the ``end`` record and the earlier turns."""
    from mage_gym.env.turns import SUMMED_METRICS

    agg_c = dict(end.get("reward_components") or {})
    agg_m = dict(end.get("metrics") or {})
    n = int(agg_m.get("turns") or (len(earlier) + 1))
    per_turn = {int(p.get("turn", i)): p for i, p in enumerate(agg_m.get("per_turn") or [])}
    own = per_turn.get(turn, {})
    comps: dict[str, Any] = {k: agg_c[k] for k in CONSTANT_COMPONENTS if k in agg_c}
    mets: dict[str, Any] = {}
    derived: list[str] = []
    for key in AVERAGED_COMPONENTS:
        v = _back_out(agg_c.get(key), [e["components"].get(key) for e in earlier], n, summed=False)
        if v is not None:
            comps[key] = v
            derived.append(key)
    for key in RECOVERED_METRICS:
        v = _back_out(agg_m.get(key), [e["metrics"].get(key) for e in earlier], n, summed=key in SUMMED_METRICS)
        if v is not None:
            mets[key] = int(round(v)) if key in SUMMED_METRICS or key.endswith("_rendered") else v
            derived.append(key)
    recall = own.get("evidence_page_recall")
    mets["evidence_page_recall"] = recall
    if recall is not None:  # gold known on this turn: all-covered was averaged over every turn
        v = _back_out(agg_m.get("evidence_all_covered"),
                      [e["metrics"].get("evidence_all_covered") for e in earlier], n, summed=False)
        if v is not None and min(abs(v), abs(v - 1)) < 1e-6:
            mets["evidence_all_covered"] = bool(round(v))
            derived.append("evidence_all_covered")
    if "reward" in own:
        comps["reward"] = own["reward"]
    if "tokens_rendered" in own:
        mets["tokens_rendered"] = own["tokens_rendered"]
    mets["stop_reason"] = end.get("stop_reason")
    return comps, mets, derived


def _close(cur: dict[str, Any], record: Mapping[str, Any] | None, n_steps: int, last: bool,
           earlier: Sequence[Mapping[str, Any]], replay: "Replay", threshold: float) -> dict[str, Any]:
    cur["end_step"] = n_steps
    cur["complete"] = record is not None
    if record is None:
        cur.update(stop_reason=None, answer=None, reader_input=None, reader_output=None, components={},
                   metrics={}, derived=[], replay_mismatch=[])
    else:
        out = record.get("reader_output") or None
        if last:
            comps, mets, derived = _last_turn_numbers(record, earlier, cur["turn"])
        else:
            comps, mets, derived = dict(record.get("reward_components") or {}), dict(record.get("metrics") or {}), []
        mismatch = replay.mismatch if last else replay.turn_mismatch.get(cur["turn"], ())
        cur.update(stop_reason=record.get("stop_reason"), answer=None if not out else out.get("answer"),
                   reader_input=dict(record["rendered"]) if record.get("rendered") else None,
                   reader_output=dict(out) if out else None, components=comps, metrics=mets, derived=derived,
                   replay_mismatch=list(mismatch))
    c, m = cur["components"], cur["metrics"]
    support = _number(c.get("support"))
    cur["reward"] = _number(c.get("reward"))
    cur["support"] = support
    cur["evidence_page_recall"] = _number(m.get("evidence_page_recall"))
    cur["tokens_rendered"] = _number(m.get("tokens_rendered"))
    cur["per_document_recall"] = m.get("per_document_recall")
    cur["correct"] = None if cur["answer"] is None or support is None else support >= threshold
    cov = m.get("evidence_all_covered")
    cur["covered"] = None if cov is None else bool(cov)
    return cur


def turn_views(trace: "TraceEpisode", replay: "Replay", threshold: float = 0.5) -> list[dict[str, Any]]:
    """One dict per turn of a conversation's trace (empty for a single question; see the module docstring).

    Keys: turn, question, first_step / end_step (the turn's steps are
    ``first_step .. end_step - 1``), working_set (at the turn's start),
    stop_reason, answer, reader_input, reader_output, components, metrics,
    derived, reward, support, evidence_page_recall, tokens_rendered,
    per_document_recall, correct, covered, complete, replay_mismatch.
    """
    if not any(r.get("kind") in ("turn_start", "turn_end") for r in trace.records):
        return []
    reset = trace.reset
    cur: dict[str, Any] | None = {"turn": 0, "question": str(reset.get("question") or ""), "first_step": 0,
                                  "working_set": [str(p) for p in reset.get("entry_pages") or []]}
    turns: list[dict[str, Any]] = []
    n_steps = 0
    for r in trace.records[1:]:
        kind = r.get("kind")
        if kind == "step":
            n_steps += 1
        elif kind in ("turn_end", "end") and cur is not None:
            turns.append(_close(cur, r, n_steps, kind == "end", turns, replay, threshold))
            cur = None
        elif kind == "turn_start":
            if cur is not None:  # a turn that never ended (should not happen): keep it, marked incomplete
                turns.append(_close(cur, None, n_steps, False, turns, replay, threshold))
            cur = {"turn": int(r.get("turn", len(turns))), "question": str(r.get("question") or ""),
                   "first_step": n_steps, "working_set": [str(n) for n in r.get("working_set") or []]}
    if cur is not None:
        turns.append(_close(cur, None, n_steps, True, turns, replay, threshold))
    return turns


def fill_last_turn_documents(turns: list[dict[str, Any]], turn_meta: Sequence[Mapping[str, Any]],
                             doc: "DocView", end_metrics: Mapping[str, Any]) -> None:
    """Per-document page recall of a conversation's last turn, recovered from the episode's mean.

    The episode's ``per_document_recall`` averages, per document, the turns
    whose value is not None (the document had gold in that turn). The earlier
    turns' values are recorded; whether the last turn had gold in a document
    is known from the gold (``turn_meta``); so the last turn's value is
    ``count * mean - sum(earlier)``. Left out when the gold is unknown.
    """
    agg = end_metrics.get("per_document_recall")
    if not turns or not isinstance(agg, Mapping) or len(turn_meta) != len(turns) or not doc.spans:
        return
    last = turns[-1]
    if not last.get("complete") or last.get("per_document_recall") is not None:
        return
    out: dict[str, float | None] = {}
    for sp in doc.spans:
        def has_gold(t: Mapping[str, Any]) -> bool:
            return any(sp.page_offset <= p < sp.page_offset + sp.n_pages for p in t.get("gold_pages", []))

        if not has_gold(turn_meta[-1]):
            out[sp.doc_id] = None
            continue
        earlier = [v for t in turns[:-1] if (v := (t.get("per_document_recall") or {}).get(sp.doc_id)) is not None]
        v = _back_out(agg.get(sp.doc_id), earlier, len(earlier) + 1, summed=False)
        if v is None:
            return
        out[sp.doc_id] = v
    last["per_document_recall"] = out
    last["derived"] = list(last.get("derived", [])) + ["per_document_recall"]


def run_outcome(turns: Sequence[Mapping[str, Any]], key: str) -> bool | None:
    """A conversation is correct (covered) when every turn is; None when some turn is unknown."""
    vals = [t.get(key) for t in turns]
    if not vals or any(v is None for v in vals):
        return None
    return all(bool(v) for v in vals)


# --- gold per turn -------------------------------------------------------------------------------


def turn_gold(episode: "CompositeEpisode", members: Sequence["EvidenceGraph"] | None, graph: "EvidenceGraph | None",
              doc: "DocView") -> list[dict[str, Any]]:
    """Per turn: question, gold answer, evidence pages (pages of ``doc``) and gold node ids.

    With the member graphs, gold is resolved per document and moved onto the
    union (the environment's rule); without them, the episode's own gold node
    ids and evidence pages are shown as given.
    """
    from mage_gym.data.gold import remap_gold, resolve_gold

    doc_index = {d: j for j, d in enumerate(episode.doc_ids)}
    out = []
    for i, t in enumerate(episode.turns):
        nodes: set[str] = set()
        pages: set[int] = set()
        ev_pages: set[int] = set()
        for part in t.evidence:
            j = doc_index[part.doc_id]
            for p in part.evidence_pages:
                up = doc.union_page(part.doc_id, int(p)) if doc.spans else (int(p) if 0 <= int(p) < doc.n_pages
                                                                           else None)
                if up is not None:
                    ev_pages.add(up)
            if members is not None and graph is not None:
                ev = resolve_gold(part, members[j])
                if graph is not members[j]:
                    ev = remap_gold(graph, j, ev)  # type: ignore[arg-type]
                ids = graph.node_ids
                nodes |= {ids[int(v)] for item in ev.items for v in item if 0 <= int(v) < graph.n_nodes}
                pages |= {int(p) for p in ev.pages if 0 <= int(p) < graph.n_pages}
            else:
                nodes |= {str(n) for n in part.gold_node_ids}
        pages |= ev_pages
        out.append({
            "turn": i, "question": t.question, "gold_answer": t.answer, "answer_format": t.answer_format,
            "answerable": t.answerable, "evidence_docs": list(t.evidence_doc_ids),
            "evidence_pages": sorted(ev_pages), "evidence_labels": [doc.page_label(p) for p in sorted(ev_pages)],
            "gold_nodes": sorted(nodes), "gold_pages": sorted(pages),
        })
    return out


def document_rows(doc: "DocView", turns: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The documents of a union, each with its page range and the gold pages (own numbers) of every turn."""
    rows = []
    for sp in doc.spans:
        gold = sorted({p - sp.page_offset for t in turns for p in t.get("gold_pages", [])
                       if sp.page_offset <= p < sp.page_offset + sp.n_pages})
        rows.append({**sp.to_dict(), "gold_pages": gold})
    return rows


__all__ = ["AVERAGED_COMPONENTS", "RECOVERED_METRICS", "document_rows", "fill_last_turn_documents", "run_outcome",
           "turn_gold", "turn_views"]
