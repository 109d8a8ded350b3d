"""MiniLM with int8 weights on ONNX Runtime: the fast CPU path of :class:`~mage_gym.graph.embed.TextEncoder`.

Why: embedding is most of a fast-parser graph build (7 of 11 CPU-s per 100
dense pages in bfloat16), and MiniLM's matrix products are near the CPU's
bfloat16 peak. CPUs with VNNI multiply int8 at twice that rate. ONNX Runtime's
dynamic quantisation (weights int8 per output channel, activations int8 with
a scale computed per run) embedded 659 element texts of a paper in 1.83 s,
one text per run, against 3.29 s for torch bfloat16 in batches of 16 (one
thread, idle machine), with vectors at mean cosine 0.991 to float32 (min
0.973). Retrieval recall is unchanged
(``experiments/embed_precision.py --precisions bfloat16 int8``, README).

torch's own dynamic int8 was rejected: with per-tensor scales its vectors
were at mean cosine 0.91 to float32 (0.96 with per-channel weights).

The int8 model is made once per machine from the packaged MiniLM weights
(torch's ONNX exporter, then ``onnxruntime.quantization``; a few seconds)
and kept in ``$MAGE_GYM_CACHE/models/``. Making it needs the ``onnx``
package; running it needs only onnxruntime.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

#: bump when the export or quantisation recipe changes (old files are then ignored)
RECIPE = "minilm-int8-v1"
#: ONNX opset of the exported graph (LayerNormalization needs >= 17)
OPSET = 17


def cpu_has_vnni() -> bool:
    """True when the CPU has int8 dot-product instructions (AVX512-VNNI or AVX-VNNI; Linux flags)."""
    from mage_gym.device import cpu_flags

    return bool({"avx512_vnni", "avx_vnni"} & cpu_flags())


def _source_key(model_path: Path) -> str:
    """Identity of the float weights: file names, sizes and modification times (cheap, no hashing)."""
    parts = [RECIPE]
    for f in sorted(model_path.iterdir()):
        if f.is_file() and f.suffix in (".safetensors", ".bin", ".json"):
            st = f.stat()
            parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def int8_model_file(model_path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """Path of the int8 ONNX model for ``model_path``, made (and cached) on first use.

    Several processes may ask at once (build workers): a file lock lets one
    make it while the others wait, and the file appears by atomic rename, so
    nobody ever reads a half-written model.
    """
    from mage_gym.paths import cache_root

    model_path = Path(model_path)
    folder = Path(cache_dir) if cache_dir is not None else cache_root() / "models"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{RECIPE}-{_source_key(model_path)}.onnx"
    if target.is_file():
        return target
    with _file_lock(folder / (target.name + ".lock")):
        if not target.is_file():
            _make_int8_model(model_path, target)
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: concurrent makers just duplicate work
        yield
        return
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _make_int8_model(model_path: Path, target: Path) -> None:
    """Export MiniLM (last hidden state) to ONNX in float32, quantise its weights to int8."""
    try:
        import onnx  # noqa: F401 - the exporter and the quantiser need it
    except ImportError as exc:
        raise ImportError(
            "making the int8 MiniLM model needs the 'onnx' package (pip install onnx); "
            "or set MAGE_GYM_EMBED_PRECISION=bfloat16 / float32"
        ) from exc
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_path))
    model = AutoModel.from_pretrained(str(model_path), attn_implementation="eager").float().eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    example = tok(["an example", "a slightly longer example text"], padding=True, return_tensors="pt")
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
            "last_hidden_state": {0: "batch", 1: "tokens"}}
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                LastHidden(model), (example["input_ids"], example["attention_mask"]), str(fp32),
                input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                dynamic_axes=axes, opset_version=OPSET, dynamo=False,
            )
        part = Path(tmp) / "int8.onnx"
        logging.disable(logging.WARNING)  # the quantiser logs advice for image models on the root logger
        try:
            quantize_dynamic(str(fp32), str(part), weight_type=QuantType.QInt8, per_channel=True)
        finally:
            logging.disable(logging.NOTSET)
        os.replace(part, target)


class Int8Runner:
    """The int8 model on ONNX Runtime: token ids -> mean-pooled unit vectors, one text per run.

    Why one text per run: dynamic quantisation scales activations per run, so
    in a batch a text's vector would depend on its batch-mates (and a graph
    on how the build split the document). Alone, each text gets its own scale
    and no padding; on this CPU that is as fast as batches of 16.

    Why threads of our own: single short texts are too small for ONNX
    Runtime's intra-op threads to help, so the session runs on one thread
    and ``threads`` Python threads run different texts at once (ONNX Runtime
    releases the GIL inside ``run``).
    """

    def __init__(self, model_path: str | Path, threads: int = 1, cache_dir: str | Path | None = None) -> None:
        import onnxruntime as ort

        self.model_file = int8_model_file(model_path, cache_dir)
        self.threads = max(1, int(threads))
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(self.model_file), so, providers=["CPUExecutionProvider"])
        self._pool: Any = None

    def hidden(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Last hidden states [batch, tokens, 384] (float32)."""
        feed = {"input_ids": input_ids.astype(np.int64, copy=False),
                "attention_mask": attention_mask.astype(np.int64, copy=False)}
        return self.session.run(["last_hidden_state"], feed)[0]

    def embed(self, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
        """Unit vectors [n, 384] of tokenised texts (each with its special tokens)."""
        out = np.zeros((len(token_ids), 384), np.float32)
        if self.threads > 1 and len(token_ids) > 8:
            from concurrent.futures import ThreadPoolExecutor

            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="minilm-int8")
            shares = [range(k, len(token_ids), self.threads) for k in range(self.threads)]
            for f in [self._pool.submit(self._embed_rows, token_ids, rows, out) for rows in shares]:
                f.result()
        else:
            self._embed_rows(token_ids, range(len(token_ids)), out)
        return out

    def _embed_rows(self, token_ids: Sequence[Sequence[int]], rows: Iterable[int], out: np.ndarray) -> None:
        for i in rows:
            ids = np.asarray([token_ids[i]], np.int64)
            pooled = self.hidden(ids, np.ones_like(ids))[0].mean(0)
            out[i] = pooled / max(float(np.linalg.norm(pooled)), 1e-12)


__all__ = ["Int8Runner", "cpu_has_vnni", "int8_model_file", "RECIPE"]
