"""How often a trained LLM controller makes its teacher's move: greedy replies to each prefix of held-out transcripts.

Run (from the repo root)::

    .venv/bin/python experiments/analysis/llm_agreement.py --model outputs/train_llm/<sft run>/model \
        --baseline smollm2 --baseline-limit 20 --transcripts outputs/transcripts/<val run>/transcripts.jsonl --limit 60 \
        --out outputs/llm_agreement/<name>

Why: SFT imitates a teacher, so the first question about an SFT student is
whether it does what the teacher did where the teacher acted: per assistant
turn of each val transcript (questions the student never trained on), the
student answers the conversation up to that turn (greedy,
:func:`mage_gym.agent.rollout.agreement`); ``exact`` counts the same calls
with the same arguments, ``tool`` the same tools in order. ``--baseline``
measures a second model (e.g. the untrained ``smollm2``) on the same turns
(``--baseline-limit``: of the first transcripts only; each model's row counts
its own turns). ``exact_interval`` and ``tool_interval`` are 95 % bootstrap
intervals that resample whole transcripts (turns of one episode are not
independent: one early miss changes the rest). Writes ``results.json``.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Sequence


def episode_interval(per_episode: Sequence[Sequence[int]], column: int, n_boot: int = 2000,
                     seed: int = 0) -> list[float] | None:
    """95 % bootstrap interval of ``sum(hits) / sum(turns)`` resampling episodes (``[exact, tool, turns]`` rows)."""
    import numpy as np

    counts = np.asarray(per_episode, dtype=float).reshape(-1, 3)
    if counts.shape[0] == 0 or counts[:, 2].sum() == 0:
        return None
    idx = np.random.default_rng(seed).integers(0, len(counts), size=(n_boot, len(counts)))
    shares = counts[idx, column].sum(axis=1) / np.maximum(1.0, counts[idx, 2].sum(axis=1))
    return [float(v) for v in np.percentile(shares, [2.5, 97.5])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="an adapter or model folder, or smollm2")
    ap.add_argument("--baseline", default=None, help="a second model measured on the same turns (e.g. smollm2)")
    ap.add_argument("--baseline-limit", type=int, default=None,
                    help="the baseline on the first N of those transcripts only (an untrained model writes "
                         "--max-new-tokens of text every turn: the slow side)")
    ap.add_argument("--transcripts", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=20, help="first N transcripts")
    ap.add_argument("--max-turns", type=int, default=None, help="first N assistant turns of each transcript")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads; on a shared 2-core machine one thread decoded 3x faster than two")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import torch

    from mage_gym.agent.models import load_model
    from mage_gym.agent.rollout import LocalChatModel, agreement
    from mage_gym.agent.transcripts import read_jsonl

    torch.set_num_threads(args.threads)
    rows = read_jsonl(args.transcripts)[: args.limit]
    out: dict = {"kind": "llm_agreement", "transcripts": str(args.transcripts), "limit": args.limit,
                 "max_turns": args.max_turns, "teacher": sorted({str(r.get("source")) for r in rows}), "models": {}}
    for name in filter(None, [args.model, args.baseline]):
        subset = rows[: args.baseline_limit] if name == args.baseline and args.baseline_limit else rows
        model, tok = load_model(name)
        model.eval()
        t0 = time.perf_counter()
        res = agreement(LocalChatModel(model, tok, max_new_tokens=args.max_new_tokens), subset, args.max_turns)
        res["seconds"] = time.perf_counter() - t0
        res["exact_interval"] = episode_interval(res["per_episode"], 0)
        res["tool_interval"] = episode_interval(res["per_episode"], 1)
        out["models"][name] = res
        print(json.dumps({name: res}, indent=1), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
