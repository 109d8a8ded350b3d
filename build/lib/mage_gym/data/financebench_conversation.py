"""FinanceBench questions played as conversations, grouped by company: a FORMAT CHECK, not real follow-ups.

FinanceBench asks independent questions about single filings. Grouping them
by company (``3M_2018_10K`` -> ``3M``, ``JOHNSON_JOHNSON_2022Q4_EARNINGS`` ->
``JOHNSON_JOHNSON``: the ``doc_name`` up to the first ``_<four digits>``) and
asking 2-4 of them in file order, over the company's filings that those
questions use, gives real-document conversations and real-document
cross-filing episodes. The later questions do *not* refer back to the earlier
ones; what this dataset checks is the format (a conversation on real PDFs,
several filings in one graph, gold per filing), not conversational skill.

Each turn's ``evidence`` is the original single-document FinanceBench
Episode (same question, answer, pages and snippets). ``group`` is the company,
so every conversation of a company, and every filing it uses, lands in one
split. A company with a single usable question forms no conversation (counted
in the report). The report's notes say which groups were formed.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path

from mage_gym.data.composite import CompositeEpisode, DocumentRef, Turn
from mage_gym.data.episode import Episode
from mage_gym.data.financebench import load_financebench
from mage_gym.data.report import DatasetLoad, LoadReport

MAX_TURNS = 4
FORMAT_CHECK_NOTE = ("format check: FinanceBench questions grouped by company and asked in file order; "
                     "later turns do not refer back to earlier ones (not real follow-ups)")
_COMPANY = re.compile(r"^(.+?)_(?:\d{4})")


def company_of(doc_name: str) -> str:
    """``3M_2018_10K`` -> ``3M``; a name without ``_<year>`` is its own company."""
    m = _COMPANY.match(doc_name)
    return m.group(1) if m else doc_name


def chunk_sizes(n: int, max_turns: int = MAX_TURNS) -> list[int]:
    """Split ``n`` questions into conversations of 2..``max_turns`` turns, as even as possible ([] for n < 2)."""
    if n < 2:
        return []
    k = -(-n // max_turns)
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def _doc_name(ep: Episode) -> str:
    return Path(ep.source).stem


def conversations_from(episodes: list[Episode], report: LoadReport, max_turns: int = MAX_TURNS
                       ) -> list[CompositeEpisode]:
    """Group single-document FinanceBench episodes by company into conversations (module docstring)."""
    by_company: "OrderedDict[str, list[Episode]]" = OrderedDict()
    for ep in episodes:
        by_company.setdefault(company_of(_doc_name(ep)), []).append(ep)
    out: list[CompositeEpisode] = []
    for company, eps in by_company.items():
        sizes = chunk_sizes(len(eps), max_turns)
        if not sizes:
            report.skipped["company_with_one_question"] += len(eps)  # counted, noted, not a warning: by design
            report.note(f"{company}: {len(eps)} question, no conversation formed")
            continue
        start = 0
        for j, size in enumerate(sizes):
            part = eps[start:start + size]
            start += size
            docs = tuple(dict.fromkeys(DocumentRef(e.doc_id, e.source) for e in part))
            turns = tuple(Turn(question=e.question, answer=e.answer, answer_format=e.answer_format,
                               answerable=e.answerable, evidence=(e,), task_tags=e.task_tags) for e in part)
            out.append(CompositeEpisode(
                episode_id=f"fbconv-{company}-{j}", benchmark="financebench", documents=docs, turns=turns,
                group=company, flags=tuple(dict.fromkeys(f for e in part for f in e.flags)),
                extra={"dataset": "financebench_conversation", "format_check": True, "company": company,
                       "source_episode_ids": [e.episode_id for e in part],
                       "doc_names": [_doc_name(e) for e in part]}))
        filings = sorted({_doc_name(e) for e in eps})
        report.note(f"group {company}: {len(eps)} questions -> conversations of {sizes} turns over "
                    f"{len(filings)} filing(s) {filings}", counter="groups")
    return out


def load_financebench_conversation(root: str | Path | None = None, max_turns: int = MAX_TURNS) -> DatasetLoad:
    """FinanceBench (:func:`~mage_gym.data.financebench.load_financebench`) regrouped into conversations."""
    single = load_financebench(root)
    report = LoadReport(benchmark="financebench_conversation", root=single.report.root)
    report.skipped.update(single.report.skipped)
    report.notes.append(FORMAT_CHECK_NOTE)
    report.counters["source_questions"] = len(single.episodes)
    convs = conversations_from(single.episodes, report, max_turns)
    report.finalise(convs)  # type: ignore[arg-type] - composites carry what finalise reads
    report.documents = len({d for c in convs for d in c.doc_ids})  # finalise counted split keys (companies)
    report.counters["turns"] = sum(c.n_turns for c in convs)
    report.counters["cross_document_episodes"] = sum(len(c.documents) > 1 for c in convs)
    return DatasetLoad(convs, report)  # type: ignore[arg-type]


__all__ = ["load_financebench_conversation", "conversations_from", "company_of", "chunk_sizes", "MAX_TURNS",
           "FORMAT_CHECK_NOTE"]
