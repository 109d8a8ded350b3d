"""Persistent reader-response cache (sqlite) and the :class:`CachedReader` wrapper.

Why: reinforcement learning and benchmark sweeps ask the reader about the same
rendered evidence again and again (the same entry pages, the same small
subgraphs). A reader call costs seconds to minutes; a lookup costs
microseconds. The key is a sha256 of everything that decides the reply:
backend, model id, prompt version and generation settings (the reader's
``cache_identity()``), plus the exact prompt text and the pixels of every
image sent. Identical evidence therefore hits across episodes, runs and
processes, and an interrupted benchmark resumes without repeating calls.

The database is one sqlite file in WAL mode with a busy timeout, so several
processes (vectorised envs, parallel benchmark workers) can read and write it
at once. Failed reads are never stored.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from mage_gym.readers.base import RenderedImage, RenderedInput, ReaderOutput
from mage_gym.readers.prompt import PROMPT_VERSION, build_prompt

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    answer TEXT,
    raw TEXT NOT NULL,
    seconds REAL NOT NULL,
    created REAL NOT NULL
)
"""


def default_cache_path() -> Path:
    from mage_gym.readers.gguf_cache import cache_root

    return cache_root() / "readers" / "responses.sqlite"


def image_digest(pil: Any) -> str:
    """sha256 of an image's decoded pixels (mode and size included)."""
    h = hashlib.sha256(f"{pil.mode}|{pil.width}x{pil.height}|".encode())
    h.update(pil.tobytes())
    return h.hexdigest()


def reader_identity(reader: Any) -> dict[str, Any]:
    """What, besides the input, determines a reader's reply."""
    ident = getattr(reader, "cache_identity", None)
    if callable(ident):
        return dict(ident())
    return {"backend": getattr(reader, "name", type(reader).__name__),
            "model": getattr(reader, "model_id", ""),
            "prompt_version": getattr(reader, "prompt_version", PROMPT_VERSION)}


IMAGE_KEYS = ("pixels", "identity")


def _image_identity(img: RenderedImage) -> str:
    return f"{img.node_id}|{img.page}|{','.join(f'{v:.6f}' for v in img.bbox)}|{img.kind}|{img.width}x{img.height}"


def input_key(identity: dict[str, Any], rendered: RenderedInput, *, include_images: bool = True,
              image_key: str = "pixels") -> tuple[str, RenderedInput]:
    """(cache key, input with image pixels memoised) for one reader call.

    With ``image_key="pixels"`` (the default) images are loaded once here to
    hash their bytes; the returned input carries loaders that hand back those
    same pixels, so a cache miss does not render them a second time. With
    ``image_key="identity"`` an image is keyed by what the renderer asked for
    (node id, page, box, kind, pixel size) without rendering it: a visual
    cache hit then costs no rendering. That is exact only while a node id
    always names the same document bytes (doc ids derived from file content);
    use it for long runs over a fixed corpus.
    """
    if image_key not in IMAGE_KEYS:
        raise ValueError(f"image_key must be one of {IMAGE_KEYS}, got {image_key!r}")
    h = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode())
    if include_images and rendered.images and image_key == "identity":
        digests = {id(img): "id:" + _image_identity(img) for img in rendered.images}
    elif include_images and rendered.images:
        loaded = {}
        images = []
        for img in rendered.images:
            pil = img.load()
            loaded[id(img)] = image_digest(pil)
            images.append(dataclasses.replace(img, _loader=(lambda p=pil: p)))
        digests = {id(new): loaded[id(old)] for old, new in zip(rendered.images, images)}
        rendered = dataclasses.replace(rendered, images=tuple(images))
    else:
        digests = {}
    prompt = build_prompt(rendered, include_images=include_images)
    h.update(b"\x00system\x00" + prompt.system.encode())
    for part in prompt.parts:
        if isinstance(part, RenderedImage):
            h.update(f"\x00image\x00{part.node_id}\x00{part.kind}\x00{digests[id(part)]}".encode())
        else:
            h.update(b"\x00text\x00" + part.encode())
    return h.hexdigest(), rendered


