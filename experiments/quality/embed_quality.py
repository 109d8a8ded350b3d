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
* ``hybrid_adaptive``: RRF of all three with the page weight moved between
  ``dense`` and ``page_dense`` by the document's text density
  (``get_retriever("hybrid_adaptive")``, ``mage_gym.retrieval.hybrid.DensityGatedHybrid``);
* ``hybrid_learned``: pages ranked by a linear learning-to-rank model over the
  channels' ranks, their agreement, and crosses with document and question
  features (``get_retriever("hybrid_learned")``, ``mage_gym.retrieval.learned_fusion``;
  absent until its model file exists);
* ``env_default``: the environment's default retriever (``hybrid``) through
  the environment's own scoring (``mage_gym.env.relevance.score_question``).

Page recall is the environment's ``evidence_page_recall`` of the top-k pages:
gold pages as ``resolve_gold`` gives them (answerable questions, pages inside
the document and inside a LongDocURL page window), the share of them among
the k best pages inside the window, averaged over questions with gold pages.
With ``k = 5`` and ``env_default`` this is exactly what ``topk_page`` scores
in the ``visual`` render mode (it sends its 5 entry pages and stops).

``--select`` also chooses the fusion on the TRAIN splits only, by a rule
fixed before looking at the figures it picks (``fusion_grid.SELECTION_RULE``): train
questions are pooled across datasets (each question counts once, so 11
FinanceBench questions do not weigh as much as 149 MMLongBench ones); a
setting is admissible only if it loses at most one question's worth of
recall@5 against ``hybrid_elements`` on every dataset's train split (a gain
on one dataset may not be paid for on another); the best pooled train
recall@5 among admissible settings wins. Val splits confirm (reported, never
used to choose). The grid is small on purpose (relative weights in {0, 1/4,
1/2, 1}, four k): a wide grid on a few hundred questions picks noise.

``--select-adaptive`` searches four fusion families aimed at issue 19's bar
(``fusion_adaptive.ADAPTIVE_SELECTION_RULE``): weighted RRF, normalised score sums, interleaving
of the two channels' rankings, and an RRF gated by document text density. Each
family's parameters are chosen on the TRAIN splits by the bar margin of the
worst dataset; the family is then chosen on the VAL splits by the same margin
(so val is a selection split here, and only test is held out). The test splits
are never read by either selection.

``--select-learned`` fits that linear ranker on the TRAIN splits pooled (each
question once) for every setting of a small grid (nested feature sets, each
with and without the unpenalised ``hybrid_elements`` anchor, x L2 penalty) and
chooses the setting on the VAL splits by the same bar margin
(``fusion_learned.LEARNED_SELECTION_RULE``); ``--save-learned`` writes the chosen fit, which
``mage_gym/retrieval/learned_fusion.json`` ships. Test splits are never read.

``issue_bar`` in ``results.json`` checks issue 19's bar on each test split:
``hybrid_pages`` recall@5 at least that of the better single channel
(``hybrid_elements`` or ``page_text``), and on FinanceBench at least
``page_dense``'s; ``issue_bar_by_retriever`` does the same for every fused
candidate (``hybrid_pages``, ``hybrid_adaptive``, ``hybrid_learned``). Each
entry also carries issue 34's ruling on that bar (``passes_ruling``): judged
with the paired 95 % interval, a fused setting passes unless its top-5 recall
is below the best single channel's by more than the interval, i.e. unless the
interval of (fused - best rival) lies wholly below 0 (``RULING``).

Graphs come from the cache (``build_graph(..., parser="fast")``, what
the benchmarks use); a document whose graph is not cached is skipped and
listed, unless ``--build-missing``.

