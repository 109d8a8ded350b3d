"""One document's graph job: build it (or load it from the cache) and describe the outcome as a record.

Why apart from :mod:`mage_gym.bench.corpus`: the same job runs in the local
process pool (``corpus``) and as a Ray task
(:mod:`mage_gym.bench.distributed.build`); both import it from here, so
neither imports the other's scheduler. Every failure becomes a record, never
an exception: one bad file must not stop a corpus build.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger("mage_gym.bench.corpus")


def build_kwargs(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``build_graph`` / ``load_graph`` keywords of a corpus build's settings (:data:`~mage_gym.bench.corpus.DEFAULTS`)."""
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


def document_record(path: Path, graph: Any = None, seconds: float = 0.0, cached: bool = False,
            error: BaseException | None = None) -> dict[str, Any]:
    """A document's record in a corpus build's ``results.json`` (counts, timing, hash, or the typed error)."""
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
        g = build_graph(path, workers=1, cache=cfg["cache"], progress=False, **build_kwargs(cfg))
        return document_record(Path(path), g, time.perf_counter() - t0, cached=bool(g.meta.get("cache_hit")))
    except DocumentError as exc:
        return document_record(Path(path), seconds=time.perf_counter() - t0, error=exc)
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop a corpus build
        log.exception("unexpected failure on %s", path)
        return document_record(Path(path), seconds=time.perf_counter() - t0, error=exc)


def try_cached(path: Path, cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record of a document already in the cache (no parsing, no torch), else None."""
    from mage_gym.graph.build import load_graph
    from mage_gym.graph.errors import DocumentError
    from mage_gym.graph.store import GraphNotBuiltError

    if not cfg["cache"]:
        return None
    t0 = time.perf_counter()
    try:
        g = load_graph(path, **build_kwargs(cfg))
    except (GraphNotBuiltError, DocumentError):
        return None  # not built yet, or a bad file: the build task records the typed error
    return document_record(path, g, time.perf_counter() - t0, cached=True)
