"""The privileged greedy oracle: gold only through the privileged view, full recall where slots allow it."""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.env import MageRAGEnv, PrivilegedAccessError
from mage_gym.testing import hash_query_fn, toy_episodes
from policies.oracle import OraclePolicy, privileged_row
from mage_gym.bench.play import run_episode
from policies.topk_page import TopKPagePolicy

QF = hash_query_fn(16)


def _env(privileged: bool = True, **kw) -> MageRAGEnv:  # noqa: ANN003
    kw.setdefault("budget", {"k": 1})
    return MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=48, privileged=privileged, **kw)


def test_oracle_refuses_an_env_without_privileged_access() -> None:
    env = _env(privileged=False)
    with pytest.raises(PrivilegedAccessError):
        run_episode(env, OraclePolicy(env), episode_id="page")
    with pytest.raises(RuntimeError, match="needs its env"):
        run_episode(_env(), OraclePolicy(), episode_id="page")


@pytest.mark.parametrize("episode_id", ["elem", "page", "region"])
def test_oracle_covers_gold_in_visual_mode(episode_id: str) -> None:
    env = _env(budget={"k": 2})
    base = run_episode(env, TopKPagePolicy(), episode_id=episode_id)
    res = run_episode(env, OraclePolicy(env), episode_id=episode_id)
    assert res.invalid == 0 and not res.errors
    assert res.metrics["evidence_page_recall"] == 1.0, res.metrics
    if episode_id == "region":  # the gold page is a candidate, not an entry page: the oracle fetches it
        assert base.metrics["evidence_page_recall"] == 0.0 and res.metrics["pages_rendered"] == 3


def test_oracle_stops_when_no_gold_is_in_the_slots() -> None:
    """Greedy over the slots: with one entry page far from the gold, nothing gold is a candidate."""
    env = _env(budget={"k": 1})
    policy = OraclePolicy(env)
    res = run_episode(env, policy, episode_id="elem")
    assert res.decisions == 1 and policy.stats == {"stops_no_gold_in_slots": 1}


#: Page texts cut at 5 characters: in text mode an active page then covers nothing, only opened elements do.
CUT = {"max_opened_chars": 5}


def test_oracle_opens_gold_elements_in_text_mode_when_page_texts_are_cut() -> None:
    env = _env(render_mode="text", budget={"k": 2}, render_config=CUT)
    policy = OraclePolicy(env)
    res = run_episode(env, policy, episode_id="elem")
    assert res.metrics["evidence_page_recall"] == 1.0
    assert policy.stats.get("opens", 0) >= 1  # element gold is covered by an opened node
    assert res.metrics["element_recall"] == 1.0, res.metrics


def test_oracle_opens_an_element_of_page_level_gold_when_page_texts_are_cut() -> None:
    """An active page whose text was cut covers nothing; the oracle opens an element of it."""
    env = _env(render_mode="text", budget={"k": 8}, render_config=CUT)  # every page is an entry page
    policy = OraclePolicy(env)
    res = run_episode(env, policy, episode_id="page")
    assert res.invalid == 0 and policy.stats.get("opens", 0) == 1 and policy.stats.get("stops_all_covered") == 1
    assert res.metrics["evidence_page_recall"] == 1.0 and res.components["support"] == 1.0
    base = run_episode(env, TopKPagePolicy(), episode_id="page")  # the same pages, nothing opened
    assert base.metrics["evidence_page_recall"] == 0.0 and base.components["support"] == 0.0


def test_text_mode_page_text_covers_page_level_gold_for_oracle_and_topk_alike() -> None:
    env = _env(render_mode="text", budget={"k": 8})  # whole page texts: an active gold page is covered
    policy = OraclePolicy(env)
    res = run_episode(env, policy, episode_id="page")
    assert policy.stats == {"stops_all_covered": 1} and res.metrics["evidence_page_recall"] == 1.0
    base = run_episode(env, TopKPagePolicy(), episode_id="page")
    assert base.metrics["evidence_page_recall"] == 1.0 and base.components["support"] == 1.0


def test_oracle_stops_at_once_without_gold() -> None:
    env = _env()
    policy = OraclePolicy(env)
    res = run_episode(env, policy, episode_id="unans")
    assert res.decisions == 1 and res.invalid == 0


def test_oracle_spends_no_more_than_needed() -> None:
    """Greedy covering: one gold page outside the entry pages costs exactly one activation."""
    env = _env(budget={"k": 2})
    policy = OraclePolicy(env)
    run_episode(env, policy, episode_id="region")
    assert policy.stats == {"activations": 1, "stops_all_covered": 1}


def test_rows_are_marked_privileged() -> None:
    assert OraclePolicy.privileged is True
    assert privileged_row({"policy": "oracle", "recall": np.float64(1.0)})["privileged"] is True