Run (page-text vectors are computed on first use and cached under
``$MAGE_GYM_CACHE/page_text``), choosing before any test figure is computed::

    # 1. choose on train (val reported); set HYBRID_PRESETS["hybrid_pages"] and conf/retriever/hybrid_pages.yaml
    .venv/bin/python experiments/quality/embed_quality.py --synth-root data_out/synth/train24_s6 --select \\
        --splits train val --out outputs/embed_quality_select
    # 2. measure every split; selection.preset_matches_chosen must be true
    .venv/bin/python experiments/quality/embed_quality.py --synth-root data_out/synth/train24_s6 --select \\
        --out outputs/embed_quality
    # the adaptive fusion: choose on train + val, set mage_gym.retrieval.hybrid.HYBRID_ADAPTIVE, then measure all
    .venv/bin/python experiments/quality/embed_quality.py --synth-root data_out/synth/train24_s6 --select-adaptive \\
        --splits train val --out outputs/embed_quality_adaptive_select
    # the learned fusion: fit on train, choose on val, write the shipped model; then measure all with --select-learned
    # (learned_selection.shipped_matches_chosen must be true)
    .venv/bin/python experiments/quality/embed_quality.py --synth-root data_out/synth/train24_s6 --select-learned \
        --splits train val --save-learned mage_gym/retrieval/learned_fusion.json --out outputs/embed_quality_learned
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from experiments.quality.fusion_adaptive import adaptive_preset_matches, select_adaptive
from experiments.quality.fusion_grid import same_fusion, select_fusion
from experiments.quality.fusion_learned import LEARNED_SELECTION_RULE, learned_model_matches, select_learned
from experiments.quality.fusion_ruling import BAR_CANDIDATES, RULING, delta_text, fused_choice, issue_bar
from experiments.quality.page_scores import CHANNELS, KS, SPLITS, QuestionScores, page_recall, ranked_pages
from mage_gym.bench.results import write_json

#: Fused rankings stored per question (``QuestionScores.fused``) and reported beside the channels.
FUSED = ("page_text", "hybrid_elements", "hybrid_pages", "hybrid_adaptive", "hybrid_learned", "env_default")


def collect(dataset: str, split: str, args: argparse.Namespace, retrievers: dict[str, Any],
            missing: dict[str, set[str]], skipped: dict[str, int]) -> list[QuestionScores]:
    """Channel scores of every question with gold pages in one split of one dataset."""
    from mage_gym.data import load_dataset
    from mage_gym.data.gold import resolve_gold
    from mage_gym.env.relevance import score_question
    from mage_gym.graph.build import build_graph, load_graph
    from mage_gym.graph.store import GraphNotBuiltError
    from mage_gym.retrieval import make_query
    from mage_gym.retrieval.hybrid import document_text_density
    from mage_gym.retrieval.learned_fusion import best_element_scores, document_features

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
        density = document_text_density(graph)
        doc = document_features(graph)
        for ep in by_source[source]:
            gold = tuple(p for p in resolve_gold(ep, graph).pages if 0 <= p < graph.n_pages)
            if not gold:
                continue
            query = make_query(ep.question)
            bm25 = retrievers["bm25"].score(graph, query).pages
            dense = retrievers["dense"].score(graph, query)
            best = best_element_scores(dense.elements, el_page, graph.n_pages)  # as hybrid_learned computes it
            page_dense = retrievers["page_dense"].score(graph, query).pages
            inside = None
            if ep.page_window is not None:
                lo, hi = max(0, int(ep.page_window[0])), min(graph.n_pages - 1, int(ep.page_window[1]))
                inside = np.zeros(graph.n_pages, dtype=bool)
                inside[lo: hi + 1] = True
            q = QuestionScores(ep.episode_id, ep.doc_id, gold,
                               {"bm25": bm25, "dense": dense.pages, "best_element": best, "page_dense": page_dense},
                               inside, density=density, question=ep.question, doc=doc)
            kmax = max(args.ks)
            for name in ("page_text", "hybrid_elements", "hybrid_pages", "hybrid_adaptive", "hybrid_learned"):
                if name not in retrievers:  # hybrid_learned before its model file exists (the selection run)
                    continue
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
        if ch not in CHANNELS and ch not in questions[0].fused:
            continue
        if ch in CHANNELS:
            tops = [ranked_pages(q.scores[ch], q.inside, max(ks)) for q in questions]
        else:
            tops = [q.fused[ch] for q in questions]
        metrics = dict(counts)
        for k in ks:
            metrics[f"R@{k}"] = float(np.mean([page_recall(t[:k], q.gold) for t, q in zip(tops, questions)]))
        rows.append({"dataset": dataset, "split": split, "channel": ch, "metrics": metrics})
    return rows


