"""Build (or find in the cache) the evidence graphs of many documents: the corpus step of every experiment.

Why here and not in :mod:`mage_gym.graph`: a corpus build is an experiment's
job (which files, how many worker processes, a record per document for
``results.json``); ``mage_gym.graph.build_graph`` stays a pure function of one
file and its settings. Documents already in the cache are only loaded
(milliseconds); the rest are built in ``workers`` processes, each holding one
text encoder and ``cores // workers`` torch threads, one document per task.
A bad file never stops the run: its typed error (:mod:`mage_gym.graph.errors`)
is recorded. With ``executor: {name: ray}`` the documents to build are Ray
tasks instead (:mod:`experiments.common.distributed.build`); every record
carries ``graph_hash`` (:func:`graph_hash`), so builds anywhere can be compared.
"""
from __future__ import annotations

import logging
import os
import time
from collections import Counter
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Mapping

from experiments.common.config import check_parser

log = logging.getLogger("experiments.corpus")

#: the keys of a corpus build (conf/build_graphs.yaml); missing keys take these values
DEFAULTS: dict[str, Any] = {"input": None, "files": [], "parser": "layout", "parser_cfg": {}, "edge_cfg": {},
                            "embed_cfg": {}, "max_pages": None, "workers": 1, "limit": None, "cache": True,
                            "cache_dir": None, "executor": {"name": "local"}}


def find_documents(root: Path) -> list[Path]:
    """PDF files and folders holding page images under ``root`` (or ``root`` itself), sorted."""
    from mage_gym.graph.sources import IMAGE_SUFFIXES

    if root.is_file():
        return [root]
    if not root.is_dir():
        raise FileNotFoundError(f"input not found: {root}")
    docs: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        d = Path(dirpath)
        if any(Path(f).suffix.lower() in IMAGE_SUFFIXES for f in filenames):
            docs.append(d)
        docs.extend(d / f for f in filenames if f.lower().endswith(".pdf"))
    return sorted(docs)


