"""Entry-page recall with and without the cross-encoder reranker, per dataset, with paired 95 % intervals.

Run (from the repo root; graphs from the cache, fast parser)::

    .venv/bin/python experiments/rerank_quality.py --synth-root data_out/synth/train24_s6 --out outputs/rerank_quality

For every question with gold pages of the chosen splits (default: test), the
env's own scoring (:func:`mage_gym.env.relevance.score_question`, the page
window applied) ranks pages with the default retriever (``hybrid``) and with
``hybrid_rerank`` as ``conf/retriever/hybrid_rerank.yaml`` configures it (the
shipped adapter); page recall at k = 1, 3, 5, 10 of each, and the paired
difference (rerank minus hybrid) per question with its 95 % bootstrap
interval (:func:`mage_gym.bench.equal_cost.paired_delta`). At k = 5 this
is what ``topk_page`` reads under each retriever.

CPU cost: the seconds the reranker adds per question (its scoring, first
stage included, minus the first stage's alone, both timed on the same
question one after the other; cross-encoder scores computed, not read from
the cache), the pairs it reads, as medians over questions, and the median
ratio of its whole scoring time to the first stage's. Writes ``results.json`` (``runs``: one row per dataset, split and
retriever; ``deltas``; ``cost``; ``bar``: issue 34's reranker bar, top-5
recall above the hybrid's with the interval above 0).
"""
from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from mage_gym.bench.rerank_data import recall_at
from mage_gym.bench.results import write_json

KS = (1, 3, 5, 10)


def rerank_settings(repo: Path) -> dict[str, Any]:
    """``conf/retriever/hybrid_rerank.yaml`` without its name (what ``retriever=hybrid_rerank`` builds)."""
    import yaml

    cfg = yaml.safe_load((repo / "conf" / "retriever" / "hybrid_rerank.yaml").read_text())
    cfg.pop("name", None)
    return {k: v for k, v in cfg.items() if v is not None}


