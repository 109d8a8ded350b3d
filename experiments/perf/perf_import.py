"""Fresh-process cost of ``import mage_gym`` (which registers MageRAG-v0) and of loading a cached graph.

Why fresh processes: a user's script, a benchmark worker and a rollout actor
each pay these costs once at start, and an already-warm interpreter would hide
them. Each figure is the median of ``--repeats`` new interpreters:

* ``import_ms``: ``import mage_gym`` timed inside the process (gymnasium
  included, since registering needs it), ``gymnasium_import_ms``: the same
  for ``import gymnasium`` alone (the share mage_gym cannot avoid), and
  ``process_ms``: the whole ``python -c "import mage_gym"`` run, interpreter
  start-up included;
* ``graph_load_ms``: ``import mage_gym`` + ``load_graph`` of the cached graph
  of the first ``--pages`` pages of ``--doc`` (built once beforehand, not
  timed); ``heavy_imports`` lists torch / transformers / parser modules that
  got imported on the way (there should be none).

Run::

    .venv/bin/python experiments/perf/perf_import.py                  # writes outputs/perf_import/results.json
    .venv/bin/python experiments/perf/perf_import.py --parser fast --repeats 9
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "pymupdf4llm", "rapidocr_onnxruntime", "mage_gym.graph.parsers")

_IMPORT_CHILD = """
import json, sys, time
t = time.perf_counter()
import mage_gym
ms = (time.perf_counter() - t) * 1e3
print(json.dumps({"import_ms": ms, "registered": "MageRAG-v0" in __import__("gymnasium").registry}))
"""

_GYM_CHILD = """
import json, time
t = time.perf_counter()
import gymnasium
print(json.dumps({"import_ms": (time.perf_counter() - t) * 1e3}))
"""

_LOAD_CHILD = """
import json, sys, time
t = time.perf_counter()
import mage_gym
from mage_gym.graph import load_graph
g = load_graph(sys.argv[1], sys.argv[2], max_pages=int(sys.argv[3]))
ms = (time.perf_counter() - t) * 1e3
heavy = [m for m in json.loads(sys.argv[4]) if m in sys.modules]
print(json.dumps({"graph_load_ms": ms, "pages": g.n_pages, "elements": g.n_elements, "edges": g.n_edges,
                  "heavy_imports": heavy}))
"""


def fresh(code: str, *args: str) -> tuple[dict, float]:
    """Run ``code`` in a new interpreter; its last stdout line as JSON, and the process wall time in ms."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=600)
    wall = (time.perf_counter() - t) * 1e3
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--doc", default="financebench-dev/pdfs/NIKE_2021_10K.pdf", help="relative to the data root")
    ap.add_argument("--parser", default="layout")
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="outputs/perf_import", help="folder for results.json")
    args = ap.parse_args()

    from mage_gym.data.io import data_root
    from mage_gym.graph import build_graph
    from mage_gym.graph.workers import shutdown_pool

    doc = Path(args.doc) if Path(args.doc).is_absolute() else Path(data_root()) / args.doc
    t = time.perf_counter()
    build_graph(doc, args.parser, max_pages=args.pages, workers=2)  # a cache hit after the first run
    shutdown_pool()
    print(f"graph ready in {time.perf_counter() - t:.1f} s (excluded)")

    imports, gyms = [], []
    for _ in range(args.repeats):  # interleaved, so machine load hits both alike
        imports.append(fresh(_IMPORT_CHILD))
        gyms.append(fresh(_GYM_CHILD)[0]["import_ms"])
    loads = [fresh(_LOAD_CHILD, str(doc), args.parser, str(args.pages), json.dumps(HEAVY))[0]
             for _ in range(args.repeats)]
    assert all(r["registered"] for r, _ in imports), "import mage_gym did not register MageRAG-v0"
    results = {
        "config": vars(args), "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"python": platform.python_version(), "cores": os.cpu_count(), "load_average_1min": os.getloadavg()[0]},
        "import_ms": statistics.median(r["import_ms"] for r, _ in imports),
        "gymnasium_import_ms": statistics.median(gyms),
        "process_ms": statistics.median(w for _, w in imports),
        "graph_load_ms": statistics.median(r["graph_load_ms"] for r in loads),
        "graph": {k: loads[0][k] for k in ("pages", "elements", "edges")},
        "heavy_imports": sorted({m for r in loads for m in r["heavy_imports"]}),
    }
    print(f"import mage_gym (fresh process, median of {args.repeats}): {results['import_ms']:.1f} ms "
          f"(gymnasium alone {results['gymnasium_import_ms']:.1f} ms; {results['process_ms']:.0f} ms for the whole process)")
    print(f"import + load cached graph ({results['graph']['pages']} pages, {results['graph']['elements']} elements, "
          f"{results['graph']['edges']} edges): {results['graph_load_ms']:.1f} ms; "
          f"heavy imports: {results['heavy_imports'] or 'none'}")
    from mage_gym.bench.results import write_json

    print(f"wrote {write_json(Path(args.out) / 'results.json', results)}")


if __name__ == "__main__":
    main()