def _build_kwargs(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return dict(parser=cfg["parser"], max_pages=cfg["max_pages"], parser_cfg=cfg["parser_cfg"] or {},
                edge_cfg=cfg["edge_cfg"] or {}, embed_cfg=cfg["embed_cfg"] or {}, cache_dir=cfg["cache_dir"])


def graph_hash(graph: Any) -> str:
    """sha256 over a graph's node ids, edge arrays and vector matrix (fixed dtypes and shapes).

    Why: two builds of one document (local vs. Ray, this node vs. that one)
    must be checkable for equality without comparing files; this is the
    ``graph_hash`` of a document record.
    """
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    h.update("\n".join(graph.node_ids).encode())
    for arr, dtype in ((graph.edge_src, np.int64), (graph.edge_dst, np.int64), (graph.edge_kind, np.int64),
                       (graph.edge_weight, np.float32), (graph.vectors, np.float32)):
        a = np.ascontiguousarray(arr, dtype=dtype)
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    h.update("\n".join(graph.edge_label).encode())
    return h.hexdigest()


def _record(path: Path, graph: Any = None, seconds: float = 0.0, cached: bool = False,
            error: BaseException | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = {"doc_id": None, "path": str(path), "pages": 0, "elements": 0, "elements_by_type": {},
                           "edges_by_kind": {}, "seconds": round(seconds, 3), "cached": cached, "error": None,
                           "error_type": None, "warnings": [], "graph_hash": None}
    if graph is not None:
        rec.update(doc_id=graph.doc_id, pages=graph.n_pages, elements=graph.n_elements,
                   elements_by_type=graph.element_type_counts(), edges_by_kind=graph.edge_counts(),
                   warnings=list(graph.meta.get("warnings", [])), graph_hash=graph_hash(graph))
    if error is not None:
        rec.update(error=str(error), error_type=type(error).__name__)
    return rec


def build_one(path: str, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Worker task: one document; every failure becomes a record, never an exception."""
    from mage_gym.graph.build import build_graph
    from mage_gym.graph.errors import DocumentError

    t0 = time.perf_counter()
    try:
        g = build_graph(path, workers=1, cache=cfg["cache"], progress=False, **_build_kwargs(cfg))
        return _record(Path(path), g, time.perf_counter() - t0, cached=bool(g.meta.get("cache_hit")))
    except DocumentError as exc:
        return _record(Path(path), seconds=time.perf_counter() - t0, error=exc)
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop a corpus build
        log.exception("unexpected failure on %s", path)
        return _record(Path(path), seconds=time.perf_counter() - t0, error=exc)


def try_cached(path: Path, cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record of a document already in the cache (no parsing, no torch), else None."""
    from mage_gym.graph.build import load_graph
    from mage_gym.graph.errors import DocumentError
    from mage_gym.graph.store import GraphNotBuiltError

    if not cfg["cache"]:
        return None
    t0 = time.perf_counter()
    try:
        g = load_graph(path, **_build_kwargs(cfg))
    except (GraphNotBuiltError, DocumentError):
        return None  # not built yet, or a bad file: the build task records the typed error
    return _record(path, g, time.perf_counter() - t0, cached=True)


def _pool(workers: int) -> ProcessPoolExecutor:
    import multiprocessing as mp

    from mage_gym.graph.workers import init_worker

    threads = max(1, (os.cpu_count() or 1) // workers)
    return ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("forkserver"),
                               initializer=init_worker, initargs=(threads, True))


def _build_parallel(todo: list[Path], cfg: Mapping[str, Any], workers: int, bar: Any) -> dict[str, dict[str, Any]]:
    """Documents in a worker pool; if a worker dies (out of memory), the documents that were
    lost with the pool are retried one per fresh process, so only the culprit is charged."""
    from concurrent.futures.process import BrokenProcessPool

    out: dict[str, dict[str, Any]] = {}
    pool = _pool(min(workers, len(todo)))
    futs: dict[Future, Path] = {pool.submit(build_one, str(p), dict(cfg)): p for p in todo}
    died: list[Path] = []
    for fut in as_completed(futs):
        p = futs[fut]
        try:
            out[str(p)] = fut.result()
        except BrokenProcessPool:
            died.append(p)
            continue
        except Exception as exc:  # noqa: BLE001
            out[str(p)] = _record(p, error=exc)
        bar.update(1)
    pool.shutdown(wait=True, cancel_futures=True)
    for p in sorted(died):
        solo = _pool(1)
        try:
            out[str(p)] = solo.submit(build_one, str(p), dict(cfg)).result()
        except BrokenProcessPool:
            out[str(p)] = _record(p, error=RuntimeError("worker process died while building (out of memory?)"))
        finally:
            solo.shutdown(wait=True, cancel_futures=True)
        bar.update(1)
    return out


def build_corpus(cfg: Mapping[str, Any], progress: bool = True) -> dict[str, Any]:
    """Graphs of the documents ``cfg`` names (keys of :data:`DEFAULTS`); returns config, records and totals.

    The parser name is checked before anything is opened, so a typo is one
    error, not a failure per document.
    """
    from mage_gym.progress import progress_bar

    from mage_gym.data.io import data_root as default_data_root

    unknown = sorted(set(cfg) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"unknown corpus build options {unknown}; expected {sorted(DEFAULTS)}")
    cfg = {**DEFAULTS, **cfg}
    check_parser(cfg["parser"], option="parser")
    t_start = time.perf_counter()
    if cfg["files"]:
        docs = [Path(f) for f in cfg["files"]]
    else:
        docs = find_documents(Path(cfg["input"]) if cfg["input"] else default_data_root())
    if cfg["limit"]:
        docs = docs[: int(cfg["limit"])]
    records: dict[str, dict[str, Any]] = {}
    todo: list[Path] = []
    for p in docs:
        rec = try_cached(p, cfg)
        if rec is None:
            todo.append(p)
        else:
            records[str(p)] = rec
    log.info("%d documents: %d cached, %d to build", len(docs), len(records), len(todo))
    workers = max(1, int(cfg["workers"]))
    bar = progress_bar(total=len(todo), desc=f"build[{cfg['parser']}]", unit="doc", disable=not progress)
    executor = dict(cfg["executor"] or {"name": "local"})
    if executor.get("name", "local") == "ray" and todo:
        from experiments.common.distributed.build import build_on_ray

        records.update(build_on_ray(todo, cfg, executor, bar))
    elif workers == 1 or len(todo) <= 1:
        for p in todo:
            records[str(p)] = build_one(str(p), cfg)
            bar.update(1)
    else:
        records.update(_build_parallel(todo, cfg, workers, bar))
    bar.close()
    ordered = [records[str(p)] for p in docs]
    built = [r for r in ordered if not r["cached"] and r["error"] is None]
    pages_built = sum(r["pages"] for r in built)
    secs_built = sum(r["seconds"] for r in built)
    totals = {
        "documents": len(ordered), "built": len(built), "cached": sum(r["cached"] for r in ordered),
        "failed": sum(r["error"] is not None for r in ordered),
        "pages": sum(r["pages"] for r in ordered), "elements": sum(r["elements"] for r in ordered),
        "edges": sum(sum(r["edges_by_kind"].values()) for r in ordered),
        "build_seconds": round(secs_built, 2), "wall_seconds": round(time.perf_counter() - t_start, 2),
        "seconds_per_100_pages_built": round(100 * secs_built / pages_built, 2) if pages_built else None,
        "errors_by_type": dict(Counter(r["error_type"] for r in ordered if r["error_type"])),
    }
    return {"config": cfg, "documents": ordered, "totals": totals}
