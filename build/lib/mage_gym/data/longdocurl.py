"""LongDocURL loader: ``LongDocURL.jsonl`` + page images under ``pdf_pngs/``.

There are no PDFs: a document is its folder of page images
``pdf_pngs/<range>/<doc_no[:4]>/<doc_no>_<i>.png`` (``i`` 0-based). The
``images`` field holds absolute paths on the authors' machine; the part after
``pdf_pngs/`` is re-rooted here (or the layout is rebuilt from ``doc_no``).

Conversions: ``start_end_idx`` is a 1-based inclusive page window ->
``Episode.page_window`` 0-based inclusive; ``evidence_pages`` 1-based ->
0-based, range-checked against the document *and* the window (gold outside
the pages the model is given is flagged like out-of-range gold). ``task_tag``,
``question_type`` and any ``subTask`` entries go into ``task_tags``. Answers
that are numbers or lists become strings (lists as JSON); the raw value stays
in ``extra["answer_raw"]``. ``answer_format == "None"`` means unanswerable.

Evidence boxes: ``detailed_evidences`` text may hold ``<box>(x0, y0, x1,
y1)</box>`` in 0-1 page fractions, usually followed by ``, page N`` (1-based).
A box takes the page the text names after it (or just before it); with no
mention and a single gold page it takes that page; otherwise (several gold
pages and no usable mention) the box is dropped, the episode keeps page-level
gold and is flagged ``region_unmatched``.

Shared folders: the image folder is named by the first four digits of
``doc_no``, so two documents can share it. A folder holding only this
document's pages is the source (what ``mage_gym.graph.sources.open_source``
opens). If other documents' images are present, the source is the glob
``<folder>/<doc_no>_*.png`` (``extra["page_files"]`` lists the files) and the
case is counted (``shared_image_folder``), so it can never be parsed as one
interleaved document. A document whose page images have gaps is skipped:
page numbers would no longer equal image positions.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from mage_gym.data.episode import FLAG_BAD_FIELD, FLAG_EMPTY_EVIDENCE, FLAG_REGION_UNMATCHED, Episode, Region
from mage_gym.data.io import answer_text, data_root, iter_jsonl, parse_int_list, parse_literal_list
from mage_gym.data.report import DatasetLoad, LoadReport, check_pages

DEFAULT_SUBDIR = "longdocurl-sample"
QUESTIONS_FILE = "LongDocURL.jsonl"

_NUM = r"\s*(-?\d*\.?\d+)\s*"
_BOX = re.compile(r"<box>\s*\(" + ",".join([_NUM] * 4) + r"\)\s*</box>", re.IGNORECASE)
_PAGE_AFTER = re.compile(r"^[\s,;:)\]]*(?:on\s+)?(?:the\s+)?pages?\s*(\d+)", re.IGNORECASE)
_PAGE_BEFORE = re.compile(r"pages?\s*(\d+)\s*[,:;(\[]*\s*$", re.IGNORECASE)
_SEPARATOR = re.compile(r"^[\s,;]*(?:and\s*)?$", re.IGNORECASE)
_PAGE_FILE = re.compile(r"^(.+)_(\d+)$")
#: How far (characters) around a box we look for "page N".
_MENTION_SPAN = 40


def _image_folder(root: Path, rec: dict) -> Path:
    """Where this document's page images live under ``root``."""
    for img in rec.get("images") or []:
        parts = Path(str(img)).parts
        if "pdf_pngs" in parts:
            k = parts.index("pdf_pngs")
            return root.joinpath(*parts[k:]).parent
    doc_no = str(rec.get("doc_no", ""))
    if len(doc_no) >= 4 and doc_no.isdigit():  # 4127644 -> 4000-4999/4127
        lo = int(doc_no[:4]) // 1000 * 1000
        return root / "pdf_pngs" / f"{lo}-{lo + 999}" / doc_no[:4]
    return root / "pdf_pngs" / doc_no


def _page_files(folder: Path, doc_no: str) -> tuple[dict[int, Path], bool]:
    """This document's images by 0-based page, and whether other files share the folder."""
    mine: dict[int, Path] = {}
    shared = False
    for f in folder.iterdir():
        if not f.is_file() or f.suffix.lower() not in {".png", ".jpg", ".jpeg"}:
            continue
        m = _PAGE_FILE.match(f.stem)
        if m and m.group(1) == doc_no:
            mine[int(m.group(2))] = f
        else:
            shared = True
    return mine, shared


