"""policies.training.fast_learn: threads per phase, no per-call distribution checks, the same learning."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import mage_gym.env  # noqa: F401 - registers MageRAG-v0
from policies.training.fast_learn import learn, unchecked_distributions
from mage_gym.env import EnvEpisode
from mage_gym.testing import hash_query_fn
from mage_gym.testing import toy_quote_pairs

import torch  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from torch.distributions import Distribution  # noqa: E402

HPARAMS = {"n_steps": 64, "batch_size": 32, "n_epochs": 2}


@pytest.fixture(scope="module")
def pairs() -> list[EnvEpisode]:
    return toy_quote_pairs(n_questions=8, seed=5, prefix="fl-q")


def model_for(pairs):
    from policies.ppo import build_model

    env = gym.make("MageRAG-v0", episodes=pairs, K=16, budget={"k": 2, "m": 2, "M": 6, "T": 3, "B": 4},
                   retriever="bm25", query_fn=hash_query_fn(16), render_mode="text")
    return build_model(env, seed=0, hparams=HPARAMS)


class Record(BaseCallback):
    """Records torch's thread count and the distribution-check default while collecting."""

    def __init__(self) -> None:
        super().__init__()
        self.rollout: set[tuple[int, bool]] = set()

    def _on_step(self) -> bool:
        self.rollout.add((torch.get_num_threads(), bool(Distribution._validate_args)))
        return True


def test_threads_per_phase_and_everything_restored(pairs, monkeypatch) -> None:
    torch.set_num_threads(1)
    model = model_for(pairs)
    seen_in_update: set[tuple[int, bool]] = set()
    train = model.train

    def recording_train() -> None:
        seen_in_update.add((torch.get_num_threads(), bool(Distribution._validate_args)))
        train()

    monkeypatch.setattr(model, "train", recording_train)
    rec = Record()
    checks_before = Distribution._validate_args
    learn(model, 128, rec, rollout_threads=1, update_threads=2)
    assert rec.rollout == {(1, False)}
    assert seen_in_update == {(2, False)}
    assert torch.get_num_threads() == 1 and Distribution._validate_args == checks_before


def test_same_parameters_as_plain_learn_with_one_thread(pairs) -> None:
    """Only the checks are skipped: with one thread in both phases the weights come out bit-identical."""
    torch.set_num_threads(1)
    start = model_for(pairs).policy.state_dict()
    a = model_for(pairs)  # built right before its learn: the model's seed also resets torch's global generator
    a.learn(128)
    b = model_for(pairs)
    learn(b, 128, update_threads=1)
    sa, sb = a.policy.state_dict(), b.policy.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], start[k]) for k in sa)  # it did learn


def test_non_finite_rollout_is_an_error(pairs) -> None:
    class Poison(BaseCallback):
        def _on_rollout_end(self) -> None:
            self.model.rollout_buffer.values[0, 0] = np.nan

        def _on_step(self) -> bool:
            return True

    torch.set_num_threads(1)
    with pytest.raises(FloatingPointError, match="non-finite values"):
        learn(model_for(pairs), 64, [Poison()], update_threads=1)
    assert torch.get_num_threads() == 1


def test_unchecked_distributions_restores_on_error() -> None:
    before = Distribution._validate_args
    with pytest.raises(RuntimeError):
        with unchecked_distributions():
            assert Distribution._validate_args is False
            raise RuntimeError("boom")
    assert Distribution._validate_args == before
