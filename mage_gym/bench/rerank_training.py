"""Fine-tune the cross-encoder: LoRA adapters on MiniLM, a listwise loss over (positive, hard negatives) groups.

Why LoRA: the dev sets give a few hundred training questions, far too few to
move 22 M weights safely, and the package must stay lean; low-rank adapters
(peft) on the attention and feed-forward layers plus a trained head hold a
fraction of a megabyte and keep the shipped MiniLM as the base.

Why listwise: the reranker's job is to put the gold passage above the first
stage's other top passages, so each step scores a group - the positive first,
then hard negatives from the same question's top pages - and minimises the
softmax cross-entropy of the positive (the multiple-negatives ranking loss of
sentence-transformers, here without in-batch negatives: the hard ones are the
informative ones). AdamW with a linear warm-up and decay
(``transformers.get_linear_schedule_with_warmup``).
"""
from __future__ import annotations

import math
import random
import time
from typing import Any, Callable, Sequence

import numpy as np

from mage_gym.bench.rerank_data import Group

#: Linear layers adapted in every kept transformer layer (peft matches names by suffix).
TARGET_SUFFIXES = ("query", "key", "value", "dense")


def make_trainable(base: Any, r: int, alpha: float, dropout: float, only_joint: bool = False) -> Any:
    """``base`` (:func:`mage_gym.retrieval.cross_encoder.base_model`) wrapped by peft: LoRA on
    :data:`TARGET_SUFFIXES` of the encoder (``only_joint``: of its joint layers only, the lower ones stay the
    bi-encoder), the head trained whole."""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()  # before peft imports transformers' model classes
    from peft import LoraConfig, get_peft_model

    n = int(base.config.num_hidden_layers)
    joint = int(getattr(base, "joint_layers", 0))
    if only_joint and not joint:
        raise ValueError("only_joint needs a late-joint model (joint_layers > 0)")
    layers = list(range(n - joint, n)) if only_joint else None
    cfg = LoraConfig(r=int(r), lora_alpha=float(alpha), lora_dropout=float(dropout),
                     target_modules=list(TARGET_SUFFIXES), modules_to_save=["head"], layers_to_transform=layers,
                     layers_pattern="layer" if layers else None)
    return get_peft_model(base, cfg)


def export_adapter(peft_model: Any) -> tuple[dict[str, tuple[Any, Any]], dict[str, Any]]:
    """(LoRA factors by base module name, trained whole tensors by base parameter name) of a peft model, in the
    names :func:`mage_gym.retrieval.cross_encoder.merge_adapter` reads."""
    lora: dict[str, list[Any]] = {}
    full: dict[str, Any] = {}
    for name, t in peft_model.state_dict().items():
        clean = name.replace("base_model.model.", "", 1)
        if ".lora_A." in clean or ".lora_B." in clean:
            module, rest = clean.split(".lora_", 1)
            slot = 0 if rest.startswith("A.") else 1
            lora.setdefault(module, [None, None])[slot] = t.detach().clone()
        elif ".modules_to_save.default." in clean:
            full[clean.replace(".modules_to_save.default.", ".")] = t.detach().clone()
    return {m: (a, b) for m, (a, b) in lora.items()}, full


