"""Reading benchmark files safely, and Episodes to/from JSON.

Why one module: every loader reads third-party JSON/JSONL whose fields can be
strings holding Python literals (MMLongBench), numbers where text is expected
(LongDocURL answers) or broken lines. These helpers parse them without ``eval``
and turn failures into values the loader can flag, instead of exceptions deep
inside a loop. Episodes serialise to plain JSON so generated corpora and run
outputs can store them (tuples become lists and come back as tuples).
"""
from __future__ import annotations

import ast
import json
import os
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Iterator

from mage_gym.data.composite import CompositeEpisode, DocumentRef, Turn
from mage_gym.data.episode import Episode, Region


class DatasetError(ValueError):
    """A benchmark folder or file is unusable as a whole (not a single bad record)."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """The dataset root or its question file does not exist."""


# --- files -------------------------------------------------------------------


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise DatasetNotFoundError(f"{what} not found: {path}")
    return path


def read_json(path: Path, what: str) -> Any:
    require_file(path, what)
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{what} is not valid JSON ({exc}): {path}") from exc


def iter_jsonl(path: Path, what: str) -> Iterator[tuple[int, dict | None, str | None]]:
    """Yield ``(line_no, record, error)``; a bad line yields ``record=None`` and a reason.

    Blank lines are ignored. The loader decides how to count bad lines.
    """
    require_file(path, what)
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                yield n, None, f"bad JSON on line {n} of {path.name}: {exc.msg}"
                continue
            if not isinstance(rec, dict):
                yield n, None, f"line {n} of {path.name} is not a JSON object"
                continue
            yield n, rec, None


# --- fields ------------------------------------------------------------------


def parse_literal_list(value: Any) -> list | None:
    """A list from a real list or a JSON / Python-literal string; None if unparseable.

    MMLongBench stores lists as Python literals (``"['Table', 'Chart']"``);
    ``ast.literal_eval`` evaluates literals only, never code. An empty or
    missing string is an empty list.
    """
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return []
    for parse in (json.loads, ast.literal_eval):
        try:
            out = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(out, (list, tuple)):
            return list(out)
        if isinstance(out, int) and not isinstance(out, bool):  # "5" -> [5]
            return [out]
        return None
    return None


def parse_int_list(value: Any) -> list[int] | None:
    """Integer page numbers from a list field; None if any entry is not an integer."""
    items = parse_literal_list(value)
    if items is None:
        return None
    out: list[int] = []
    for x in items:
        if isinstance(x, bool):
            return None
        if isinstance(x, int):
            out.append(x)
        elif isinstance(x, float) and x.is_integer():
            out.append(int(x))
        elif isinstance(x, str) and x.strip().lstrip("-").isdigit():
            out.append(int(x.strip()))
        else:
            return None
    return out


def answer_text(value: Any) -> str:
    """The answer as a string: lists as JSON (parseable by json and ast), numbers via str."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False)
    if value is None:
        return ""
    return str(value)


def pdf_page_count(path: Path) -> int:
    """Pages of a PDF, opening it lazily (milliseconds even for 500-page filings).

    Raises the typed :class:`mage_gym.graph.errors.DocumentError` subclasses.
    """
    from mage_gym.graph.sources import page_count
    from mage_gym.graph.schema import DocumentSource

    return page_count(DocumentSource("pdf", str(path)))


def data_root(default_subdir: str | None = None) -> Path:
    """``$MAGE_GYM_DATA`` (default ``<repo>/../shared/data``), optionally a sub-folder."""
    env = os.environ.get("MAGE_GYM_DATA")
    base = Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data"
    return base / default_subdir if default_subdir else base


# --- episodes <-> JSON -------------------------------------------------------

_TUPLE_FIELDS = ("evidence_pages", "evidence_text", "gold_node_ids", "evidence_sources", "task_tags", "flags")


def episode_to_dict(ep: Episode) -> dict[str, Any]:
    d = asdict(ep)
    d["evidence_regions"] = [{"page": r.page, "bbox": list(r.bbox), "type": r.type} for r in ep.evidence_regions]
    d["page_window"] = list(ep.page_window) if ep.page_window is not None else None
    for k in _TUPLE_FIELDS:
        d[k] = list(d[k])
    return d


