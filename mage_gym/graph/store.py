"""Content-addressed on-disk cache of evidence graphs.

Why: parsing and embedding a 100-page PDF costs seconds to tens of seconds,
while every episode on that document needs the same graph. A graph is a pure
function of the file's bytes and the build settings, so the cache key is a
hash of exactly those (:func:`cache_key`), and a cached graph loads in a few
milliseconds with nothing but ``json`` and ``numpy`` (no parser, no torch).

Entry layout (one directory per key)::

    <cache_dir>/<key>/records.json      pages, elements (columnar), label vocabulary, meta, source
    <cache_dir>/<key>/<array>.npy       edge_src, edge_dst, edge_kind, edge_weight, edge_label,
                                        page_vectors, element_vectors
    <cache_dir>/<key>/manifest.json     version, key, sha256 + size of every file, array shapes (written last)

Writes go to a temporary sibling directory that is renamed into place with
``os.replace`` (atomic on one filesystem), so a reader sees a whole entry or
none. Loading verifies the manifest, every checksum and every shape; an
entry that is corrupted, partial or from another ``GRAPH_VERSION`` is deleted
and reported as a miss, never trusted.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import DocumentSource, Element, Page
from mage_gym.jsonio import json_default

#: Bump whenever the builder's output for the same input changes (edges,
#: summaries, ids, normalisation). Old entries then become misses.
#: 3: the default encoder runs int8 on CPUs with VNNI (new vectors and semantic edges there).
#: 4: the layout parser keeps text-layer lines no model box covers; a page whose only lines look like
#: a header or footer keeps them as elements (text-layer routes). See docs/ARCHITECTURE.md.
#: 5: a sixth relation, ``reference`` (explicit cross-references: "Figure 3", "Note 7", "see page 12").
#: Not bumped for a change in the last bit of a float only: knn_pairs' similarities computed outside BLAS (same
#: edges, weights within 1.2e-7; a bump would also make every checkpoint's recorded graph version a mismatch).
GRAPH_VERSION = "5"
#: Per-parser output versions, in the key of that parser's graphs only: bump a parser's entry when its output
#: for the same input changes, so that its cached graphs become misses while every other parser's stay valid
#: (a parser without an entry keys as before these versions existed).
#: layout 2: simple pages (no image, no vector path, at most one plain text block, no line the fast rules call
#: furniture; mage_gym/graph/parsers/simple.py) skip the layout model and are typed by the fast parser's rules;
#: before, a block inside a margin band and a blank page still went to the model.
PARSER_VERSIONS: dict[str, str] = {"layout": "2"}
FORMAT = 1
MANIFEST = "manifest.json"
RECORDS = "records.json"
ARRAYS = ("edge_src", "edge_dst", "edge_kind", "edge_weight", "edge_label", "page_vectors", "element_vectors")
_TMP_PREFIX = ".tmp-"
_TMP_MAX_AGE_S = 24 * 3600

log = logging.getLogger(__name__)

_PAGE_FIELDS = ("node_id", "index", "width", "height", "text", "summary", "header_text", "footer_text",
                "image_only", "n_elements")
_ELEMENT_FIELDS = ("node_id", "page", "index", "type", "bbox", "text", "summary", "reading_order",
                   "section_path", "heading_level", "table_markdown", "ocr")


class GraphNotBuiltError(LookupError):
    """``load_graph`` found no valid cache entry for these build settings."""


class CacheEntryError(ValueError):
    """A cache entry failed verification (internal: the entry is then deleted)."""


def default_cache_dir() -> Path:
    """``$MAGE_GYM_CACHE/graphs``, default ``~/.cache/mage_gym/graphs``.

    ``MAGE_GYM_CACHE`` names the project's cache root so other caches (reader
    responses, retriever indexes) can live beside the graphs.
    """
    from mage_gym.paths import cache_root as project_cache_root

    return project_cache_root() / "graphs"


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def cache_key(digest: str, parser: str, parser_cfg: Mapping[str, Any] | None, edge_cfg: Mapping[str, Any] | None,
              embed_model: str, version: str = GRAPH_VERSION, extra: Mapping[str, Any] | None = None) -> str:
    """sha256 hex of everything the graph depends on.

    ``extra`` carries further build settings that change the output
    (``doc_id``, ``max_pages``, embedding truncation), so two different
    graphs can never share a key. The parser's own version
    (:data:`PARSER_VERSIONS`) is part of the key when it has one.
    """
    payload = {
        "digest": digest, "parser": parser, "parser_cfg": dict(parser_cfg or {}), "edge_cfg": dict(edge_cfg or {}),
        "embed_model": embed_model, "version": version, "extra": dict(extra or {}),
    }
    if parser in PARSER_VERSIONS:
        payload["parser_version"] = PARSER_VERSIONS[parser]
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """The directory holding the entries: ``cache_dir`` if given, else :func:`default_cache_dir`."""
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def entry_path(key: str, cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / key


# --- save -----------------------------------------------------------------------


def _columns(records: list, names: tuple[str, ...]) -> dict[str, list]:
    cols: dict[str, list] = {n: [] for n in names}
    for r in records:
        d = r.__dict__
        for n in names:
            cols[n].append(d[n])
    return cols


def _joined_element_text(elements: list, n_pages: int) -> list[str]:
    """Each page's element texts joined as the builder does (text, else table markdown)."""
    parts: list[list[str]] = [[] for _ in range(n_pages)]
    for e in elements:
        t = (e.text or "").strip() or (e.table_markdown or "").strip()
        if t and 0 <= e.page < n_pages:
            parts[e.page].append(t)
    return ["\n".join(p) for p in parts]


