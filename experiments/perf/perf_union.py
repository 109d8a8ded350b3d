"""Cost of cross-document episodes: the union graph of two ~50-page documents versus one document.

Target (issue 17): a reset on the union of two 50-page documents within 5x a
single-document reset. Two synthetic reports are generated (or reused) and
parsed with the fast parser and the default MiniLM encoder (graph build
excluded from every figure: graphs come from the graph store after the first
run). Measured, as medians of ``--repeats`` runs (union build) or of
``--rounds`` samples per question of document A (retrieval, resets):

* union build: cold (no cache at all: concatenation plus cross-document
  semantic edges), from the graph store (``disk``), and an in-memory cache hit;
  beside it, loading one member graph from the store;
* ``EnvRetrieval.relevance`` (hybrid retriever) on the union and on document A:
  the first call on a graph (retriever indexes built) and a new question on an
  indexed graph;
* ``fill_slots`` on the state after a reset;
* ``MageRAGEnv.reset`` on a :class:`~mage_gym.env.episodes.PairProvider` of
  (Episode, graph, gold) pairs, the union's gold mapped with
  ``mage_gym.data.gold.remap_gold``: cold (a question new to the graph: retrieval
  scoring included) and warm (seen before), union and single interleaved; the
  ratio of the medians is the issue's figure.

Run::

    .venv/bin/python experiments/perf/perf_union.py                 # writes outputs/perf_union/results.json
    .venv/bin/python experiments/perf/perf_union.py --pages 50 --repeats 7 --out outputs/perf_union
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable


def _ms(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000.0


def make_corpus(root: Path, pages: int, seed: int) -> Path:
    """Two generated reports of ``pages`` pages (reused when ``root`` already holds them)."""
    from mage_gym.data.synth import SynthConfig, generate_corpus, read_manifest

    if (root / "episodes.jsonl").is_file():
        docs = read_manifest(root)["docs"]
        if len(docs) == 2 and all(d["n_pages"] == pages for d in docs):
            return root
    cfg = SynthConfig(min_pages=pages, max_pages=pages)
    generate_corpus(root, 2, seed=seed, cfg=cfg, workers=1, progress=False)
    return root


def build_members(root: Path) -> list:
    from mage_gym.data.synth import read_manifest
    from mage_gym.graph.build import build_graph

    return [build_graph(str(root / d["file"]), parser="fast", progress=False) for d in read_manifest(root)["docs"]]


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def time_union_build(members: list, repeats: int) -> dict[str, float]:
    from mage_gym.graph.build import build_graph
    from mage_gym.graph.union import clear_union_cache, union_graph

    cold, disk, hit, member_load = [], [], [], []
    union_graph(members, disk=True)  # make sure the store holds the union (excluded)
    for _ in range(repeats):
        clear_union_cache()
        cold.append(_ms(lambda: union_graph(members, disk=False)))
        clear_union_cache()
        disk.append(_ms(lambda: union_graph(members, disk=True)))
        hit.append(_ms(lambda: union_graph(members, disk=True)))
        src = members[0].source.path
        member_load.append(_ms(lambda: build_graph(src, parser="fast", progress=False)))
    return {"union_build_cold_ms": median(cold), "union_load_disk_ms": median(disk),
            "union_cache_hit_ms": median(hit), "member_load_disk_ms": median(member_load)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=50, help="pages of each generated document")
    ap.add_argument("--seed", type=int, default=11, help="generator seed")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3, help="cold samples per question (relevance, reset)")
    ap.add_argument("--warm", type=int, default=60, help="warm resets per env")
    ap.add_argument("--fill-slots", type=int, default=2000, help="fill_slots calls per graph")
    ap.add_argument("--K", type=int, default=32)
    ap.add_argument("--corpus", type=str, default=None,
                    help="where the two documents live (default $MAGE_GYM_CACHE/perf_union/p<pages>_s<seed>)")
    ap.add_argument("--out", type=str, default="outputs/perf_union")
    args = ap.parse_args()

    from mage_gym.data.gold import remap_gold, resolve_gold
    from mage_gym.data.synth import load_synth
    from mage_gym.env import EnvEpisode, MageRAGEnv, PairProvider
    from mage_gym.env.candidates import fill_slots
    from mage_gym.env.relevance import cached_query, clear_caches
    from mage_gym.env.search import EnvRetrieval
    from mage_gym.graph.union import union_graph
    from mage_gym.paths import cache_root
    from mage_gym.retrieval import make_query

    root = Path(args.corpus) if args.corpus else cache_root() / "perf_union" / f"p{args.pages}_s{args.seed}"
    t = time.perf_counter()
    make_corpus(root, args.pages, args.seed)
    members = build_members(root)
    a, b = members
    make_query("warm up")  # loads MiniLM once (excluded)
    setup_s = time.perf_counter() - t
    print(f"documents: {a.doc_id} ({a.n_pages} pages, {a.n_elements} elements), "
          f"{b.doc_id} ({b.n_pages} pages, {b.n_elements} elements); setup {setup_s:.1f} s (excluded)")

    build = time_union_build(members, args.repeats)
    union = union_graph(members)
    print(f"union: {union.n_pages} pages, {union.n_elements} elements, {union.n_edges} edges "
          f"({union.meta['union']['cross_edges']} cross-document)")
    print("union build: cold {union_build_cold_ms:.1f} ms, from store {union_load_disk_ms:.1f} ms, "
          "cache hit {union_cache_hit_ms:.3f} ms (one member from store: {member_load_disk_ms:.1f} ms)".format(**build))

    episodes = load_synth(root)
    questions_a = [ep for ep in episodes if ep.doc_id == a.doc_id]
    # the same questions on both graphs; union episodes carry A's gold mapped onto the union
    single_pairs = [EnvEpisode(ep, a, resolve_gold(ep, a)) for ep in questions_a]
    union_pairs = [EnvEpisode(replace(ep, episode_id=f"u:{ep.episode_id}", doc_id=union.doc_id), union,
                              remap_gold(union, a.doc_id, resolve_gold(ep, a))) for ep in questions_a]
    samples = list(range(len(questions_a))) * args.rounds  # each question cold ``rounds`` times

    # relevance: the first call per graph builds the retriever indexes (BM25, dense); then a new question
    retrieval = EnvRetrieval("hybrid", query_fn=make_query)
    rel_first = {}
    for name, g in (("single", a), ("union", union)):
        clear_caches()
        cached_query(make_query, questions_a[0].question)
        rel_first[name] = _ms(lambda: retrieval.relevance(g, questions_a[0].question))
    rel: dict[str, list[float]] = {"single": [], "union": []}
    for i in samples:
        q = questions_a[i].question
        for name, g in (("single", a), ("union", union)):
            clear_caches()  # question relevance forgotten; retriever indexes stay
            cached_query(make_query, q)  # the question's vector is made outside the timing
            rel[name].append(_ms(lambda: retrieval.relevance(g, q)))

    env_single = MageRAGEnv(episodes=PairProvider(single_pairs), query_fn=make_query, K=args.K)
    env_union = MageRAGEnv(episodes=PairProvider(union_pairs), query_fn=make_query, K=args.K)
    envs = {"single": (env_single, single_pairs), "union": (env_union, union_pairs)}
    first_reset = {}
    for name, (env, pairs) in envs.items():  # indexes are warm from above: graph_index and node tables built here
        first_reset[name] = _ms(lambda: env.reset(options={"episode_id": pairs[0].episode.episode_id}))
    # cold: the question is new to the graph (retrieval scoring included); "with encode": its vector too
    cold: dict[str, list[float]] = {"single": [], "union": []}
    cold_enc: dict[str, list[float]] = {"single": [], "union": []}
    for i in samples:
        for name, (env, pairs) in envs.items():
            eid, q = pairs[i].episode.episode_id, pairs[i].episode.question
            clear_caches()
            cached_query(make_query, q)
            cold[name].append(_ms(lambda: env.reset(options={"episode_id": eid})))
            clear_caches()
            cold_enc[name].append(_ms(lambda: env.reset(options={"episode_id": eid})))
    warm: dict[str, list[float]] = {"single": [], "union": []}
    for i in range(args.warm):
        for name, (env, pairs) in envs.items():
            eid = pairs[i % len(pairs)].episode.episode_id
            warm[name].append(_ms(lambda: env.reset(options={"episode_id": eid})))
    slots = {}
    for name, (env, pairs) in envs.items():
        env.reset(options={"episode_id": pairs[0].episode.episode_id})
        state, order = env.state, env.rel.order
        t0 = time.perf_counter()
        for _ in range(args.fill_slots):
            fill_slots(state, order, args.K)
        slots[name] = (time.perf_counter() - t0) / args.fill_slots * 1e6

    results: dict[str, Any] = {
        "config": vars(args),
        "machine": {"python": platform.python_version(), "cores": os.cpu_count(),
                    "load_average_1min": os.getloadavg()[0]},
        "documents": [{"doc_id": g.doc_id, "pages": g.n_pages, "elements": g.n_elements, "edges": g.n_edges}
                      for g in members],
        "union": {"pages": union.n_pages, "elements": union.n_elements, "edges": union.n_edges,
                  "cross_edges": union.meta["union"]["cross_edges"], **build},
        "relevance_first_ms": rel_first,
        "relevance_ms": {k: median(v) for k, v in rel.items()},
        "reset_first_ms": first_reset,
        "reset_cold_ms": {k: median(v) for k, v in cold.items()},
        "reset_cold_with_encode_ms": {k: median(v) for k, v in cold_enc.items()},
        "reset_warm_ms": {k: median(v) for k, v in warm.items()},
        "fill_slots_us": slots,
        "samples": {"relevance": len(rel["single"]), "reset_cold": len(cold["single"]),
                    "reset_warm": len(warm["single"]), "union_build": args.repeats},
    }
    results["ratio_union_over_single"] = {
        "reset_cold": results["reset_cold_ms"]["union"] / results["reset_cold_ms"]["single"],
        "reset_cold_with_encode": (results["reset_cold_with_encode_ms"]["union"]
                                   / results["reset_cold_with_encode_ms"]["single"]),
        "reset_warm": results["reset_warm_ms"]["union"] / results["reset_warm_ms"]["single"],
        "relevance": results["relevance_ms"]["union"] / results["relevance_ms"]["single"],
        "fill_slots": slots["union"] / slots["single"],
    }
    results["within_5x"] = bool(results["ratio_union_over_single"]["reset_cold"] <= 5.0
                                and results["ratio_union_over_single"]["reset_warm"] <= 5.0)
    for key in ("relevance_first_ms", "relevance_ms", "reset_first_ms", "reset_cold_ms", "reset_cold_with_encode_ms",
                "reset_warm_ms"):
        v = results[key]
        print(f"{key}: single {v['single']:.2f}, union {v['union']:.2f}")
    print(f"fill_slots_us: single {slots['single']:.2f}, union {slots['union']:.2f}")
    print("union / single: " + ", ".join(f"{k} {v:.2f}x" for k, v in results["ratio_union_over_single"].items())
          + f"  (within 5x: {results['within_5x']})")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    from mage_gym.bench.results import write_json

    print(f"wrote {write_json(Path(args.out) / 'results.json', results)}")


if __name__ == "__main__":
    main()