def measure(dataset: str, split: str, args: argparse.Namespace, hybrid: Any, rerank: Any,
            timer: Any) -> list[dict[str, Any]]:
    """Per question: gold pages, both page orders (window applied) and the timing of both scorings."""
    from mage_gym.data import load_dataset
    from mage_gym.data.gold import resolve_gold
    from mage_gym.env.relevance import score_question
    from mage_gym.graph.build import load_graph
    from mage_gym.graph.store import GraphNotBuiltError
    from mage_gym.retrieval import make_query

    kw = {"root": args.synth_root} if dataset == "synth" and args.synth_root else {}
    episodes = load_dataset(dataset, split=split, **kw)
    by_source: dict[str, list] = defaultdict(list)
    for ep in episodes:
        by_source[ep.source].append(ep)
    rows = []
    for source in sorted(by_source):
        try:
            graph = load_graph(source, parser=args.parser)
        except GraphNotBuiltError:
            continue
        for ep in by_source[source]:
            gold = tuple(p for p in resolve_gold(ep, graph).pages if 0 <= p < graph.n_pages)
            if not gold:
                continue
            query = make_query(ep.question)
            t0 = time.perf_counter()
            first = score_question(graph, hybrid, query)
            t1 = time.perf_counter()
            second = score_question(graph, rerank, query)
            t2 = time.perf_counter()
            orders = {}
            for name, rel in (("hybrid", first), ("hybrid_rerank", second)):
                order = rel.page_order
                if ep.page_window is not None:
                    lo, hi = int(ep.page_window[0]), int(ep.page_window[1])
                    order = order[(order >= lo) & (order <= hi)]
                orders[name] = order[: max(KS)].tolist()
            rows.append({"episode_id": ep.episode_id, "gold": gold, "orders": orders, "first_s": t1 - t0,
                         "rerank_s": t2 - t1, "pairs": rerank.last_pairs})
            timer(len(rows))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="*", default=["mmlongbench", "financebench", "synth"])
    ap.add_argument("--splits", nargs="*", default=["test"])
    ap.add_argument("--synth-root", default=None)
    ap.add_argument("--parser", default="fast")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="outputs/rerank_quality")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from mage_gym.bench.equal_cost import paired_delta
    from mage_gym.bench.published import current_commit
    from mage_gym.retrieval import get_retriever
    from mage_gym.retrieval.cross_encoder import read_meta

    torch.set_num_threads(args.threads)
    repo = Path(__file__).resolve().parents[1]
    settings = rerank_settings(repo)
    from mage_gym.retrieval.rerank import RerankedRetriever, settings_of

    hybrid = get_retriever(settings.get("first_stage", "hybrid"), **settings.get("first_stage_cfg", {}))
    # the same first-stage object (its per-document indexes are built once); every cross-encoder score computed
    rerank = RerankedRetriever(hybrid, **{**settings_of(settings), "cache": "write"})  # computed, then stored
    meta = read_meta(Path(settings["checkpoint"]) if settings.get("checkpoint") else
                     repo / "mage_gym" / "retrieval" / "cross_encoder")
    results: dict[str, Any] = {
        "command": " ".join([".venv/bin/python experiments/rerank_quality.py", *map(shlex.quote, sys.argv[1:])]),
        "date": datetime.date.today().isoformat(), "commit": current_commit(repo),
        "config": {**vars(args), "hybrid_rerank": settings},
        "adapter": {"layers": meta.layers, "r": meta.r, "max_length": meta.max_length,
                    "trained_by": meta.extra.get("command"), "val": meta.extra.get("val")},
        "machine": {"cores": os.cpu_count(), "load_average_1min_start": os.getloadavg()[0]},
        "runs": [], "deltas": {}, "cost": {}, "bar": {}}
    t_start = time.perf_counter()
    all_rows = []
    for ds in args.datasets:
        for split in args.splits:
            t0 = time.perf_counter()
            rows = measure(ds, split, args, hybrid, rerank, lambda n: (n % 25 == 0) and print(
                f"  {ds} {split}: {n} questions ({time.perf_counter() - t0:.0f} s)", flush=True))
            all_rows += rows
            n = len(rows)
            for name in ("hybrid", "hybrid_rerank"):
                m = {"questions": n, **{f"R@{k}": float(np.mean([recall_at(r["orders"][name], r["gold"], k)
                                                                   for r in rows])) if n else None for k in KS}}
                results["runs"].append({"dataset": ds, "split": split, "retriever": name, "metrics": m})
            key = f"{ds}/{split}"
            results["deltas"][key] = {f"R@{k}": paired_delta([recall_at(r["orders"]["hybrid_rerank"], r["gold"], k)
                                                              for r in rows],
                                                             [recall_at(r["orders"]["hybrid"], r["gold"], k)
                                                              for r in rows]) for k in KS} if n else {}
            missed = [r for r in rows if r["pairs"] > 0]
            results["cost"][key] = {
                "questions_timed": len(missed),
                "added_seconds_per_question_median": float(np.median([r["rerank_s"] - r["first_s"] for r in missed]))
                if missed else None,
                "first_stage_seconds_per_question_median": float(np.median([r["first_s"] for r in rows]))
                if rows else None,
                "ratio_to_first_stage_median": float(np.median([r["rerank_s"] / max(r["first_s"], 1e-9)
                                                                for r in missed])) if missed else None,
                "pairs_per_question_median": float(np.median([r["pairs"] for r in missed])) if missed else None}
            if n:
                d = results["deltas"][key]["R@5"]
                results["bar"][key] = {"delta_R@5": d, "met": bool(d["lo"] is not None and d["lo"] > 0)}
                print(f"{ds} {split}: {n} q; R@5 hybrid {results['runs'][-2]['metrics']['R@5']:.3f} -> rerank "
                      f"{results['runs'][-1]['metrics']['R@5']:.3f}, delta {d['mean']:+.3f} [{d['lo']:+.3f}, "
                      f"{d['hi']:+.3f}]; cost {results['cost'][key]}", flush=True)
    results["seconds"] = round(time.perf_counter() - t_start, 1)
    results["machine"]["load_average_1min_end"] = os.getloadavg()[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", results)
    with open(out / "questions.jsonl", "w") as f:
        import json

        for r in all_rows:
            f.write(json.dumps({**r, "gold": list(r["gold"])}) + "\n")
    print(f"wrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
