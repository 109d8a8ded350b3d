"""``executor=ray`` on a real two-node Ray cluster on this machine (issue 16).

One cluster per module (``ray.cluster_utils.Cluster``: a head node and one
worker node, one CPU each, small object stores), one generated corpus of
three short synthetic PDFs (and one 12-page PDF). Checked: a Ray graph build gives the same
``graph_hash`` per document as a local build; a long document is built from
page-chunk tasks assembled on the driver, with the hash of a local build with
the same chunks, even when a chunk task kills its process; a build task that kills its own
process is retried and nothing is lost or duplicated; a benchmark on Ray
actors writes the same ``episodes.jsonl`` rows (ignoring ``wall_s``) and the
same traces as a local run, including when an actor dies mid-episode; a build
task that meets a half-written or corrupt cache entry rebuilds it; with
``executor.servers`` the actors' model requests reach every server and never
exceed the per-server limit (two stdlib fake OpenAI-compatible servers).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import ray  # noqa: E402

from mage_gym.bench.benchmark import benchmark  # noqa: E402
from policies import REGISTRY  # noqa: E402
from mage_gym.bench.config import plain  # noqa: E402
from mage_gym.bench.corpus import build_corpus  # noqa: E402
from mage_gym.bench.distributed.cluster import KILL_ONCE_ENV  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STORE = 100 * 1024 * 1024  # Ray's minimum object store is 75 MiB
RAY = {"name": "ray", "address": "auto", "cpus_per_task": 1, "max_retries": 2, "object_store_memory": None,
       "actors": None}
SMALL_ENV = ["env.K=16", "env.parser=fast", "env.budget.k=2", "env.budget.M=6", "env.budget.T=3", "env.budget.B=4",
             "graph_workers=1"]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": STORE})
    c.add_node(num_cpus=1, object_store_memory=STORE)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    from mage_gym.bench.distributed.episodes import release_actors

    release_actors()
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from mage_gym.data.synth import SynthConfig, generate_corpus

    root = tmp_path_factory.mktemp("ray_synth")
    generate_corpus(root, 3, seed=7, cfg=SynthConfig(min_pages=4, max_pages=5, questions_per_doc=5), workers=1,
                    progress=False)
    return root


def pdfs(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.pdf"))


def build(files: list[str], cache: Path, executor: dict | None = None) -> dict:
    cfg = {"files": files, "parser": "fast", "workers": 1, "cache_dir": str(cache)}
    if executor is not None:
        cfg["executor"] = executor
    return build_corpus(cfg, progress=False)


@pytest.fixture(scope="module")
def local_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache_local")


@pytest.fixture(scope="module")
def local_build(corpus, local_cache) -> dict:
    return build(pdfs(corpus), local_cache)


def hashes(res: dict) -> dict[str, str]:
    return {r["path"]: r["graph_hash"] for r in res["documents"]}


def test_two_nodes_are_up(cluster) -> None:
    alive = [n for n in ray.nodes() if n["Alive"]]
    assert len(alive) == 2 and ray.cluster_resources()["CPU"] == 2


def test_ray_build_gives_the_local_graph_hashes(cluster, corpus, local_build, tmp_path) -> None:
    res = build(pdfs(corpus), tmp_path / "cache", RAY)
    assert res["totals"]["built"] == 3 and res["totals"]["failed"] == 0
    assert all(len(h or "") == 64 for h in hashes(local_build).values())
    assert hashes(res) == hashes(local_build)
    # the tasks wrote the graphs into the shared cache: a second build only loads them
    again = build(pdfs(corpus), tmp_path / "cache", RAY)
    assert again["totals"]["cached"] == 3 and hashes(again) == hashes(local_build)


def test_build_task_that_kills_its_process_is_retried(cluster, corpus, local_build, tmp_path, monkeypatch) -> None:
    files = pdfs(corpus)
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_ONCE_ENV, f"{Path(files[1]).name}:{marker}")
    res = build(files, tmp_path / "cache", RAY)
    assert marker.exists(), "the fault hook never fired: the test would prove nothing"
    paths = [r["path"] for r in res["documents"]]
    assert paths == files  # every document once, in order
    assert res["totals"]["failed"] == 0 and res["totals"]["built"] == 3
    assert hashes(res) == hashes(local_build)


@pytest.fixture(scope="module")
def long_pdf(tmp_path_factory) -> str:
    from mage_gym.data.synth import SynthConfig, generate_corpus

    root = tmp_path_factory.mktemp("ray_long")
    generate_corpus(root, 1, seed=11, cfg=SynthConfig(min_pages=12, max_pages=12, questions_per_doc=2), workers=1,
                    progress=False)
    (pdf,) = pdfs(root)
    return pdf


@pytest.fixture(scope="module")
def long_local_hashes(long_pdf) -> dict[str, str]:
    """The long document built locally: in-process (one chunk), and as 3 chunks (pages 0-3, 4-7, 8-11) in a
    one-thread worker process, as each Ray task runs them (torch precisions batch texts, so the vectors' last
    digits may depend on the chunks and the thread count; int8 encodes one text at a time)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from mage_gym.bench.graph_jobs import graph_hash
    from mage_gym.graph.build import build_graph
    from mage_gym.graph.workers import init_worker

    out = {"workers1": graph_hash(build_graph(long_pdf, parser="fast", cache=False, workers=1, progress=False))}
    pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("forkserver"), initializer=init_worker,
                               initargs=(1, True))
    try:
        out["chunks3"] = graph_hash(build_graph(long_pdf, parser="fast", cache=False, chunk_executor=pool, chunks=3,
                                                progress=False))
    finally:
        pool.shutdown()
    return out


