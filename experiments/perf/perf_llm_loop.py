"""The LLM controller loop's speed on this CPU: prefill, generation and training tokens/s in fp32 and bf16.

Why: training a controller on CPU is worth planning only with its real
rates. On a CPU with bf16 instructions (``avx512_bf16``, AMX) torch's bf16
matmuls can run several times faster than fp32; whether that reaches a whole
135M model's prefill, decoding and backward pass is measured here, side by
side in one process (alternating dtypes, medians), so the faster honest path
is chosen from figures, not flags. Per dtype, for SmolLM2-135M
(``mage_gym.agent.models.load_model``, the model the controller is trained
from):

- prefill tokens/s on a ``--prompt-tokens`` prompt, as ``generate`` pays it
  (logits for the last position only), and beside it one forward pass with
  logits for every position, as a training forward pays it
  (``forward_tok_s``: SmolLM2's 49k-word output layer is a large share);
- generation tokens/s: ``--new-tokens`` greedy tokens after that prompt (KV
  cache), timed inside one ``generate`` call from its first new token to its
  last (a streamer stamps each token), so prefill never enters the rate;
- training tokens/s: forward + backward (+ optimizer step) of a LoRA
  (``--lora-r``, all linear layers) on a ``--train-tokens`` sequence (bf16 runs
  under CPU autocast, as the trainers do with ``bf16=true``).

Run::

    .venv/bin/python experiments/perf/perf_llm_loop.py --out outputs/perf_llm_loop

Writes ``results.json`` (medians per dtype, the bf16/fp32 ratios, the CPU
flags, the load average before and after: a shared machine slows both sides alike).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable


def cpu_flags() -> list[str]:
    """The CPU features that decide the fast dtype (from /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in flags if f.startswith(("amx", "avx512_bf16", "avx512f", "avx512_vnni", "avx_vnni")))


def seconds(fn: Callable[[], Any]) -> float:
    """Wall seconds of one call of ``fn()``."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class TokenClock:
    """A ``generate`` streamer that stamps the time of each ``put``: the prompt first, then each new token.

    Why: decoding measured as "generate minus a separately timed prefill"
    subtracts two noisy figures of which the prefill is by far the larger on a
    long prompt (the earlier measure of this script; it went negative and was
    clamped, printing absurd rates). Stamps within one call time the prefill
    (prompt to first token) and the decoding (first token to last) directly.
    """

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def put(self, value: Any) -> None:
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass

    def prefill_s(self) -> float:
        return self.stamps[1] - self.stamps[0]

    def decode_s(self) -> float:
        """Seconds of the tokens after the first (``len(stamps) - 2`` decoding steps)."""
        return self.stamps[-1] - self.stamps[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--new-tokens", type=int, default=32, help="greedy tokens generated (at least 2)")
    ap.add_argument("--train-tokens", type=int, default=1024)
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("outputs/perf_llm_loop"))
    args = ap.parse_args(argv)
    if args.new_tokens < 2:
        ap.error("--new-tokens must be at least 2: the rate is timed from the first new token to the last")

    import torch

    from mage_gym.agent.models import load_model

    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()
    model, tok = load_model("smollm2", dtype="float32")
    model.eval()
    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, vocab - 100, (1, args.prompt_tokens), generator=gen)
    train_ids = torch.randint(100, vocab - 100, (1, args.train_tokens), generator=gen)
    models = {"float32": model, "bfloat16": load_model("smollm2", dtype="bfloat16")[0].eval()}

    def forward(m: Any) -> None:
        with torch.inference_mode():
            m(input_ids=prompt)

    def generate(m: Any) -> TokenClock:
        clock = TokenClock()
        with torch.inference_mode():
            m.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.new_tokens,
                       min_new_tokens=args.new_tokens, do_sample=False, streamer=clock)
        return clock

    from peft import LoraConfig, get_peft_model

    lora = {}
    for name in models:
        base = load_model("smollm2", dtype="float32")[0]
        lora[name] = get_peft_model(base, LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
        lora[name].train()
    optims = {n: torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4) for n, m in lora.items()}

    def train_step(name: str) -> None:
        m = lora[name]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name == "bfloat16"):
            loss = m(input_ids=train_ids, labels=train_ids).loss
        loss.backward()
        optims[name].step()
        optims[name].zero_grad()

    keys = ("forward", "prefill", "decode", "train")
    rows: dict[str, dict[str, list[float]]] = {n: {k: [] for k in keys} for n in models}
    for name in models:  # warm-up: first calls allocate and pick kernels
        generate(models[name])
        train_step(name)
    for _ in range(args.repeats):  # alternate dtypes so load changes hit both
        for name, m in models.items():
            rows[name]["forward"].append(seconds(lambda: forward(m)))
            clock = generate(m)
            rows[name]["prefill"].append(clock.prefill_s())
            rows[name]["decode"].append(clock.decode_s())
            rows[name]["train"].append(seconds(lambda: train_step(name)))
    results: dict[str, Any] = {"kind": "perf_llm_loop", "model": "SmolLM2-135M-Instruct", "cpu_flags": cpu_flags(),
                               "threads": args.threads, "prompt_tokens": args.prompt_tokens,
                               "new_tokens": args.new_tokens, "train_tokens": args.train_tokens,
                               "lora_r": args.lora_r, "repeats": args.repeats, "dtypes": {}}
    for name, r in rows.items():
        fwd, pre, dec, tr = (statistics.median(r[k]) for k in keys)
        results["dtypes"][name] = {"prefill_tok_s": args.prompt_tokens / pre,
                                   "generation_tok_s": (args.new_tokens - 1) / dec,
                                   "forward_tok_s": args.prompt_tokens / fwd,
                                   "train_tok_s": args.train_tokens / tr, "train_step_s": tr,
                                   "prefill_s": pre, "decode_s": dec, "forward_s": fwd}
    f, b = results["dtypes"]["float32"], results["dtypes"]["bfloat16"]
    rates = ("prefill_tok_s", "generation_tok_s", "forward_tok_s", "train_tok_s")
    results["bf16_over_fp32"] = {k: b[k] / f[k] for k in rates}
    results["faster"] = {k: "bfloat16" if b[k] > f[k] else "float32" for k in rates}
    results["machine"] = {"cpus": os.cpu_count(), "loadavg_start": list(load0), "loadavg_end": list(os.getloadavg())}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
