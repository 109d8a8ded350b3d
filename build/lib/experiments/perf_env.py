"""Speed and memory of MageRAG-v0 on a synthetic 500-page document, with the oracle reader.

Targets (issue 4): >= 5,000 steps/s in one process, near-linear gain with one
process per core, reset <= 20 ms, <= 200 MB per additional env on a 500-page
document. Graph building, retriever index building and the text encoder are
loaded once per process and excluded from every figure.

What runs: a uniformly random *masked* policy (every valid action equally
likely, Stop included), resets included whenever an episode ends; the hybrid
retriever (BM25 + dense, RRF) at reset and at every SearchEvidence. Measures
(medians over ``--repeats``):

* steps/s in one process, by wall clock and by process CPU time (the CPU
  figure is what an idle core would give when the machine is shared);
* aggregate steps/s with 1 and with 2 processes started together (each
  process builds its own graph first, outside the timed window);
* reset: warm (episode seen before in this process: relevance cached) and
  cold (a new question: retrieval scoring included), in ms;
* RSS of the first env (graph included) and per additional env (MB);
* with ``--compare-tree PATH`` (another checkout of the project, e.g. the
  previous commit unpacked with ``git archive``): the same step loop in fresh
  processes, alternating between that tree and this one (who goes first
  alternates too), each process warming up then timing ``--repeats`` runs;
  medians per tree, their ratio, and the load average around every process.
  Other work on the machine slows both trees alike, so the ratio is the
  figure to trust on a shared machine.

Run::

    .venv/bin/python experiments/perf_env.py                     # writes outputs/perf_env/results.json
    .venv/bin/python experiments/perf_env.py --pages 100 --steps 5000 --procs 1
    git archive HEAD~1 | tar -x -C /tmp/before && \
        .venv/bin/python experiments/perf_env.py --procs '' --compare-tree /tmp/before
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

QUESTIONS = [
    "How did revenue growth in asia change this quarter?", "What was the operating margin and profit?",
    "How many employees were hired?", "What is the credit risk exposure?", "What were carbon emissions?",
    "Who sits on the audit committee?", "How much cash and debt does the company hold?",
    "Which products launched in the market?",
]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def setup(pages: int, elements: int, encoder: str, n_questions: int = len(QUESTIONS)):
    """Graph, episodes and query function (all excluded from the timings)."""
    from mage_gym.data.episode import Episode
    from mage_gym.env import EnvEpisode
    from mage_gym.env._synthetic import hash_query_fn, make_large_graph

    graph = make_large_graph(pages, elements)
    episodes = [EnvEpisode(Episode(episode_id=f"q{i}", benchmark="synth", doc_id=graph.doc_id, source="<synthetic>",
                                   question=q, answer="x", answer_format="Str", evidence_pages=((i * 37) % pages,)),
                           graph) for i, q in enumerate(QUESTIONS[:n_questions])]
    if encoder == "minilm":
        from mage_gym.retrieval import make_query

        make_query("warm up")  # loads MiniLM once (excluded)
        query_fn = make_query
    else:
        query_fn = hash_query_fn(384)
    return graph, episodes, query_fn


def make_env(episodes, query_fn, retriever: str = "hybrid"):
    from mage_gym.env import MageRAGEnv

    return MageRAGEnv(episodes=episodes, query_fn=query_fn, retriever=retriever)


def compare_cold_resets(episodes, query_fn, names: list[str], rounds: int) -> dict[str, dict[str, float]]:
    """Cold-reset medians per retriever, measured interleaved (question by question) in one process.

    Every reset is cold: cached relevance and question vectors are cleared
    before it, so the question is encoded and scored again. Each retriever's
    index (page-text vectors included) is built or loaded by a first reset
    that is not timed.
    """
    from mage_gym.env.relevance import clear_caches

    envs = {name: make_env(episodes, query_fn, name) for name in names}
    for env in envs.values():
        env.reset(options={"episode_id": episodes[0].episode.episode_id})
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for i, ep in enumerate(episodes):
            order = names if (r + i) % 2 == 0 else names[::-1]  # alternate who goes first
            for name in order:
                clear_caches()
                t, c = time.perf_counter(), time.process_time()
                envs[name].reset(options={"episode_id": ep.episode.episode_id})
                wall[name].append((time.perf_counter() - t) * 1000)
                cpu[name].append((time.process_time() - c) * 1000)
    return {n: {"reset_cold_ms": statistics.median(wall[n]), "reset_cold_cpu_ms": statistics.median(cpu[n]),
                "samples": len(wall[n])} for n in names}


def run_steps(env, n_steps: int, seed: int) -> tuple[float, float, int]:
    """Random masked policy for ``n_steps`` steps; returns (wall s, cpu s, episodes)."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    episodes = 0
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n_steps):
        valid = env.action_masks().nonzero()[0]
        _, _, terminated, truncated, _ = env.step(int(valid[rng.integers(len(valid))]))
        if terminated or truncated:  # the step cap truncates
            env.reset()
            episodes += 1
    return time.perf_counter() - w0, time.process_time() - c0, episodes