class ResponseCache:
    """A key -> reader reply store in one sqlite file, safe across threads and processes."""

    def __init__(self, path: str | Path | None = None, *, timeout: float = 30.0) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1

    def _connection(self) -> sqlite3.Connection:
        # A connection must not cross a fork: reopen in a child process.
        if self._conn is None or self._pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
            conn.execute(_SCHEMA)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def get(self, key: str) -> tuple[str | None, str, float] | None:
        """(answer, raw, seconds of the original call) or None."""
        with self._lock:
            row = self._connection().execute(
                "SELECT answer, raw, seconds FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else (row[0], row[1], float(row[2]))

    def put(self, key: str, identity: dict[str, Any], output: ReaderOutput) -> None:
        with self._lock:
            self._connection().execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, str(identity.get("backend", "")), str(identity.get("model", "")),
                 str(identity.get("prompt_version", "")), output.answer, output.raw,
                 float(output.seconds), time.time()))

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def journal_mode(self) -> str:
        with self._lock:
            return str(self._connection().execute("PRAGMA journal_mode").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


class CachedReader:
    """Wrap any reader so identical inputs are answered from the cache.

    ``hits`` and ``misses`` count lookups made through this wrapper. A hit
    returns ``cached=True`` and ``seconds`` = the lookup time.
    """

    def __init__(self, reader: Any, path: str | Path | None = None, *, image_key: str = "pixels") -> None:
        if image_key not in IMAGE_KEYS:
            raise ValueError(f"image_key must be one of {IMAGE_KEYS}, got {image_key!r}")
        self.reader = reader
        self.image_key = image_key
        self.cache = ResponseCache(path)
        self.identity = reader_identity(reader)
        self.include_images = bool(getattr(reader, "uses_images", True))
        self.hits = 0
        self.misses = 0
        self._count_lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.reader.name

    @property
    def answers(self) -> bool:
        return self.reader.answers

    @property
    def model_id(self) -> str:
        return getattr(self.reader, "model_id", "")

    @property
    def uses_images(self) -> bool:
        return self.include_images

    def cache_identity(self) -> dict[str, Any]:
        return dict(self.identity)

    def validate(self) -> None:
        """The wrapped reader's pre-run check (e.g. the server serves the model)."""
        check = getattr(self.reader, "validate", None)
        if callable(check):
            check()

    def key(self, rendered: RenderedInput) -> str:
        return input_key(self.identity, rendered, include_images=self.include_images, image_key=self.image_key)[0]

    def _lookup(self, rendered: RenderedInput) -> tuple[str, RenderedInput, ReaderOutput | None]:
        start = time.perf_counter()
        key, memo = input_key(self.identity, rendered, include_images=self.include_images,
                              image_key=self.image_key)
        row = self.cache.get(key)
        with self._count_lock:
            if row is None:
                self.misses += 1
            else:
                self.hits += 1
        if row is None:
            return key, memo, None
        answer, raw, _ = row
        return key, memo, ReaderOutput(answer=answer, raw=raw, cached=True,
                                       seconds=time.perf_counter() - start)

    def read(self, rendered: RenderedInput) -> ReaderOutput:
        key, memo, hit = self._lookup(rendered)
        if hit is not None:
            return hit
        out = self.reader.read(memo)
        if out.error is None:
            self.cache.put(key, self.identity, out)
        return out

    def read_many(self, inputs: Sequence[RenderedInput], *, return_errors: bool = False,
                  max_workers: int | None = None) -> list[ReaderOutput]:
        """Read many inputs, in order; each reply is stored as soon as it arrives.

        Storing per reply (rather than per batch) is what makes an interrupted
        run resumable. Concurrency defaults to the wrapped reader's
        ``max_concurrency`` (1 for local models).
        """
        from concurrent.futures import ThreadPoolExecutor

        from mage_gym.readers.errors import read_or_error

        workers = int(max_workers or getattr(self.reader, "max_concurrency", 1) or 1)

        def one(inp: RenderedInput) -> ReaderOutput:
            return read_or_error(self.read, inp, return_errors)

        if workers <= 1:
            return [one(inp) for inp in inputs]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, inputs))
