"""experiments/perf/perf_update.py: the matmul FLOP count, the profiler split and the update-cost record."""
from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from experiments.perf.perf_update import gemm_rate, matmul_flops, profiled_split, update_cost
import mage_gym.env  # noqa: F401 - registers MageRAG-v0
from mage_gym.testing import hash_query_fn
from mage_gym.testing import toy_quote_pairs


def test_matmul_flops_counts_two_mnk_per_product() -> None:
    layer = torch.nn.Linear(3, 5)
    x = torch.randn(4, 3)
    assert matmul_flops(lambda: layer(x)) == 2 * 4 * 3 * 5
    assert matmul_flops(lambda: layer(x).sum().backward()) == 2 * (2 * 4 * 3 * 5)  # forward, d(weight)
    x.requires_grad_(True)
    assert matmul_flops(lambda: layer(x).sum().backward()) == 3 * (2 * 4 * 3 * 5)  # and d(input)
    assert matmul_flops(lambda: torch.relu(x)) == 0


def test_profiled_split_and_gemm_rate() -> None:
    a, b = torch.randn(256, 64), torch.randn(64, 64)
    total, matmul = profiled_split(lambda: [torch.relu(a @ b) for _ in range(5)])
    assert 0 < matmul <= total
    assert gemm_rate(256, 64, 64, min_s=0.05) > 0


@pytest.fixture(scope="module")
def tiny_model():
    from policies.ppo import build_model

    def make(n_epochs: int):
        pairs = toy_quote_pairs(n_questions=6, element=0, seed=3, prefix="pu-q")
        env = gym.make("MageRAG-v0", episodes=pairs, K=8, budget={"k": 2, "m": 2, "M": 6, "T": 3, "B": 4},
                       retriever="bm25", query_fn=hash_query_fn(16), render_mode="text")
        model = build_model(env, seed=0, hparams={"n_steps": 32, "batch_size": 16, "n_epochs": n_epochs})
        model.learn(32)  # a real rollout in the buffer
        return model

    return make


def test_update_cost_scales_with_epochs(tiny_model) -> None:
    one, two = update_cost(tiny_model(1), threads=1, repeats=2), update_cost(tiny_model(2), threads=1, repeats=2)
    assert one["samples_per_update"] == 32 and one["gemm_shape"] == [16 * 8, 64, 64]
    assert two["matmul_gflop"] == pytest.approx(2 * one["matmul_gflop"])  # the same minibatches, twice
    assert (one["minibatches"], two["minibatches"]) == (2, 4)  # 32 samples in minibatches of 16, per epoch
    for row in (one, two):
        assert row["matmul_gflop"] > 0 and 0 < row["matmul_share"] <= 1 and len(row["update_s_all"]) == 2
        assert row["floor_s"] == pytest.approx(row["matmul_gflop"] / row["gemm_gflop_s"])
        assert row["call_overhead_s"] > 0
        assert row["overhead_s"] == pytest.approx(row["call_overhead_s"] * row["minibatches"])
        assert row["per_8192_steps"]["update_s"] == pytest.approx(row["update_s"] * 8192 / 32)
