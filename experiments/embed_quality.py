"""Entry-page retrieval quality per dataset and split: each channel alone, and the fused hybrids.

Why: entry pages decide what every controller can reach (topk_page's score,
the candidate slots, the oracle's headroom). This script measures page recall
at k = 1, 3, 5, 10 of

* ``bm25``: BM25 over each page's full text (OCR text on image-only pages);
* ``dense``: the graph's page vectors (length-weighted mean of 80-character
  element snippets);
* ``best_element``: pages ranked by their best element vector (diagnostic);
* ``page_dense``: MiniLM over chunks of each page's full text, best chunk
  (``mage_gym.retrieval.page_text``);
* ``page_text``: RRF of ``bm25`` and ``page_dense`` (the page-text channel);
* ``hybrid_elements``: RRF of ``bm25`` and ``dense`` (the original hybrid);
* ``hybrid_pages``: RRF of all three (``get_retriever("hybrid_pages")``);
* ``env_default``: the environment's default retriever (``hybrid``) through
  the environment's own scoring (``mage_gym.env.relevance.score_question``).

Page recall is the environment's ``evidence_page_recall`` of the top-k pages:
gold pages as ``resolve_gold`` gives them (answerable questions, pages inside
the document and inside a LongDocURL page window), the share of them among
the k best pages inside the window, averaged over questions with gold pages.
With ``k = 5`` and ``env_default`` this is exactly what ``topk_page`` scores
in the ``visual`` render mode (it sends its 5 entry pages and stops).

``--select`` also chooses the fusion on the TRAIN splits only: a grid over
RRF weights and k, ranked by the mean over datasets of train recall@5 (ties:
mean recall over all k, then the setting closest to equal weights and k=60);
the best per-dataset setting is then compared with the shared one on the val
split. Graphs come from the cache (``build_graph(..., parser="fast")``, what
the benchmarks use); a document whose graph is not cached is skipped and
listed, unless ``--build-missing``.

Run (page-text vectors are computed on first use and cached under
``$MAGE_GYM_CACHE/page_text``)::

    .venv/bin/python experiments/embed_quality.py --synth-root data_out/synth/train24_s6 --select \\
        --out outputs/embed_quality
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import shlex
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from experiments.common.results import write_json

KS = (1, 3, 5, 10)
SPLITS = ("train", "val", "test")
CHANNELS = ("bm25", "dense", "best_element", "page_dense")
FUSED = ("page_text", "hybrid_elements", "hybrid_pages", "env_default")


@dataclass
class QuestionScores:
    """One question's page scores per channel, its gold pages and its page window."""

    episode_id: str
    doc_id: str
    gold: tuple[int, ...]
    scores: dict[str, np.ndarray]  # channel -> float32 [n_pages]
    inside: np.ndarray | None  # bool [n_pages] for a page window, else None
    fused: dict[str, list[int]] = field(default_factory=dict)  # fused retriever -> top pages (window applied)


def ranked_pages(scores: np.ndarray, inside: np.ndarray | None, k: int) -> list[int]:
    """Top ``k`` pages by score, ties by page index (as the env orders entry pages), inside the window."""
    order = np.lexsort((np.arange(len(scores)), -np.asarray(scores, dtype=np.float64)))
    if inside is not None and inside.any():
        order = order[inside[order]]
    return order[:k].tolist()


def page_recall(top: list[int], gold: tuple[int, ...]) -> float:
    return len(set(top) & set(gold)) / len(gold)