def episode_from_dict(d: dict[str, Any]) -> Episode:
    known = {f.name for f in fields(Episode)}
    unknown = set(d) - known
    if unknown:
        raise DatasetError(f"unknown Episode fields {sorted(unknown)}")
    kw = dict(d)
    for k in _TUPLE_FIELDS:
        if k in kw and kw[k] is not None:
            kw[k] = tuple(kw[k])
    if kw.get("evidence_regions"):
        kw["evidence_regions"] = tuple(
            Region(page=int(r["page"]), bbox=tuple(float(v) for v in r["bbox"]), type=r.get("type", "unknown"))
            for r in kw["evidence_regions"]
        )
    else:
        kw["evidence_regions"] = ()
    if kw.get("page_window") is not None:
        kw["page_window"] = (int(kw["page_window"][0]), int(kw["page_window"][1]))
    kw["extra"] = dict(kw.get("extra") or {})
    return Episode(**kw)


def composite_to_dict(ep: CompositeEpisode) -> dict[str, Any]:
    """A :class:`~mage_gym.data.composite.CompositeEpisode` as a JSON object (its turns' evidence as episodes)."""
    return {
        "episode_id": ep.episode_id, "benchmark": ep.benchmark,
        "documents": [asdict(d) for d in ep.documents],
        "turns": [{"question": t.question, "answer": t.answer, "answer_format": t.answer_format,
                   "answerable": t.answerable, "task_tags": list(t.task_tags),
                   "evidence": [episode_to_dict(e) for e in t.evidence]} for t in ep.turns],
        "group": ep.group, "split": ep.split, "flags": list(ep.flags), "extra": dict(ep.extra),
    }


def composite_from_dict(d: dict[str, Any]) -> CompositeEpisode:
    """The inverse of :func:`composite_to_dict`."""
    turns = tuple(Turn(question=t["question"], answer=t["answer"], answer_format=t.get("answer_format", "Str"),
                       answerable=bool(t.get("answerable", True)), task_tags=tuple(t.get("task_tags", ())),
                       evidence=tuple(episode_from_dict(e) for e in t.get("evidence", ())))
                  for t in d["turns"])
    return CompositeEpisode(episode_id=d["episode_id"], benchmark=d["benchmark"],
                            documents=tuple(DocumentRef(x["doc_id"], x["source"]) for x in d["documents"]),
                            turns=turns, group=d.get("group", ""), split=d.get("split", "train"),
                            flags=tuple(d.get("flags", ())), extra=dict(d.get("extra") or {}))


def any_episode_to_dict(ep: Any) -> dict[str, Any]:
    """An Episode or a :class:`~mage_gym.data.composite.CompositeEpisode` as a JSON object."""
    return composite_to_dict(ep) if isinstance(ep, CompositeEpisode) else episode_to_dict(ep)


def any_episode_from_dict(d: dict[str, Any]) -> Any:
    """The inverse of :func:`any_episode_to_dict` (composite records are the ones with ``turns``)."""
    if "turns" in d:
        return composite_from_dict(d)
    return episode_from_dict(d)


def save_episodes(path: str | os.PathLike[str], episodes: list[Any]) -> None:
    """Write episodes (single or composite) as JSONL (atomic: a temp file then rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for ep in episodes:
            fh.write(json.dumps(any_episode_to_dict(ep), ensure_ascii=False) + "\n")
    os.replace(tmp, p)


def load_episodes(path: str | os.PathLike[str]) -> list[Any]:
    """Episodes (and composite episodes) from a JSONL file written by :func:`save_episodes`."""
    out: list[Any] = []
    for n, rec, err in iter_jsonl(Path(path), "episode file"):
        if err:
            raise DatasetError(err)
        out.append(any_episode_from_dict(rec))  # type: ignore[arg-type]
    return out


__all__ = [
    "DatasetError", "DatasetNotFoundError", "read_json", "iter_jsonl", "parse_literal_list", "parse_int_list",
    "answer_text", "pdf_page_count", "data_root", "episode_to_dict", "episode_from_dict", "composite_to_dict",
    "composite_from_dict", "any_episode_to_dict", "any_episode_from_dict", "save_episodes", "load_episodes",
]
