"""The env's constructor: a small config object plus the few objects that are not settings (issue 32).

``MageRAGEnv(episodes, config=None, *, reader, retriever, query_fn, privileged, **settings)``:
settings are :class:`EnvConfig` fields (given as a record, a mapping or keywords), an unknown name is a
TypeError naming the valid ones, reader and retriever are a name, a mapping ``{name, **options}`` or an
object, and ``gym.make`` keeps recording (and rebuilding from) what it was given.
"""
from __future__ import annotations

import copy
import inspect
from dataclasses import replace

import gymnasium as gym
import pytest

import mage_gym  # noqa: F401 - registers MageRAG-v0
from mage_gym.env import Budget, EnvConfig, MageRAGEnv
from mage_gym.reward import RewardConfig
from mage_gym.testing import hash_query_fn, toy_episodes

QF = hash_query_fn(16)


def test_the_constructor_takes_a_config_and_the_few_objects_that_are_not_settings() -> None:
    params = inspect.signature(MageRAGEnv.__init__).parameters
    named = [n for n, p in params.items() if n != "self" and p.kind != p.VAR_KEYWORD]
    assert named == ["episodes", "config", "reader", "retriever", "query_fn", "privileged"]
    assert any(p.kind == p.VAR_KEYWORD for p in params.values())  # settings: EnvConfig fields


def test_defaults_are_the_experiments_settings() -> None:
    cfg = EnvConfig()
    assert cfg.K == 64 and cfg.budget == Budget() == Budget(5, 4, 24, 6, 16) and cfg.render_mode == "visual"
    assert cfg.reward == RewardConfig() and cfg.reward.lambda_cost == 1.0  # was 0.1 in the class
    env = MageRAGEnv(toy_episodes(), query_fn=QF)
    assert env.config == cfg and env.reward_config.lambda_cost == 1.0


def test_settings_as_a_record_a_mapping_or_keywords_build_the_same_env() -> None:
    record = EnvConfig(K=16, budget={"k": 2, "m": 2}, render_mode="text", reward={"lambda_cost": 0.5})
    a = MageRAGEnv(toy_episodes(), record, query_fn=QF)
    b = MageRAGEnv(toy_episodes(), {"K": 16, "budget": {"k": 2, "m": 2}, "render_mode": "text",
                                    "reward": {"lambda_cost": 0.5}}, query_fn=QF)
    c = MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=16, budget=Budget(k=2, m=2), render_mode="text",
                   reward=RewardConfig(lambda_cost=0.5))
    assert a.config == b.config == c.config == record
    assert (a.K, a.budget.k, a.render_mode, a.reward_config.lambda_cost) == (16, 2, "text", 0.5)
    over = MageRAGEnv(toy_episodes(), record, query_fn=QF, K=8)  # keywords override the record
    assert over.K == 8 and over.config == replace(record, K=8) and over.budget.k == 2


def test_an_unknown_setting_names_the_valid_ones() -> None:
    with pytest.raises(TypeError, match=r"unknown setting\(s\) \['budgt'\]; valid settings: K, budget, render_mode"):
        MageRAGEnv(toy_episodes(), query_fn=QF, budgt={"k": 1})
    with pytest.raises(TypeError, match="unknown setting"):
        MageRAGEnv(toy_episodes(), {"K": 8, "reader_cfg": {}}, query_fn=QF)  # folded into reader= mappings
    with pytest.raises(TypeError, match="unknown reward setting"):
        EnvConfig(reward={"lambda_costs": 1.0})
    with pytest.raises(TypeError, match="unknown render setting"):
        EnvConfig(render_config={"dpi": 72})
    with pytest.raises(ValueError, match="render_mode"):
        EnvConfig(render_mode="pixels")
    with pytest.raises(ValueError, match="budget"):
        EnvConfig(budget={"k": -1})


def test_reader_and_retriever_by_name_mapping_or_object() -> None:
    from mage_gym.readers.oracle import OracleReader
    from mage_gym.retrieval import get_retriever
    from mage_gym.retrieval.bm25 import BM25Retriever

    env = MageRAGEnv(toy_episodes(), query_fn=QF, K=8, reader={"name": "oracle"},
                     retriever={"name": "bm25", "k1": 1.2, "b": 0.5})
    assert isinstance(env.reader, OracleReader)
    assert isinstance(env.retriever, BM25Retriever) and (env.retriever.k1, env.retriever.b) == (1.2, 0.5)
    same = MageRAGEnv(toy_episodes(), query_fn=QF, K=8, retriever={"name": "bm25", "k1": 1.2, "b": 0.5})
    assert same.retriever is env.retriever  # one retriever per name and options per process: indexes shared
    assert MageRAGEnv(toy_episodes(), query_fn=QF, K=8, retriever="bm25").retriever.k1 == 1.5
    mine = get_retriever("bm25", k1=0.9)
    assert MageRAGEnv(toy_episodes(), query_fn=QF, K=8, retriever=mine).retriever is mine
    with pytest.raises(ValueError, match="unknown retriever"):
        MageRAGEnv(toy_episodes(), query_fn=QF, K=8, retriever={"name": "bm52"})


def test_gym_make_records_the_config_and_rebuilds_the_same_env() -> None:
    record = EnvConfig(K=8, budget={"k": 1})
    env = gym.make("MageRAG-v0", episodes=toy_episodes(), config=record, query_fn=QF, retriever={"name": "bm25"},
                   render_mode="text")
    assert env.unwrapped.config == replace(record, render_mode="text")
    again = gym.make(copy.deepcopy(env.spec))
    assert again.unwrapped.config == env.unwrapped.config
    assert again.unwrapped.retriever is env.unwrapped.retriever
    obs, _ = again.reset(seed=0)
    assert obs["nodes"].shape[0] == 8
    with pytest.raises(TypeError, match="TraceRecording"):
        MageRAGEnv(toy_episodes(), query_fn=QF, trace_path="x.jsonl")  # a gym.make keyword, not a setting