def collect(dataset: str, split: str, args: argparse.Namespace, retrievers: dict[str, Any],
            missing: dict[str, set[str]], skipped: dict[str, int]) -> list[QuestionScores]:
    """Channel scores of every question with gold pages in one split of one dataset."""
    from mage_gym.data import load_dataset
    from mage_gym.data.gold import resolve_gold
    from mage_gym.env.relevance import score_question
    from mage_gym.graph.build import build_graph, load_graph
    from mage_gym.graph.store import GraphNotBuiltError
    from mage_gym.retrieval import make_query

    kw = {"root": args.synth_root} if dataset == "synth" and args.synth_root else {}
    episodes = load_dataset(dataset, split=split, **kw)
    by_source: dict[str, list] = defaultdict(list)
    for ep in episodes:
        by_source[ep.source].append(ep)
    out: list[QuestionScores] = []
    for source in sorted(by_source)[: args.max_docs]:
        try:
            graph = (build_graph(source, parser=args.parser) if args.build_missing
                     else load_graph(source, parser=args.parser))
        except GraphNotBuiltError:
            missing[dataset].add(source)
            skipped[f"{dataset}/{split}"] += len(by_source[source])
            continue
        el_page = np.fromiter((e.page for e in graph.elements), dtype=np.intp, count=graph.n_elements)
        for ep in by_source[source]:
            gold = tuple(p for p in resolve_gold(ep, graph).pages if 0 <= p < graph.n_pages)
            if not gold:
                continue
            query = make_query(ep.question)
            bm25 = retrievers["bm25"].score(graph, query).pages
            dense = retrievers["dense"].score(graph, query)
            best = np.zeros(graph.n_pages, dtype=np.float32)
            if graph.n_elements:
                best[:] = -np.inf
                np.maximum.at(best, el_page, dense.elements)
                best[~np.isfinite(best)] = 0.0
            page_dense = retrievers["page_dense"].score(graph, query).pages
            inside = None
            if ep.page_window is not None:
                lo, hi = max(0, int(ep.page_window[0])), min(graph.n_pages - 1, int(ep.page_window[1]))
                inside = np.zeros(graph.n_pages, dtype=bool)
                inside[lo: hi + 1] = True
            q = QuestionScores(ep.episode_id, ep.doc_id, gold,
                               {"bm25": bm25, "dense": dense.pages, "best_element": best, "page_dense": page_dense},
                               inside)
            kmax = max(args.ks)
            for name in ("page_text", "hybrid_elements", "hybrid_pages"):
                q.fused[name] = ranked_pages(retrievers[name].score(graph, query).pages, inside, kmax)
            rel = score_question(graph, retrievers["env_default"], query)
            entry = rel.page_order
            if inside is not None and inside.any():
                entry = entry[inside[entry]]
            q.fused["env_default"] = entry[:kmax].tolist()
            out.append(q)
    return out


def recall_rows(dataset: str, split: str, questions: list[QuestionScores], ks: tuple[int, ...]) -> list[dict[str, Any]]:
    """One ``runs`` row per retriever: question and document counts, page recall at each k.

    Rows are flat (dataset, split, channel, metrics) so ``experiments/results_doc.py``
    renders them as one table; a split without questions gives one row with
    ``channel`` null and zero counts, so the count is still on record.
    """
    counts = {"questions": len(questions), "documents": len({q.doc_id for q in questions})}
    if not questions:
        return [{"dataset": dataset, "split": split, "channel": None, "metrics": dict(counts)}]
    rows = []
    for ch in (*CHANNELS, *FUSED):
        if ch in CHANNELS:
            tops = [ranked_pages(q.scores[ch], q.inside, max(ks)) for q in questions]
        else:
            tops = [q.fused[ch] for q in questions]
        metrics = dict(counts)
        for k in ks:
            metrics[f"R@{k}"] = float(np.mean([page_recall(t[:k], q.gold) for t, q in zip(tops, questions)]))
        rows.append({"dataset": dataset, "split": split, "channel": ch, "metrics": metrics})
    return rows


# --- fusion choice on the train splits ----------------------------------------------------------


