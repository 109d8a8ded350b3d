"""Train the cross-encoder reranker on TRAIN-split gold, choose its reading settings on VAL, ship the adapter.

Run (from the repo root; graphs from the cache, fast parser; nothing downloads)::

    .venv/bin/python experiments/train_reranker.py --synth-root data_out/synth/train24_s6 \\
        --out outputs/train_reranker --save mage_gym/retrieval/cross_encoder

1. Questions with gold pages of the TRAIN splits of MMLongBench, FinanceBench
   and the synthetic corpus; for each, the env's default hybrid ranks the
   pages (the first stage) and the reranker's passages are read
   (:mod:`mage_gym.bench.rerank_data`: the positive passage of each gold
   page, hard negatives from the top ``--negative-depth`` non-gold pages).
2. LoRA fine-tuning of the first ``--layers`` layers of the shipped MiniLM
   (:mod:`mage_gym.bench.rerank_training`), fixed settings (printed and
   recorded; no search over them: one training run fits the CPU budget).
3. The VAL splits choose how the reranker reads (``SELECTION_RULE``): the
   number of first-stage pages it reranks, passages per page and how its
   score combines with the first stage. The test splits are never read here
   (``experiments/rerank_quality.py`` measures them).

Writes ``OUT/results.json`` (data counts, training curve and seconds, every
setting's val recall, the chosen one) and ``OUT/adapter/``; ``--save`` also
copies the adapter (with its command, data, val figures and chosen settings in
``adapter.json``) to the shipped folder. The chosen settings must then be
those of ``conf/retriever/hybrid_rerank.yaml`` and the
:class:`~mage_gym.retrieval.rerank.RerankedRetriever` defaults
(``selection.preset_matches_chosen`` says whether they are).
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from mage_gym.bench.results import write_json

DATASETS = ("mmlongbench", "financebench", "synth")
KS = (1, 3, 5, 10)
COMBINES = ("ce", "rrf")
SELECTION_RULE = (
    "Grid: depth (first-stage pages reranked) in --depths, passages per page in {1, 2}, combine in {ce (the "
    "cross-encoder's order), rrf (reciprocal-rank fusion with the first stage, k 60)}. Chosen: the best VAL "
    "recall@5 pooled over questions (each question once, all datasets); ties: the pooled mean of recall@1/3/5/10, "
    "then the fewest passages read (depth x passages). The first stage alone is reported beside it. Test splits "
    "are never read.")


def _log(msg: str) -> None:
    print(msg, flush=True)


def collect(args: argparse.Namespace, reranker: Any, split: str, positives: bool) -> tuple[list, dict]:
    from mage_gym.bench.rerank_data import collect_questions

    qs, skipped = [], {}
    for ds in args.datasets:
        t0 = time.perf_counter()
        part, sk = collect_questions(ds, split, reranker, args.depth_max, root=args.synth_root, parser=args.parser,
                                     with_positives=positives,
                                     max_questions=args.max_questions.get(ds) if args.max_questions else None,
                                     seed=args.seed)
        qs += part
        skipped[ds] = sk
        _log(f"{ds} {split}: {len(part)} questions with gold ({sk}) in {time.perf_counter() - t0:.0f} s")
    return qs, skipped


def score_passages(scorer: Any, questions: list) -> tuple[list[list[np.ndarray]], list[float]]:
    """Every question's passage scores (per page of its order) and the seconds each question took."""
    out, seconds = [], []
    for i, q in enumerate(questions):
        t0 = time.perf_counter()
        flat = [t for ps in q.passages for t in ps]
        s = scorer.score(q.question, flat)
        per, at = [], 0
        for ps in q.passages:
            per.append(np.asarray(s[at: at + len(ps)], dtype=np.float32))
            at += len(ps)
        out.append(per)
        seconds.append(time.perf_counter() - t0)
        if (i + 1) % 25 == 0:
            _log(f"  scored {i + 1}/{len(questions)} questions ({np.sum(seconds):.0f} s)")
    return out, seconds


def evaluate(questions: list, scores: list, depths: list[int]) -> list[dict[str, Any]]:
    """Val recall of the first stage and of every grid setting, per dataset and pooled."""
    from mage_gym.bench.rerank_data import recall_at, reranked_order

    settings: list[dict[str, Any]] = [{"depth": 0, "chunks_per_page": 0, "combine": "first_stage"}]
    settings += [{"depth": d, "chunks_per_page": c, "combine": m}
                 for d, c, m in itertools.product(depths, (1, 2), COMBINES)]
    rows = []
    for s in settings:
        per: dict[str, dict[int, list[float]]] = {}
        for q, sc in zip(questions, scores):
            order = q.order if s["depth"] == 0 else reranked_order(q, sc, s["depth"], s["chunks_per_page"],
                                                                  s["combine"])
            d = per.setdefault(q.dataset, {k: [] for k in KS})
            for k in KS:
                d[k].append(recall_at(order, q.gold, k))
        pooled = {k: float(np.mean([v for d in per.values() for v in d[k]])) for k in KS}
        rows.append({**s, "pooled": {f"R@{k}": pooled[k] for k in KS},
                     "per_dataset": {ds: {"questions": len(d[5]), **{f"R@{k}": float(np.mean(d[k])) for k in KS}}
                                     for ds, d in per.items()}})
    return rows


