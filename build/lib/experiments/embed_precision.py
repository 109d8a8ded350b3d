"""Does a faster embedding precision cost retrieval quality? float32, bfloat16 and int8 MiniLM, side by side.

Why: embedding is most of a graph build (issue 2's speed targets);
bfloat16 runs ~2x faster than float32 on CPUs with native bfloat16, and int8
(ONNX Runtime) ~1.6x faster again on CPUs with VNNI. The vectors change
slightly; this script measures whether that matters where it is used:
dense page retrieval at reset, on real MMLongBench-Doc questions.

For each of the first ``--docs`` text-layer MMLongBench-Doc dev documents
(whole document, ``fast`` parser, no cache) and each precision it builds the
graph, then reports:

* embedding throughput (tokens/s of the element texts, median over docs);
* dense page recall@k: share of answerable questions with a gold evidence
  page among the top-k pages by question-page cosine, and the same with
  pages ranked by their best element;
* the same recall for the environment's default page retriever (``hybrid``:
  BM25 fused with dense), which is what an episode's entry pages come from;
* agreement: cosine between the two precisions' element vectors.

``--dataset financebench --max-pages 1000`` runs it on FinanceBench's filings.
(Until issue 19 this script was ``experiments/embed_quality.py``, the name the
README's embedding tables cite; that name now measures entry-page recall per
dataset and retrieval channel.)

Run::

    .venv/bin/python experiments/embed_precision.py --docs 10    # writes outputs/embed_precision/results.json
    .venv/bin/python experiments/embed_precision.py --docs 10 --element-chars 150 200 300 --out outputs/embed_chars
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from experiments.common.results import write_json


def recall_at(scores: np.ndarray, gold: set[int], k: int) -> float:
    top = np.argsort(-scores, kind="stable")[:k]
    return float(any(int(p) in gold for p in top))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="mmlongbench", choices=["mmlongbench", "financebench"])
    ap.add_argument("--docs", type=int, default=10, help="text-layer documents to use")
    ap.add_argument("--max-pages", type=int, default=150, help="skip longer documents (keeps the run short)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--precisions", nargs="*", default=["float32", "bfloat16"])
    ap.add_argument("--element-chars", type=int, nargs="*", default=[300],
                    help="element text cut(s) to compare (EmbedConfig.element_max_chars); with several, "
                         "one precision (the last of --precisions) is used")
    ap.add_argument("--out", default="outputs/embed_precision")
    args = ap.parse_args()

    from mage_gym.data import load_dataset
    from mage_gym.graph.build import build_graph
    from mage_gym.graph.embed import TextEncoder
    from mage_gym.graph.sources import open_source, page_count
    from mage_gym.retrieval import get_retriever
    from mage_gym.retrieval.base import Query

    hybrid = get_retriever("hybrid")
    by_doc: dict[str, list] = defaultdict(list)
    for ep in load_dataset(args.dataset):
        if ep.answerable and ep.evidence_pages:
            by_doc[ep.source].append(ep)
    docs = []
    for src in sorted(by_doc):
        if not src.endswith(".pdf") or page_count(open_source(src)) > args.max_pages:
            continue
        docs.append(src)
        if len(docs) == args.docs:
            break
    if not docs:
        sys.exit(f"no {args.dataset} documents found: set MAGE_GYM_DATA to the folder holding the benchmark data")

    # settings: label -> (encoder, element_max_chars)
    if len(args.element_chars) > 1:
        enc = TextEncoder(device="cpu", precision=args.precisions[-1])
        settings = {f"{args.precisions[-1]}/{c}ch": (enc, c) for c in args.element_chars}
    else:
        settings = {p: (TextEncoder(device="cpu", precision=p), args.element_chars[0]) for p in args.precisions}
    results: dict[str, dict] = {p: {"tok_per_s": [], "page_hits": [], "element_hits": [], "hybrid_hits": [],
                                    "tokens": []} for p in settings}
    agreement: list[float] = []
    for src in docs:
        vecs = {}
        for prec, (enc, cut) in settings.items():
            t = time.perf_counter()
            g = build_graph(src, "fast", encoder=enc, workers=1, cache=False, embed_cfg={"element_max_chars": cut})
            cut = g.meta["embed_cfg"]["element_max_chars"]  # what was embedded (approximately)
            texts = [(e.text or "")[:cut] for e in g.elements]
            n_tok = sum(len(ids) for ids in enc.tokenizer(texts, truncation=True, max_length=enc.max_length)["input_ids"])
            embed_s = g.meta["stage_seconds"]["embed_busy"]
            results[prec]["tok_per_s"].append(n_tok / max(embed_s, 1e-9))
            results[prec]["tokens"].append(n_tok)
            el_pages = np.asarray([e.page for e in g.elements])
            for ep in by_doc[src]:
                q = enc.encode([ep.question])[0]
                gold = set(ep.evidence_pages)
                results[prec]["page_hits"].append(recall_at(g.page_vectors @ q, gold, args.k))
                best = np.full(g.n_pages, -1.0, np.float32)
                np.maximum.at(best, el_pages, g.element_vectors @ q)
                results[prec]["element_hits"].append(recall_at(best, gold, args.k))
                fused = np.asarray(hybrid.score(g, Query(ep.question, q)).pages)
                results[prec]["hybrid_hits"].append(recall_at(fused, gold, args.k))
            vecs[prec] = g.element_vectors
            print(f"{Path(src).name[:40]:40s} {prec:9s} {g.n_pages:4d} p {g.n_elements:5d} el  "
                  f"build {time.perf_counter() - t:6.1f} s", flush=True)
        if len(vecs) == 2 and len(args.element_chars) == 1:
            a, b = vecs.values()
            live = (np.linalg.norm(a, axis=1) > 0) & (np.linalg.norm(b, axis=1) > 0)
            agreement.extend((a[live] * b[live]).sum(1).tolist())

    summary = {"dataset": args.dataset, "docs": len(docs), "questions": len(next(iter(results.values()))["page_hits"]), "k": args.k}
    print(f"\n{len(docs)} documents, {summary['questions']} answerable questions")
    print(f"{'setting':16s} {'tokens':>8s} {'tokens/s':>9s} {'page R@' + str(args.k):>10s} {'elem R@' + str(args.k):>10s}"
          f" {'hybrid R@' + str(args.k):>10s}")
    for prec, r in results.items():
        row = {"tokens": int(sum(r["tokens"])), "tokens_per_s_median": statistics.median(r["tok_per_s"]),
               "page_recall": float(np.mean(r["page_hits"])), "element_page_recall": float(np.mean(r["element_hits"])),
               "hybrid_page_recall": float(np.mean(r["hybrid_hits"]))}
        summary[prec] = row
        print(f"{prec:16s} {row['tokens']:8d} {row['tokens_per_s_median']:9.0f} {row['page_recall']:10.3f} "
              f"{row['element_page_recall']:10.3f} {row['hybrid_page_recall']:10.3f}")
    if agreement:
        summary["element_cosine"] = {"mean": float(np.mean(agreement)), "min": float(np.min(agreement))}
        print(f"element vector cosine between precisions: mean {np.mean(agreement):.4f}, min {np.min(agreement):.4f}")
    print(f"wrote {write_json(Path(args.out) / 'results.json', summary)}")


if __name__ == "__main__":
    main()