# chunk_pages=5: the 12-page document becomes 3 chunk tasks of 4 pages; the corpus's 4-5 page ones stay one task each
CHUNKED = {**RAY, "chunk_pages": 5}


def spy_chunk_calls(monkeypatch) -> list[tuple[str, object]]:
    """Every call the driver sends to Ray through RayChunks: (function name, page range or None)."""
    import mage_gym.bench.distributed.build as B

    calls: list[tuple[str, object]] = []
    submit = B.RayChunks.submit

    def spy(self, fn, *args):
        calls.append((fn.__name__, args[3] if fn.__name__ == "parse_and_embed_chunk" else None))
        return submit(self, fn, *args)

    monkeypatch.setattr(B.RayChunks, "submit", spy)
    return calls


def test_a_long_document_is_built_from_page_chunk_tasks(cluster, corpus, local_build, long_pdf, long_local_hashes,
                                                        tmp_path, monkeypatch) -> None:
    from mage_gym.graph.embed import resolve_precision

    calls = spy_chunk_calls(monkeypatch)
    files = pdfs(corpus) + [long_pdf]
    res = build(files, tmp_path / "cache", CHUNKED)
    assert res["totals"]["built"] == 4 and res["totals"]["failed"] == 0
    assert calls == [("page_count", None), *(("parse_and_embed_chunk", list(range(lo, lo + 4))) for lo in (0, 4, 8))]
    got = hashes(res)
    assert got[long_pdf] == long_local_hashes["chunks3"]  # the local build with the same chunks
    assert {p: got[p] for p in pdfs(corpus)} == hashes(local_build)  # the short ones: one task each, as before
    if resolve_precision(None, "cpu") == "int8":  # one text per encoder call: chunks cannot change a vector
        assert long_local_hashes["workers1"] == long_local_hashes["chunks3"] == got[long_pdf]
    again = build([long_pdf], tmp_path / "cache", CHUNKED)  # the driver wrote the assembled graph to the cache
    assert again["totals"]["cached"] == 1 and hashes(again)[long_pdf] == got[long_pdf]


def test_a_chunk_task_that_kills_its_process_is_retried(cluster, long_pdf, long_local_hashes, tmp_path,
                                                        monkeypatch) -> None:
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_ONCE_ENV, f"{Path(long_pdf).name}#2:{marker}")  # call 2: the second page chunk
    res = build([long_pdf], tmp_path / "cache", CHUNKED)
    assert marker.exists(), "the fault hook never fired: the test would prove nothing"
    assert res["totals"]["built"] == 1 and res["totals"]["failed"] == 0
    assert hashes(res) == {long_pdf: long_local_hashes["chunks3"]}