def choose(rows: list[dict[str, Any]]) -> dict[str, Any]:
    cands = [r for r in rows if r["depth"] > 0]
    return min(cands, key=lambda r: (-round(r["pooled"]["R@5"], 9),
                                     -round(float(np.mean(list(r["pooled"].values()))), 9),
                                     r["depth"] * r["chunks_per_page"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS))
    ap.add_argument("--synth-root", default=None, help="synthetic corpus folder (make_synth.py out_dir)")
    ap.add_argument("--parser", default="fast")
    ap.add_argument("--layers", type=int, default=3, help="MiniLM layers kept (of 6)")
    ap.add_argument("--head", default="mean_pool_linear", help="scoring head (mage_gym.retrieval.cross_encoder.HEADS)")
    ap.add_argument("--joint-layers", type=int, default=0,
                    help="top layers reading question and passage together (0: all; needs --head segment_cosine)")
    ap.add_argument("--only-joint", action="store_true",
                    help="adapt only the joint layers; the lower ones (the bi-encoder) run once per text")
    ap.add_argument("--r", type=int, default=16, help="LoRA rank")
    ap.add_argument("--alpha", type=float, default=32.0, help="LoRA alpha (scale alpha / r)")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--max-length", type=int, default=256, help="tokens per (question, passage)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--batch-groups", type=int, default=4, help="groups (questions) per optimiser step")
    ap.add_argument("--negatives", type=int, default=5, help="hard negatives per group")
    ap.add_argument("--negative-depth", type=int, default=20, help="first-stage pages negatives are drawn from")
    ap.add_argument("--max-positives", type=int, default=2, help="groups per question (one per gold page)")
    ap.add_argument("--depth-max", type=int, default=20, help="first-stage pages whose passages are read")
    ap.add_argument("--depths", type=int, nargs="*", default=[10, 20], help="depths of the val grid")
    ap.add_argument("--max-questions", default=None,
                    help="cap per dataset and split, e.g. synth=120 (a seeded sample; default: all)")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast in training (CPUs with AMX/AVX512-BF16)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="outputs/train_reranker")
    ap.add_argument("--save", default=None, help="copy the adapter here (mage_gym/retrieval/cross_encoder ships it)")
    ap.add_argument("--ship", default=None, metavar="OUT",
                    help="no training: copy OUT/adapter (a finished run's) to --save with OUT/results.json's val "
                         "figures, and record it in OUT/results.json")
    args = ap.parse_args()
    if args.ship:
        if not args.save:
            raise SystemExit("--ship OUT needs --save FOLDER")
        out = Path(args.ship)
        results = json.loads((out / "results.json").read_text())
        ship(out, Path(args.save), results)
        write_json(out / "results.json", results)
        return
    args.max_questions = dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in args.max_questions.split(",")) \
        if args.max_questions else None
    if max(args.depths) > args.depth_max:
        raise SystemExit(f"--depths {args.depths} exceed --depth-max {args.depth_max}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from mage_gym.bench.published import current_commit
    from mage_gym.bench.rerank_data import training_groups
    from mage_gym.bench.rerank_training import LowerStates, export_adapter, make_trainable, train_groups
    from mage_gym.env.relevance import shared_retriever
    from mage_gym.retrieval.cross_encoder import (AdapterMeta, CrossEncoderScorer, base_model, default_base_path,
                                                  save_adapter)
    from mage_gym.retrieval.rerank import RerankedRetriever

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    repo = Path(__file__).resolve().parents[1]
    command = " ".join([".venv/bin/python experiments/train_reranker.py", *map(shlex.quote, sys.argv[1:])])
    results: dict[str, Any] = {"command": command, "date": datetime.date.today().isoformat(),
                               "commit": current_commit(repo), "config": {k: v for k, v in vars(args).items()},
                               "selection_rule": SELECTION_RULE,
                               "machine": {"cores": os.cpu_count(), "load_average_1min_start": os.getloadavg()[0]}}
    reranker = RerankedRetriever(shared_retriever("hybrid"), scorer=object(), depth=args.depth_max)

    t0 = time.perf_counter()
    train, skipped_train = collect(args, reranker, "train", positives=True)
    val, skipped_val = collect(args, reranker, "val", positives=False)
    results["data"] = {"train_questions": _count(train), "val_questions": _count(val),
                       "skipped": {"train": skipped_train, "val": skipped_val},
                       "collect_seconds": round(time.perf_counter() - t0, 1)}
    groups = training_groups(train, args.negatives, args.negative_depth, args.max_positives, seed=args.seed)
    results["data"]["train_groups"] = len(groups)
    _log(f"{len(groups)} training groups of {1 + args.negatives} passages from {len(train)} train questions")

    base_path = default_base_path()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_path)
    model = make_trainable(base_model(base_path, args.layers, args.head, args.joint_layers), args.r, args.alpha,
                           args.dropout, only_joint=args.only_joint)
    lower = LowerStates(model, tokenizer, groups, args.max_length, args.bf16, log=_log) if args.only_joint else None
    trained = model.get_nb_trainable_parameters()
    stats = train_groups(model, tokenizer, groups, args.epochs, args.lr, args.batch_groups, args.max_length,
                         seed=args.seed, bf16=args.bf16, log=_log, joint_layers=args.joint_layers, lower=lower)
    stats["trainable_parameters"] = int(trained[0])
    results["training"] = stats
    _log(f"trained in {stats['seconds']:.0f} s: loss {stats['loss_first10']} -> {stats['loss_last10']}")
    lora, full = export_adapter(model)
    meta = AdapterMeta(r=args.r, alpha=args.alpha, targets=tuple(sorted(lora)), layers=args.layers,
                       max_length=args.max_length,
                       extra={"head": args.head, "joint_layers": args.joint_layers, "command": command, "date": results["date"], "commit": results["commit"],
                              "train_questions": results["data"]["train_questions"], "train_groups": len(groups),
                              "training_seconds": round(stats["seconds"], 1)})
    adapter = save_adapter(out / "adapter", lora, full, meta)

    scorer = CrossEncoderScorer(adapter)
    t0 = time.perf_counter()
    scores, seconds = score_passages(scorer, val)
    rows = evaluate(val, scores, sorted(args.depths))
    best = choose(rows)
    chosen = {"depth": best["depth"], "chunks_per_page": best["chunks_per_page"], "combine": best["combine"]}
    results["val"] = {"settings": rows, "chosen": chosen, "first_stage": rows[0],
                      "score_seconds": round(time.perf_counter() - t0, 1),
                      "seconds_per_question_median": float(np.median(seconds)) if seconds else None,
                      "passages_per_question_mean": float(np.mean([sum(len(p) for p in q.passages) for q in val]))
                      if val else None}
    defaults = RerankedRetriever.__init__.__defaults__  # (scorer, depth, chunks_per_page, chunk_chars, combine, ...)
    import yaml

    conf = yaml.safe_load((repo / "conf" / "retriever" / "hybrid_rerank.yaml").read_text())
    results["selection"] = {"chosen": chosen, "preset_matches_chosen": bool(
        all(conf.get(k) == v for k, v in chosen.items()) and defaults[1] == chosen["depth"]
        and defaults[2] == chosen["chunks_per_page"] and defaults[4] == chosen["combine"])}
    for r in rows:
        _log(f"val {r['combine']:11s} depth {r['depth']:2d} x{r['chunks_per_page']}: pooled "
             + " ".join(f"{k} {v:.3f}" for k, v in r["pooled"].items()) + "  "
             + ", ".join(f"{ds} R@5 {d['R@5']:.3f}" for ds, d in r["per_dataset"].items()))
    _log(f"chosen on val: {chosen}; conf/retriever/hybrid_rerank.yaml and the class defaults match: "
         f"{results['selection']['preset_matches_chosen']}")
    results["machine"]["load_average_1min_end"] = os.getloadavg()[0]
    if args.save:
        ship(out, Path(args.save), results)
    write_json(out / "results.json", results)
    _log(f"wrote {out / 'results.json'}")


def ship(out: Path, dest: Path, results: dict[str, Any]) -> None:
    """Copy ``out/adapter`` to ``dest``, its ``adapter.json`` completed with the run's val figures and chosen
    settings (taken from ``results``, the run's results.json); records the size in ``results["saved"]``."""
    meta = json.loads((out / "adapter" / "adapter.json").read_text())
    val = results["val"]
    best = next(r for r in val["settings"] if all(r[k] == v for k, v in val["chosen"].items()))
    meta["val"] = {"chosen": val["chosen"], "pooled": best["pooled"], "first_stage": val["first_stage"]["pooled"],
                   "questions": results["data"]["val_questions"], "results_of": results["command"]}
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(out / "adapter" / "adapter.safetensors", dest / "adapter.safetensors")
    (dest / "adapter.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    size = sum((dest / n).stat().st_size for n in ("adapter.safetensors", "adapter.json"))
    results["saved"] = {"folder": str(dest), "bytes": size}
    _log(f"saved the adapter to {dest} ({size / 1024:.0f} KiB)")


def _count(questions: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in questions:
        out[q.dataset] = out.get(q.dataset, 0) + 1
    return out


if __name__ == "__main__":
    main()