class RankCache:
    """Competition ranks of each channel per question (what RRF uses), computed once for the grid."""

    def __init__(self, questions: list[QuestionScores], channels: tuple[str, ...]) -> None:
        from mage_gym.retrieval.fusion import competition_ranks

        self.questions = questions
        self.channels = channels
        self.ranks: list[dict[str, np.ndarray]] = []
        for q in questions:
            per: dict[str, np.ndarray] = {}
            for ch in channels:
                s = np.asarray(q.scores[ch], dtype=np.float64)
                retrieved = np.isfinite(s) & (s != 0)
                r = competition_ranks(np.where(retrieved, s, -np.inf)).astype(np.float64)
                per[ch] = np.where(retrieved, r, np.inf)  # 1/(k+inf) = 0: not retrieved
            self.ranks.append(per)

    def recall(self, weights: dict[str, float], k_rrf: float, ks: tuple[int, ...]) -> dict[int, float]:
        hits = {k: [] for k in ks}
        for q, per in zip(self.questions, self.ranks):
            fused = np.zeros(len(next(iter(per.values()))), dtype=np.float64)
            for ch, w in weights.items():
                if w:
                    fused += w / (k_rrf + per[ch])
            order = ranked_pages(fused.astype(np.float32), q.inside, max(ks))
            for k in ks:
                hits[k].append(page_recall(order[:k], q.gold))
        return {k: float(np.mean(v)) for k, v in hits.items()}


def select_fusion(data: dict[str, dict[str, list[QuestionScores]]], args: argparse.Namespace) -> dict[str, Any]:
    channels = ("bm25", "dense", "page_dense")
    grid_w = (0.0, 0.5, 1.0, 1.5, 2.0)
    grid_k = (5.0, 15.0, 30.0, 60.0, 120.0)
    settings = [dict(zip(channels, w)) for w in itertools.product(grid_w, repeat=3) if any(w)]
    train_sets = {ds: RankCache(sp["train"], channels) for ds, sp in data.items() if sp.get("train")}
    val_sets = {ds: RankCache(sp["val"], channels) for ds, sp in data.items() if sp.get("val")}
    rows = []
    for weights, k_rrf in itertools.product(settings, grid_k):
        per = {ds: rc.recall(weights, k_rrf, args.ks) for ds, rc in train_sets.items()}
        r5 = float(np.mean([p[5] for p in per.values()]))
        r_all = float(np.mean([np.mean(list(p.values())) for p in per.values()]))
        dist = sum(abs(w - 1.0) for w in weights.values()) + abs(np.log(k_rrf / 60.0))
        rows.append({"weights": weights, "k": k_rrf, "train_recall5_mean": r5, "train_recall_mean": r_all,
                     "train_recall5": {ds: p[5] for ds, p in per.items()}, "_dist": dist})
    rows.sort(key=lambda r: (-round(r["train_recall5_mean"], 9), -round(r["train_recall_mean"], 9), r["_dist"]))
    best = rows[0]
    out: dict[str, Any] = {
        "objective": "mean over datasets of train page recall@5; ties: mean recall over k, then closest to "
                     "equal weights and k=60",
        "train_datasets": {ds: len(rc.questions) for ds, rc in train_sets.items()},
        "grid": {"weights": list(grid_w), "k": list(grid_k)},
        "chosen": {"weights": best["weights"], "k": best["k"]},
        "top": [{k: v for k, v in r.items() if k != "_dist"} for r in rows[:15]],
        "equal_weights_k60": next({k: v for k, v in r.items() if k != "_dist"} for r in rows
                                  if r["k"] == 60.0 and all(w == 1.0 for w in r["weights"].values())),
    }
    def by_k(rec: dict[int, float] | None) -> dict[str, float] | None:
        return None if rec is None else {str(k): v for k, v in rec.items()}

    shared_val = {ds: by_k(rc.recall(best["weights"], best["k"], args.ks)) for ds, rc in val_sets.items()}
    per_dataset = {}
    for ds, rc in train_sets.items():
        mine = max(rows, key=lambda r: (round(r["train_recall5"][ds], 9), -r["_dist"]))
        val = by_k(val_sets[ds].recall(mine["weights"], mine["k"], args.ks)) if ds in val_sets else None
        per_dataset[ds] = {"weights": mine["weights"], "k": mine["k"], "train_recall5": mine["train_recall5"][ds],
                           "val_recall": val, "shared_val_recall": shared_val.get(ds),
                           "val_questions": len(val_sets[ds].questions) if ds in val_sets else 0}
    out["per_dataset_best_on_train"] = per_dataset
    out["shared_val_recall"] = shared_val
    return out


