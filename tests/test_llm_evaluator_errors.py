"""The LLM evaluator never masks a failing backend: typed errors, fixed counters, a failure-share limit."""
from __future__ import annotations

import gymnasium as gym
import pytest

import mage_gym.env  # noqa: F401 - registers MageRAG-v0
from mage_gym.env import EnvEpisode
from mage_gym.testing import hash_query_fn
from mage_gym.readers.errors import (BackendFailureRateError, ReaderConfigError, ReaderError, ReaderRequestError,
                                     ReaderUnavailableError, error_kind)
from mage_gym.testing import toy_quote_pairs
from policies import get_policy
from policies.llm_evaluator import STATS_KEYS, CallableBackend, LLMEvaluatorPolicy
from mage_gym.bench.play import run_episode

GOOD = '<agent_decision><selected_actions><action index="1"/></selected_actions></agent_decision>'
LENIENT = 'sure <agent_decision><selected_actions><action index=2></selected_actions>'
BUDGET = {"k": 2, "m": 2, "M": 20, "T": 4, "B": 4}


@pytest.fixture(scope="module")
def pairs() -> list[EnvEpisode]:
    return toy_quote_pairs(n_questions=6, seed=1, prefix="e")


def make_env(pairs):
    return gym.make("MageRAG-v0", episodes=pairs, K=16, budget=BUDGET, retriever="bm25", query_fn=hash_query_fn(16),
                    render_mode="text")


def scripted(script: list) -> CallableBackend:
    """Replies (str) or exceptions, in order; then GOOD forever."""
    queue = list(script)

    def fn(system: str, user: str) -> str:
        item = queue.pop(0) if queue else GOOD
        if isinstance(item, BaseException):
            raise item
        return item

    return CallableBackend(fn, "scripted")


def policy_with(script: list, **kw) -> LLMEvaluatorPolicy:
    return get_policy("llm_evaluator", backend=scripted(script), cache=False, **kw)


def check_invariants(st: dict) -> None:
    assert set(STATS_KEYS) <= set(st)
    assert st["evaluator_rounds"] == st["evaluator_calls"] + st["evaluator_cache_hits"] + st["evaluator_backend_errors"]
    assert st["evaluator_rounds"] == st["evaluator_strict"] + st["evaluator_lenient"] + st["evaluator_fallback"]
    assert st["evaluator_fallback"] == st["evaluator_unusable"] + st["evaluator_backend_errors"]


def test_transient_failures_fall_back_and_are_counted_not_reported_as_replies(pairs) -> None:
    down = ReaderUnavailableError("server http://x failed after 4 attempt(s): connection refused", cause="conn")
    policy = policy_with([down, GOOD, ConnectionRefusedError("refused"), LENIENT, "no idea"],
                         max_backend_error_share=1.0, backend_error_grace=10)
    env = make_env(pairs)
    results = [run_episode(env, policy, p.episode.episode_id, seed=i) for i, p in enumerate(pairs[:2])]
    st = policy.stats
    check_invariants(st)
    assert st["evaluator_backend_errors"] == 2 and st["evaluator_unusable"] == 1 and st["evaluator_lenient"] == 1
    assert st["evaluator_calls"] == st["evaluator_rounds"] - 2  # the two failures received no reply
    assert st["evaluator_requests"] == st["evaluator_rounds"]  # a callable backend: one request per call
    assert sum(r.metrics["evaluator_calls"] for r in results) == st["evaluator_rounds"]  # the env counts rounds
    assert policy.last_backend_error.startswith("ConnectionRefusedError")


@pytest.mark.parametrize("err", [ReaderConfigError("bad option"), ReaderRequestError("HTTP 400", status=400),
                                 KeyError("a bug")])
def test_config_errors_rejected_requests_and_bugs_raise_at_once(pairs, err) -> None:
    policy = policy_with([GOOD, err])
    env = make_env(pairs)
    with pytest.raises(type(err)):
        run_episode(env, policy, pairs[0].episode.episode_id, seed=0)
    assert policy.stats["evaluator_backend_errors"] == 0 and policy.stats["evaluator_calls"] == 1


def test_other_backend_failures_count_as_backend_errors(pairs) -> None:
    policy = policy_with([ReaderError("hf reader failed: RuntimeError: boom")], backend_error_grace=5)
    run_episode(make_env(pairs), policy, pairs[0].episode.episode_id, seed=0)
    assert policy.stats["evaluator_backend_errors"] == 1
    check_invariants(policy.stats)


