"""Load benchmark of the chat-env service: 1, 16, 64 and 256 concurrent OpenEnv sessions on loopback, against the
in-process env as the floor.

What runs: ``python -m mage_gym.agent.server`` (a subprocess, pre-built graphs
only) serves real dev documents of mixed sizes, MMLongBench papers and reports
of 9 to 28 pages and FinanceBench filings of 9 to 503 pages. For each level of
N sessions a fresh server is started and warmed (every episode once, so
graphs, indexes and question vectors are in memory, as for the floor), then N clients (OpenEnv's
``EnvClient`` over ``/ws``, :class:`~mage_gym.agent.service.client.MageChatClient`,
all on one asyncio loop in this process) play full episodes at once, with no
pause between calls: each reply is written by a scripted random controller
from what the last observation showed (activate listed candidates, open held
elements, search words of the question, prune, stop), and about one reply in
ten is malformed (text with no call, an unknown tool, bad arguments), which the
env answers and counts. Every session plays ``episodes`` episodes and stops:
the loops end by themselves.

Figures per level: p50 / p99 latency of reset and step as the client sees them
(send to reply), episodes per second, the server's peak RSS (summed over its
processes) and that peak minus the RSS after warm-up, per session (at one
session that is whatever the first episodes allocate: read it at 16 and up); the
server's CPU seconds per call (reset or step); errors (any exception a client
saw: must be 0). The floor plays the same controller on the same documents in
this process with no server: reset and step latency, episodes per second, CPU
per call. ``--workers 2`` compares uvicorn worker processes at the levels named
by ``--worker-levels``.

Closed loop, no think time: N sessions each waiting for its reply keep the
server saturated, so latency at N sessions is about N divided by throughput.
A trainer's rollouts pause for generation between calls; these figures are
the worst case for the env.

Goal (named before measuring, issue 43): at 64 sessions, p99 step latency at
most 1 s (one generation turn of a 7B policy on a GPU; an env slower than
that in the worst 1% would be what rollouts wait for) and at most 4 MB of
server memory per session (256 sessions per worker in about 1 GB beside the
documents).

Run (on a shared machine: ``nice``, and say it ran under load)::

    nice -n 10 .venv/bin/python experiments/perf/perf_service.py --repeats 3 --out outputs/perf_service

Writes ``results.json`` and ``results.md`` into ``--out``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOCS = ("2303.05039v2", "8dfc21ec151fb9d3578fc32d5c4e5df9", "2023.acl-long.386",
        "12-15-15-ISIS-and-terrorism-release-final", "ULTABEAUTY_2023Q4_EARNINGS", "JPMORGAN_2021Q1_10Q",
        "AMERICANEXPRESS_2022_10K", "CVSHEALTH_2018_10K", "PEPSICO_2022_10K")
DATASETS = "mmlongbench,financebench"
GOAL = {"sessions": 64, "p99_step_ms": 1000.0, "rss_per_session_mb": 4.0}
MALFORMED = ("I would look at the revenue table first.", '<tool_call>{"name": "fly", "arguments": {}}</tool_call>',
             '<tool_call>{"name": "activate", "arguments": {"candidates": "three"}}</tool_call>',
             "<tool_call>{not json</tool_call>")
CANDIDATE = re.compile(r'<c n="(\d+)" id="([^"]+)"')
HELD = re.compile(r'<(?:page|element|added) id="([^"]+)"[^>]*state="(?:activated|opened)"')


# --- the scripted controller (the same for the floor and the server) -------------------------------------

@dataclass
class Controller:
    """Random valid calls written from what the observations showed, and some malformed replies."""

    rng: random.Random
    question: str = ""
    candidates: list[int] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    turn: int = 0

    def start(self, text: str) -> None:
        self.question = (re.search(r"<question>(.*?)</question>", text, re.S) or re.search("(.*)", text)).group(1)
        self.candidates, self.held, self.turn = [], [], 0
        self.see(text)

    def see(self, text: str) -> None:
        self.candidates += [int(n) for n, _ in CANDIDATE.findall(text)]
        self.held = list(dict.fromkeys(self.held + HELD.findall(text)))

    def reply(self) -> str:
        self.turn += 1
        rng = self.rng
        if rng.random() < 0.1:
            return rng.choice(MALFORMED)
        if self.turn >= 10 or rng.random() < 0.08 * self.turn:
            return call("stop")
        kind = rng.choice(("activate", "activate", "open", "search", "prune"))
        elements = [h for h in self.held if h.rsplit(":", 1)[-1].startswith("e")]
        if kind == "open" and elements:
            return call("open", ids=[rng.choice(elements)])
        if kind == "prune" and self.held:
            return call("prune", ids=[rng.choice(self.held)], reason="not about the question")
        if kind == "search" or not self.candidates:
            words = [w for w in re.findall(r"[A-Za-z]{4,}", self.question)] or ["total"]
            return call("search", query=" ".join(rng.sample(words, min(3, len(words)))))
        return call("activate", candidates=rng.sample(self.candidates, min(len(self.candidates), rng.randint(1, 3))))


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def text_of(messages: list[dict]) -> str:
    from mage_gym.agent.chat_env import text_of as chat_text

    return chat_text(messages)


# --- figures ------------------------------------------------------------------------------------------------

def percentiles(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return {"n": len(s), "p50_ms": 1000 * pick(0.5), "p99_ms": 1000 * pick(0.99), "mean_ms": 1000 * statistics.fmean(s)}


def median_of(values: list[Any]) -> Any:
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(nums) if nums else None


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (uvicorn's worker processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def rss_and_cpu(pid: int) -> tuple[float, float]:
    """(RSS in MB, CPU seconds) summed over ``pid``'s process tree."""
    rss = cpu = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for p in process_tree(pid):
        try:
            rss += next(int(line.split()[1]) for line in open(f"/proc/{p}/status") if line.startswith("VmRSS:")) / 1024
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, StopIteration, ValueError, IndexError):
            pass
    return rss, cpu


