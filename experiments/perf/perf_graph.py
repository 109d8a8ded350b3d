"""Speed and memory of graph building and loading, on real documents.

Why: every document of a benchmark is built once and loaded at every episode,
so both costs bound what experiments can afford. Targets on a 2-core machine:
layout parser <= 20 s and fast parser <= 4 s per 100 text-layer pages (full
graph with embeddings, 2 workers, encoder load excluded); cached 100-page
graph load <= 50 ms; peak memory of a 500-page build < 2 GiB.

Measures (medians over ``--repeats`` runs):

* ``build``: seconds per 100 pages of ``build_graph(..., workers=2,
  cache=False)`` for each parser on the first ``--pages`` pages of each
  ``--docs`` PDF, after the worker pool has loaded its encoders; with the
  busy time of the parse and embed stages (summed over workers);
* ``load``: milliseconds to load the cached graph of a ~100-page document, in
  a fresh process (first load, imports included) and warm (median), and
  whether torch / a parser got imported on the way (they must not);
* ``memory``: peak RSS of building a ~500-page filing in a child process,
  once with ``workers=1`` (the whole pipeline in one process) and once with
  ``workers=2`` (main process and the largest worker);
* ``ocr``: seconds per page of parsing an image-only document (LongDocURL
  page images) with the parser's OCR path.

``--docs-dir DIR --first-docs N`` builds the first N PDFs of DIR by sorted
name (a subset fixed by a rule) instead of ``--docs``. ``--before-tree PATH``
times the build side by side with another checkout of this project (the code
before a change): ``--rounds`` rounds, each building the documents once with
either tree in a fresh process (that tree first on ``PYTHONPATH``), in the
order before, after, after, before, ... so a load change on the shared
machine hits both alike; it reports each tree's pages/s (median and range
over rounds), the after/before ratio of each round and their median (the
headline: paired by round), the parse stage's CPU seconds per 100 pages
(which other jobs inflate less than wall time), and whether each document's graph
(records, edges, vectors) came out the same in both trees.

Run (takes a few minutes; other jobs on the machine inflate the numbers)::

    .venv/bin/python experiments/perf/perf_graph.py                       # writes outputs/perf_graph/results.json
    .venv/bin/python experiments/perf/perf_graph.py --parsers fast --repeats 3 --skip memory ocr
    .venv/bin/python experiments/perf/perf_graph.py --parsers layout --docs-dir mmlongbench-dev/documents \
        --first-docs 16 --before-tree ../main --rounds 3 --skip load memory ocr
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

from mage_gym.data.io import data_root

DEFAULT_DOCS = ["financebench-dev/pdfs/NIKE_2021_10K.pdf", "mmlongbench-dev/documents/2312.09390v1.pdf"]
BIG_DOC = "financebench-dev/pdfs/PEPSICO_2022_10K.pdf"
IMAGE_DOC = "longdocurl-sample/pdf_pngs/4000-4999/4127"


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 3) if xs else float("nan")


def bench_build(docs: list[Path], parsers: list[str], pages: int, repeats: int, workers: int) -> dict[str, Any]:
    from mage_gym.graph.build import build_graph, shutdown_pool, warm_pool

    out: dict[str, Any] = {}
    t = time.perf_counter()
    warm_pool(workers)
    out["pool_warmup_seconds"] = round(time.perf_counter() - t, 2)
    for parser in parsers:
        per_doc = {}
        all_rates: list[float] = []
        all_cpu: list[float] = []
        run_pages, run_secs, run_parse_cpu = [0] * repeats, [0.0] * repeats, [0.0] * repeats
        for doc in docs:
            rates, parse_busy, embed_busy, assemble, cpu, n_el = [], [], [], [], [], 0
            parse_cpu, embed_cpu, digests = [], [], []
            for r in range(repeats):
                g = build_graph(doc, parser, cache=False, max_pages=pages, workers=workers)
                secs = g.meta["build_seconds"]
                run_pages[r] += g.n_pages
                run_secs[r] += secs
                run_parse_cpu[r] += g.meta["stage_seconds"]["parse_cpu"]
                digests.append(graph_fingerprint(g))
                rates.append(100.0 * secs / g.n_pages)
                st = g.meta["stage_seconds"]
                parse_busy.append(100.0 * st["parse_busy"] / g.n_pages)
                embed_busy.append(100.0 * st["embed_busy"] / g.n_pages)
                assemble.append(100.0 * st["assemble"] / g.n_pages)
                cpu.append(100.0 * (st["parse_cpu"] + st["embed_cpu"] + st["assemble"]) / g.n_pages)
                parse_cpu.append(100.0 * st["parse_cpu"] / g.n_pages)
                embed_cpu.append(100.0 * st["embed_cpu"] / g.n_pages)
                n_el = g.n_elements
            per_doc[doc.name] = {
                "pages": g.n_pages, "elements": n_el, "edges": g.edge_counts(),
                "seconds_per_100_pages": _median(rates), "runs": [round(r, 2) for r in rates],
                "parse_busy_s_per_100p": _median(parse_busy), "embed_busy_s_per_100p": _median(embed_busy),
                "assemble_s_per_100p": _median(assemble),
                "cpu_s_per_100p": _median(cpu), "ideal_wall_s_per_100p": _median([c / workers for c in cpu]),
                "parse_cpu_s_per_100p": _median(parse_cpu), "embed_cpu_s_per_100p": _median(embed_cpu),
                "fingerprints": sorted(set(digests)),
            }
            all_rates.extend(rates)
            print(f"  build {parser:6s} {doc.name:32s} {g.n_pages:4d} p {n_el:5d} el  "
                  f"{_median(rates):7.2f} s/100p  (parse busy {_median(parse_busy):.2f}, "
                  f"embed busy {_median(embed_busy):.2f}, assemble {_median(assemble):.2f}; "
                  f"CPU {_median(cpu):.2f} s/100p = parse {_median(parse_cpu):.2f} + embed {_median(embed_cpu):.2f})",
                  flush=True)
            all_cpu.extend(cpu)
        rates_all = [n / t for n, t in zip(run_pages, run_secs) if t > 0]
        out[parser] = {"seconds_per_100_pages": _median(all_rates), "cpu_seconds_per_100_pages": _median(all_cpu),
                       "pages": run_pages[0], "pages_per_second": _median(rates_all),
                       "runs_pages_per_second": [round(x, 3) for x in rates_all],
                       "parse_cpu_s_per_100p": _median([100.0 * c / n for n, c in zip(run_pages, run_parse_cpu) if n]),
                       "documents": per_doc}
    shutdown_pool()
    return out


def graph_fingerprint(g: Any) -> str:
    """sha256 of a graph's content (page and element records, edges, vectors), not of its build settings."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    for p in g.pages:
        h.update(repr((p.node_id, p.width, p.height, p.text, p.summary, p.header_text, p.footer_text,
                       p.image_only)).encode())
    for e in g.elements:
        h.update(repr((e.node_id, e.type, e.bbox, e.text, e.summary, e.reading_order, e.section_path,
                       e.heading_level, e.table_markdown, e.ocr)).encode())
    for arr in (g.edge_src, g.edge_dst, g.edge_kind, g.edge_weight, g.page_vectors, g.element_vectors):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update("\x1f".join(g.edge_label).encode())
    return h.hexdigest()


