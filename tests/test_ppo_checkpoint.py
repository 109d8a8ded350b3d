"""A checkpoint's sidecar records what its inputs meant; loading it where they differ fails, naming the difference."""
from __future__ import annotations

import json

import gymnasium as gym
import pytest

import mage_gym.env  # noqa: F401 - registers MageRAG-v0
import policies.ppo as ppo
from mage_gym.data.episode import Episode
from mage_gym.env import NODE_FEATURES, NUMERIC_KEYS, EnvEpisode
from mage_gym.testing import hash_query_fn
from mage_gym.graph.store import GRAPH_VERSION
from mage_gym.testing import make_toy_graph
from policies import get_policy
from policies.ppo import CheckpointMismatch, build_model, save_checkpoint
from mage_gym.bench.play import run_episode

BUDGET = {"k": 2, "m": 2, "M": 6, "T": 3, "B": 3}


@pytest.fixture(scope="module")
def pairs() -> list[EnvEpisode]:
    g = make_toy_graph(n_pages=6, elements_per_page=3, dim=16, seed=4)
    return [EnvEpisode(Episode(episode_id=f"q{i}", benchmark="synth", doc_id="toy", source="<toy>",
                               question=g.elements[i * 3].text, answer="x", answer_format="Str",
                               evidence_pages=(i,), gold_node_ids=(g.elements[i * 3].node_id,)), g)
            for i in range(3)]


def make(pairs, K: int = 16, render_mode: str = "text", **kw) -> gym.Env:
    return gym.make("MageRAG-v0", episodes=pairs, K=K, budget=BUDGET, retriever="bm25", query_fn=hash_query_fn(16),
                    render_mode=render_mode, **kw)


@pytest.fixture(scope="module")
def ckpt(pairs, tmp_path_factory):
    model = build_model(make(pairs), hparams={"n_steps": 32, "batch_size": 16, "n_epochs": 1})
    return save_checkpoint(model, tmp_path_factory.mktemp("ck") / "ck", "maskable_ppo", 16,
                           extra={"render_mode": "text"})


def edited(ckpt, tmp_path, **changes):
    """A copy of ``ckpt`` whose sidecar has ``changes`` (None deletes a field)."""
    meta = json.loads(ckpt.with_suffix(".json").read_text())
    for k, v in changes.items():
        meta.pop(k) if v is None else meta.__setitem__(k, v)
    out = tmp_path / "edited.zip"
    out.write_bytes(ckpt.read_bytes())
    out.with_suffix(".json").write_text(json.dumps(meta))
    return str(out)


def test_the_sidecar_records_what_the_inputs_meant(ckpt, pairs) -> None:
    meta = json.loads(ckpt.with_suffix(".json").read_text())
    assert meta["node_features"] == list(NODE_FEATURES) and meta["observation_keys"] == sorted(NUMERIC_KEYS)
    assert meta["K"] == 16 and meta["render_mode"] == "text" and meta["graph_version"] == str(GRAPH_VERSION)
    res = run_episode(make(pairs), get_policy("ppo", checkpoint=str(ckpt)), "q0", seed=0)  # a match acts
    assert res.invalid == 0


def test_other_node_features_fail_naming_them(ckpt, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ppo, "NODE_FEATURES", (*NODE_FEATURES, "brand_new_feature"))
    with pytest.raises(CheckpointMismatch, match=r"node_features: .*added \['brand_new_feature'\]"):
        get_policy("ppo", checkpoint=str(ckpt))
    monkeypatch.setattr(ppo, "NODE_FEATURES", tuple(reversed(NODE_FEATURES)))
    with pytest.raises(CheckpointMismatch, match="other order from column 0"):
        get_policy("ppo", checkpoint=str(ckpt))
    monkeypatch.setattr(ppo, "NODE_FEATURES", tuple(NODE_FEATURES))
    with pytest.raises(CheckpointMismatch, match=r"removed \['retired_feature'\]"):
        get_policy("ppo", checkpoint=edited(ckpt, tmp_path, node_features=[*NODE_FEATURES, "retired_feature"]))


@pytest.mark.parametrize("field,value,match", [
    ("graph_version", "0", "graph_version: graph_version='0' in the checkpoint"),
    ("node_features", None, "node_features: not recorded in the sidecar"),
])
def test_graph_version_and_old_sidecars_fail_at_load(ckpt, tmp_path, field, value, match) -> None:
    path = edited(ckpt, tmp_path, **{field: value})
    with pytest.raises(CheckpointMismatch, match=match):
        get_policy("ppo", checkpoint=path)
    assert get_policy("ppo", checkpoint=path, allow_mismatch=[field]).meta[field if value else "K"] is not None


def test_env_differences_fail_at_reset_or_first_act(ckpt, pairs) -> None:
    with pytest.raises(CheckpointMismatch, match="K: K=16 in the checkpoint, K=24 now"):
        run_episode(make(pairs, K=24), get_policy("ppo", checkpoint=str(ckpt)), "q0", seed=0)
    with pytest.raises(CheckpointMismatch, match="render_mode='text' in the checkpoint, render_mode='visual' now"):
        get_policy("ppo", checkpoint=str(ckpt), render_mode="visual")  # asked for explicitly: refused at load
    with pytest.raises(CheckpointMismatch, match="render_mode='text' in the checkpoint, render_mode='visual' now"):
        run_episode(make(pairs, render_mode="visual"), get_policy("ppo", checkpoint=str(ckpt)), "q0", seed=0)
    keys = [k for k in NUMERIC_KEYS if k != "progress"]
    with pytest.raises(CheckpointMismatch, match=r"observation_keys: checkpoint \[.*'progress'"):
        run_episode(make(pairs, observation_keys=keys), get_policy("ppo", checkpoint=str(ckpt)), "q0", seed=0)


@pytest.mark.parametrize("mode", ["visual", "text", "elements"])
def test_the_checkpoints_render_mode_is_taken_when_none_is_asked(ckpt, tmp_path, mode) -> None:
    # a student trained in elements mode once played in the env's mode: only visual and text were taken over
    policy = get_policy("ppo", checkpoint=edited(ckpt, tmp_path, render_mode=mode))
    assert policy.render_mode == mode
