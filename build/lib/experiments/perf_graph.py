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

Run (takes a few minutes; other jobs on the machine inflate the numbers)::

    .venv/bin/python experiments/perf_graph.py                       # writes outputs/perf_graph/results.json
    .venv/bin/python experiments/perf_graph.py --parsers fast --repeats 3 --skip memory ocr
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

REPO = Path(__file__).resolve().parents[1]

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
        for doc in docs:
            rates, parse_busy, embed_busy, assemble, cpu, n_el = [], [], [], [], [], 0
            parse_cpu, embed_cpu = [], []
            for _ in range(repeats):
                g = build_graph(doc, parser, cache=False, max_pages=pages, workers=workers)
                secs = g.meta["build_seconds"]
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
            }
            all_rates.extend(rates)
            print(f"  build {parser:6s} {doc.name:32s} {g.n_pages:4d} p {n_el:5d} el  "
                  f"{_median(rates):7.2f} s/100p  (parse busy {_median(parse_busy):.2f}, "
                  f"embed busy {_median(embed_busy):.2f}, assemble {_median(assemble):.2f}; "
                  f"CPU {_median(cpu):.2f} s/100p = parse {_median(parse_cpu):.2f} + embed {_median(embed_cpu):.2f})",
                  flush=True)
            all_cpu.extend(cpu)
        out[parser] = {"seconds_per_100_pages": _median(all_rates), "cpu_seconds_per_100_pages": _median(all_cpu),
                       "documents": per_doc}
    shutdown_pool()
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
    args = ap.parse_args()
    os.environ["MAGE_GYM_OCR_CACHE"] = "0"  # time the OCR itself, never the OCR cache (workers inherit this)

    root = data_root()
    if not root.is_dir():
        sys.exit(f"benchmark data not found at {root} (set MAGE_GYM_DATA)")
    resolve = lambda p: Path(p) if Path(p).is_absolute() else root / p  # noqa: E731
    docs = [resolve(d) for d in (args.docs or DEFAULT_DOCS)]
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_start": os.getloadavg()},
        "config": vars(args),
    }
    with tempfile.TemporaryDirectory(prefix="perf_graph_cache_") as cache_dir:
        os.environ["MAGE_GYM_CACHE"] = cache_dir  # never touch the user's cache
        if "build" not in args.skip:
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