def _tree_build(tree: Path, docs: list[Path], args: argparse.Namespace) -> dict[str, Any]:
    """One build round of ``docs`` by the checkout ``tree`` (first on PYTHONPATH), in a fresh process."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--parsers", *args.parsers, "--pages",
           str(args.pages), "--workers", str(args.workers), "--docs", *map(str, docs)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=env, timeout=7200)
    if proc.returncode != 0:
        raise RuntimeError(f"build in {tree} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if res["code"] != str(Path(tree).resolve() / "mage_gym"):
        raise RuntimeError(f"the round meant for {tree} imported {res['code']}")
    return res


def side_by_side(before: Path, after: Path, docs: list[Path], args: argparse.Namespace) -> dict[str, Any]:
    """``--rounds`` rounds of the build benchmark, alternating the two trees (before, after, after, before, ...)."""
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for side in order:
            res = _tree_build(before if side == "before" else after, docs, args)
            runs[side].append(res)
            rates = {p: res["build"][p]["pages_per_second"] for p in args.parsers}
            print(f"  round {r + 1} {side:6s} pages/s {rates} (load {res['load_avg'][0]:.1f})", flush=True)
    out: dict[str, Any] = {"before_tree": str(before), "after_tree": str(after), "rounds": args.rounds,
                           "documents": [d.name for d in docs]}
    for parser in args.parsers:
        summary: dict[str, Any] = {}
        for side in ("before", "after"):
            rates = [x["build"][parser]["pages_per_second"] for x in runs[side]]
            cpu = [x["build"][parser]["parse_cpu_s_per_100p"] for x in runs[side]]
            summary[side] = {"pages_per_second": _median(rates), "min": min(rates), "max": max(rates),
                             "runs": rates, "parse_cpu_s_per_100p": _median(cpu), "parse_cpu_runs": cpu,
                             "pages": runs[side][0]["build"][parser]["pages"]}
        b, a = summary["before"], summary["after"]
        summary["ratio_pages_per_second"] = round(a["pages_per_second"] / b["pages_per_second"], 3)
        summary["ratio_per_round"] = [round(x / y, 3) for x, y in zip(a["runs"], b["runs"])]
        # paired by round (both trees under the same load), so the headline ratio is the median of these
        summary["ratio_per_round_median"] = _median(summary["ratio_per_round"])
        summary["ratio_parse_cpu"] = round(a["parse_cpu_s_per_100p"] / b["parse_cpu_s_per_100p"], 3)
        same: dict[str, Any] = {}
        for d in docs:
            fps = {side: sorted({f for x in runs[side] for f in x["build"][parser]["documents"][d.name]["fingerprints"]})
                   for side in ("before", "after")}
            same[d.name] = {"same_graph": fps["before"] == fps["after"] and len(fps["after"]) == 1,
                            "deterministic": len(fps["before"]) == 1 and len(fps["after"]) == 1}
        summary["graph_identity"] = same
        summary["documents_with_the_same_graph"] = sum(v["same_graph"] for v in same.values())
        out[parser] = summary
        print(f"  {parser}: before {b['pages_per_second']} pages/s [{b['min']}, {b['max']}], after "
              f"{a['pages_per_second']} [{a['min']}, {a['max']}], ratio of medians {summary['ratio_pages_per_second']}, "
              f"per round {summary['ratio_per_round']} (median {summary['ratio_per_round_median']}); parse CPU s/100p {b['parse_cpu_s_per_100p']} -> "
              f"{a['parse_cpu_s_per_100p']}; same graph {summary['documents_with_the_same_graph']}/{len(docs)}",
              flush=True)
    out["runs"] = runs
    return out


_LOAD_CHILD = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    from mage_gym.graph.build import load_graph
    from mage_gym.graph.store import load_cached
    g = load_graph(sys.argv[1], sys.argv[2], max_pages=int(sys.argv[3]), cache_dir=sys.argv[4])
    first = time.perf_counter() - t0
    key = g.meta["cache_key"]
    warm, warm_key = [], []
    for _ in range(int(sys.argv[5])):
        t = time.perf_counter(); load_graph(sys.argv[1], sys.argv[2], max_pages=int(sys.argv[3]), cache_dir=sys.argv[4])
        warm.append(time.perf_counter() - t)
        t = time.perf_counter(); load_cached(key, sys.argv[4]); warm_key.append(time.perf_counter() - t)
    heavy = [m for m in ("torch", "transformers", "pymupdf4llm", "rapidocr_onnxruntime", "mage_gym.graph.parsers")
             if m in sys.modules]
    print(json.dumps({"first_ms": first * 1e3, "warm_ms": sorted(warm)[len(warm) // 2] * 1e3,
                      "warm_by_key_ms": sorted(warm_key)[len(warm_key) // 2] * 1e3,
                      "n_pages": g.n_pages, "n_elements": g.n_elements, "n_edges": g.n_edges,
                      "heavy_imports": heavy}))
""")


