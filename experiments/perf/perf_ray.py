"""Wall time of a corpus build and a benchmark, local vs. Ray with 1 and 2 worker CPUs, and Ray's overhead.

What runs, on a generated synthetic corpus (``--docs`` PDFs of ``--pages``
pages, ``--questions`` questions each; fast parser, BM25, oracle reader):

* build: ``build_corpus`` into a fresh cache directory each time: local with
  ``workers=1`` and ``workers=2`` processes; Ray (one task per document) on
  a cluster of ``n`` one-CPU nodes started on this machine
  (``ray.cluster_utils.Cluster``), ``n`` = 1 and 2. Every figure includes
  its worker processes' start and encoder load: what a user waits for.
* benchmark: ``benchmark`` with topk_page and heuristic on every episode:
  in-process locally, on ``n`` Ray actors (one per CPU) on the same clusters.
* overhead: a no-op Ray task's round trip (submitted in a batch, median per
  task over ``--noop`` tasks) and a no-op actor call's, on the 2-node cluster;
  and each cluster's start-up time (not inside the figures above).

Records of Ray runs are checked equal to the local run's (``wall_s`` aside)
and graph hashes to the local build's; the script fails loudly otherwise.
On a 2-core machine shared with other work the speedups are modest and
noisy; ``load_average`` is recorded beside them.

Run::

    .venv/bin/python experiments/perf/perf_ray.py                   # writes outputs/perf_ray/<time>/results.json
    .venv/bin/python experiments/perf/perf_ray.py --docs 6 --pages 8 --out /tmp/perf_ray
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RAY = {"name": "ray", "address": "auto", "cpus_per_task": 1, "max_retries": 2, "object_store_memory": None,
       "actors": None}
STORE = 100 * 1024 * 1024


def bench_cfg(corpus: Path) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir

    from mage_gym.bench.config import plain

    overrides = ["dataset=synth", f"dataset.root={corpus}", "policies=[topk_page,heuristic]", "retriever=bm25",
                 "logger=none", "env.K=16", "env.parser=fast", "graph_workers=1", "traces=false"]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return plain(compose(config_name="benchmark", overrides=overrides))


def timed_build(files: list[str], cache: Path, workers: int, executor: dict | None) -> tuple[float, dict]:
    from mage_gym.bench.corpus import build_corpus

    cfg: dict[str, Any] = {"files": files, "parser": "fast", "workers": workers, "cache_dir": str(cache)}
    if executor:
        cfg["executor"] = executor
    t0 = time.perf_counter()
    res = build_corpus(cfg, progress=False)
    wall = time.perf_counter() - t0
    if res["totals"]["built"] != len(files):
        raise RuntimeError(f"build did not build every document: {res['totals']}")
    return wall, {r["path"]: r["graph_hash"] for r in res["documents"]}


def rows(out: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if k != "wall_s"}
            for x in (out / "episodes.jsonl").read_text().splitlines()]


def timed_benchmark(cfg: dict, out: Path) -> float:
    from mage_gym.bench.benchmark import benchmark
    from policies import REGISTRY

    t0 = time.perf_counter()
    benchmark(cfg, out, registry=REGISTRY)
    return time.perf_counter() - t0


def noop() -> int:
    return 0


class Noop:
    def call(self) -> int:
        return 0


def overheads(n: int) -> dict[str, float]:
    """Median round trip of a no-op task (batch of ``n``) and of ``n`` sequential no-op actor calls, in ms."""
    import ray

    task = ray.remote(noop).options(num_cpus=1)
    ray.get([task.remote() for _ in range(20)])  # warm worker processes
    t0 = time.perf_counter()
    ray.get([task.remote() for _ in range(n)])
    per_task = (time.perf_counter() - t0) / n
    actor = ray.remote(Noop).options(num_cpus=1).remote()
    ray.get(actor.call.remote())
    times = []
    for _ in range(n):
        t = time.perf_counter()
        ray.get(actor.call.remote())
        times.append(time.perf_counter() - t)
    ray.kill(actor)
    return {"task_ms_batched": round(1000 * per_task, 3), "actor_call_ms": round(1000 * statistics.median(times), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=4)
    ap.add_argument("--pages", type=int, default=6)
    ap.add_argument("--questions", type=int, default=5)
    ap.add_argument("--noop", type=int, default=200)
    ap.add_argument("--out", type=Path, default=REPO / "outputs" / "perf_ray" / time.strftime("%Y%m%d-%H%M%S"))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    import ray
    from ray.cluster_utils import Cluster

    from mage_gym.bench.distributed.episodes import release_actors
    from mage_gym.data.synth import SynthConfig, generate_corpus

    work = Path(tempfile.mkdtemp(prefix="perf_ray_"))
    os.environ["MAGE_GYM_CACHE"] = str(work / "cache")  # benchmark graphs: one shared cache, built once below
    corpus = work / "corpus"
    generate_corpus(corpus, args.docs, seed=11, cfg=SynthConfig(min_pages=args.pages, max_pages=args.pages,
                                                                questions_per_doc=args.questions),
                    workers=1, progress=False)
    files = sorted(str(p) for p in corpus.rglob("*.pdf"))
    cfg = bench_cfg(corpus)
    res: dict[str, Any] = {"build_s": {}, "benchmark_s": {}, "cluster_start_s": {}}

    res["build_s"]["local_workers1"], ref_hashes = timed_build(files, work / "b_local1", 1, None)
    res["build_s"]["local_workers2"], h = timed_build(files, work / "b_local2", 2, None)
    assert h == ref_hashes, "local builds with 1 and 2 workers differ"
    timed_benchmark(cfg, work / "warm")  # graphs into the benchmark cache, outside every timed figure
    res["benchmark_s"]["local"] = timed_benchmark(cfg, work / "bench_local")
    ref_rows = rows(work / "bench_local")
    for n in (1, 2):
        t0 = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": STORE})
        for _ in range(n - 1):
            cluster.add_node(num_cpus=1, object_store_memory=STORE)
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        cluster.wait_for_nodes()
        res["cluster_start_s"][f"ray_{n}"] = round(time.perf_counter() - t0, 2)
        try:
            res["build_s"][f"ray_{n}"], h = timed_build(files, work / f"b_ray{n}", 1, RAY)
            assert h == ref_hashes, f"ray build on {n} nodes gave other graph hashes"
            res["benchmark_s"][f"ray_{n}"] = timed_benchmark({**cfg, "executor": RAY}, work / f"bench_ray{n}")
            assert rows(work / f"bench_ray{n}") == ref_rows, f"ray benchmark on {n} nodes gave other records"
            if n == 2:
                release_actors()  # the pooled episode actors hold every CPU
                res["overhead"] = overheads(args.noop)
        finally:
            release_actors()
            ray.shutdown()
            cluster.shutdown()
    for part in ("build_s", "benchmark_s"):
        res[part] = {k: round(v, 2) for k, v in res[part].items()}
    base_b, base_e = res["build_s"]["local_workers1"], res["benchmark_s"]["local"]
    res["speedup"] = {"build_ray_2_vs_1": round(res["build_s"]["ray_1"] / res["build_s"]["ray_2"], 3),
                      "build_ray_2_vs_local_workers1": round(base_b / res["build_s"]["ray_2"], 3),
                      "benchmark_ray_2_vs_1": round(res["benchmark_s"]["ray_1"] / res["benchmark_s"]["ray_2"], 3),
                      "benchmark_ray_2_vs_local": round(base_e / res["benchmark_s"]["ray_2"], 3)}
    res["setup"] = {"documents": len(files), "pages_per_doc": args.pages, "episodes": len(ref_rows) // 2,
                    "policies": ["topk_page", "heuristic"], "parser": "fast", "cpus": os.cpu_count(),
                    "load_average": os.getloadavg(), "python": platform.python_version(), "ray": ray.__version__,
                    "records_equal_local": True, "graph_hashes_equal_local": True}
    from mage_gym.bench.results import write_json

    out = write_json(args.out / "results.json", res)
    print(json.dumps(res, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