class Sampler(threading.Thread):
    """The server tree's peak RSS while a level runs."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop_flag = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            self.peak = max(self.peak, rss_and_cpu(self.pid)[0])
            time.sleep(0.2)

    def stop(self) -> float:
        self.stop_flag.set()
        self.join(5)
        return max(self.peak, rss_and_cpu(self.pid)[0])


# --- the server ---------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: argparse.Namespace, workers: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "mage_gym.agent.server", "--dataset", args.dataset, "--split", args.split,
           *(["--root", args.root] if args.root else []), "--doc-ids", ",".join(args.docs), "--parser", "fast", "--prebuilt-only", "--port", str(port),
           "--workers", str(workers), "--max-sessions", "300", "--max-documents", str(len(args.docs)),
           "--threads", str(args.threads), "--idle-timeout", "600", "--episode-timeout", "1200",
           "--step-timeout", "600"]
    out = open(log, "a")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=out, text=True)
    line = proc.stdout.readline()
    if "sessions on" not in line:
        proc.kill()
        raise RuntimeError(f"the server did not start: {line!r} (see {log})")
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, workers)
    return proc, base


def wait_healthy(base: str, workers: int, timeout: float = 600.0) -> None:
    """Until ``/health`` has answered from ``workers`` distinct worker processes (they start after the socket)."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(seen)} of {workers} workers answered /health in {timeout:g} s")
        try:
            with opener.open(base + "/health", timeout=30) as r:
                seen.add(json.loads(r.read())["worker"])
        except OSError:
            time.sleep(0.5)


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


# --- sessions -----------------------------------------------------------------------------------------------

@dataclass
class Record:
    reset: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    episodes: int = 0
    malformed_answered: int = 0
    errors: dict[str, int] = field(default_factory=dict)


async def session(base: str, episodes: list[str], n_episodes: int, seed: int, rec: Record) -> None:
    from mage_gym.agent.service.client import MageChatClient
    from mage_gym.agent.service.models import MageChatAction

    rng = random.Random(seed)
    ctl = Controller(rng)
    try:
        async with MageChatClient(base_url=base, connect_timeout_s=300, message_timeout_s=900) as env:
            for _ in range(n_episodes):
                t = time.perf_counter()
                result = await env.reset(episode_id=rng.choice(episodes), seed=rng.randrange(1 << 30))
                rec.reset.append(time.perf_counter() - t)
                ctl.start(text_of(result.observation.messages))
                while not result.done:
                    t = time.perf_counter()
                    result = await env.step(MageChatAction(message=ctl.reply()))
                    rec.step.append(time.perf_counter() - t)
                    rec.malformed_answered += int(result.observation.info.get("format_errors", 0) > 0)
                    ctl.see(text_of(result.observation.messages))
                rec.episodes += 1
    except Exception as err:  # counted: a level with any error fails the run's check
        rec.errors[type(err).__name__] = rec.errors.get(type(err).__name__, 0) + 1