def bench_load(doc: Path, parser: str, pages: int, repeats: int, cache_dir: str) -> dict[str, Any]:
    from mage_gym.graph.build import build_graph, shutdown_pool

    build_graph(doc, parser, cache=True, cache_dir=cache_dir, max_pages=pages, workers=2)
    shutdown_pool()
    proc = subprocess.run([sys.executable, "-c", _LOAD_CHILD, str(doc), parser, str(pages), cache_dir, str(repeats)],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res = {k: round(v, 2) if isinstance(v, float) else v for k, v in res.items()}
    print(f"  load   {doc.name:32s} {res['n_pages']} p {res['n_elements']} el {res['n_edges']} edges: "
          f"first {res['first_ms']:.1f} ms (fresh process, imports incl.), warm {res['warm_ms']:.1f} ms "
          f"(digest + verify + records), heavy imports: {res['heavy_imports'] or 'none'}", flush=True)
    return res


_RSS_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    from mage_gym.graph.build import build_graph, shutdown_pool
    t = time.perf_counter()
    g = build_graph(sys.argv[1], sys.argv[2], cache=False, workers=int(sys.argv[3]))
    secs = time.perf_counter() - t
    main_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    shutdown_pool()
    child_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    worker_peak = g.meta.get("worker_peak_rss_mib", child_peak)  # forkserver workers are not our children
    print(json.dumps({"pages": g.n_pages, "elements": g.n_elements, "edges": g.n_edges, "seconds": secs,
                      "main_peak_mib": main_peak, "largest_worker_peak_mib": worker_peak}))
""")


def bench_memory(doc: Path, parser: str, worker_counts: tuple[int, ...] = (1, 2)) -> dict[str, Any]:
    out: dict[str, Any] = {"document": doc.name, "parser": parser}
    for workers in worker_counts:
        proc = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(doc), parser, str(workers)],
                              capture_output=True, text=True, cwd=REPO, timeout=7200)
        if proc.returncode != 0:
            out[f"workers_{workers}"] = {"error": proc.stderr[-2000:]}
            print(f"  memory workers={workers} FAILED: {proc.stderr[-500:]}")
            continue
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        res = {k: round(v, 1) if isinstance(v, float) else v for k, v in res.items()}
        if workers == 1:
            res["largest_worker_peak_mib"] = None  # no workers: everything ran in the main process
        out[f"workers_{workers}"] = res
        print(f"  memory {doc.name} ({res['pages']} p, {res['elements']} el) workers={workers}: "
              f"main peak {res['main_peak_mib']:.0f} MiB, largest worker peak "
              f"{res['largest_worker_peak_mib'] or 0:.0f} MiB, {res['seconds']:.0f} s", flush=True)
    return out


def bench_ocr(folder: Path, parser: str, pages: int, repeats: int) -> dict[str, Any]:
    from mage_gym.graph.parsers import get_parser
    from mage_gym.graph.sources import open_source

    src = open_source(folder)
    p = get_parser(parser)
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        doc = p.parse(src, max_pages=pages)
        rates.append((time.perf_counter() - t) / len(doc.pages))
    n_el = sum(len(pg.elements) for pg in doc.pages)
    print(f"  ocr    {folder.name} ({parser}): {_median(rates):.2f} s/page over {len(doc.pages)} pages, "
          f"{n_el} elements", flush=True)
    return {"document": str(folder), "parser": parser, "pages": len(doc.pages), "elements": n_el,
            "seconds_per_page": _median(rates), "runs": [round(r, 3) for r in rates]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", nargs="*", default=None, help="text-layer PDFs (relative to the data root or absolute)")
    ap.add_argument("--parsers", nargs="*", default=["layout", "fast"])
    ap.add_argument("--pages", type=int, default=100, help="pages of each document to build")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--big-doc", default=BIG_DOC, help="~500-page document for peak memory")
    ap.add_argument("--memory-parser", default="layout")
    ap.add_argument("--memory-workers", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--image-doc", default=IMAGE_DOC)
    ap.add_argument("--ocr-pages", type=int, default=3)
    ap.add_argument("--skip", nargs="*", default=[], choices=["build", "load", "memory", "ocr"])
    ap.add_argument("--out", default="outputs/perf_graph", help="folder for results.json")
    ap.add_argument("--docs-dir", default=None, help="build the first --first-docs PDFs of this folder (sorted by name)")
    ap.add_argument("--first-docs", type=int, default=None)
    ap.add_argument("--before-tree", default=None, help="another checkout to time side by side (the code before)")
    ap.add_argument("--rounds", type=int, default=3, help="side-by-side rounds (each tree builds once a round)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one round, for --before-tree
    args = ap.parse_args()
    os.environ["MAGE_GYM_OCR_CACHE"] = "0"  # time the OCR itself, never the OCR cache (workers inherit this)

    root = data_root()
    if not root.is_dir():
        sys.exit(f"benchmark data not found at {root} (set MAGE_GYM_DATA)")
    resolve = lambda p: Path(p) if Path(p).is_absolute() else root / p  # noqa: E731
    if args.docs_dir:
        docs = sorted(resolve(args.docs_dir).glob("*.pdf"), key=lambda p: p.name)[: args.first_docs]
    else:
        docs = [resolve(d) for d in (args.docs or DEFAULT_DOCS)]
    if args.child:
        import mage_gym

        with tempfile.TemporaryDirectory(prefix="perf_graph_cache_") as cache_dir:
            os.environ["MAGE_GYM_CACHE"] = cache_dir
            build = bench_build(docs, args.parsers, args.pages, 1, args.workers)
        print(json.dumps({"code": str(Path(mage_gym.__file__).resolve().parent), "load_avg": os.getloadavg(),
                          "build": build}, default=str))
        return
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_start": os.getloadavg()},
        "config": vars(args),
    }
    if args.before_tree:
        print(f"build side by side, {args.rounds} rounds: before = {args.before_tree}, after = {REPO}")
        results["side_by_side"] = side_by_side(Path(args.before_tree).resolve(), REPO, docs, args)
    with tempfile.TemporaryDirectory(prefix="perf_graph_cache_") as cache_dir:
        os.environ["MAGE_GYM_CACHE"] = cache_dir  # never touch the user's cache
        if "build" not in args.skip and not args.before_tree:
            print("build (cache off, worker pool warmed up):")
            results["build"] = bench_build(docs, args.parsers, args.pages, args.repeats, args.workers)
        if "load" not in args.skip:
            print("cached load:")
            results["load"] = bench_load(docs[0], args.parsers[0], args.pages, 20, cache_dir)
        if "ocr" not in args.skip:
            print("OCR of an image-only document:")
            results["ocr"] = bench_ocr(resolve(args.image_doc), args.parsers[0], args.ocr_pages,
                                       max(1, args.repeats - 1))
        if "memory" not in args.skip:
            print("peak memory of a long document:")
            results["memory"] = bench_memory(resolve(args.big_doc), args.memory_parser, tuple(args.memory_workers))
    results["machine"]["load_avg_end"] = os.getloadavg()
    results["machine"]["self_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    print("\nsummary (medians)")
    print(f"{'measure':48s} {'value':>12s}  target")
    for parser in args.parsers:
        if "build" in results and parser in results["build"]:
            target = "<= 20" if parser == "layout" else "<= 4"
            b = results["build"][parser]
            print(f"{'build ' + parser + ' (s / 100 pages, 2 workers)':48s} {b['seconds_per_100_pages']:12.2f}  {target}")
            print(f"{'  CPU s / 100 pages (/2 = wall on 2 idle cores)':48s} {b['cpu_seconds_per_100_pages']:12.2f}")
    if "load" in results:
        print(f"{'cached load, warm (ms, ~100 pages)':48s} {results['load']['warm_ms']:12.1f}  <= 50")
        print(f"{'cached load, fresh process incl. imports (ms)':48s} {results['load']['first_ms']:12.1f}")
    if "memory" in results:
        for w in (1, 2):
            r = results["memory"].get(f"workers_{w}", {})
            if "main_peak_mib" in r:
                extra = f" + worker {r['largest_worker_peak_mib']:.0f}" if r.get("largest_worker_peak_mib") else ""
                label = f"peak RSS {r['pages']}-page build, workers={w} (MiB)"
                print(f"{label:48s} {r['main_peak_mib']:12.0f}{extra}  < 2048")
    if "ocr" in results:
        print(f"{'OCR (s / page, image-only)':48s} {results['ocr']['seconds_per_page']:12.2f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