def _page_columns(graph: EvidenceGraph) -> dict[str, list]:
    """Page columns, with ``text`` stored as None where it equals the joined element text.

    Page text is usually exactly its elements' text, so storing it again
    would double the records file (and its parse time at every load).
    """
    cols = _columns(graph.pages, _PAGE_FIELDS)
    joined = _joined_element_text(graph.elements, graph.n_pages)
    cols["text"] = [None if t == j else t for t, j in zip(cols["text"], joined)]
    return cols


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def _sweep_tmp(base: Path) -> None:
    """Remove temporary directories left by writers that crashed long ago."""
    now = time.time()
    try:
        for p in base.glob(_TMP_PREFIX + "*"):
            try:
                if now - p.stat().st_mtime > _TMP_MAX_AGE_S:
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                pass
    except OSError:
        pass


def save_graph(graph: EvidenceGraph, key: str, cache_dir: str | Path | None = None) -> Path:
    """Write ``graph`` under ``key`` atomically; returns the entry directory.

    If a concurrent writer already placed a valid entry, that one is kept.
    """
    base = cache_root(cache_dir)
    base.mkdir(parents=True, exist_ok=True)
    final = base / key
    tmp = base / f"{_TMP_PREFIX}{key[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        labels = graph.edge_label
        vocab = sorted(set(labels))
        code_of = {lab: i for i, lab in enumerate(vocab)}
        label_codes = np.fromiter((code_of[lab] for lab in labels), dtype=np.int16, count=len(labels))
        records = {
            "format": FORMAT,
            "doc_id": graph.doc_id,
            "source": {"kind": graph.source.kind, "path": graph.source.path,
                       "page_files": list(graph.source.page_files)},
            "pages": _page_columns(graph),
            "elements": _columns(graph.elements, _ELEMENT_FIELDS),
            "edge_label_vocab": vocab,
            "meta": graph.meta,
        }
        files: dict[str, bytes] = {RECORDS: json.dumps(records, ensure_ascii=False, default=json_default).encode()}
        arrays = {
            "edge_src": graph.edge_src, "edge_dst": graph.edge_dst, "edge_kind": graph.edge_kind,
            "edge_weight": graph.edge_weight, "edge_label": label_codes,
            "page_vectors": graph.page_vectors, "element_vectors": graph.element_vectors,
        }
        shapes = {}
        for name, arr in arrays.items():
            files[f"{name}.npy"] = _npy_bytes(arr)
            shapes[name] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}
        for fname, data in files.items():
            with open(tmp / fname, "wb") as fh:
                fh.write(data)
        manifest = {
            "format": FORMAT, "version": GRAPH_VERSION, "key": key, "created": time.time(),
            "n_pages": graph.n_pages, "n_elements": graph.n_elements, "n_edges": graph.n_edges,
            "files": {f: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for f, d in files.items()},
            "arrays": shapes,
        }
        with open(tmp / MANIFEST, "w") as fh:  # last: its presence means the entry is complete
            json.dump(manifest, fh)
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:
            # another process won the race with an entry of its own; keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _sweep_tmp(base)
    return final


# --- load -----------------------------------------------------------------------


def _read_verified(path: Path, info: Mapping[str, Any]) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CacheEntryError(f"missing file {path.name}: {err}") from err
    if len(data) != info.get("bytes") or hashlib.sha256(data).hexdigest() != info.get("sha256"):
        raise CacheEntryError(f"checksum mismatch in {path.name}")
    return data


def _build_records(cls: type, cols: Mapping[str, list], names: tuple[str, ...], tuple_fields: tuple[str, ...]) -> list:
    n = len(cols[names[0]]) if names[0] in cols else 0
    for f in names:
        if len(cols.get(f, ())) != n:
            raise CacheEntryError(f"column {f!r} of {cls.__name__} has the wrong length")
    columns = [cols[f] for f in names]
    for f in tuple_fields:
        i = names.index(f)
        columns[i] = [tuple(v) for v in columns[i]]
    # Bypass the frozen dataclass __init__ (12 object.__setattr__ calls per
    # record): the values were validated when the graph was built, and this
    # keeps a 3,000-element load in a few milliseconds.
    new = object.__new__
    out = []
    for row in zip(*columns):
        obj = new(cls)
        obj.__dict__.update(zip(names, row))
        out.append(obj)
    return out