def parse_boxes(text: str, gold_pages_1based: list[int]) -> tuple[list[tuple[int, tuple[float, ...]]], int]:
    """``[(page_1based, box)]`` from ``detailed_evidences``, and how many boxes were unplaceable.

    A box's page is the "page N" written right after it (boxes listed back to
    back share the mention that follows the last of them), else right before
    it (then shared with boxes listed right after it); N must be one of the
    gold pages. Without a usable mention the only gold
    page is taken; with several gold pages the box is unplaceable.
    """
    gold = set(gold_pages_1based)
    matches = list(_BOX.finditer(text or ""))
    pages: list[int | None] = [None] * len(matches)
    for k in range(len(matches) - 1, -1, -1):  # backwards: a box may inherit the next box's mention
        m = matches[k]
        stop = matches[k + 1].start() if k + 1 < len(matches) else len(text)
        gap = text[m.end(): min(stop, m.end() + _MENTION_SPAN)]
        after = _PAGE_AFTER.match(gap)
        if after:
            pages[k] = int(after.group(1))
        elif k + 1 < len(matches) and _SEPARATOR.match(text[m.end(): stop]):
            pages[k] = pages[k + 1]
        if pages[k] is None:
            before = _PAGE_BEFORE.search(text[max(0, m.start() - _MENTION_SPAN): m.start()])
            pages[k] = int(before.group(1)) if before else None
    for k in range(1, len(matches)):  # "on page 3: <box>..</box> and <box>..</box>": share forwards
        if pages[k] is None and _SEPARATOR.match(text[matches[k - 1].end(): matches[k].start()]):
            pages[k] = pages[k - 1]
    placed: list[tuple[int, tuple[float, ...]]] = []
    unplaced = 0
    for m, page in zip(matches, pages):
        if page is not None and page not in gold:
            page = None
        if page is None and len(gold) == 1:
            page = next(iter(gold))
        if page is None:
            unplaced += 1
        else:
            placed.append((page, tuple(float(m.group(g)) for g in range(1, 5))))
    return placed, unplaced


def _to_region(page0: int, box: tuple[float, ...], rtype: str) -> Region | None:
    x0, x1 = sorted((box[0], box[2]))
    y0, y1 = sorted((box[1], box[3]))
    clip = lambda v: min(max(v, 0.0), 1.0)  # noqa: E731
    b = (clip(x0), clip(y0), clip(x1), clip(y1))
    if b[2] - b[0] <= 0 or b[3] - b[1] <= 0:
        return None
    return Region(page=page0, bbox=b, type=rtype)


