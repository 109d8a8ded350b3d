"""MMLongBench-Doc loader: ``samples.json`` + ``documents/``, optional MMDocIR regions.

Source format: a JSON list of records whose fields are *all strings*;
``evidence_pages`` (1-based) and ``evidence_sources`` are Python-literal lists,
parsed with ``json``/``ast.literal_eval`` (never ``eval``). Pages become
0-based here. ``answer_format == "None"`` or answer ``"Not answerable"`` means
unanswerable (``answerable=False``); the format keeps the source's spelling.

MMDocIR (``mmdocir_layout.jsonl``) re-annotated many of these questions with
evidence boxes. It has no question id, so it is joined on the document name
plus the question text with whitespace normalised (nothing else: a reworded
question does not join). Boxes are in PDF points of the stated ``page_size``
and are rescaled to [0, 1] with that size; where the PDF's real page size
differs (pages re-rendered at another scale), the normalised box is still the
right one and the mismatch is only counted (``mmdocir_page_size_mismatch``).
Region type comes from the question's ``type`` list (several types joined by
``|``, since MMDocIR does not say which box is which).

When a question joins, its gold pages become MMDocIR's pages (``page_id`` and
the boxes' pages). Why: the boxes are only meaningful on the pages they were
drawn on, and MMDocIR's pages repair MMLongBench defects (1-based pages cited
as ``[0]``, printed page numbers, empty evidence). The source's own pages stay
in ``extra["source_evidence_pages"]``, disagreements are counted
(``mmdocir_pages_revised``), and defect flags still describe the source
annotation. ``use_mmdocir=False`` keeps MMLongBench's pages only.

Episode ids are ``mmlb-<sha1(doc_id, question)[:12]>`` (the source has no ids).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from mage_gym.progress import progress_bar

from mage_gym.data.episode import FLAG_BAD_FIELD, FLAG_EMPTY_EVIDENCE, FLAG_REGION_UNMATCHED, Episode, Region
from mage_gym.data.io import (
    DatasetError,
    data_root,
    iter_jsonl,
    parse_int_list,
    parse_literal_list,
    pdf_page_count,
    read_json,
)
from mage_gym.data.report import DatasetLoad, LoadReport, check_pages
from mage_gym.graph.errors import DocumentError
from mage_gym.graph.sources import doc_id_for

DEFAULT_SUBDIR = "mmlongbench-dev"
UNANSWERABLE_ANSWER = "not answerable"
#: Boxes thinner than this (normalised) after clipping are degenerate and dropped.
_MIN_SIDE = 1e-4
#: Page sizes closer than this (relative) count as the same size.
_SIZE_TOL = 0.01


def _norm_ws(text: str) -> str:
    return " ".join(str(text).split())


def _episode_id(doc_name: str, question: str, seen: set[str]) -> str:
    base = "mmlb-" + hashlib.sha1(f"{doc_name}\x00{question}".encode("utf-8")).hexdigest()[:12]
    eid, k = base, 1
    while eid in seen:  # the same question asked twice about one document
        k += 1
        eid = f"{base}-{k}"
    seen.add(eid)
    return eid


def _source_types(value: Any) -> tuple[tuple[str, ...], bool]:
    items = parse_literal_list(value)
    if items is None:
        return (), False
    return tuple(str(x).strip() for x in items if str(x).strip()), True


# --- MMDocIR -------------------------------------------------------------------


def _load_mmdocir(path: Path, report: LoadReport) -> dict[tuple[str, str], dict]:
    """Index MMDocIR questions by (document name, whitespace-normalised question)."""
    index: dict[tuple[str, str], dict] = {}
    ambiguous: set[tuple[str, str]] = set()
    for _, rec, err in iter_jsonl(path, "MMDocIR layout file"):
        if err or rec is None:
            report.note(f"MMDocIR: {err}", counter="mmdocir_bad_lines")
            continue
        doc = rec.get("doc_name")
        for q in rec.get("questions") or []:
            if not isinstance(q, dict) or not isinstance(q.get("Q"), str) or not doc:
                report.counters["mmdocir_bad_questions"] += 1
                continue
            key = (str(doc), _norm_ws(q["Q"]))
            if key in index:
                ambiguous.add(key)
            index[key] = q
    for key in ambiguous:  # two annotations for one text: trust neither
        del index[key]
        report.note(f"MMDocIR: question asked twice in {key[0]} ({key[1][:60]!r}); not joined",
                    counter="mmdocir_ambiguous")
    report.counters["mmdocir_questions"] = len(index) + len(ambiguous)
    return index


def _page_sizes(pdf: Path, pages: set[int]) -> dict[int, tuple[float, float]]:
    """Displayed (rotation-aware) size of a few pages, for the rescale note."""
    import pymupdf

    out: dict[int, tuple[float, float]] = {}
    try:
        with pymupdf.open(str(pdf)) as doc:
            for p in pages:
                if 0 <= p < doc.page_count:
                    r = doc[p].rect
                    out[p] = (float(r.width), float(r.height))
    except Exception:  # noqa: BLE001 - only a diagnostic; the page count was read already
        pass
    return out


def _regions_from_mmdocir(q: dict, pdf: Path, n_pages: int, report: LoadReport,
                          ep_notes: list[str]) -> tuple[list[Region], list[int], bool]:
    """Normalised regions and MMDocIR's 0-based pages; bool = some box was unusable."""
    types, ok = _source_types(q.get("type"))
    rtype = "|".join(dict.fromkeys(types)) if ok and types else "unknown"
    pages_dir = parse_int_list(q.get("page_id")) or []
    mapping = q.get("layout_mapping") or []
    raw_pages = {int(m["page"]) for m in mapping if isinstance(m, dict) and isinstance(m.get("page"), int)}
    real = _page_sizes(pdf, raw_pages)
    regions: list[Region] = []
    bad = False
    for m in mapping:
        try:
            page = int(m["page"])
            w, h = (float(v) for v in m["page_size"])
            x0, y0, x1, y1 = (float(v) for v in m["bbox"])
        except (KeyError, TypeError, ValueError):
            bad = True
            continue
        if w <= 0 or h <= 0 or not 0 <= page < n_pages:
            bad = True
            continue
        x0, x1 = sorted((x0, x1))
        y0, y1 = sorted((y0, y1))
        box = (min(max(x0 / w, 0.0), 1.0), min(max(y0 / h, 0.0), 1.0),
               min(max(x1 / w, 0.0), 1.0), min(max(y1 / h, 0.0), 1.0))
        if box[2] - box[0] < _MIN_SIDE or box[3] - box[1] < _MIN_SIDE:
            bad = True
            continue
        if page in real:
            rw, rh = real[page]
            if abs(rw - w) > _SIZE_TOL * rw or abs(rh - h) > _SIZE_TOL * rh:
                report.counters["mmdocir_page_size_mismatch"] += 1
                ep_notes.append(f"page {page}: MMDocIR page_size {w:g}x{h:g} pt, PDF {rw:g}x{rh:g} pt; "
                                "box rescaled with MMDocIR's size")
        regions.append(Region(page=page, bbox=box, type=rtype))
    pages = sorted({p for p in pages_dir if 0 <= p < n_pages} | {r.page for r in regions})
    return regions, pages, bad


