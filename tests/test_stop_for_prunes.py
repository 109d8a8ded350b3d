"""The oracle's ``make_room=stop`` variant, and the script that derives its transcripts by cutting the oracle's.

- the cut of an oracle transcript at its first prune equals what the oracle with ``make_room=stop`` records
  when it plays the same task through the chat (call ids aside: they count replies across episodes);
- rows without a prune are kept as they are; a cut row's outcome fields are null (the env never scored it);
- the script refuses rows of other teachers and files whose stops are answered in more than one way;
- ``make_room`` takes only its two values.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_helpers import toy_chat_env
import experiments.stop_for_prunes as mod

def _record(make_room: str, K: int) -> list[dict[str, Any]]:
    """The oracle's transcripts of every toy task through a chat that lists one candidate (so it must make room)."""
    from mage_gym.agent.transcripts import record_episode
    from mage_gym.bench.chat import policy_actor
    from policies import REGISTRY

    env = toy_chat_env(numeric_obs_in_info=True, privileged=True, max_candidates=1, K=K)
    actor, _ = policy_actor(env, "oracle", {"make_room": make_room}, REGISTRY)
    return [record_episode(env, actor, task=str(env.task_id(eid)), source="oracle", privileged=True).row()
            for eid in env.episode_ids]


def _without_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if k != "tool_call_id"}
        if m.get("tool_calls"):
            m["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} for c in m["tool_calls"]]
        out.append(m)
    return out


@pytest.mark.parametrize("K", [16, 64], ids=["slots_full_rule5", "list_full_chat"])
def test_the_cut_equals_what_the_stop_variant_plays(K: int) -> None:
    """K=16: the oracle's slots fill, it makes room by its rule 5; K=64: only the chat's list is full."""
    pruning, stopping = _record("prune", K), _record("stop", K)
    assert any("prune" in mod.call_names(m) for r in pruning for m in r["messages"]), "no prune to cut: a weak test"
    answer = mod.stop_answer(pruning + stopping)
    cut = [mod.stop_at_first_prune(r, answer) for r in pruning]
    assert any(changed for _, changed in cut)
    for (row, _), played in zip(cut, stopping):
        assert row["task"] == played["task"]
        assert _without_ids(row["messages"]) == _without_ids(played["messages"])
    assert not any("prune" in mod.call_names(m) for r in stopping for m in r["messages"])


def _call(name: str, cid: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "id": cid, "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _result(name: str, cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "name": name, "content": text}


def _row(*messages: dict[str, Any], source: str = "oracle") -> dict[str, Any]:
    return {"task": "t", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, *messages],
            "reward": 0.5, "metrics": {"evidence_page_recall": 1.0}, "components": {"support": 1.0},
            "source": source, "terminated": True}


STOP = "stop: stopped\n\nended"


def test_a_row_is_cut_at_its_first_prune_and_keeps_everything_before() -> None:
    row = _row(_call("activate", "c1", candidates=[1]), _result("activate", "c1", "ok"),
               _call("prune", "c2", ids=["p1"]), _result("prune", "c2", "pruned"),
               _call("activate", "c3", candidates=[2]), _result("activate", "c3", "ok"),
               _call("prune", "c4", ids=["p2"]), _result("prune", "c4", "pruned"),
               _call("stop", "c5"), _result("stop", "c5", STOP))
    answer = mod.stop_answer([row])
    new, changed = mod.stop_at_first_prune(row, answer)
    assert changed and new["messages"][:4] == row["messages"][:4]
    assert new["messages"][4:] == [_call("stop", "c2"), _result("stop", "c2", STOP)]
    assert new["reward"] is None and new["metrics"] is None and new["make_room"] == "stop"
    plain = _row(_call("stop", "c9"), _result("stop", "c9", STOP))
    assert mod.stop_at_first_prune(plain, answer) == (plain, False)


def test_the_script_refuses_other_teachers_and_mixed_stop_answers(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(_row(_call("stop", "c1"), _result("stop", "c1", STOP), source="ppo")) + "\n")
    with pytest.raises(SystemExit, match="only the oracle"):
        mod.main(["--transcripts", str(src), "--out", str(tmp_path / "out.jsonl")])
    two = [_row(_call("stop", "c1"), _result("stop", "c1", STOP)), _row(_call("stop", "c1"), _result("stop", "c1", "x"))]
    with pytest.raises(ValueError, match="one way"):
        mod.stop_answer(two)
    src.write_text("".join(json.dumps(r) + "\n" for r in [
        _row(_call("prune", "c1", ids=["p"]), _result("prune", "c1", "pruned"), _call("stop", "c2"),
             _result("stop", "c2", STOP)), _row(_call("stop", "c1"), _result("stop", "c1", STOP))]))
    summary = mod.main(["--transcripts", str(src), "--out", str(tmp_path / "out.jsonl")])
    assert (summary["cut"], summary["kept"]) == (1, 1)
    assert json.loads((tmp_path / "out.jsonl.json").read_text())["rows"] == 2


def test_make_room_takes_its_two_values() -> None:
    from policies.oracle import OraclePolicy

    assert OraclePolicy(make_room="stop").make_room == "stop"
    with pytest.raises(ValueError, match="make_room"):
        OraclePolicy(make_room="search")