def test_a_chunk_task_without_retries_fails_its_document_only(cluster, long_pdf, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(KILL_ONCE_ENV, f"{Path(long_pdf).name}#1:{tmp_path / 'killed'}")
    res = build([long_pdf], tmp_path / "cache", {**CHUNKED, "max_retries": 0})
    (rec,) = res["documents"]
    assert rec["error"] and "after retries" in rec["error"] and rec["graph_hash"] is None


def entries_by_document(cache: Path) -> dict[str, Path]:
    """The graph cache's entry folders, by the path of the document each one holds."""
    from mage_gym.graph.store import RECORDS

    return {json.loads((d / RECORDS).read_text())["source"]["path"]: d for d in cache.iterdir()
            if (d / RECORDS).is_file()}


def test_a_build_task_never_trusts_a_partial_cache_entry(cluster, corpus, local_build, local_cache, tmp_path,
                                                         monkeypatch) -> None:
    import shutil

    import numpy as np

    import mage_gym.bench.corpus as corpus_mod
    from mage_gym.graph.store import MANIFEST

    files = pdfs(corpus)
    cache = tmp_path / "cache"
    shutil.copytree(local_cache, cache)
    entries = entries_by_document(cache)
    assert sorted(entries) == files
    # what a writer that died, or a damaged disk, leaves behind in the shared folder
    (entries[files[0]] / MANIFEST).unlink()  # every array written, the completion marker not
    vec = entries[files[1]] / "element_vectors.npy"
    vec.write_bytes(vec.read_bytes()[: vec.stat().st_size // 2])  # a truncated array
    pv = entries[files[2]] / "page_vectors.npy"
    np.save(pv, np.zeros_like(np.load(pv)))  # a readable array of the right shape, the wrong bytes
    # the driver's own cache check is skipped, so each entry is first met by a Ray task (on either node)
    monkeypatch.setattr(corpus_mod, "try_cached", lambda p, cfg: None)
    res = build(files, cache, RAY)
    assert [r["cached"] for r in res["documents"]] == [False] * 3 and res["totals"]["failed"] == 0
    assert hashes(res) == hashes(local_build)
    assert entries_by_document(cache) == entries and all((d / MANIFEST).is_file() for d in entries.values())
    again = build(files, cache, RAY)  # the rebuilt entries are whole: the tasks now load them
    assert [r["cached"] for r in again["documents"]] == [True] * 3 and hashes(again) == hashes(local_build)


def test_ray_build_without_retries_reports_the_dead_task(cluster, corpus, tmp_path, monkeypatch) -> None:
    files = pdfs(corpus)[:1]
    monkeypatch.setenv(KILL_ONCE_ENV, f"{Path(files[0]).name}:{tmp_path / 'killed'}")
    res = build(files, tmp_path / "cache", {**RAY, "max_retries": 0})
    (rec,) = res["documents"]
    assert rec["error"] and "after retries" in rec["error"] and rec["graph_hash"] is None


# --- benchmark ---------------------------------------------------------------------------------------------


def compose(*overrides: str) -> dict:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return plain(hydra_compose(config_name="benchmark", overrides=list(overrides)))


def rows(out: Path) -> list[dict]:
    lines = (out / "episodes.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k != "wall_s"} for x in lines]


def traces(out: Path) -> dict[str, list[dict]]:
    from mage_gym.trace import read_jsonl

    def strip(r: dict) -> dict:
        return {k: v for k, v in r.items() if "wall" not in k and "time" not in k and k != "seconds"}

    return {str(p.relative_to(out)): [strip(r) for r in read_jsonl(p)] for p in sorted(out.rglob("traces/**/*.jsonl"))}


@pytest.fixture(scope="module")
def bench_cfg(corpus) -> dict:
    return compose("dataset=synth", f"dataset.root={corpus}", "policies=[topk_page,heuristic]", "retriever=bm25",
                   "logger=none", *SMALL_ENV)


@pytest.fixture(scope="module")
def local_bench(bench_cfg, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench_local")
    benchmark(bench_cfg, out, registry=REGISTRY)
    return out


def test_benchmark_on_ray_actors_equals_local(cluster, bench_cfg, local_bench, tmp_path) -> None:
    assert bench_cfg["executor"] == {"name": "local"}  # the default stays local
    local = rows(local_bench)
    assert 30 <= len(local) <= 50 and not any(r.get("failed") for r in local)
    res = benchmark({**bench_cfg, "executor": RAY}, tmp_path, registry=REGISTRY)
    assert rows(tmp_path) == local
    assert traces(tmp_path) == traces(local_bench) and traces(local_bench)
    local_runs = json.loads((local_bench / "results.json").read_text())["runs"]
    def means(runs: list[dict]) -> list[dict]:
        return [{k: v for k, v in r["metrics"].items() if k != "wall_s"} for r in runs]

    assert means(res["runs"]) == means(local_runs)


def test_actor_killed_mid_episode_loses_and_duplicates_nothing(cluster, bench_cfg, local_bench, tmp_path,
                                                              monkeypatch) -> None:
    local = [r for r in rows(local_bench) if r["policy"] == "topk_page"]
    victim = local[len(local) // 2]["episode_id"]
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_ONCE_ENV, f"{victim}:{marker}")
    benchmark({**bench_cfg, "policies": ["topk_page"], "executor": RAY}, tmp_path / "out", registry=REGISTRY)
    assert marker.exists(), "the fault hook never fired: the test would prove nothing"
    assert rows(tmp_path / "out") == local  # every episode once, the killed one replayed by the restarted actor


# --- several model servers behind the actors ------------------------------------------------------------------


class FakeModelServer:
    """An OpenAI-compatible chat server (stdlib, a thread) counting its requests and the most it served at once.

    Replies are a pure function of the request, like a deterministic model's,
    so which server answered cannot change a record.
    """

    MODEL = "fake-model"

    def __init__(self, delay: float) -> None:
        import threading
        import time
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.lock = threading.Lock()
        self.in_flight = self.peak = self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def reply(self, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self.reply({"data": [{"id": FakeModelServer.MODEL}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.in_flight += 1
                    server.requests += 1
                    server.peak = max(server.peak, server.in_flight)
                try:
                    time.sleep(delay)
                    user = str(body["messages"][1]["content"])
                finally:
                    with server.lock:
                        server.in_flight -= 1
                self.reply({"choices": [{"message": {"role": "assistant", "content": f"Answer: {len(user) % 7}"}}]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def model_servers():
    servers = [FakeModelServer(delay=0.05), FakeModelServer(delay=0.05)]
    yield servers
    for s in servers:
        s.close()


def test_episode_actors_spread_requests_over_servers_with_a_limit_per_server(cluster, corpus, model_servers,
                                                                            tmp_path) -> None:
    a, b = model_servers
    # the LLM evaluator calls its backend every round and the reader once per episode: both go to the servers
    cfg = compose("dataset=synth", f"dataset.root={corpus}", "policies=[llm_evaluator]", "retriever=bm25",
                  "logger=none", "equal_cost.enabled=false", *SMALL_ENV,
                  "reader=openai", f"reader.base_url={a.url}", f"reader.model={a.MODEL}", "reader.vision=false",
                  "reader.cache=false", "policy.llm_evaluator.backend.reader=openai",
                  f"policy.llm_evaluator.backend.model={a.MODEL}", f"+policy.llm_evaluator.backend.base_url={a.url}",
                  "+policy.llm_evaluator.backend.vision=false", "policy.llm_evaluator.cache=false",
                  "policy.llm_evaluator.limit=10")
    benchmark(cfg, tmp_path / "local", registry=REGISTRY)  # one process, every request to the first server
    local_requests = a.requests
    assert local_requests >= 20 and b.requests == 0
    a.requests = a.peak = 0
    # four actors on two servers, one request in flight per server: actors 0 and 2 share server a, 1 and 3 server b
    on_ray = {**RAY, "cpus_per_task": 0.5, "actors": 4, "servers": [a.url, b.url], "server_concurrency": 1}
    benchmark({**cfg, "executor": on_ray}, tmp_path / "ray", registry=REGISTRY)
    assert a.requests > 0 and b.requests > 0, "both servers get requests"
    assert a.requests + b.requests == local_requests
    assert a.peak == 1 and b.peak == 1, "the limit holds per server across actors (and nodes)"
    def untimed(out: Path) -> list[dict]:
        return [{**r, "evaluator": {k: v for k, v in r["evaluator"].items() if k != "model_seconds"}}
                for r in rows(out)]

    assert untimed(tmp_path / "ray") == untimed(tmp_path / "local")  # which server answered changes no record


def test_server_slots_free_what_a_dead_process_held(cluster) -> None:
    from mage_gym.bench.distributed.servers import start_slots

    slots = start_slots(ray, ["http://s1/v1"], 1)
    try:
        assert ray.get(slots.acquire.remote("http://s1/v1", "actor-a", 100))
        waiting = slots.acquire.remote("http://s1/v1", "actor-b", 200)  # the server is full: b waits
        ready, _ = ray.wait([waiting], timeout=0.5)
        assert not ready
        ray.get(slots.register.remote("actor-a", 101))  # actor a restarted: process 100 died holding the slot
        assert ray.get(waiting, timeout=10)
        ray.get(slots.release.remote("http://s1/v1", "actor-b", 200))
        assert not ray.get(slots.acquire.remote("http://s1/v1", "actor-a", 100))  # the dead process gets nothing
        assert ray.get(slots.stats.remote())["http://s1/v1"] == {"requests": 2, "peak_in_flight": 1, "limit": 1}
    finally:
        ray.kill(slots)


# --- configuration and the default path ----------------------------------------------------------------------


def test_graph_hash_changes_with_the_vectors_and_edges() -> None:
    import dataclasses

    from mage_gym.bench.graph_jobs import graph_hash
    from mage_gym.testing import make_toy_graph

    g = make_toy_graph(n_pages=3, elements_per_page=2, dim=8, seed=0)
    same = make_toy_graph(n_pages=3, elements_per_page=2, dim=8, seed=0)
    assert graph_hash(g) == graph_hash(same)
    vec = g.element_vectors.copy()
    vec[0, 0] += 1e-3
    assert graph_hash(dataclasses.replace(g, element_vectors=vec)) != graph_hash(g)
    assert graph_hash(dataclasses.replace(g, edge_weight=g.edge_weight * 0.5)) != graph_hash(g)


def test_executor_configs_compose_and_match_the_code() -> None:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from mage_gym.bench.distributed.cluster import RAY_DEFAULTS, ray_options

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        local = plain(hydra_compose(config_name="build_graphs"))["executor"]
        on_ray = plain(hydra_compose(config_name="build_graphs", overrides=["executor=ray"]))["executor"]
        bench = plain(hydra_compose(config_name="benchmark", overrides=["executor=ray"]))["executor"]
    assert local == {"name": "local"}
    assert on_ray == bench == ray_options(on_ray) and set(on_ray) == set(RAY_DEFAULTS)
    with pytest.raises(ValueError, match="unknown executor options"):
        ray_options({**on_ray, "adress": "auto"})


def test_default_build_never_imports_ray(corpus, tmp_path) -> None:
    import subprocess
    import sys

    code = f"""
import sys
from hydra import compose, initialize_config_dir
from mage_gym.bench.config import plain
from mage_gym.bench.corpus import build_corpus
with initialize_config_dir(config_dir={str(REPO / 'conf')!r}, version_base=None):
    cfg = plain(compose(config_name="build_graphs", overrides=["parser=fast", "workers=1"]))
cfg.pop("hydra", None)
cfg.update(files=[{pdfs(corpus)[0]!r}], cache_dir={str(tmp_path / 'cache')!r})
res = build_corpus(cfg, progress=False)
assert res["totals"]["built"] == 1 and res["documents"][0]["graph_hash"], res
assert "ray" not in sys.modules, "the local path imported ray"
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]


def test_a_worker_with_other_builder_code_is_refused(cluster, corpus, tmp_path) -> None:
    import mage_gym.bench.distributed.build as B
    from mage_gym.bench.distributed.episodes import release_actors

    release_actors()  # pooled episode actors of earlier tests hold the CPUs
    ref = ray.remote(B._build_task).remote(pdfs(corpus)[0], {}, {}, 1, "not-a-version")
    with pytest.raises(Exception, match="graph version"):
        ray.get(ref)