async def warm_up(base: str, episodes: list[str]) -> None:
    """Every episode once (reset, stop): documents loaded, indexes built, questions encoded, as the floor's
    warm-up does in-process (else the server pays the query encoder inside the measured run)."""
    from mage_gym.agent.service.client import MageChatClient
    from mage_gym.agent.service.models import MageChatAction

    async with MageChatClient(base_url=base, connect_timeout_s=300, message_timeout_s=900) as env:
        for episode_id in dict.fromkeys(episodes):
            await env.reset(episode_id=episode_id, seed=0)
            await env.step(MageChatAction(message=call("stop")))


def warm_every_worker(base: str, workers: int, episodes: list[str], n_docs: int, rounds: int = 20) -> None:
    """Warm-ups until every worker has loaded every document: the kernel hands each connection to some worker,
    so warm in rounds of concurrent connections and ask ``/metrics`` (which also lands on some worker) who is
    warm."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    warm: dict[int, int] = {}
    for _ in range(rounds):
        async def warm_round() -> None:
            await asyncio.gather(*(warm_up(base, episodes) for _ in range(2 * workers if workers > 1 else 1)))

        asyncio.run(warm_round())
        for _ in range(10 * workers):
            with opener.open(base + "/metrics", timeout=60) as r:
                m = json.loads(r.read())
            warm[m["worker"]] = m["documents"]["documents"]
        if len(warm) >= workers and all(n >= n_docs for n in warm.values()):
            return
    raise RuntimeError(f"workers not warm after {rounds} rounds: {warm}")


def run_level(args: argparse.Namespace, n: int, workers: int, seed: int, episodes: list[str],
              episodes_by_doc: dict[str, str], log: Path) -> dict[str, Any]:
    proc, base = start_server(args, workers, log)
    try:
        warm_every_worker(base, workers, episodes, len(episodes_by_doc))
        time.sleep(1.0)
        rss0, cpu0 = rss_and_cpu(proc.pid)
        per_session = max(1, -(-args.episodes // n))
        sampler = Sampler(proc.pid)
        sampler.start()
        rec = Record()
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()

        async def all_sessions() -> None:
            await asyncio.gather(*(session(base, episodes, per_session, seed * 100_003 + i, rec) for i in range(n)))

        asyncio.run(all_sessions())
        wall = time.perf_counter() - t0
        peak = sampler.stop()
        rss1, cpu1 = rss_and_cpu(proc.pid)
    finally:
        stop_server(proc)
    calls = len(rec.reset) + len(rec.step)
    return {"sessions": n, "workers": workers, "episodes_per_session": per_session, "episodes": rec.episodes,
            "wall_s": wall, "episodes_per_s": rec.episodes / wall, "steps_per_s": len(rec.step) / wall,
            "reset": percentiles(rec.reset), "step": percentiles(rec.step), "errors": rec.errors,
            "malformed_replies_answered": rec.malformed_answered,
            "rss_warm_mb": rss0, "rss_peak_mb": peak, "rss_per_session_mb": (peak - rss0) / n,
            "cpu_ms_per_call": 1000 * (cpu1 - cpu0) / max(1, calls), "loadavg_start": load0,
            "loadavg_end": os.getloadavg()[0]}


# --- the floor ----------------------------------------------------------------------------------------------

def run_floor(args: argparse.Namespace, episodes: list[str], seed: int) -> dict[str, Any]:
    """The same controller driving MageChatEnv in this process: what the env costs with no server."""
    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.agent.service.config import ServiceConfig

    config = ServiceConfig(dataset=args.dataset, root=args.root, split=args.split, doc_ids=tuple(args.docs),
                           prebuilt_only=True, max_documents=len(args.docs))
    documents = config.runtime().documents
    env = MageChatEnv(episodes=documents, dataset=config.label, retriever="hybrid")
    rng = random.Random(seed)
    ctl = Controller(rng)
    for eid in dict.fromkeys(episodes):  # warm: every episode's document loaded once
        env.reset(seed=0, options={"episode_id": eid})
    reset, step, reset_cpu, step_cpu = [], [], [], []
    t0 = time.perf_counter()
    for _ in range(args.episodes):
        t, c = time.perf_counter(), time.process_time()
        messages, info = env.reset(seed=rng.randrange(1 << 30), options={"episode_id": rng.choice(episodes)})
        reset.append(time.perf_counter() - t)
        reset_cpu.append(time.process_time() - c)
        ctl.start(text_of(messages))
        done = False
        while not done:
            t, c = time.perf_counter(), time.process_time()
            messages, _, terminated, truncated, _ = env.step(ctl.reply())
            step.append(time.perf_counter() - t)
            step_cpu.append(time.process_time() - c)
            ctl.see(text_of(messages))
            done = terminated or truncated
    wall = time.perf_counter() - t0
    return {"episodes": args.episodes, "wall_s": wall, "episodes_per_s": args.episodes / wall,
            "reset": percentiles(reset), "step": percentiles(step),
            "cpu_ms_per_reset": 1000 * statistics.fmean(reset_cpu), "cpu_ms_per_step": 1000 * statistics.fmean(step_cpu),
            "cpu_ms_per_call": 1000 * (sum(reset_cpu) + sum(step_cpu)) / (len(reset) + len(step))}


# --- the run ------------------------------------------------------------------------------------------------

def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-figure medians over repeated runs of one configuration (nested dicts followed)."""
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict) and key != "errors":
            out[key] = medians([r[key] for r in runs])
        elif key == "errors":
            total: dict[str, int] = {}
            for r in runs:
                for k, v in r[key].items():
                    total[k] = total.get(k, 0) + v
            out[key] = total
        else:
            m = median_of([r[key] for r in runs])
            out[key] = m if m is not None else value
    return out