def test_past_the_allowed_share_the_policy_raises_naming_backend_and_last_error(pairs) -> None:
    # grace 2, share 0.25: the 3rd failure raises unless it is at most a quarter of the calls.
    fail = [ReaderUnavailableError(f"timeout {i}", cause="timeout") for i in range(3)]
    policy = policy_with([GOOD] * 8 + fail[:2] + [GOOD] * 2 + [fail[2]], max_backend_error_share=0.25,
                         backend_error_grace=2)
    env = make_env(pairs)
    # 8 + 2 + 2 = 12 rounds with 2 failures, then the 13th call is the 3rd failure: 3/13 < 0.25 -> tolerated
    for i, p in enumerate(pairs):
        run_episode(env, policy, p.episode.episode_id, seed=i)
        if policy.stats["evaluator_rounds"] >= 13:
            break
    assert policy.stats["evaluator_backend_errors"] == 3
    strict = policy_with([GOOD, *fail], max_backend_error_share=0.05, backend_error_grace=2)
    with pytest.raises(BackendFailureRateError) as info:
        for i, p in enumerate(pairs):
            run_episode(env, strict, p.episode.episode_id, seed=i)
    err = info.value
    assert err.errors == 3 and err.attempts == 4 and error_kind(err) == "rate"
    assert "scripted evaluator backend failed on 3 of 4 calls" in str(err) and "timeout 2" in str(err)
    assert err.last_error.startswith("ReaderUnavailableError: timeout 2")


def test_error_kinds() -> None:
    assert [error_kind(e) for e in (ReaderConfigError("x"), ReaderRequestError("x"), ReaderUnavailableError("x"),
                                    ReaderError("x"), TimeoutError(), ValueError())] == \
        ["config", "request", "transient", "backend", "transient", None]


def test_bad_share_options_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="max_backend_error_share"):
        policy_with([], max_backend_error_share=1.5)
    with pytest.raises(ValueError, match="backend_error_grace"):
        policy_with([], backend_error_grace=-1)


# --- the benchmark: failed episodes, the failure limit, resuming, failing fast ----------------------------

def bench_cfg(**extra) -> dict:
    """``conf/benchmark.yaml`` composed by Hydra, on the toy pairs, running the LLM evaluator only."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from mage_gym.bench.config import plain

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        cfg = plain(compose(config_name="benchmark", overrides=["retriever=bm25", "logger=none"]))
    cfg["env"].update(K=16, render_mode="text", budget=dict(BUDGET), query_fn=hash_query_fn(16))
    cfg.update(policies=["llm_evaluator"], budgets=None, traces=False, **extra)
    return cfg


def by_question(pairs, fail: dict[int, BaseException], seen: list[str]) -> CallableBackend:
    """GOOD for every prompt, except an exception for the prompts of the episodes in ``fail``."""
    from xml.sax.saxutils import escape

    questions = {f"<question>{escape(p.episode.question)}</question>": i for i, p in enumerate(pairs)}

    def fn(system: str, user: str) -> str:
        i = next(i for q, i in questions.items() if q in user)  # the state's question line, not candidate text
        seen.append(pairs[i].episode.episode_id)
        if i in fail:
            raise fail[i]
        return GOOD

    return CallableBackend(fn, "scripted")


def table_cells(table: str) -> dict[str, str]:
    """The console table's last row by column name."""
    lines = table.splitlines()
    head, last = ([c.strip() for c in line.strip().strip("|").split("|")] for line in (lines[0], lines[-1]))
    return dict(zip(head, last))


def read_rows(out) -> list[dict]:
    import json

    return [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]


