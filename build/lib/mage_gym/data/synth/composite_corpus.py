"""Folders of composite synthetic episodes (cross-document questions, conversations): write and read.

Same layout as a classic corpus (:mod:`.corpus`), so graph building and the
report browser need nothing new::

    corpus.json      generator, version, seed, role, config, every document (with its group), the groups
    episodes.jsonl   one :class:`~mage_gym.data.composite.CompositeEpisode` a line (``save_episodes``);
                     document and evidence sources relative to the folder
    pdfs/<doc_id>.pdf, layout/<doc_id>.json

Why a group per document in the manifest: splits go by group
(``CompositeEpisode.doc_id`` is the group), so a document must belong to one
group only; :func:`write_composite_corpus` refuses anything else.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from mage_gym.data.composite import CompositeEpisode
from mage_gym.data.io import DatasetError, DatasetNotFoundError, load_episodes, save_episodes
from mage_gym.data.synth.corpus import FORMAT_VERSION, DocResult
from mage_gym.data.synth.provenance import GENERATOR_VERSION


def check_groups(episodes: Iterable[CompositeEpisode]) -> dict[str, list[str]]:
    """``group -> documents`` of the episodes; raises if a document sits in two groups (splits would leak)."""
    owner: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for ep in episodes:
        if not ep.group:
            raise DatasetError(f"{ep.episode_id}: composite synthetic episodes need a group")
        for d in ep.doc_ids:
            if owner.setdefault(d, ep.group) != ep.group:
                raise DatasetError(f"document {d} is in groups {owner[d]} and {ep.group}")
            docs = groups.setdefault(ep.group, [])
            if d not in docs:
                docs.append(d)
    return groups


def write_composite_corpus(root: str | os.PathLike[str], *, generator: str, seed: int, role: str,
                           config: dict[str, Any], docs: Sequence[tuple[DocResult, str]],
                           episodes: Sequence[CompositeEpisode]) -> dict[str, Any]:
    """Write ``episodes.jsonl`` and ``corpus.json`` (the PDFs and layouts are already in ``root``).

    ``docs`` pairs each document with its group. Returns the manifest.
    """
    root = Path(root)
    groups = check_groups(episodes)
    doc_group = {r.doc_id: g for r, g in docs}
    for g, ids in groups.items():
        stray = [d for d in ids if doc_group.get(d) != g]
        if stray:
            raise DatasetError(f"group {g}: documents {stray} are not recorded in that group")
    save_episodes(root / "episodes.jsonl", list(episodes))
    kinds = Counter(str(ep.extra.get("question_kind", ep.kind)) for ep in episodes)
    manifest = {
        "generator": generator, "generator_version": GENERATOR_VERSION, "format_version": FORMAT_VERSION,
        "seed": int(seed), "role": role, "config": config,
        "docs": [{"doc_id": r.doc_id, "group": g, "file": r.file, "layout": r.layout_file, "n_pages": r.n_pages,
                  "title": r.title, "domain": r.domain, "bytes": r.n_bytes, "sha256": r.sha256} for r, g in docs],
        "groups": {g: list(ids) for g, ids in groups.items()},
        "totals": {"documents": len(docs), "groups": len({g for _, g in docs}),
                   "pages": sum(r.n_pages for r, _ in docs), "episodes": len(episodes),
                   "turns": sum(ep.n_turns for ep in episodes),
                   "episode_kinds": dict(sorted(Counter(ep.kind for ep in episodes).items())),
                   "question_kinds": dict(sorted(kinds.items()))},
    }
    tmp = root / "corpus.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, root / "corpus.json")
    return manifest


def _absolute(base: Path, source: str) -> str:
    return source if os.path.isabs(source) else str(base / source)


def resolve_sources(ep: CompositeEpisode, base: Path) -> CompositeEpisode:
    """The episode with every document and evidence source made absolute under ``base``."""
    docs = tuple(replace(d, source=_absolute(base, d.source)) for d in ep.documents)
    turns = tuple(replace(t, evidence=tuple(replace(e, source=_absolute(base, e.source)) for e in t.evidence))
                  for t in ep.turns)
    return replace(ep, documents=docs, turns=turns)


def load_composite_corpus(root: str | os.PathLike[str]) -> list[CompositeEpisode]:
    """Composite episodes of a folder written by :func:`write_composite_corpus`, sources absolute."""
    base = Path(root)
    path = base / "episodes.jsonl"
    if not path.is_file():
        raise DatasetNotFoundError(f"composite synthetic corpus not found: {path}")
    base = base.resolve()
    out = []
    for ep in load_episodes(path):
        if not isinstance(ep, CompositeEpisode):
            raise DatasetError(f"{path}: {ep.episode_id} is not a composite episode")
        out.append(resolve_sources(ep, base))
    return out


def manifest_matches(root: str | os.PathLike[str], generator: str, seed: int, config: dict[str, Any]) -> bool:
    """True when ``root`` already holds a complete corpus made by ``generator`` with this seed and config."""
    path = Path(root) / "corpus.json"
    if not path.is_file() or not (Path(root) / "episodes.jsonl").is_file():
        return False
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return (m.get("generator") == generator and m.get("generator_version") == GENERATOR_VERSION
            and m.get("seed") == int(seed) and m.get("config") == json.loads(json.dumps(config)))


def default_composite_root(name: str, seed: int = 0) -> Path:
    """``$MAGE_GYM_CACHE/synth/<name>_s<seed>``: where a dataset with no root keeps its generated corpus."""
    from mage_gym.paths import cache_root

    return cache_root() / "synth" / f"{name}_s{int(seed)}"


def load_or_generate(root: str | os.PathLike[str] | None, *, name: str, generator: str, seed: int,
                     config: dict[str, Any], make: Callable[[Path], Any]) -> tuple[Path, bool]:
    """The corpus folder to read: ``root`` as given, or the default one, generated when absent or stale.

    Returns ``(folder, generated_now)``. A given root is never generated into
    (a missing one is an error at load time), so a typo cannot silently make data.
    """
    if root is not None:
        return Path(root), False
    path = default_composite_root(name, seed)
    if manifest_matches(path, generator, seed, config):
        return path, False
    make(path)
    return path, True


def composite_report(benchmark: str, root: Path, episodes: list[CompositeEpisode], generated: bool) -> Any:
    """A :class:`~mage_gym.data.report.LoadReport` for a composite corpus: episodes, groups, documents, turns."""
    from mage_gym.data.report import LoadReport

    report = LoadReport(benchmark=benchmark, root=str(root))
    report.finalise(episodes)  # type: ignore[arg-type] - composites carry what finalise reads
    groups = check_groups(episodes)
    report.documents = len({d for ep in episodes for d in ep.doc_ids})  # finalise counted split keys (groups)
    report.counters["groups"] = len(groups)
    report.counters["documents_in_groups"] = sum(len(v) for v in groups.values())
    report.counters["turns"] = sum(ep.n_turns for ep in episodes)
    for kind, n in sorted(Counter(ep.kind for ep in episodes).items()):
        report.counters[f"kind:{kind}"] = n
    if generated:
        report.note(f"generated the default corpus at {root}")
    return report


__all__ = ["default_composite_root", "load_or_generate", "composite_report", "check_groups", "write_composite_corpus",
           "resolve_sources", "load_composite_corpus", "manifest_matches"]
