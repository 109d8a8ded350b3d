"""FinanceBench loader: ``financebench_open_source.jsonl`` + ``pdfs/<doc_name>.pdf``.

Source format: one JSON object a line; ``evidence`` is a list of
``{doc_name, evidence_page_num (0-based), evidence_text,
evidence_text_full_page}``. Pages are already 0-based and are only
range-checked here.

What the source does not give, and what we use instead (documented because
downstream scoring and stats depend on it):

- no answer format: every answer is free text, ``answer_format = "Str"``;
- no evidence modality: ``evidence_sources = ("unknown",)``;
- every question is answerable (the open-source split has no unanswerable
  ones); an answer that is literally "not answerable" would still be marked so.

Each ``evidence_text`` snippet is kept in ``Episode.evidence_text`` and its
page in ``extra["evidence_text_pages"]`` (aligned), so gold mapping can match
the snippet against the elements of that page. Snippets on out-of-range pages
are dropped together with their page. Evidence that names another document
cannot be placed in this one and is dropped (counted ``evidence_other_document``).
``question_type`` and ``question_reasoning`` go into ``task_tags``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from mage_gym.data.episode import FLAG_BAD_FIELD, FLAG_EMPTY_EVIDENCE, Episode
from mage_gym.data.io import answer_text, data_root, iter_jsonl, pdf_page_count
from mage_gym.data.report import DatasetLoad, LoadReport, check_pages
from mage_gym.graph.errors import DocumentError
from mage_gym.graph.sources import doc_id_for

DEFAULT_SUBDIR = "financebench-dev"
QUESTIONS_FILE = "financebench_open_source.jsonl"
ANSWER_FORMAT = "Str"
UNKNOWN_SOURCE = ("unknown",)


def load_financebench(root: str | Path | None = None) -> DatasetLoad:
    """Load every question whose filing PDF is present (see module docstring)."""
    root = (Path(root) if root is not None else data_root(DEFAULT_SUBDIR)).resolve()
    report = LoadReport(benchmark="financebench", root=str(root))
    page_counts: dict[str, int | str] = {}
    episodes: list[Episode] = []
    seen: set[str] = set()
    for line_no, rec, err in iter_jsonl(root / QUESTIONS_FILE, "FinanceBench questions"):
        if err or rec is None:
            report.skip("bad_json_line", message=err)
            continue
        doc_name, question = rec.get("doc_name"), rec.get("question")
        if not isinstance(doc_name, str) or not doc_name.strip() or not isinstance(question, str):
            report.skip("bad_record", message=f"line {line_no}: no doc_name/question")
            continue
        pdf = root / "pdfs" / f"{doc_name}.pdf"
        if doc_name not in page_counts:
            page_counts[doc_name] = _count_pages(pdf, report)
        n_pages = page_counts[doc_name]
        if isinstance(n_pages, str):
            report.skip(n_pages)
            continue

        flags: list[str] = []
        extra: dict[str, Any] = {"line": line_no}
        for k in ("company", "justification", "financebench_id", "dataset_subset_label"):
            if rec.get(k) is not None:
                extra[k] = rec[k]
        answer = answer_text(rec.get("answer"))
        answerable = answer.strip().lower() != "not answerable"

        evidence = rec.get("evidence")
        if evidence is None:
            evidence = []
        if not isinstance(evidence, list):
            flags.append(FLAG_BAD_FIELD)
            extra["bad_fields"] = ["evidence"]
            evidence = []
        raw_pages: list[int] = []
        snippets: list[tuple[int, str]] = []
        bad_items = 0
        for ev in evidence:
            page = ev.get("evidence_page_num") if isinstance(ev, dict) else None
            if isinstance(page, bool) or not isinstance(page, int):
                bad_items += 1
                continue
            if ev.get("doc_name") not in (None, doc_name):
                report.counters["evidence_other_document"] += 1
                continue
            raw_pages.append(page)
            text = ev.get("evidence_text")
            if isinstance(text, str) and text.strip():
                snippets.append((page, text))
        if bad_items:
            if FLAG_BAD_FIELD not in flags:
                flags.append(FLAG_BAD_FIELD)
            extra.setdefault("bad_fields", []).append("evidence_page_num")
        check = check_pages(raw_pages, n_pages, answerable)
        flags.extend(f for f in check.flags if not (bad_items and not raw_pages and f == FLAG_EMPTY_EVIDENCE))
        if check.dropped:
            extra["dropped_evidence_pages"] = list(check.dropped)
        kept = set(check.pages)
        snippets = [(p, t) for p, t in snippets if p in kept]
        extra["evidence_text_pages"] = [p for p, _ in snippets]

        tags = tuple(str(rec[k]) for k in ("question_type", "question_reasoning") if rec.get(k))
        eid = str(rec.get("financebench_id") or f"fb-{doc_name}-{line_no}")
        if eid in seen:
            eid = f"{eid}-l{line_no}"
        seen.add(eid)
        episodes.append(Episode(
            episode_id=eid, benchmark="financebench", doc_id=doc_id_for(pdf), source=str(pdf),
            question=question, answer=answer, answer_format=ANSWER_FORMAT, answerable=answerable,
            evidence_pages=check.pages, evidence_text=tuple(t for _, t in snippets),
            evidence_sources=UNKNOWN_SOURCE, task_tags=tags, flags=tuple(dict.fromkeys(flags)), extra=extra,
        ))
    return DatasetLoad(episodes, report.finalise(episodes))


def _count_pages(pdf: Path, report: LoadReport) -> int | str:
    if not pdf.is_file():
        report.note(f"document missing: {pdf}; its questions are skipped", warn=True)
        return "missing_document"
    try:
        return pdf_page_count(pdf)
    except DocumentError as exc:
        report.note(f"document unreadable ({exc}); its questions are skipped", warn=True)
        return f"unreadable_document:{type(exc).__name__}"


__all__ = ["load_financebench", "DEFAULT_SUBDIR", "ANSWER_FORMAT", "UNKNOWN_SOURCE"]