def load_longdocurl(root: str | Path | None = None) -> DatasetLoad:
    """Load every question whose page images are present (see module docstring)."""
    root = (Path(root) if root is not None else data_root(DEFAULT_SUBDIR)).resolve()
    report = LoadReport(benchmark="longdocurl", root=str(root))
    docs: dict[str, tuple[str, int, dict[int, Path]] | str] = {}  # doc_no -> (source, n_pages, files) | reason
    episodes: list[Episode] = []
    seen: defaultdict[str, int] = defaultdict(int)
    for line_no, rec, err in iter_jsonl(root / QUESTIONS_FILE, "LongDocURL questions"):
        if err or rec is None:
            report.skip("bad_json_line", message=err)
            continue
        doc_no, question = str(rec.get("doc_no", "")).strip(), rec.get("question")
        if not doc_no or not isinstance(question, str):
            report.skip("bad_record", message=f"line {line_no}: no doc_no/question")
            continue
        if doc_no not in docs:
            docs[doc_no] = _open_document(root, rec, doc_no, report)
        doc = docs[doc_no]
        if isinstance(doc, str):
            report.skip(doc)
            continue
        source, n_pages, files = doc

        flags: list[str] = []
        extra: dict[str, Any] = {"answer_raw": rec.get("answer"), "total_pages": rec.get("total_pages"),
                                 "line": line_no}
        if source.endswith("*.png"):  # shared folder: say exactly which files are this document
            extra["page_files"] = [str(files[i]) for i in range(n_pages)]
        answer_format = str(rec.get("answer_format", "")).strip() or "String"
        answerable = answer_format != "None"

        window = None
        w = parse_int_list(rec.get("start_end_idx"))
        if w is not None and len(w) == 2 and 1 <= w[0] <= w[1] and w[0] <= n_pages:
            window = (w[0] - 1, min(w[1] - 1, n_pages - 1))
        elif rec.get("start_end_idx") is not None:
            flags.append(FLAG_BAD_FIELD)
            extra.setdefault("bad_fields", []).append("start_end_idx")

        pages_1 = parse_int_list(rec.get("evidence_pages"))
        if pages_1 is None:
            flags.append(FLAG_BAD_FIELD)
            extra.setdefault("bad_fields", []).append("evidence_pages")
        bad_pages_field = pages_1 is None
        if bad_pages_field:
            pages_1 = []
        check = check_pages([p - 1 for p in pages_1], n_pages, answerable, window)
        # an unparseable field is flagged as such, not as "answerable without evidence"
        flags.extend(f for f in check.flags if not (bad_pages_field and f == FLAG_EMPTY_EVIDENCE))
        if check.dropped:
            extra["dropped_evidence_pages"] = list(check.dropped)
        sources = tuple(str(s).strip() for s in (parse_literal_list(rec.get("evidence_sources")) or [])
                        if str(s).strip())

        regions: list[Region] = []
        detailed = rec.get("detailed_evidences") or ""
        if answerable and isinstance(detailed, str) and "<box>" in detailed.lower():
            rtype = "|".join(sources) if sources else "unknown"
            placed, unplaced = parse_boxes(detailed, [p + 1 for p in check.pages])
            for page1, box in placed:
                reg = _to_region(page1 - 1, box, rtype)
                if reg is None:
                    unplaced += 1
                else:
                    regions.append(reg)
            if unplaced:
                flags.append(FLAG_REGION_UNMATCHED)
                report.counters["boxes_unplaced"] += unplaced
            report.counters["boxes_placed"] += len(regions)

        tags = [str(rec[k]) for k in ("task_tag", "question_type") if rec.get(k)]
        tags += [str(t) for t in (parse_literal_list(rec.get("subTask")) or []) if t]
        qid = str(rec.get("question_id") or f"ldu-{doc_no}-{line_no}")
        seen[qid] += 1
        if seen[qid] > 1:
            qid = f"{qid}-{seen[qid]}"
        episodes.append(Episode(
            episode_id=qid, benchmark="longdocurl", doc_id=doc_no, source=source, question=question,
            answer=answer_text(rec.get("answer")), answer_format=answer_format, answerable=answerable,
            evidence_pages=check.pages, evidence_regions=tuple(regions), evidence_sources=sources,
            task_tags=tuple(dict.fromkeys(tags)), page_window=window, flags=tuple(dict.fromkeys(flags)),
            extra=extra,
        ))
    return DatasetLoad(episodes, report.finalise(episodes))


def _open_document(root: Path, rec: dict, doc_no: str,
                   report: LoadReport) -> tuple[str, int, dict[int, Path]] | str:
    """(source, page count, files) for a document, or the reason it cannot be used."""
    folder = _image_folder(root, rec)
    if not folder.is_dir():
        report.note(f"document {doc_no}: page-image folder missing ({folder}); its questions are skipped",
                    warn=True)
        return "missing_document"
    files, shared = _page_files(folder, doc_no)
    if not files:
        report.note(f"document {doc_no}: no page images named {doc_no}_<i> in {folder}; questions skipped",
                    warn=True)
        return "missing_document"
    n = max(files) + 1
    if len(files) != n:
        missing = sorted(set(range(n)) - set(files))
        report.note(f"document {doc_no}: page images missing {missing[:10]}; questions skipped "
                    "(page numbers would not match image positions)", warn=True)
        return "page_images_incomplete"
    total = rec.get("total_pages")
    if isinstance(total, int) and total != n:
        report.note(f"document {doc_no}: {n} page images but total_pages={total}", counter="page_count_mismatch")
    if shared:
        report.note(f"document {doc_no}: folder {folder} also holds other documents' images; "
                    f"source is the glob {doc_no}_*.png", counter="shared_image_folder")
        return str(folder / f"{doc_no}_*.png"), n, files
    return str(folder), n, files


__all__ = ["load_longdocurl", "parse_boxes", "DEFAULT_SUBDIR"]