def table(rows: list[dict[str, Any]], floor: dict[str, Any]) -> str:
    head = ("| sessions | workers | episodes/s | reset p50 / p99 ms | step p50 / p99 ms | CPU ms / call | "
            "RSS peak MB | RSS / session MB | errors |\n|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['sessions']} | {r['workers']} | {r['episodes_per_s']:.2f} | {r['reset']['p50_ms']:.0f} / "
        f"{r['reset']['p99_ms']:.0f} | {r['step']['p50_ms']:.0f} / {r['step']['p99_ms']:.0f} | "
        f"{r['cpu_ms_per_call']:.1f} | {r['rss_peak_mb']:.0f} | {r['rss_per_session_mb']:.2f} | "
        f"{sum(r['errors'].values())} |\n" for r in rows)
    body += (f"| in-process floor | - | {floor['episodes_per_s']:.2f} | {floor['reset']['p50_ms']:.0f} / "
             f"{floor['reset']['p99_ms']:.0f} | {floor['step']['p50_ms']:.0f} / {floor['step']['p99_ms']:.0f} | "
             f"{floor['cpu_ms_per_call']:.1f} | - | - | - |\n")
    return head + body


def summarise(args: argparse.Namespace, configs: list[tuple[int, int]], runs: dict[tuple[int, int], list[dict]],
              floors: list[dict[str, Any]], n_episodes: int, machine: dict[str, Any]) -> dict[str, Any]:
    """The published figures: per-configuration medians over the runs, the goal, the worker comparison."""
    levels = [medians(runs[c]) for c in configs]
    floor = medians(floors)
    at = {(x["sessions"], x["workers"]): x for x in levels}
    goal_row = at.get((GOAL["sessions"], 1))
    goal = dict(GOAL)
    if goal_row:
        goal.update(p99_step_ms_measured=goal_row["step"]["p99_ms"],
                    rss_per_session_mb_measured=goal_row["rss_per_session_mb"],
                    p99_met=goal_row["step"]["p99_ms"] <= GOAL["p99_step_ms"],
                    rss_met=goal_row["rss_per_session_mb"] <= GOAL["rss_per_session_mb"])
    workers = {}
    for n in args.worker_levels:
        one, two = at.get((n, 1)), at.get((n, 2))
        if one and two:
            workers[f"sessions_{n}"] = {"throughput_2_over_1": two["steps_per_s"] / one["steps_per_s"],
                                        "p99_step_2_over_1": two["step"]["p99_ms"] / one["step"]["p99_ms"],
                                        "rss_warm_2_over_1": two["rss_warm_mb"] / one["rss_warm_mb"]}
    row = goal_row or levels[0]
    return {
        "kind": "perf_service", "datasets": args.dataset, "documents": args.docs, "episodes_served": n_episodes,
        "episodes_per_level": args.episodes, "repeats": args.repeats, "levels": levels, "floor": floor,
        "server_cpu_per_call_over_floor": row["cpu_ms_per_call"] / floor["cpu_ms_per_call"],
        "workers": workers, "goal": goal,
        # the one figure of the index's speed table (``_vs_``); the others are on the result's page
        "throughput_2_vs_1_workers": workers.get(f"sessions_{GOAL['sessions']}", {}).get("throughput_2_over_1"),
        "errors_total": sum(sum(x["errors"].values()) for x in levels),
        "machine": machine, "runs": {f"{n}x{w}": runs[(n, w)] for n, w in configs}, "floor_runs": floors,
    }