def markdown(results: dict[str, Any]) -> str:
    """The tables the docs cite, generated from ``results.json`` alone."""
    names = (*CHANNELS, *FUSED)
    ks = [f"R@{k}" for k in results["config"]["ks"]]
    lines = [f"# Entry-page recall (`experiments/embed_quality.py`, parser `{results['config']['parser']}`)", "",
             f"`{results['command']}` ({results['date']}, commit `{results['commit']}`)", "",
             "Page recall of the top-k pages (the env's `evidence_page_recall`; `env_default` at k=5 = topk_page, "
             "visual). Cells: " + " / ".join(ks) + ".", ""]
    table: dict[str, dict[str, dict[str, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    counts: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in results["runs"]:
        counts[r["dataset"]][r["split"]] = r["metrics"]
        if r["channel"] is not None:
            table[r["dataset"]][r["split"]][r["channel"]] = r["metrics"]
    for ds, by_split in counts.items():
        splits = {sp: by_split[sp] for sp in sorted(by_split, key=lambda x: SPLITS.index(x) if x in SPLITS else 9)}
        lines += [f"## {ds}", "", "| retriever | " + " | ".join(
            f"{sp} ({m['questions']} q., {m['documents']} docs)" for sp, m in splits.items()) + " |",
            "|---|" + "---|" * len(splits)]
        for n in names:
            cells = [" / ".join(f"{table[ds][sp][n][k]:.3f}" for k in ks) if n in table[ds][sp] else "-"
                     for sp in splits]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
    if results.get("missing_graphs"):
        lines += ["Documents skipped (graph not in the cache): " + ", ".join(
            f"{ds} {len(v)}" for ds, v in results["missing_graphs"].items()) + "; their questions: " + ", ".join(
            f"{k} {v}" for k, v in results.get("skipped_questions", {}).items()) + ".", ""]
    sel = results.get("selection")
    if sel:
        lines += ["## Fusion chosen on the train splits", "", f"Objective: {sel['objective']}.", "",
                  f"Chosen: weights {sel['chosen']['weights']}, k {sel['chosen']['k']}; train questions "
                  f"{sel['train_datasets']}.", "", "| weights | k | train R@5 (mean) | per dataset |",
                  "|---|---|---|---|"]
        for r in [*sel["top"][:5], sel["equal_weights_k60"]]:
            lines.append(f"| {r['weights']} | {r['k']} | {r['train_recall5_mean']:.3f} | "
                         + ", ".join(f"{d} {v:.3f}" for d, v in r["train_recall5"].items()) + " |")
        lines += ["", "Per-dataset settings (best on train) vs the shared one, on val (R@5):", ""]
        for ds, r in sel["per_dataset_best_on_train"].items():
            own = (r["val_recall"] or {}).get("5")
            shared = (r["shared_val_recall"] or {}).get("5")
            lines.append(f"- {ds}: {r['weights']} k {r['k']}: val {own if own is None else round(own, 3)} vs "
                         f"shared {shared if shared is None else round(shared, 3)} ({r['val_questions']} q.)")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="*", default=["mmlongbench", "financebench", "longdocurl", "synth"])
    ap.add_argument("--splits", nargs="*", default=list(SPLITS))
    ap.add_argument("--ks", type=int, nargs="*", default=list(KS))
    ap.add_argument("--parser", default="fast", help="graph parser (the cached graphs the benchmarks use)")
    ap.add_argument("--synth-root", default=None, help="synthetic corpus folder (make_synth.py out_dir)")
    ap.add_argument("--max-docs", type=int, default=None, help="first N documents per split (quick runs)")
    ap.add_argument("--build-missing", action="store_true", help="build graphs that are not cached (slow: OCR)")
    ap.add_argument("--select", action="store_true", help="choose RRF weights and k on the train splits")
    ap.add_argument("--chunk-chars", type=int, default=None,
                    help="page_dense chunk size for page_dense, page_text and hybrid_pages (default: the preset's)")
    ap.add_argument("--note", default=None, help="free text kept in results.json (e.g. which graph cache was read)")
    ap.add_argument("--out", default="outputs/embed_quality")
    args = ap.parse_args()
    args.ks = tuple(sorted(set(args.ks) | {5}))

    from mage_gym.env.relevance import shared_retriever
    from mage_gym.retrieval import DEFAULT_HYBRID, HYBRID_PRESETS, get_retriever

    pd_cfg = {} if args.chunk_chars is None else {"chunk_chars": args.chunk_chars}
    retrievers = {name: shared_retriever(name) for name in ("bm25", "dense", "hybrid_elements")}
    retrievers["page_dense"] = shared_retriever("page_dense", **pd_cfg)
    retrievers["hybrid_pages"] = get_retriever("hybrid_pages", page_dense=pd_cfg)
    retrievers["page_text"] = get_retriever("hybrid_elements", components=["bm25", "page_dense"], page_dense=pd_cfg)
    retrievers["env_default"] = shared_retriever("hybrid")  # what MageRAG-v0 uses at reset
    t0 = time.perf_counter()
    missing: dict[str, set[str]] = defaultdict(set)
    skipped: dict[str, int] = defaultdict(int)  # "dataset/split" -> questions of documents without a graph
    data: dict[str, dict[str, list[QuestionScores]]] = {}
    from experiments.common.published import current_commit

    results: dict[str, Any] = {
        "command": " ".join([".venv/bin/python experiments/embed_quality.py", *map(shlex.quote, sys.argv[1:])]),
        "date": datetime.date.today().isoformat(),
        "commit": current_commit(Path(__file__).resolve().parents[1]),
        "config": {**vars(args), "ks": list(args.ks)},
        "retrievers": {"hybrid_pages": HYBRID_PRESETS["hybrid_pages"], "hybrid_elements": HYBRID_PRESETS[
            "hybrid_elements"], "env_default": f"hybrid = {DEFAULT_HYBRID}",
            "page_dense_chunk_chars": retrievers["page_dense"].chunk_chars},  # type: ignore[attr-defined]
        "machine": {"cores": os.cpu_count(), "load_average_1min_start": os.getloadavg()[0]},
        "runs": [],
    }
    for ds in args.datasets:
        data[ds] = {}
        for split in args.splits:
            qs = collect(ds, split, args, retrievers, missing, skipped)
            data[ds][split] = qs
            rows = recall_rows(ds, split, qs, args.ks)
            results["runs"] += rows
            m = rows[0]["metrics"]
            print(f"{ds:12s} {split:5s} {m['questions']:4d} q  {m['documents']:3d} docs  " + (
                "  ".join(f"{r['channel']} {r['metrics']['R@5']:.3f}" for r in rows) if qs else "-"), flush=True)
    results["missing_graphs"] = {ds: sorted(s) for ds, s in missing.items() if s}
    results["skipped_questions"] = dict(skipped)
    if args.select:
        sel = select_fusion(data, args)
        results["selection"] = sel
        print(f"chosen on train: weights {sel['chosen']['weights']} k {sel['chosen']['k']}  "
              f"(train recall@5 mean {sel['top'][0]['train_recall5_mean']:.3f}; equal weights k=60: "
              f"{sel['equal_weights_k60']['train_recall5_mean']:.3f})")
        for ds, r in sel["per_dataset_best_on_train"].items():
            print(f"  {ds}: own best on train {r['weights']} k {r['k']}: val recall@5 "
                  f"{(r['val_recall'] or {}).get('5', float('nan')):.3f} vs shared "
                  f"{(r['shared_val_recall'] or {}).get('5', float('nan')):.3f} ({r['val_questions']} val q.)")
    results["machine"]["load_average_1min_end"] = os.getloadavg()[0]
    results["seconds"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    write_json(path, results)
    # the markdown is made from the file just written, so the docs' tables come from results.json alone
    (out / "results.md").write_text(markdown(json.loads(path.read_text())))
    print(f"wrote {path} and results.md")


if __name__ == "__main__":
    main()