def markdown(results: dict[str, Any]) -> str:
    """The tables the docs cite, generated from ``results.json`` alone."""
    names = (*CHANNELS, *FUSED)
    ks = [f"R@{k}" for k in results["config"]["ks"]]
    parser = results["config"]["parser"]
    lines = [f"# Entry-page recall (`experiments/quality/embed_quality.py`, parser `{parser}`)", "",
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
    if results.get("issue_bar"):
        lines += ["Issue 19's bar on the test splits (hybrid_pages R@5 >= the better of hybrid_elements and page_text; "
                  "on FinanceBench also >= page_dense):", ""]
        for ds, b in results["issue_bar"].items():
            lines.append(f"- {ds}: hybrid_pages {b['hybrid_pages']:.3f}, needed {b['needed']:.3f} ("
                         + ", ".join(f"{c} {v:.3f}" for c, v in b["rivals"].items()) + "): "
                         + ("met" if b["met"] else "NOT met") + delta_text(b))
        lines.append("")
    for name, bar in (results.get("issue_bar_by_retriever") or {}).items():
        if name == "hybrid_pages" and results.get("issue_bar"):
            continue  # listed above
        lines += [f"Issue 19's bar for {name} on the test splits:", ""]
        for ds, b in bar.items():
            lines.append(f"- {ds}: {name} {b['recall5']:.3f}, needed {b['needed']:.3f}: "
                         + ("met" if b["met"] else "NOT met") + delta_text(b))
        lines.append("")
    fc = results.get("fused_choice")
    if fc:
        lines += ["## One fused setting, chosen on val (issue 34)", "", f"Rule: {fc['rule']}", "",
                  f"Chosen: {fc['chosen']}; each dataset's own best on val: {fc['best_per_dataset']}; "
                  f"val questions {fc['questions']}.", "", "| candidate | worst val margin (q.) | per dataset | "
                  "pooled val R@5 |", "|---|---|---|---|"]
        for name, r in fc["candidates"].items():
            lines.append(f"| {name} | {r['worst_margin']:+.2f} | " + ", ".join(
                f"{d} {v:+.2f}" for d, v in r["margin_questions"].items()) + f" | {r['pooled_recall5']:.3f} |")
        if fc.get("chosen_delta"):
            lines += ["", "How sure val is of the chosen setting (its recall@5 minus the best single channel's "
                      "on val):", ""]
            lines += [f"- {ds}: {fc['chosen']}" + delta_text({"delta": d}) for ds, d in fc["chosen_delta"].items()]
        lines += ["", f"Ruling on the test splits: {results.get('ruling', '')}", ""]
        for ds, b in (results.get("issue_bar_by_retriever") or {}).get(fc["chosen"], {}).items():
            lines.append(f"- {ds}: {fc['chosen']} {b['recall5']:.3f}, best single channel {b['needed']:.3f}"
                         + delta_text(b))
        lines.append("")
    if results["config"].get("note"):
        lines += [f"Note: {results['config']['note']}", ""]

    def margins(r: dict[str, Any] | None) -> str:
        """One setting's bar margins on a split, as the adaptive and learned tables show them."""
        if r is None:
            return "-"
        return f"worst {r['worst_margin']:+.2f} q., pooled R@5 {r['pooled_recall5']:.3f} (" + ", ".join(
            f"{d} {v:+.2f}" for d, v in r["margin_questions"].items()) + ")"

    ad = results.get("adaptive_selection")
    if ad:
        lines += ["## Adaptive fusion (`--select-adaptive`)", "", f"Rule: {ad['rule']}", "",
                  f"Chosen family: {ad['chosen_family']}, setting {ad['chosen']}; meets the bar on train: "
                  f"{ad['meets_bar_on_train']}, on val: {ad['meets_bar_on_val']}; preset matches: "
                  f"{ad.get('preset_matches_chosen')}.", "",
                  "Bar margins (summed recall@5 minus the best rival's, in questions) of each family's train winner:",
                  "", "| family | setting | train | val |", "|---|---|---|---|"]
        for fam, r in ad["family_winners"].items():
            setting = {k: v for k, v in r["setting"].items() if k != "family"}
            lines.append(f"| {fam} | {setting} | {margins(r['train'])} | {margins(r['val'])} |")
        lines.append("")
    ls = results.get("learned_selection")
    if ls:
        lines += ["## Learned fusion (`--select-learned`)", "", f"Rule: {ls['rule']}", "",
                  f"Chosen: feature set {ls['chosen']['features']}, L2 {ls['chosen']['l2']}; meets the bar on train: "
                  f"{ls['meets_bar_on_train']}, on val: {ls['meets_bar_on_val']}; shipped model matches: "
                  f"{ls.get('shipped_matches_chosen')}.", "",
                  "Bar margins (summed recall@5 minus the best rival's, in questions) of every grid setting, fitted "
                  "on train:", "", "| feature set | L2 | features | train | val |", "|---|---|---|---|---|"]
        for r in ls["settings"]:
            lines.append(f"| {r['setting']['features']} | {r['setting']['l2']} | {r['features']} "
                         f"| {margins(r['train'])} | {margins(r['val'])} |")
        lines.append("")
    sel = results.get("selection")
    if sel:
        def cell(r: dict[str, Any] | None) -> str:
            if r is None:
                return "-"
            return f"{r['pooled_recall5']:.3f} (" + ", ".join(
                f"{d} {v:.3f}, loss {r['loss5_questions'][d]:+.2f} q." for d, v in r["recall5"].items()) + ")"

        lines += ["## Fusion chosen on the train splits", "", f"Rule: {sel['rule']}", "",
                  f"Chosen: weights {sel['chosen']['weights']}, k {sel['chosen']['k']} "
                  f"({sel['grid']['admissible']} of {sel['grid']['settings']} settings admissible); "
                  f"train questions {sel['train_questions']}, val questions {sel['val_questions']}; "
                  f"val confirms: {sel['val_confirms']}.", "",
                  "Recall@5 pooled over questions (per dataset, and questions' worth of recall@5 lost against "
                  "hybrid_elements):", "", "| setting | train | val |", "|---|---|---|",
                  f"| chosen | {cell(sel['chosen_train'])} | {cell(sel['chosen_val'])} |",
                  f"| hybrid_elements | {cell(sel['reference']['train'])} | {cell(sel['reference']['val'])} |", "",
                  "Best admissible settings on train:", "", "| weights | k | pooled train R@5 | per dataset |",
                  "|---|---|---|---|"]
        for r in sel["top_admissible"][:5]:
            lines.append(f"| {r['weights']} | {r['k']} | {r['pooled_recall5']:.3f} | "
                         + ", ".join(f"{d} {v:.3f}" for d, v in r["recall5"].items()) + " |")
        lines += ["", "Best inadmissible settings (rejected: lose more than one question on some train split):", "",
                  "| weights | k | pooled train R@5 | loss against hybrid_elements (questions) |", "|---|---|---|---|"]
        for r in sel["best_inadmissible"]:
            lines.append(f"| {r['weights']} | {r['k']} | {r['pooled_recall5']:.3f} | "
                         + ", ".join(f"{d} {v:+.2f}" for d, v in r["loss5_questions"].items()) + " |")
        lines += ["", "Per-dataset settings (each dataset's best on its own train split) vs the shared one, val R@5:",
                  ""]
        for ds, r in sel["per_dataset_best_on_train"].items():
            own, shared = r["val_recall5"], r["shared_val_recall5"]
            lines.append(f"- {ds}: {r['weights']} k {r['k']}: val {own if own is None else round(own, 3)} vs "
                         f"shared {shared if shared is None else round(shared, 3)}")
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
    ap.add_argument("--select-adaptive", action="store_true",
                    help="search the adaptive fusion families (parameters on train, family on val)")
    ap.add_argument("--select-learned", action="store_true",
                    help="fit the learned fusion on train for each grid setting, choose on val")
    ap.add_argument("--save-learned", default=None,
                    help="write the chosen learned model here (mage_gym/retrieval/learned_fusion.json ships it)")
    ap.add_argument("--scores-cache", default=None,
                    help="pickle of the collected channel scores: read if present (same datasets/splits), else "
                         "written; fused rows then come from the cached run")
    ap.add_argument("--chunk-chars", type=int, default=None,
                    help="page_dense chunk size for page_dense, page_text and hybrid_pages (default: the preset's)")
    ap.add_argument("--note", default=None, help="free text kept in results.json (e.g. which graph cache was read)")
    ap.add_argument("--out", default="outputs/embed_quality")
    args = ap.parse_args()
    args.ks = tuple(sorted(set(args.ks) | {5}))

    from mage_gym.env.relevance import shared_retriever
    from mage_gym.retrieval import DEFAULT_HYBRID, HYBRID_PRESETS, get_retriever
    from mage_gym.retrieval.hybrid import HYBRID_ADAPTIVE
    from mage_gym.retrieval.learned_fusion import DEFAULT_MODEL_PATH, LinearRanker

    pd_cfg = {} if args.chunk_chars is None else {"chunk_chars": args.chunk_chars}
    retrievers = {name: shared_retriever(name) for name in ("bm25", "dense", "hybrid_elements")}
    retrievers["page_dense"] = shared_retriever("page_dense", **pd_cfg)
    retrievers["hybrid_pages"] = get_retriever("hybrid_pages", page_dense=pd_cfg)
    retrievers["hybrid_adaptive"] = get_retriever("hybrid_adaptive", page_dense=pd_cfg)
    retrievers["page_text"] = get_retriever("hybrid_elements", components=["bm25", "page_dense"], page_dense=pd_cfg)
    retrievers["env_default"] = shared_retriever("hybrid")  # what MageRAG-v0 uses at reset
    shipped = LinearRanker.load() if DEFAULT_MODEL_PATH.exists() else None
    if shipped is not None:
        retrievers["hybrid_learned"] = get_retriever("hybrid_learned", page_dense=pd_cfg)
    t0 = time.perf_counter()
    missing: dict[str, set[str]] = defaultdict(set)
    skipped: dict[str, int] = defaultdict(int)  # "dataset/split" -> questions of documents without a graph
    data: dict[str, dict[str, list[QuestionScores]]] = {}
    from mage_gym.bench.published import current_commit

    results: dict[str, Any] = {
        "command": " ".join([".venv/bin/python experiments/quality/embed_quality.py", *map(shlex.quote, sys.argv[1:])]),
        "date": datetime.date.today().isoformat(),
        "commit": current_commit(Path(__file__).resolve().parents[2]),
        "config": {**vars(args), "ks": list(args.ks)},
        "retrievers": {"hybrid_pages": HYBRID_PRESETS["hybrid_pages"], "hybrid_elements": HYBRID_PRESETS[
            "hybrid_elements"], "hybrid_adaptive": dict(HYBRID_ADAPTIVE), "env_default": f"hybrid = {DEFAULT_HYBRID}",
            "page_dense_chunk_chars": retrievers["page_dense"].chunk_chars,  # type: ignore[attr-defined]
            "hybrid_learned": None if shipped is None else {
                "model": "mage_gym/retrieval/learned_fusion.json", "groups": list(shipped.groups), "l2": shipped.l2,
                "features": len(shipped.names), "fitted_by": shipped.meta.get("command")}},
        "machine": {"cores": os.cpu_count(), "load_average_1min_start": os.getloadavg()[0]},
        "runs": [],
    }
    import pickle

    cache_path = Path(args.scores_cache) if args.scores_cache else None
    cached = pickle.loads(cache_path.read_bytes()) if cache_path is not None and cache_path.exists() else None
    for ds in args.datasets:
        data[ds] = {}
        for split in args.splits:
            if cached is not None:
                qs = cached["data"][ds][split]
                missing[ds] |= set(cached["missing"].get(ds, ()))
                skipped[f"{ds}/{split}"] += cached["skipped"].get(f"{ds}/{split}", 0)
            else:
                qs = collect(ds, split, args, retrievers, missing, skipped)
            data[ds][split] = qs
            rows = recall_rows(ds, split, qs, args.ks)
            results["runs"] += rows
            m = rows[0]["metrics"]
            print(f"{ds:12s} {split:5s} {m['questions']:4d} q  {m['documents']:3d} docs  " + (
                "  ".join(f"{r['channel']} {r['metrics']['R@5']:.3f}" for r in rows) if qs else "-"), flush=True)
    if cache_path is not None and cached is None:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        cache_path.write_bytes(pickle.dumps({"data": data, "missing": dict(missing), "skipped": dict(skipped)}))
    results["missing_graphs"] = {ds: sorted(s) for ds, s in missing.items() if s}
    results["skipped_questions"] = dict(skipped)
    if args.select:
        sel = select_fusion(data, args)
        sel["preset_matches_chosen"] = same_fusion(HYBRID_PRESETS["hybrid_pages"], sel["chosen"])
        results["selection"] = sel
        ref = sel["reference"]
        print(f"chosen on train: weights {sel['chosen']['weights']} k {sel['chosen']['k']} "
              f"({sel['grid']['admissible']}/{sel['grid']['settings']} admissible); pooled train recall@5 "
              f"{sel['chosen_train']['pooled_recall5']:.3f} vs hybrid_elements {ref['train']['pooled_recall5']:.3f}; "
              f"hybrid_pages preset matches: {sel['preset_matches_chosen']}")
        if sel["chosen_val"] is not None:
            print(f"val: pooled recall@5 {sel['chosen_val']['pooled_recall5']:.3f} vs hybrid_elements "
                  f"{ref['val']['pooled_recall5']:.3f}; losses (questions) {sel['chosen_val']['loss5_questions']}; "
                  f"confirms: {sel['val_confirms']}")
    if args.select_adaptive:
        ad = select_adaptive(data)
        ad["preset_matches_chosen"] = adaptive_preset_matches(HYBRID_ADAPTIVE, ad["chosen"])
        results["adaptive_selection"] = ad
        for fam, r in ad["family_winners"].items():
            val = r["val"]
            print(f"adaptive {fam:10s} {r['setting']}: train worst margin {r['train']['worst_margin']:+.2f} q. "
                  f"(pooled R@5 {r['train']['pooled_recall5']:.3f})" + (
                      f", val worst margin {val['worst_margin']:+.2f} q. (pooled {val['pooled_recall5']:.3f}) "
                      f"{val['margin_questions']}" if val else ""))
        print(f"adaptive chosen: {ad['chosen']}; bar on train {ad['meets_bar_on_train']}, val "
              f"{ad['meets_bar_on_val']}; hybrid_adaptive preset matches: {ad['preset_matches_chosen']}")
    if args.select_learned:
        lsel, model = select_learned(data)
        lsel["shipped_matches_chosen"] = learned_model_matches(shipped, model)
        results["learned_selection"] = lsel
        for r in lsel["settings"]:
            print(f"learned {r['setting']['features']:24s} l2 {r['setting']['l2']:<6} train worst "
                  f"{r['train']['worst_margin']:+.2f} q. (pooled {r['train']['pooled_recall5']:.3f}), val worst "
                  f"{r['val']['worst_margin']:+.2f} q. (pooled {r['val']['pooled_recall5']:.3f}) "
                  f"{ {d: round(v, 2) for d, v in r['val']['margin_questions'].items()} }")
        print(f"learned chosen: {lsel['chosen']}; bar on train {lsel['meets_bar_on_train']}, val "
              f"{lsel['meets_bar_on_val']}; shipped model matches: {lsel['shipped_matches_chosen']}")
        if args.save_learned:
            meta = {"command": results["command"], "date": results["date"], "rule": LEARNED_SELECTION_RULE,
                    "setting": lsel["chosen"], "val_margin_questions": lsel["chosen_val"]["margin_questions"],
                    "train_questions": lsel["questions"]["train"], "fit": dict(model.meta["fit"])}
            dataclasses.replace(model, meta=meta).save(args.save_learned)
            print(f"wrote the chosen model to {args.save_learned}")
    present = {(r["split"], r["channel"]) for r in results["runs"]}
    test_questions = {ds: by_split["test"] for ds, by_split in data.items() if by_split.get("test")}
    results["issue_bar"] = issue_bar(results["runs"], questions=test_questions)
    results["issue_bar_by_retriever"] = {name: issue_bar(results["runs"], fused=name, questions=test_questions)
                                         for name in BAR_CANDIDATES if ("test", name) in present}
    results["ruling"] = RULING
    results["fused_choice"] = fused_choice(data)
    if results["fused_choice"]:
        fc = results["fused_choice"]
        print(f"fused setting chosen on val: {fc['chosen']} (worst-dataset margins "
              + ", ".join(f"{n} {r['worst_margin']:+.2f} q." for n, r in fc["candidates"].items())
              + f"); each dataset's own best on val: {fc['best_per_dataset']}")
        for ds, d in fc["chosen_delta"].items():
            print(f"val {ds}: {fc['chosen']}" + delta_text({"delta": d}))
        for ds, b in results["issue_bar_by_retriever"].get(fc["chosen"], {}).items():
            print(f"ruling {ds}: {fc['chosen']} test R@5 {b['recall5']:.3f} vs best single {b['needed']:.3f}"
                  + delta_text(b))
    for name in ("hybrid_adaptive", "hybrid_learned"):
        for ds, b in results["issue_bar_by_retriever"].get(name, {}).items():
            print(f"bar {ds}: {name} test R@5 {b['recall5']:.3f} vs needed {b['needed']:.3f}: {b['met']}"
                  + delta_text(b))
    for ds, b in results["issue_bar"].items():
        print(f"bar {ds}: hybrid_pages test R@5 {b['hybrid_pages']:.3f} vs needed {b['needed']:.3f}: {b['met']}"
              + delta_text(b))
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