def write(out: Path, results: dict[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1))
    table_md = table(results["levels"], results["floor"])
    (out / "results.md").write_text(f"# perf_service\n\n{table_md}\n\ngoal: {json.dumps(results['goal'])}\n")
    print(table_md)
    print("goal:", json.dumps(results["goal"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default=DATASETS, help="dataset(s) served, comma-separated")
    ap.add_argument("--root", default=None, help="the dataset's root (one dataset)")
    ap.add_argument("--split", default="all")
    ap.add_argument("--docs", nargs="+", default=list(DOCS), help="document ids served (pre-built fast graphs)")
    ap.add_argument("--levels", nargs="+", type=int, default=[1, 16, 64, 256])
    ap.add_argument("--worker-levels", nargs="*", type=int, default=[64], help="levels also run with 2 workers")
    ap.add_argument("--episodes", type=int, default=64, help="episodes per level (at least one per session)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of every configuration; figures are medians")
    ap.add_argument("--threads", type=int, default=2, help="server threads per worker running env calls")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("outputs/perf_service"))
    ap.add_argument("--resummarise", action="store_true",
                    help="recompute the summary of --out/results.json from its recorded runs (no measuring)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.resummarise:
        old = json.loads((args.out / "results.json").read_text())
        runs = {tuple(int(x) for x in k.split("x")): v for k, v in old["runs"].items()}
        args.worker_levels = sorted({n for n, w in runs if w == 2})
        args.docs, args.dataset, args.episodes, args.repeats = (old["documents"], old["datasets"],
                                                                 old["episodes_per_level"], old["repeats"])
        results = summarise(args, list(runs), runs, old["floor_runs"], old["episodes_served"], old["machine"])
        write(args.out, results)
        return 0
    log = args.out / "server.log"

    from mage_gym.agent.service.config import ServiceConfig

    served = ServiceConfig(dataset=args.dataset, root=args.root, split=args.split, doc_ids=tuple(args.docs)).episodes()
    episodes = [e.episode_id for e in served]
    episodes_by_doc = {}
    for e in served:
        episodes_by_doc.setdefault(e.doc_id, e.episode_id)
    load0 = os.getloadavg()
    print(f"{len(episodes)} episodes on {len(episodes_by_doc)} documents; load {load0[0]:.1f}", flush=True)

    floors = []
    for r in range(args.repeats):
        floors.append(run_floor(args, episodes, args.seed + r))
        print(f"floor run {r}: {json.dumps(floors[-1])}", flush=True)
    configs = [(n, 1) for n in args.levels] + [(n, 2) for n in args.worker_levels]
    runs: dict[tuple[int, int], list[dict[str, Any]]] = {c: [] for c in configs}
    for r in range(args.repeats):
        for n, workers in configs:
            res = run_level(args, n, workers, args.seed + r, episodes, episodes_by_doc, log)
            runs[(n, workers)].append(res)
            print(f"run {r} sessions={n} workers={workers}: {json.dumps(res)}", flush=True)
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "nice": os.nice(0),
               "loadavg_start": list(load0), "loadavg_end": list(os.getloadavg()),
               "note": "shared machine, other jobs running; client and server share its cores"}
    results = summarise(args, configs, runs, floors, len(episodes), machine)
    write(args.out, results)
    return 0 if results["errors_total"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