def _worker(args) -> tuple[float, float, int]:
    pages, elements, encoder, n_steps, seed, barrier = args
    _, episodes, query_fn = setup(pages, elements, encoder)
    env = make_env(episodes, query_fn)
    for ep in episodes:  # warm: relevance and indexes built before the clock starts
        env.reset(options={"episode_id": ep.episode.episode_id})
    run_steps(env, 500, seed)
    barrier.wait()
    t0 = time.time()
    wall, cpu, _ = run_steps(env, n_steps, seed)
    return t0, t0 + wall, n_steps


def parallel_rate(procs: int, pages: int, elements: int, encoder: str, n_steps: int) -> float:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(procs)
        with ctx.Pool(procs) as pool:
            out = pool.map(_worker, [(pages, elements, encoder, n_steps, s, barrier) for s in range(procs)])
    start, end = min(o[0] for o in out), max(o[1] for o in out)
    return sum(o[2] for o in out) / (end - start)


#: The step loop a --compare-tree process runs, written against what every version of this script has
#: (setup, make_env, run_steps), so an older checkout can be measured by the same code as this one.
_TREE_WORKER = """
import json, os, sys
import mage_gym
from experiments.perf_env import make_env, run_steps, setup
pages, elements, encoder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
steps, repeats = int(sys.argv[4]), int(sys.argv[5])
load0 = os.getloadavg()[0]
_, episodes, query_fn = setup(pages, elements, encoder)
env = make_env(episodes, query_fn)
for ep in episodes:
    env.reset(options={"episode_id": ep.episode.episode_id})
run_steps(env, 2000, 0)
wall, cpu = [], []
for r in range(repeats):
    w, c, _ = run_steps(env, steps, r + 1)
    wall.append(steps / w)
    cpu.append(steps / c)
print(json.dumps({"wall": wall, "cpu": cpu, "package": os.path.dirname(mage_gym.__file__),
                  "load_before": load0, "load_after": os.getloadavg()[0]}))
"""