def test_a_failed_episode_is_recorded_the_run_goes_on_and_a_rerun_plays_only_it(pairs, tmp_path) -> None:
    import json

    from mage_gym.bench import results as R
    from mage_gym.bench.benchmark import benchmark
    from policies import REGISTRY

    rejected = ReaderRequestError("reader server http://x rejected the request: HTTP 400: prompt too long", status=400)
    seen: list[str] = []
    policy = get_policy("llm_evaluator", backend=by_question(pairs, {1: rejected, 3: rejected}, seen), cache=False)
    res = benchmark(bench_cfg(max_failed_episodes=2), tmp_path, episodes=pairs, policy_objects={"llm_evaluator": policy}, registry=REGISTRY)
    obj = json.loads((tmp_path / "results.json").read_text())
    R.validate_results(obj)
    run = obj["runs"][0]
    assert run["failed"] == {"episodes": 2, "episode_ids": ["e1", "e3"]} and run["metrics"]["episodes"] == 4
    rows = read_rows(tmp_path)
    assert [r["episode_id"] for r in rows] == [f"e{i}" for i in range(6)]
    for r in (rows[1], rows[3]):
        assert r["failed"] is True and r["error_kind"] == "request" and "HTTP 400" in r["error"]
    ev = run["evaluator"]
    assert ev["calls"] == sum(r["evaluator"]["calls"] for r in rows) == len([s for s in seen if s not in ("e1", "e3")])
    assert ev["backend_errors"] == 0  # a rejected request fails its episode; it is not a fallback
    cells = table_cells(res["table"])
    assert cells["failed"] == "2" and cells["evaluator calls/errors/strict/lenient/fallback"] == \
        f"{ev['calls']}/0/{ev['strict']}/{ev['lenient']}/{ev['fallback']}"

    # Re-run in the same directory with a backend that works: only e1 and e3 are played; the rest is kept.
    seen2: list[str] = []
    policy2 = get_policy("llm_evaluator", backend=by_question(pairs, {}, seen2), cache=False)
    benchmark(bench_cfg(max_failed_episodes=2), tmp_path, episodes=pairs, policy_objects={"llm_evaluator": policy2}, registry=REGISTRY)
    assert set(seen2) == {"e1", "e3"}
    rows2 = read_rows(tmp_path)
    assert [r["episode_id"] for r in rows2] == [f"e{i}" for i in range(6)] and not any(r.get("failed") for r in rows2)
    assert [rows2[i] for i in (0, 2, 4, 5)] == [rows[i] for i in (0, 2, 4, 5)]
    run2 = json.loads((tmp_path / "results.json").read_text())["runs"][0]
    assert run2["failed"]["episodes"] == 0 and run2["metrics"]["episodes"] == 6
    assert run2["evaluator"]["calls"] == len(seen) - seen.count("e1") - seen.count("e3") + len(seen2)


def test_past_max_failed_episodes_the_run_stops_with_what_finished_written(pairs, tmp_path) -> None:
    from mage_gym.bench.benchmark import RunStopped, benchmark
    from policies import REGISTRY

    rejected = ReaderRequestError("HTTP 400: prompt too long", status=400)
    policy = get_policy("llm_evaluator", backend=by_question(pairs, {1: rejected, 3: rejected}, []), cache=False)
    # default max_failed_episodes 0.05 of 6 episodes: at least one failure is tolerated, the second stops the run
    with pytest.raises(RunStopped, match=r"2 episodes failed, more than max_failed_episodes allows \(1\).*e3.*"
                                         r"HTTP 400.*hydra.run.dir="):
        benchmark(bench_cfg(), tmp_path, episodes=pairs, policy_objects={"llm_evaluator": policy}, registry=REGISTRY)
    rows = read_rows(tmp_path)
    assert [(r["episode_id"], bool(r.get("failed"))) for r in rows] == \
        [("e0", False), ("e1", True), ("e2", False), ("e3", True)]
    assert (tmp_path / "results.json").is_file()


def test_backend_down_past_its_share_stops_the_run_and_bad_backends_fail_before_any_episode(pairs, tmp_path) -> None:
    from mage_gym.bench.benchmark import RunStopped, benchmark
    from policies import REGISTRY
    from mage_gym.bench.config import ConfigError

    down = ReaderUnavailableError("reader server http://x failed after 4 attempt(s): connection refused")
    policy = get_policy("llm_evaluator", backend=by_question(pairs, dict.fromkeys(range(6), down), []), cache=False)
    with pytest.raises(RunStopped, match="scripted evaluator backend failed on 3 of 3 calls.*connection refused"):
        benchmark(bench_cfg(), tmp_path / "a", episodes=pairs, policy_objects={"llm_evaluator": policy}, registry=REGISTRY)

    cfg = bench_cfg()
    cfg["policy"]["llm_evaluator"]["backend"] = {"reader": "openai", "base_url": "http://127.0.0.1:9/v1",
                                                 "device": "cpu"}
    with pytest.raises(ConfigError, match=r"policy.llm_evaluator: openai reader backend .*'device'"):
        benchmark(cfg, tmp_path / "b", episodes=pairs, registry=REGISTRY)
    cfg["policy"]["llm_evaluator"]["backend"].pop("device")
    with pytest.raises(ConfigError, match=r"unreachable.*is the server running"):
        benchmark(cfg, tmp_path / "c", episodes=pairs, registry=REGISTRY)  # nothing listens on port 9
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()

    bad = get_policy("llm_evaluator", backend=by_question(pairs, {0: ReaderConfigError("HTTP 401 - check the key")}, []),
                     cache=False)
    with pytest.raises(ConfigError, match="HTTP 401"):
        benchmark(bench_cfg(), tmp_path / "d", episodes=pairs, policy_objects={"llm_evaluator": bad}, registry=REGISTRY)