class LowerStates:
    """The lower layers' token states of every distinct text of the groups, computed once without gradients.

    Why: when only the joint layers are trained (``make_trainable(only_joint=True)``), the layers below them
    never change, so each question and passage goes through them once instead of once per step and epoch
    (PreTTR's precomputation, applied to training). Passages are cut as
    :func:`mage_gym.retrieval.cross_encoder.encode_pairs` cuts them beside their question.
    """

    def __init__(self, model: Any, tokenizer: Any, groups: Sequence[Group], max_length: int, bf16: bool,
                 batch: int = 32, log: Callable[[str], None] = print) -> None:
        import torch

        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.states: dict[tuple[str, int], tuple[Any, Any]] = {}
        q_len = {g.question: len(tokenizer(g.question, truncation=True, max_length=64)["input_ids"]) for g in groups}
        todo = sorted({(g.question, 64) for g in groups}
                      | {(p, max(16, max_length - q_len[g.question])) for g in groups for p in g.passages},
                      key=lambda x: len(x[0]))
        t0 = time.perf_counter()
        inner.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            for lo in range(0, len(todo), batch):
                part = todo[lo: lo + batch]
                for cap in sorted({c for _, c in part}):
                    texts = [t for t, c in part if c == cap]
                    enc = tokenizer(texts, truncation=True, max_length=cap, padding=True, return_tensors="pt")
                    h = inner.lower_states(enc["input_ids"], enc["attention_mask"]).float()
                    for i, t in enumerate(texts):
                        n = int(enc["attention_mask"][i].sum())
                        self.states[(t, cap)] = h[i, :n].clone()
        self.q_len = q_len
        self.max_length = max_length
        log(f"  lower-layer states of {len(todo)} texts in {time.perf_counter() - t0:.0f} s")

    def batch(self, questions: list[str], passages: list[str]) -> tuple[Any, Any, Any, Any]:
        """Padded (question states, mask, passage states, mask) of these pairs."""
        import torch

        def pad(rows: list[Any]) -> tuple[Any, Any]:
            n = max(r.shape[0] for r in rows)
            h = torch.zeros(len(rows), n, rows[0].shape[1])
            m = torch.zeros(len(rows), n, dtype=torch.long)
            for i, r in enumerate(rows):
                h[i, : r.shape[0]] = r
                m[i, : r.shape[0]] = 1
            return h, m

        hq, mq = pad([self.states[(q, 64)] for q in questions])
        hp, mp = pad([self.states[(p, max(16, self.max_length - self.q_len[q]))] for q, p in zip(questions, passages)])
        return hq, mq, hp, mp


def train_groups(model: Any, tokenizer: Any, groups: Sequence[Group], epochs: int, lr: float, batch_groups: int,
                 max_length: int, seed: int = 0, warmup: float = 0.1, weight_decay: float = 0.01,
                 bf16: bool = False, log: Callable[[str], None] = print, joint_layers: int = 0,
                 lower: LowerStates | None = None) -> dict[str, Any]:
    """Train ``model`` (peft-wrapped) on ``groups``; returns the loss curve and timing. ``lower``: precomputed
    lower-layer states (only the joint layers train: their forward and backward are all a step costs)."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    from mage_gym.retrieval.cross_encoder import encode_pairs

    torch.manual_seed(seed)
    rng = random.Random(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    steps = epochs * math.ceil(len(groups) / batch_groups)
    sched = get_linear_schedule_with_warmup(opt, int(warmup * steps), max(1, steps))
    size = len(groups[0].passages) if groups else 0
    if any(len(g.passages) != size for g in groups):
        raise ValueError("every group must hold the same number of passages")
    losses: list[float] = []
    t0 = time.perf_counter()
    step = 0
    model.train()
    for epoch in range(epochs):
        order = list(range(len(groups)))
        rng.shuffle(order)
        for lo in range(0, len(order), batch_groups):
            batch = [groups[i] for i in order[lo: lo + batch_groups]]
            questions = [g.question for g in batch for _ in g.passages]
            passages = [p for g in batch for p in g.passages]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                if lower is not None:
                    logits = model.get_base_model().joint_scores(*lower.batch(questions, passages))
                else:
                    logits = model(**encode_pairs(tokenizer, questions, passages, max_length, joint_layers)).logits
                logits = logits[:, 0].float().view(len(batch), size)
            loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(loss.item())
            step += 1
            if step % 10 == 0 or step == steps:
                log(f"  epoch {epoch + 1}/{epochs} step {step}/{steps} loss {np.mean(losses[-10:]):.3f} "
                    f"({time.perf_counter() - t0:.0f} s)")
    model.eval()
    return {"steps": step, "groups": len(groups), "group_size": size, "seconds": time.perf_counter() - t0,
            "loss_first10": float(np.mean(losses[:10])) if losses else None,
            "loss_last10": float(np.mean(losses[-10:])) if losses else None}
