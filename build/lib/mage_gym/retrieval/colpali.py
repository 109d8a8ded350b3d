"""Visual page retrieval with a ColPali-family model (ColQwen2/2.5/3, ColPali, ...) from colpali-engine.

Why: a page's pixels carry evidence its text layer does not (charts, scanned
slides, layouts); late-interaction vision retrievers score the page image
directly against the question. Image-only pages, invisible to BM25/dense, are
found this way.

Design:

* The model comes from a LOCAL folder only (``model_path``, or the
  ``MAGE_GYM_COLPALI_MODEL`` environment variable); hub access is never
  attempted (``local_files_only=True``, ``HF_HUB_OFFLINE=1``). The family is
  read from the folder's ``config.json`` ``model_type`` (override with
  ``family=``). A PEFT adapter folder (``adapter_config.json`` only, as the
  vidore releases ship) is merged into its base model, which must also be a
  local folder (``base_model_path=`` or the adapter's own
  ``base_model_name_or_path``).
* Page images are rendered lazily through ``graph.page_image(page, dpi)``
  (falling back to pymupdf / the image files when ``mage_gym.graph.images`` is
  not available), embedded once per graph (multi-vector, one matrix per page)
  and cached on the retriever; with ``cache_dir`` also on disk, keyed by the
  document id, page count, model fingerprint and rendering settings.
* A query is embedded once per distinct text (small LRU) and scored against
  all pages with ``processor.score_multi_vector`` (MaxSim).
* Element scores (``element_scores=``): ``"page"`` (default) gives every
  element its page's score -- ColPali has no region granularity, and a page
  prior is exactly what fusion with the text retrievers needs; ``"dense"``
  gives elements the MiniLM cosine instead (see :mod:`.dense`).

colpali-engine, transformers and torch are imported only when the model is
first needed, after :func:`mage_gym._compat.ensure_torchvision`.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval.base import Query, Scores
from mage_gym.retrieval.cache import GraphIndexCache

MODEL_PATH_ENV = "MAGE_GYM_COLPALI_MODEL"

#: config.json ``model_type`` -> (model class, processor class) in ``colpali_engine.models``.
FAMILIES: dict[str, tuple[str, str]] = {
    "qwen3_vl": ("ColQwen3", "ColQwen3Processor"),
    "qwen2_5_vl": ("ColQwen2_5", "ColQwen2_5_Processor"),
    "qwen2_vl": ("ColQwen2", "ColQwen2Processor"),
    "qwen3_5": ("ColQwen3_5", "ColQwen3_5Processor"),
    "paligemma": ("ColPali", "ColPaliProcessor"),
    "idefics3": ("ColIdefics3", "ColIdefics3Processor"),
    "gemma3": ("ColGemma3", "ColGemmaProcessor3"),
}


class ColPaliModelError(ValueError):
    """The ColPali model folder is missing, not a folder, or not a supported checkpoint."""


@dataclass
class PageEmbeddings:
    """Multi-vector page embeddings of one graph: page ``i`` is ``vectors[offsets[i]:offsets[i+1]]``."""

    vectors: np.ndarray  # float32/float16 [total_tokens, dim]
    offsets: np.ndarray  # int64 [n_pages + 1]

    @property
    def n_pages(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def page(self, i: int) -> np.ndarray:
        return self.vectors[self.offsets[i] : self.offsets[i + 1]]


@dataclass
class _PageIndex:
    embeddings: PageEmbeddings
    tensors: list[Any]  # torch tensors, one per page, on the retriever's device


def resolve_model_path(model_path: str | os.PathLike[str] | None) -> Path:
    """The model folder, or a :class:`ColPaliModelError` saying what is wrong with it."""
    raw = model_path if model_path is not None else os.environ.get(MODEL_PATH_ENV)
    if raw is None or str(raw).strip() == "":
        raise ColPaliModelError(
            f"colpali retriever needs model_path= (a local ColPali/ColQwen checkpoint folder) "
            f"or the {MODEL_PATH_ENV} environment variable; models are never downloaded")
    path = Path(raw).expanduser()
    if not path.exists():
        raise ColPaliModelError(f"colpali model_path {str(path)!r} does not exist (models are never downloaded; "
                                "point it at a local checkpoint folder)")
    if not path.is_dir():
        raise ColPaliModelError(f"colpali model_path {str(path)!r} is not a directory; expected a checkpoint "
                                "folder with config.json (or adapter_config.json)")
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise ColPaliModelError(f"colpali model_path {str(path)!r} has neither config.json nor adapter_config.json")
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ColPaliModelError(f"cannot read {path}: {err}") from err


def _fingerprint(folders: list[Path]) -> str:
    """Changes when the checkpoint changes: config text plus weight file names and sizes."""
    h = hashlib.sha1()
    for folder in folders:
        for name in ("config.json", "adapter_config.json"):
            f = folder / name
            if f.is_file():
                h.update(f.read_bytes())
        for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
            h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()[:16]


def render_page_image(graph: EvidenceGraph, page: int, dpi: int, max_side: int | None = None) -> Any:
    """A PIL RGB image of ``page``: via ``graph.page_image`` or, without ``mage_gym.graph.images``, directly."""
    try:
        return graph.page_image(page, dpi=dpi, max_side=max_side).convert("RGB")
    except ModuleNotFoundError as err:
        if err.name != "mage_gym.graph.images":
            raise
    from PIL import Image

    src = graph.source
    if src.kind == "images":
        img = Image.open(src.page_files[page])
        img.load()
    elif src.kind == "pdf":
        import pymupdf

        with pymupdf.open(src.path) as doc:
            pix = doc[page].get_pixmap(dpi=dpi, alpha=False)
            img = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    else:  # pragma: no cover - schema allows only the two kinds
        raise ValueError(f"cannot render pages of source kind {src.kind!r}")
    if max_side is not None and max(img.size) > max_side:
        img.thumbnail((max_side, max_side))
    return img.convert("RGB")


class ColPaliRetriever:
    """Late-interaction page retrieval with a local ColPali-family checkpoint.

    Config: ``model_path`` (local folder), ``family`` (``config.json``
    model_type override, see :data:`FAMILIES`), ``base_model_path`` (for
    adapter folders), ``device`` (default :func:`mage_gym.device.pick_device`),
    ``dtype`` (``"auto"``: bfloat16 on CUDA, float32 elsewhere), ``dpi`` and
    ``max_side`` for page rendering, ``max_num_visual_tokens`` (processor
    resolution cap), ``batch_size`` for page embedding, ``element_scores``
    (``"page"`` or ``"dense"``), ``cache_dir`` (on-disk page embeddings; ``"auto"`` =
    ``$MAGE_GYM_CACHE/colpali`` beside the graph cache),
    ``max_graphs`` and ``query_cache_size`` (in-memory caches).
    """

    name = "colpali"

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *, family: str | None = None,
                 base_model_path: str | os.PathLike[str] | None = None, device: str | None = None,
                 dtype: str = "auto", dpi: int = 100, max_side: int | None = None,
                 max_num_visual_tokens: int | None = None, batch_size: int = 4,
                 element_scores: Literal["page", "dense"] = "page", cache_dir: str | os.PathLike[str] | None = None,
                 max_graphs: int = 4, query_cache_size: int = 64, show_progress: bool = True) -> None:
        self.model_path = resolve_model_path(model_path)
        self.adapter_path: Path | None = None
        self.weights_path = self.model_path
        if not (self.model_path / "config.json").is_file():  # a PEFT adapter folder
            self.adapter_path = self.model_path
            base = base_model_path or _read_json(self.model_path / "adapter_config.json").get("base_model_name_or_path")
            if not base or not Path(base).expanduser().is_dir():
                raise ColPaliModelError(
                    f"{str(self.model_path)!r} is a PEFT adapter whose base model {base!r} is not a local folder; "
                    "pass base_model_path= (a local copy of the base checkpoint) or give a merged checkpoint")
            self.weights_path = resolve_model_path(base)
        elif base_model_path is not None:
            raise ColPaliModelError("base_model_path= is only used with adapter folders (no config.json)")
        model_type = family or _read_json(self.weights_path / "config.json").get("model_type")
        if model_type not in FAMILIES:
            raise ColPaliModelError(f"unsupported ColPali model_type {model_type!r} in {str(self.weights_path)!r}; "
                                    f"supported: {sorted(FAMILIES)} (override with family=)")
        if element_scores not in ("page", "dense"):
            raise ValueError(f"element_scores must be 'page' or 'dense', got {element_scores!r}")
        if dpi <= 0 or batch_size <= 0:
            raise ValueError(f"dpi and batch_size must be positive, got dpi={dpi}, batch_size={batch_size}")
        self.family = model_type
        self.device_name = device
        self.dtype_name = dtype
        self.dpi, self.max_side = int(dpi), max_side
        self.max_num_visual_tokens = max_num_visual_tokens
        self.batch_size = int(batch_size)
        self.element_scores = element_scores
        if cache_dir == "auto":  # beside the graph cache: $MAGE_GYM_CACHE/colpali
            from mage_gym.graph.store import default_cache_dir

            cache_dir = default_cache_dir().parent / "colpali"
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.show_progress = show_progress
        self.fingerprint = _fingerprint([p for p in (self.weights_path, self.adapter_path) if p is not None])
        self._model: Any = None
        self._processor: Any = None
        self._device: str | None = None
        self._cache: GraphIndexCache[_PageIndex] = GraphIndexCache(max_graphs)
        self._queries: OrderedDict[str, Any] = OrderedDict()
        self._query_cache_size = int(query_cache_size)
        self._dense: Any = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the configuration, not the model: a worker process reloads it on first use."""
        state = self.__dict__.copy()
        state.update(_model=None, _processor=None, _device=None, _queries=OrderedDict(), _dense=None)
        return state

    # --- model ---------------------------------------------------------------

    def load(self) -> None:
        """Load model and processor (first use does this; call it to pay the cost up front)."""
        if self._model is not None:
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from mage_gym._compat import ensure_torchvision

        status = ensure_torchvision()
        import torch

        try:
            import colpali_engine.models as cm
        except Exception as err:  # import chain failures are opaque otherwise
            raise ImportError(f"colpali-engine could not be imported (torchvision guard: {status}): {err}") from err
        from mage_gym.device import pick_device

        model_cls_name, proc_cls_name = FAMILIES[self.family]
        model_cls, proc_cls = getattr(cm, model_cls_name), getattr(cm, proc_cls_name)
        self._device = pick_device(self.device_name)
        if self.dtype_name == "auto":
            dtype = torch.bfloat16 if self._device.startswith("cuda") else torch.float32
        else:
            dtype = getattr(torch, self.dtype_name)
        model = model_cls.from_pretrained(str(self.weights_path), dtype=dtype, local_files_only=True)
        if self.adapter_path is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(self.adapter_path), local_files_only=True).merge_and_unload()
        self._model = model.to(self._device).eval()
        proc_kwargs: dict[str, Any] = {"local_files_only": True}
        if self.max_num_visual_tokens is not None:
            proc_kwargs["max_num_visual_tokens"] = int(self.max_num_visual_tokens)
        proc_dir = self.model_path if (self.model_path / "preprocessor_config.json").is_file() or \
            (self.model_path / "processor_config.json").is_file() else self.weights_path
        self._processor = proc_cls.from_pretrained(str(proc_dir), **proc_kwargs)

    def _embed(self, batch: Any) -> list[np.ndarray]:
        """Run the model on a processed batch; one float32 [n_tokens, dim] matrix per item, padding dropped."""
        import torch

        batch = {k: (v.to(self._device) if hasattr(v, "to") else v) for k, v in batch.items()}
        with torch.inference_mode():
            out = self._model(**batch)
        mask = batch["attention_mask"].bool()
        return [out[i][mask[i]].float().cpu().numpy() for i in range(out.shape[0])]

    # --- page index ------------------------------------------------------------

    def index(self, graph: EvidenceGraph) -> PageEmbeddings:
        """Page embeddings of ``graph`` (computed once, cached in memory and, with ``cache_dir``, on disk)."""
        return self._cache.get(graph, self._build).embeddings

    def _disk_path(self, graph: EvidenceGraph) -> Path | None:
        """``<cache_dir>/<doc_id>.n<pages>.colpali-<key>.npz``; the key covers the model, the rendering
        settings and the source file's digest when the builder recorded one (``meta["digest"]``)."""
        if self.cache_dir is None:
            return None
        settings = f"{self.fingerprint}|{self.dpi}|{self.max_side}|{self.max_num_visual_tokens}|" \
                   f"{graph.meta.get('digest', '')}|{graph.source.path}"
        key = hashlib.sha1(settings.encode()).hexdigest()[:16]
        safe_doc = "".join(c if c.isalnum() or c in "-_." else "_" for c in graph.doc_id)
        return self.cache_dir / f"{safe_doc}.n{graph.n_pages}.colpali-{key}.npz"

    def _build(self, graph: EvidenceGraph) -> _PageIndex:
        emb = self._load_disk(graph)
        if emb is None:
            emb = self._compute(graph)
            self._save_disk(graph, emb)
        self.load()
        import torch

        tensors = [torch.from_numpy(np.ascontiguousarray(emb.page(i), dtype=np.float32)).to(self._device)
                   for i in range(emb.n_pages)]
        return _PageIndex(embeddings=emb, tensors=tensors)

    def _compute(self, graph: EvidenceGraph) -> PageEmbeddings:
        self.load()
        from mage_gym.progress import progress_bar

        mats: list[np.ndarray] = []
        starts = range(0, graph.n_pages, self.batch_size)
        for start in progress_bar(starts, desc=f"colpali pages {graph.doc_id}", unit="batch",
                          disable=not self.show_progress or graph.n_pages <= self.batch_size):
            pages = range(start, min(start + self.batch_size, graph.n_pages))
            images = [render_page_image(graph, p, self.dpi, self.max_side) for p in pages]
            mats.extend(self._embed(self._processor.process_images(images)))
        dim = mats[0].shape[1] if mats else 0
        offsets = np.zeros(len(mats) + 1, dtype=np.int64)
        np.cumsum([m.shape[0] for m in mats], out=offsets[1:])
        vectors = np.concatenate(mats).astype(np.float32) if mats else np.zeros((0, dim), np.float32)
        return PageEmbeddings(vectors=vectors, offsets=offsets)

    def _load_disk(self, graph: EvidenceGraph) -> PageEmbeddings | None:
        path = self._disk_path(graph)
        if path is None or not path.is_file():
            return None
        try:
            with np.load(path) as data:
                emb = PageEmbeddings(vectors=data["vectors"].astype(np.float32), offsets=data["offsets"])
        except (OSError, KeyError, ValueError):
            return None  # unreadable cache entry: recompute and overwrite
        return emb if emb.n_pages == graph.n_pages else None

    def _save_disk(self, graph: EvidenceGraph, emb: PageEmbeddings) -> None:
        path = self._disk_path(graph)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:  # float16 halves the file; MaxSim is insensitive to it
                np.savez(f, vectors=emb.vectors.astype(np.float16), offsets=emb.offsets)
            os.replace(tmp, path)  # atomic: readers never see a half-written file
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # --- queries and scores --------------------------------------------------------

    def query_embedding(self, text: str) -> Any:
        """The query's multi-vector embedding (torch tensor on the device), cached per text."""
        q = self._queries.get(text)
        if q is not None:
            self._queries.move_to_end(text)
            return q
        self.load()
        import torch

        q = torch.from_numpy(self._embed(self._processor.process_queries([text]))[0]).to(self._device)
        self._queries[text] = q
        while len(self._queries) > self._query_cache_size:
            self._queries.popitem(last=False)
        return q

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        if graph.n_pages == 0:
            pages = np.zeros(0, dtype=np.float32)
        else:
            idx = self._cache.get(graph, self._build)
            q = self.query_embedding(query.text)
            raw = self._processor.score_multi_vector([q], idx.tensors, device=self._device)
            pages = raw[0].float().cpu().numpy().astype(np.float32)
        if self.element_scores == "dense":
            if self._dense is None:
                from mage_gym.retrieval.dense import DenseRetriever

                self._dense = DenseRetriever()
            elements = self._dense.score(graph, query).elements
        else:
            elements = pages[graph.node_page[graph.n_pages:]] if graph.n_elements else np.zeros(0, np.float32)
        return Scores(pages=pages, elements=np.asarray(elements, dtype=np.float32))
