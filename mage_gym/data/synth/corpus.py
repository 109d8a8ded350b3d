"""Generate a corpus of synthetic long reports with questions; load it back.

Layout of a corpus folder (everything relative, so a folder can be moved)::

    corpus.json      generator version, seed, role, config, one record per document
                     (no timings: deterministic)
    episodes.jsonl   one Episode per line; ``source`` is relative to the folder
    pdfs/<doc_id>.pdf
    layout/<doc_id>.json   every drawn element (type, page, normalised box, text), printed page
                     labels, every cross-reference (mention -> target element and page)

Why per-document seeds (``SeedSequence([seed, doc_index])``): documents are
made in a process pool, in any order, and must come out identical to a serial
run; each document owns its random streams, so the corpus is a pure function of
``(seed, config)``.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from mage_gym.data.episode import Episode
from mage_gym.data.io import DatasetNotFoundError, episode_to_dict, load_episodes
from mage_gym.data.synth.config import SynthConfig
from mage_gym.data.synth.provenance import GENERATOR_VERSION, check_seed

FORMAT_VERSION = 2  # corpus.json / layout file layout (2: generator_version, role, page labels, references)
_RASTERS: dict[int, Any] = {}  # one RasterFactory per process and dpi


@dataclass(frozen=True)
class DocResult:
    doc_id: str
    file: str  # relative to the corpus root
    layout_file: str
    n_pages: int
    title: str
    domain: str
    n_bytes: int
    sha256: str
    episodes: tuple[dict[str, Any], ...]  # episode_to_dict records
    element_counts: dict[str, int]


@dataclass
class CorpusInfo:
    root: Path
    seed: int
    n_docs: int
    config: SynthConfig
    n_pages: int = 0
    n_questions: int = 0
    n_bytes: int = 0
    kind_counts: dict[str, int] = field(default_factory=dict)
    element_counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0  # wall clock
    cpu_seconds: float = 0.0  # this process + finished workers: comparable across machine loads
    docs: list[DocResult] = field(default_factory=list)
    role: str = "train"
    bridge_types: dict[str, int] = field(default_factory=dict)
    generator_version: str = GENERATOR_VERSION

    def summary(self) -> dict[str, Any]:
        n_bridge = self.kind_counts.get("bridge", 0)
        return {
            "root": str(self.root), "generator_version": self.generator_version, "seed": self.seed, "role": self.role,
            "n_docs": self.n_docs, "n_pages": self.n_pages,
            "bridge_share": round(n_bridge / max(1, self.n_questions), 4), "bridge_types": self.bridge_types,
            "n_questions": self.n_questions, "n_bytes": self.n_bytes, "mean_doc_kib": round(
                self.n_bytes / max(1, self.n_docs) / 1024, 1), "kind_counts": self.kind_counts,
            "element_counts": self.element_counts, "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
        }


def doc_id_of(seed: int, index: int) -> str:
    return f"synth_s{seed}_d{index:04d}"


def _rasters(dpi: int) -> Any:
    from mage_gym.data.synth.charts import RasterFactory

    if dpi not in _RASTERS:
        _RASTERS[dpi] = RasterFactory(dpi)
    return _RASTERS[dpi]


def generate_document(out_dir: str | os.PathLike[str], index: int, seed: int, cfg: SynthConfig) -> DocResult:
    """Make one PDF, its layout record and its questions (files written under ``out_dir``)."""
    return build_document(out_dir, index, seed, cfg)[0]


def build_document(out_dir: str | os.PathLike[str], index: int, seed: int, cfg: SynthConfig, *,
                   shared: Any = None, salt: tuple[int, ...] = (), doc_id: str | None = None) -> tuple[DocResult, Any]:
    """:func:`generate_document` plus the document's :class:`~.questions.DocContext` (world, plan, drawn elements).

    Hooks for composite corpora (:mod:`.multidoc`, :mod:`.conversation`), which
    ask their own questions over the drawn facts: ``shared`` (a
    :class:`~.world.SharedWorld`) fixes domain, entities and years across a
    document group; ``salt`` is appended to every random stream's entropy so
    these documents never replay a classic corpus's streams; ``doc_id``
    renames the files. With the defaults the output is exactly
    :func:`generate_document`'s.
    """
    from mage_gym.data.synth.bridge import BridgePlanner
    from mage_gym.data.synth.bridge_questions import BridgeQuestionMaker
    from mage_gym.data.synth.layout import PageWriter
    from mage_gym.data.synth.planner import Planner
    from mage_gym.data.synth.questions import DocContext, QuestionMaker
    from mage_gym.data.synth.world import build_world

    root = Path(out_dir)
    doc_id = doc_id or doc_id_of(seed, index)
    salt = tuple(int(x) for x in salt)

    def stream(k: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([seed, index, k, *salt]))

    rng = stream(0)
    target = int(rng.integers(cfg.min_pages, cfg.max_pages + 1))
    world = build_world(rng, n_entities=int(np.clip(8 + target // 15, 9, 30)),
                        n_years=int(np.clip(5 + target // 40, 6, 12)), shared=shared)
    # bridge material draws from its own stream: the classic content is the same with or without it
    bridge = BridgePlanner(world, cfg, stream(2), target)
    planner = Planner(world, cfg, rng, bridge)
    bridge.attach(planner)
    writer = PageWriter(cfg, _rasters(cfg.chart_dpi), bridge.labels)
    for group in planner.groups():
        if writer.page_count >= bridge.body_pages and not writer.fits(group):
            break
        writer.place(group)
    if bridge.end_pages and writer.page_count != bridge.body_pages:  # pragma: no cover - layout invariant
        raise RuntimeError(f"{doc_id}: body ended on {writer.page_count} pages, expected {bridge.body_pages}")
    for group in bridge.end_matter():
        writer.place(group)
    for story in bridge.stories:
        if story.mention:
            story.mention = writer.resolve_page_marks(story.mention)
    elements = tuple(writer.elements)
    n_pages = writer.page_count
    page_chapters = list(writer.page_chapter)
    pdf = writer.finish(world.title, world.org, world.report_year)
    labels = [bridge.labels.label(i) for i in range(n_pages)]

    rel_pdf = f"pdfs/{doc_id}.pdf"
    rel_layout = f"layout/{doc_id}.json"
    (root / "pdfs").mkdir(parents=True, exist_ok=True)
    (root / "layout").mkdir(parents=True, exist_ok=True)
    _atomic_write(root / rel_pdf, pdf)
    W, H = cfg.page_width, cfg.page_height
    layout = {
        "doc_id": doc_id, "n_pages": n_pages, "page_size": [W, H], "title": world.title,
        "generator_version": GENERATOR_VERSION,
        "page_chapter": page_chapters,  # level-1 section in force at the top of each page
        "page_labels": labels,  # printed page numbers (what "see page 12" means), by PDF page index
        "page_label_style": bridge.labels.to_dict(),
        "references": _references(planner.record.references, writer, labels),
        "elements": [{"id": e.elem_id, "type": e.type, "page": e.page,
                      "bbox": [round(e.bbox[0] / W, 5), round(e.bbox[1] / H, 5), round(e.bbox[2] / W, 5),
                               round(e.bbox[3] / H, 5)],
                      # full text where it is structured (tables, lists, headings); prose is shortened
                      "text": e.text if e.type in ("table", "list", "title", "caption") else e.text[:200]}
                     for e in elements],
    }
    _atomic_write(root / rel_layout, json.dumps(layout, ensure_ascii=False, separators=(",", ":")).encode())

    full_text = "\n".join([world.title, *page_chapters, *(e.text for e in elements)])
    ctx = DocContext(doc_id, rel_pdf, world, planner.record, elements, n_pages, (W, H), full_text,
                     tuple(tuple(f) for f in writer.page_furniture), tuple(bridge.pool + bridge.end_slots))
    qm = QuestionMaker(ctx, cfg, stream(1))
    episodes = qm.make(cfg.questions_per_doc)
    episodes += BridgeQuestionMaker(ctx, cfg, stream(3), qm.main, qm._region).make(cfg.bridge_questions_per_doc)
    records = []
    for j, ep in enumerate(episodes):
        ep = replace(ep, episode_id=f"{doc_id}-q{j:02d}")
        records.append(episode_to_dict(ep))
    return (DocResult(doc_id, rel_pdf, rel_layout, n_pages, world.title, world.domain.key, len(pdf),
                      hashlib.sha256(pdf).hexdigest(), tuple(records), dict(Counter(e.type for e in elements))), ctx)


def _references(refs: list[Any], writer: Any, labels: list[str]) -> list[dict[str, Any]]:
    """Every drawn cross-reference with its target element and page (``None`` where the target is not drawn).

    ``target`` is the element that carries the cited label (the table, the
    chart, the heading of a section or appendix, the note); for a page
    mention it is the element whose page is meant (or None when only the page is).
    """
    out = []
    for r in refs:
        if r.source not in writer.block_page:
            continue
        mention = writer.resolve_page_marks(r.mention)
        page = r.target_page if r.target_page is not None else writer.block_page.get(r.target)
        drawn = r.target is not None and r.target in writer.block_page
        out.append({"source": f"b{r.source}", "mention": mention, "kind": r.kind,
                    "target": f"b{r.target}" if drawn else None,
                    "target_page": page if page is not None and page < len(labels) else None,
                    "target_label": labels[page] if page is not None and page < len(labels) else None})
    return out


def _generate_star(args: tuple[str, int, int, SynthConfig]) -> DocResult:
    return generate_document(*args)


def _cpu_seconds() -> float:
    """User+system CPU time of this process and its reaped children (the pool workers)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _start_method() -> str:
    """``fork`` when safe (saves re-importing numpy/PyMuPDF/matplotlib per worker), else ``spawn``.

    Forking a process that has initialised torch's thread pools can deadlock, so
    any parent with torch imported gets clean spawned workers.
    """
    import multiprocessing as mp
    import sys

    if "fork" in mp.get_all_start_methods() and "torch" not in sys.modules:
        return "fork"
    return "spawn"


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def generate_corpus(out_dir: str | os.PathLike[str], n_docs: int, seed: int = 0, cfg: SynthConfig | None = None,
                    workers: int = 2, progress: bool = True, role: str | None = None) -> CorpusInfo:
    """Generate ``n_docs`` documents with questions into ``out_dir`` (created if needed).

    ``workers > 1`` uses a process pool (fork, or spawn once torch is loaded);
    results are identical to a serial run. Existing files of the same names are overwritten.
    ``role`` (``train`` | ``test``) refuses a seed outside that role's range
    (:mod:`mage_gym.data.synth.provenance`); ``None`` takes the role of the
    seed's range. The generator version, seed and role go into ``corpus.json``.
    """
    from mage_gym.progress import progress_bar

    if n_docs < 1:
        raise ValueError(f"n_docs must be >= 1, got {n_docs}")
    role = check_seed(seed, role)
    cfg = cfg or SynthConfig()
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    jobs = [(str(root), i, seed, cfg) for i in range(n_docs)]
    results: list[DocResult] = []
    bar = progress_bar(total=n_docs, desc="synth docs", unit="doc", disable=not progress)
    if workers <= 1 or n_docs == 1:
        for job in jobs:
            results.append(_generate_star(job))
            bar.update(1)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(workers, n_docs), mp_context=mp.get_context(_start_method())) as ex:
            for res in ex.map(_generate_star, jobs, chunksize=1):
                results.append(res)
                bar.update(1)
    bar.close()

    lines = [json.dumps(rec, ensure_ascii=False) for r in results for rec in r.episodes]
    _atomic_write(root / "episodes.jsonl", ("\n".join(lines) + "\n").encode("utf-8"))
    kinds = Counter(rec["extra"]["question_kind"] for r in results for rec in r.episodes)
    bridge_types = Counter(rec["extra"]["bridge"]["type"] for r in results for rec in r.episodes
                           if rec["extra"]["question_kind"] == "bridge")
    elems: Counter[str] = Counter()
    for r in results:
        elems.update(r.element_counts)
    manifest = {
        "generator": "mage_gym.data.synth", "generator_version": GENERATOR_VERSION, "format_version": FORMAT_VERSION,
        "seed": seed, "role": role, "n_docs": n_docs,
        "config": cfg.to_dict(),
        "docs": [{"doc_id": r.doc_id, "file": r.file, "layout": r.layout_file, "n_pages": r.n_pages,
                  "title": r.title, "domain": r.domain, "bytes": r.n_bytes, "sha256": r.sha256,
                  "n_questions": len(r.episodes)} for r in results],
        "totals": {"pages": sum(r.n_pages for r in results), "questions": len(lines),
                   "question_kinds": dict(sorted(kinds.items())), "bridge_types": dict(sorted(bridge_types.items())),
                   "elements": dict(sorted(elems.items()))},
    }
    _atomic_write(root / "corpus.json", json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8"))
    return CorpusInfo(root=root, seed=seed, n_docs=n_docs, config=cfg, n_pages=manifest["totals"]["pages"],
                      n_questions=len(lines), n_bytes=sum(r.n_bytes for r in results),
                      kind_counts=dict(sorted(kinds.items())), element_counts=dict(sorted(elems.items())),
                      seconds=time.perf_counter() - t0, cpu_seconds=_cpu_seconds() - cpu0, docs=results, role=role,
                      bridge_types=dict(sorted(bridge_types.items())))


def default_synth_root() -> Path:
    """``$MAGE_GYM_SYNTH`` if set, else where ``make_synth.py preset=train`` writes by default."""
    env = os.environ.get("MAGE_GYM_SYNTH")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "data_out" / "synth" / "train_seed0"


def load_synth(root: str | os.PathLike[str] | None = None) -> list[Episode]:
    """Episodes of a generated corpus, with ``source`` resolved to absolute PDF paths.

    ``root=None`` reads :func:`default_synth_root`.
    """
    base = Path(root) if root is not None else default_synth_root()
    path = base / "episodes.jsonl"
    if not path.is_file():
        raise DatasetNotFoundError(f"synthetic corpus not found: {path} (run experiments/make_synth.py)")
    base = base.resolve()
    return [replace(ep, source=str(base / ep.source)) if not os.path.isabs(ep.source) else ep
            for ep in load_episodes(path)]


def read_manifest(root: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(root) / "corpus.json"
    if not path.is_file():
        raise DatasetNotFoundError(f"corpus manifest not found: {path}")
    return json.loads(path.read_text(encoding="utf-8"))