def tree_rates(tree: Path, pages: int, elements: int, encoder: str, steps: int, repeats: int) -> dict:
    """Run the step loop of ``tree`` (its own ``mage_gym`` and ``experiments``) in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", _TREE_WORKER, str(pages), str(elements), encoder, str(steps),
                          str(repeats)], cwd=tree, env=env, capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(res["package"]).resolve() != (tree / "mage_gym").resolve():
        raise RuntimeError(f"the process for {tree} imported mage_gym from {res['package']}")
    return res


def compare_trees(this: Path, other: Path, rounds: int, pages: int, elements: int, encoder: str, steps: int,
                  repeats: int) -> dict:
    """Step rates of this tree and ``other``, ``rounds`` fresh processes each, alternating (see module doc)."""
    runs: dict[str, list[dict]] = {"this": [], "other": []}
    trees = {"this": this, "other": other}
    for r in range(rounds):
        for name in (("this", "other") if r % 2 == 0 else ("other", "this")):
            res = tree_rates(trees[name], pages, elements, encoder, steps, repeats)
            runs[name].append(res)
            print(f"  round {r} {name:5s}: {statistics.median(res['cpu']):.0f} steps/s per CPU-second, "
                  f"{statistics.median(res['wall']):.0f} wall (load {res['load_before']:.1f} -> "
                  f"{res['load_after']:.1f})", flush=True)
    out: dict = {"tree": str(other), "rounds": rounds, "repeats_per_process": repeats}
    for name in ("this", "other"):
        wall = [x for res in runs[name] for x in res["wall"]]
        cpu = [x for res in runs[name] for x in res["cpu"]]
        out[name] = {"steps_per_s_wall": statistics.median(wall), "steps_per_s_cpu": statistics.median(cpu),
                     "steps_per_s_wall_best": max(wall), "runs": len(wall),
                     "load_average_1min": [[res["load_before"], res["load_after"]] for res in runs[name]]}
    out["ratio_wall"] = out["this"]["steps_per_s_wall"] / out["other"]["steps_per_s_wall"]
    out["ratio_cpu"] = out["this"]["steps_per_s_cpu"] / out["other"]["steps_per_s_cpu"]
    return out


def measure_memory(pages: int, elements: int, encoder: str, extra: int) -> dict[str, float]:
    base = rss_mb()
    graph, episodes, query_fn = setup(pages, elements, encoder)
    after_graph = rss_mb()
    envs = [make_env(episodes, query_fn)]
    for ep in episodes:
        envs[0].reset(options={"episode_id": ep.episode.episode_id})
    run_steps(envs[0], 300, 0)
    first = rss_mb()
    for i in range(extra):
        env = make_env(episodes, query_fn)
        run_steps(env, 200, i + 1)
        envs.append(env)
    after = rss_mb()
    return {"rss_start_mb": base, "graph_mb": after_graph - base, "first_env_mb": first - after_graph,
            "per_additional_env_mb": (after - first) / max(1, extra), "envs": len(envs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=500)
    ap.add_argument("--elements", type=int, default=30, help="elements per page")
    ap.add_argument("--steps", type=int, default=20000, help="steps per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--procs", type=str, default="1,2", help="process counts for the scaling test ('' to skip)")
    ap.add_argument("--extra-envs", type=int, default=8, help="additional envs for the memory figure")
    ap.add_argument("--encoder", choices=("hash", "minilm"), default="hash")
    ap.add_argument("--compare-retrievers", nargs="*", default=[],
                    help="also time cold resets of these retrievers beside the default, interleaved "
                         "(e.g. hybrid_elements hybrid_pages)")
    ap.add_argument("--compare-tree", type=str, default=None,
                    help="another checkout of the project: also measure its step loop, alternating fresh processes "
                         "with this tree's (see the module doc)")
    ap.add_argument("--compare-rounds", type=int, default=5, help="processes per tree for --compare-tree")
    ap.add_argument("--out", type=str, default="outputs/perf_env")
    args = ap.parse_args()

    load_start = os.getloadavg()[0]
    t = time.perf_counter()
    graph, episodes, query_fn = setup(args.pages, args.elements, args.encoder)
    print(f"graph: {graph.n_pages} pages, {graph.n_elements} elements, {graph.n_edges} edges "
          f"(built in {time.perf_counter() - t:.1f} s, excluded)")
    env = make_env(episodes, query_fn)
    # cold resets: a new question each time (retrieval scoring included; index built by the first one)
    env.reset(options={"episode_id": episodes[0].episode.episode_id})
    cold, cold_cpu = [], []
    for ep in episodes[1:]:
        t, c = time.perf_counter(), time.process_time()
        env.reset(options={"episode_id": ep.episode.episode_id})
        cold.append((time.perf_counter() - t) * 1000)
        cold_cpu.append((time.process_time() - c) * 1000)
    warm = []
    for i in range(200):
        t = time.perf_counter()
        env.reset(options={"episode_id": episodes[i % len(episodes)].episode.episode_id})
        warm.append((time.perf_counter() - t) * 1000)
    run_steps(env, 2000, 0)  # warm-up (search caches fill as in training)
    walls, cpus, eps = [], [], []
    for r in range(args.repeats):
        wall, cpu, n_eps = run_steps(env, args.steps, r + 1)
        walls.append(args.steps / wall)
        cpus.append(args.steps / cpu)
        eps.append(args.steps / max(1, n_eps))
    results = {
        "config": vars(args), "machine": {"python": platform.python_version(), "cores": os.cpu_count(),
                                          "load_average_1min": os.getloadavg()[0],
                                          "load_average_1min_at_start": load_start},
        "graph": {"pages": graph.n_pages, "elements": graph.n_elements, "edges": graph.n_edges},
        "steps_per_s_wall": statistics.median(walls), "steps_per_s_cpu": statistics.median(cpus),
        "steps_per_s_wall_best": max(walls),
        "steps_per_episode": statistics.median(eps),
        "reset_warm_ms": statistics.median(warm), "reset_cold_ms": statistics.median(cold),
        "reset_cold_cpu_ms": statistics.median(cold_cpu),
    }
    print(f"steps/s (1 process): {results['steps_per_s_wall']:.0f} wall (best {max(walls):.0f}), "
          f"{results['steps_per_s_cpu']:.0f} per CPU-second  (median of {args.repeats} x {args.steps} steps; "
          f"{results['steps_per_episode']:.1f} steps/episode)")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"reset: {results['reset_warm_ms']:.2f} ms warm, {results['reset_cold_ms']:.2f} ms cold (new question; "
          f"{results['reset_cold_cpu_ms']:.2f} ms CPU)")
    if args.compare_retrievers:
        names = list(dict.fromkeys(args.compare_retrievers))
        side = compare_cold_resets(episodes, query_fn, names, args.repeats)
        results["reset_cold_by_retriever"] = side
        print("cold reset by retriever (interleaved, medians): " + ", ".join(
            f"{n} {v['reset_cold_ms']:.2f} ms ({v['reset_cold_cpu_ms']:.2f} ms CPU, {v['samples']} resets)"
            for n, v in side.items()))
    procs = [int(p) for p in args.procs.split(",") if p.strip()]
    if procs:
        scaling = {}
        for p in procs:
            rates = [parallel_rate(p, args.pages, args.elements, args.encoder, args.steps)
                     for _ in range(max(1, args.repeats // 2))]
            scaling[p] = statistics.median(rates)
            print(f"aggregate steps/s with {p} process(es): {scaling[p]:.0f}")
        results["scaling_steps_per_s"] = scaling
        if 1 in scaling and 2 in scaling:
            results["speedup_2_vs_1"] = scaling[2] / scaling[1]
            print(f"speed-up 2 vs 1 processes: {results['speedup_2_vs_1']:.2f}x")
    if args.compare_tree:
        other = Path(args.compare_tree).resolve()
        this = Path(__file__).resolve().parents[1]
        print(f"this tree vs {other} ({args.compare_rounds} alternating processes each, {args.repeats} x "
              f"{args.steps} steps per process):")
        cmp = compare_trees(this, other, args.compare_rounds, args.pages, args.elements, args.encoder, args.steps,
                            args.repeats)
        results["compare_tree"] = cmp
        print(f"steps/s per CPU-second: this {cmp['this']['steps_per_s_cpu']:.0f}, other "
              f"{cmp['other']['steps_per_s_cpu']:.0f} (ratio {cmp['ratio_cpu']:.3f}); wall: this "
              f"{cmp['this']['steps_per_s_wall']:.0f}, other {cmp['other']['steps_per_s_wall']:.0f} "
              f"(ratio {cmp['ratio_wall']:.3f})")
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:  # a fresh process, so RSS is not polluted by the runs above
        mem = pool.apply(measure_memory, (args.pages, args.elements, args.encoder, args.extra_envs))
    results["memory"] = mem
    print(f"memory: graph {mem['graph_mb']:.0f} MB, first env {mem['first_env_mb']:.1f} MB, "
          f"each additional env {mem['per_additional_env_mb']:.2f} MB ({mem['envs']} envs)")
    from experiments.common.results import write_json

    print(f"wrote {write_json(Path(args.out) / 'results.json', results)}")


if __name__ == "__main__":
    main()