def _load_entry(path: Path, key: str) -> EvidenceGraph:
    try:
        manifest = json.loads((path / MANIFEST).read_bytes())
    except (OSError, ValueError) as err:
        raise CacheEntryError(f"no readable manifest: {err}") from err
    if manifest.get("version") != GRAPH_VERSION or manifest.get("format") != FORMAT:
        raise CacheEntryError(f"stale entry (version {manifest.get('version')!r}, current {GRAPH_VERSION!r})")
    if manifest.get("key") != key:
        raise CacheEntryError("manifest key does not match the entry directory")
    files = manifest.get("files", {})
    expected = {RECORDS} | {f"{a}.npy" for a in ARRAYS}
    if set(files) != expected:
        raise CacheEntryError(f"manifest lists {sorted(files)}, expected {sorted(expected)}")
    arrays: dict[str, np.ndarray] = {}
    for name in ARRAYS:
        data = _read_verified(path / f"{name}.npy", files[f"{name}.npy"])
        try:
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        except ValueError as err:
            raise CacheEntryError(f"unreadable array {name}: {err}") from err
        want = manifest["arrays"][name]
        if list(arr.shape) != want["shape"] or str(arr.dtype) != want["dtype"]:
            raise CacheEntryError(f"array {name} has shape {arr.shape} {arr.dtype}, manifest says {want}")
        arrays[name] = arr
    try:
        rec = json.loads(_read_verified(path / RECORDS, files[RECORDS]))
    except ValueError as err:
        raise CacheEntryError(f"unreadable records: {err}") from err
    elements = _build_records(Element, rec["elements"], _ELEMENT_FIELDS, ("bbox", "section_path"))
    page_cols = rec["pages"]
    if any(t is None for t in page_cols.get("text", ())):
        joined = _joined_element_text(elements, len(page_cols["text"]))
        page_cols["text"] = [j if t is None else t for t, j in zip(page_cols["text"], joined)]
    pages = _build_records(Page, page_cols, _PAGE_FIELDS, ())
    n_edges = arrays["edge_src"].shape[0]
    if any(arrays[a].shape[0] != n_edges for a in ("edge_dst", "edge_kind", "edge_weight", "edge_label")):
        raise CacheEntryError("edge arrays differ in length")
    if arrays["page_vectors"].shape[0] != len(pages) or arrays["element_vectors"].shape[0] != len(elements):
        raise CacheEntryError("vector rows do not match the number of pages/elements")
    if (len(pages), len(elements), n_edges) != (manifest.get("n_pages"), manifest.get("n_elements"),
                                                manifest.get("n_edges")):
        raise CacheEntryError("record counts do not match the manifest")
    vocab = rec["edge_label_vocab"]
    codes = arrays["edge_label"]
    if n_edges and (codes.min() < 0 or codes.max() >= len(vocab)):
        raise CacheEntryError("edge label codes out of range")
    labels = [vocab[c] for c in codes.tolist()]
    s = rec["source"]
    source = DocumentSource(kind=s["kind"], path=s["path"], page_files=tuple(s["page_files"]))
    return EvidenceGraph(
        doc_id=rec["doc_id"], source=source, pages=pages, elements=elements,
        edge_src=arrays["edge_src"], edge_dst=arrays["edge_dst"], edge_kind=arrays["edge_kind"],
        edge_weight=arrays["edge_weight"], edge_label=labels,
        page_vectors=arrays["page_vectors"], element_vectors=arrays["element_vectors"], meta=rec["meta"],
    )


def load_cached(key: str, cache_dir: str | Path | None = None) -> EvidenceGraph | None:
    """The verified graph stored under ``key``, or None (after deleting a bad entry)."""
    path = entry_path(key, cache_dir)
    if not path.is_dir():
        return None
    try:
        return _load_entry(path, key)
    except (CacheEntryError, KeyError, TypeError) as err:
        log.warning("discarding graph cache entry %s: %s", path, err)
        shutil.rmtree(path, ignore_errors=True)
        return None


def has_entry(key: str, cache_dir: str | Path | None = None) -> bool:
    """True if a (not yet verified) entry exists: a cheap check for progress reports."""
    return (entry_path(key, cache_dir) / MANIFEST).is_file()


def remove_entry(key: str, cache_dir: str | Path | None = None) -> None:
    shutil.rmtree(entry_path(key, cache_dir), ignore_errors=True)
