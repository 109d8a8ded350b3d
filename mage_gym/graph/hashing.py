"""A model-free text encoder: hashed bag-of-words vectors.

Why: graphs built from hand-made documents (tests, small examples) need
vectors where texts that share words are similar, without loading a model.
A graph built with it records ``embed_model = "hashing-bow-<dim>"``, and
retrieval encodes questions with the same encoder for such graphs
(:func:`mage_gym.retrieval.page_text.encoder_for_graph`).
"""
from __future__ import annotations

import re
import zlib
from typing import Sequence

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")


class HashingEncoder:
    """Deterministic bag-of-words vectors: a model-free stand-in for MiniLM.

    Why: unit tests that build graphs from hand-made documents
    (:func:`mage_gym.graph.build.build_from_parsed`) need vectors where texts
    that share words are similar and unrelated texts are not, without loading
    a model. Words are hashed (crc32, stable across processes) into ``dim``
    buckets with a sign; vectors are L2-normalised; empty text gives zeros.
    """

    def __init__(self, dim: int = 64, name: str = "hashing-bow") -> None:
        self.dim = dim
        self.name = f"{name}-{dim}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in _WORD.findall((t or "").lower()):
                h = zlib.crc32(w.encode())
                out[i, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
