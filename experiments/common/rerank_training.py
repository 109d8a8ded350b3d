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

from experiments.common.rerank_data import Group

#: Linear layers adapted in every kept transformer layer (peft matches names by suffix).
TARGET_SUFFIXES = ("query", "key", "value", "dense")


def make_trainable(base: Any, r: int, alpha: float, dropout: float) -> Any:
    """``base`` (:func:`mage_gym.retrieval.cross_encoder.base_model`) wrapped by peft: LoRA on
    :data:`TARGET_SUFFIXES` of the encoder, the linear head trained whole."""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()  # before peft imports transformers' model classes
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=int(r), lora_alpha=float(alpha), lora_dropout=float(dropout),
                     target_modules=list(TARGET_SUFFIXES), modules_to_save=["head"])
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


def train_groups(model: Any, tokenizer: Any, groups: Sequence[Group], epochs: int, lr: float, batch_groups: int,
                 max_length: int, seed: int = 0, warmup: float = 0.1, weight_decay: float = 0.01,
                 bf16: bool = False, log: Callable[[str], None] = print, joint_layers: int = 0) -> dict[str, Any]:
    """Train ``model`` (peft-wrapped) on ``groups``; returns the loss curve and timing."""
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
            enc = encode_pairs(tokenizer, [g.question for g in batch for _ in g.passages],
                               [p for g in batch for p in g.passages], max_length, joint_layers)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(**enc).logits[:, 0].float().view(len(batch), size)
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