# --- loader ----------------------------------------------------------------------


def load_mmlongbench(root: str | Path | None = None, use_mmdocir: bool = True,
                     progress: bool = False) -> DatasetLoad:
    """Load every question of ``samples.json`` whose PDF is present.

    ``root`` defaults to ``$MAGE_GYM_DATA/mmlongbench-dev``. Questions whose
    PDF is missing or unreadable are skipped (logged, counted by reason).
    """
    root = (Path(root) if root is not None else data_root(DEFAULT_SUBDIR)).resolve()
    report = LoadReport(benchmark="mmlongbench", root=str(root))
    records = read_json(root / "samples.json", "MMLongBench samples.json")
    if not isinstance(records, list):
        raise DatasetError(f"samples.json must hold a JSON list, got {type(records).__name__}: {root}")
    mmdocir: dict[tuple[str, str], dict] = {}
    layout = root / "mmdocir_layout.jsonl"
    if use_mmdocir and layout.is_file():
        mmdocir = _load_mmdocir(layout, report)

    page_counts: dict[str, int | str] = {}  # doc name -> pages, or the reason it is unusable
    seen_ids: set[str] = set()
    episodes: list[Episode] = []
    for i, rec in enumerate(progress_bar(records, desc="mmlongbench", disable=not progress)):
        if not isinstance(rec, dict) or not isinstance(rec.get("doc_id"), str) or not isinstance(
                rec.get("question"), str):
            report.skip("bad_record", message=f"record {i} lacks a string doc_id/question")
            continue
        doc_name, question = rec["doc_id"], rec["question"]
        pdf = root / "documents" / doc_name
        if doc_name not in page_counts:
            if not pdf.is_file():
                page_counts[doc_name] = "missing_document"
                report.note(f"document missing: {pdf}; its questions are skipped", warn=True)
            else:
                try:
                    page_counts[doc_name] = pdf_page_count(pdf)
                except DocumentError as exc:
                    page_counts[doc_name] = f"unreadable_document:{type(exc).__name__}"
                    report.note(f"document unreadable ({exc}); its questions are skipped", warn=True)
        n_pages = page_counts[doc_name]
        if isinstance(n_pages, str):
            report.skip(n_pages)
            continue

        flags: list[str] = []
        extra: dict[str, Any] = {"doc_type": rec.get("doc_type", ""), "source_index": i}
        answer = str(rec.get("answer", ""))
        answer_format = str(rec.get("answer_format", "")).strip() or "Str"
        answerable = not (answer_format == "None" or answer.strip().lower() == UNANSWERABLE_ANSWER)

        pages_1 = parse_int_list(rec.get("evidence_pages"))
        if pages_1 is None:
            flags.append(FLAG_BAD_FIELD)
            extra["bad_fields"] = ["evidence_pages"]
            pages_1 = []
        sources, ok = _source_types(rec.get("evidence_sources"))
        if not ok:
            if FLAG_BAD_FIELD not in flags:
                flags.append(FLAG_BAD_FIELD)
            extra.setdefault("bad_fields", []).append("evidence_sources")
        source_pages = [p - 1 for p in pages_1]
        check = check_pages(source_pages, n_pages, answerable)
        if FLAG_BAD_FIELD in flags and not pages_1:  # unparseable, not "empty": do not double-flag
            check_flags = tuple(f for f in check.flags if f != FLAG_EMPTY_EVIDENCE)
        else:
            check_flags = check.flags
        flags.extend(check_flags)
        pages = list(check.pages)
        if check.dropped:
            extra["dropped_evidence_pages"] = list(check.dropped)

        regions: list[Region] = []
        joined = mmdocir.get((doc_name, _norm_ws(question))) if answerable else None
        if joined is not None:
            notes: list[str] = []
            regions, dir_pages, bad = _regions_from_mmdocir(joined, pdf, n_pages, report, notes)
            if bad:
                flags.append(FLAG_REGION_UNMATCHED)
            if notes:
                extra["mmdocir_notes"] = notes
            if dir_pages:
                report.counters["mmdocir_joined"] += 1
                if regions:
                    report.counters["mmdocir_with_regions"] += 1
                extra["source_evidence_pages"] = list(check.pages)
                if set(dir_pages) != set(check.pages):
                    report.counters["mmdocir_pages_revised"] += 1
                    if not check.pages:
                        report.counters["repaired_by_mmdocir"] += 1
                        extra["repaired_by"] = "mmdocir"
                pages = dir_pages
        episodes.append(Episode(
            episode_id=_episode_id(doc_name, question, seen_ids), benchmark="mmlongbench",
            doc_id=doc_id_for(pdf), source=str(pdf), question=question, answer=answer,
            answer_format=answer_format, answerable=answerable, evidence_pages=tuple(pages),
            evidence_regions=tuple(regions), evidence_sources=sources, flags=tuple(dict.fromkeys(flags)),
            extra=extra,
        ))
    if mmdocir:
        report.counters["mmdocir_unjoined"] = report.counters["mmdocir_questions"] - report.counters["mmdocir_joined"]
    return DatasetLoad(episodes, report.finalise(episodes))


__all__ = ["load_mmlongbench", "DEFAULT_SUBDIR"]
