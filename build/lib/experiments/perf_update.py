"""How far PPO's gradient epochs are from their arithmetic floor on this machine.

Why: ``experiments/perf_train.py`` splits ``learn`` into rollout and
update, and on 2 CPU cores the update (``MaskablePPO.train``: ``n_epochs``
passes over the ``n_envs x n_steps`` samples in minibatches of
``batch_size``) is the larger share once the rollout is fast. Whether it
can get much faster without changing the network depends on how much of
its time is matrix multiplication, which only fewer FLOPs (a smaller net or
fewer epochs) or faster hardware (a GPU) reduce, and how much is the rest
(element-wise kernels, autograd, Adam, Python), which fusion could cut.
This script measures both on ``ppo.yaml``'s network and hyperparameters, so
the question is answered with figures, not guessed:

* ``matmul_gflop``: the matrix-multiply work of one ``train()`` call,
  counted by ``torch.utils.flop_counter.FlopCounterMode`` (every minibatch's
  forward and backward; Adam does no matmuls);
* ``update_s``: median wall time of ``train()`` over ``--repeats`` calls;
* ``matmul_s``: the self time of the matmul kernels (``aten::mm``,
  ``addmm``, ``bmm``, ``baddbmm``) in a ``torch.profiler`` trace of one
  ``train()``, and ``profiled_s`` the trace's total (the profiler adds its
  own overhead, so the share ``matmul_s / profiled_s`` is the figure to read);
* ``overhead_s``: the minibatches' fixed cost, ``minibatches x
  call_overhead_s`` (the forward and backward of a 2-sample minibatch:
  dispatch, autograd, Python; the optimizer step is not in it), and
  ``overhead_share`` its share of ``update_s``;
* ``gemm_gflop_s``: ``torch.mm`` alone on the update's dominant shape
  (``[batch_size * K, hidden] x [hidden, hidden]``), the rate a matmul of
  that shape reaches here with its operands in cache (in the update they
  mostly come from memory, so the floor below is a lower bound);
* ``floor_s = matmul_gflop / gemm_gflop_s``: the update if everything but
  its matmuls were free; ``per_8192_steps``: the update time and the floor
  scaled to 8,192 env steps (perf_train's default), to set beside its
  rollout times.

``--compile`` adds the figures with the slot-set extractor under
``torch.compile`` (and the build time), since fusing the element-wise
kernels is the obvious remedy to try.

The network's shapes come from the env config (K slots, node features), not
from the corpus, so the update costs the same on any corpus; the synthetic
``tiny`` corpus (generated into the cache when missing) fills the rollout
buffer with one real rollout first. Each thread count in ``--threads`` is
measured on the same model.

Run::

    .venv/bin/python experiments/perf_update.py                  # outputs/perf_update/results.json
    .venv/bin/python experiments/perf_update.py --threads 1,2 --repeats 5 --compile   # and torch.compile's figure
    .venv/bin/python experiments/perf_update.py -- policy.ppo.train.net.hidden=32   # a smaller net's floor
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

#: kernels counted as matrix multiplication in the profiler trace
MATMUL_KERNELS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def matmul_flops(fn: Any) -> int:
    """The matrix-multiply FLOPs of ``fn()`` (torch's FlopCounterMode: 2 x M x N x K per product)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def profiled_split(fn: Any) -> tuple[float, float]:
    """(total, matmul) self CPU seconds of ``fn()`` in a torch.profiler trace."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_KERNELS) / 1e6
    return total, matmul


def wall_times(fn: Any, repeats: int) -> list[float]:
    """Wall seconds of ``repeats`` calls of ``fn()``."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def gemm_rate(m: int, k: int, n: int, min_s: float = 0.5) -> float:
    """GFLOP/s of ``torch.mm`` on ``[m, k] x [k, n]`` float32 (warmed up, then timed for at least ``min_s``)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    out = torch.empty(m, n)
    for _ in range(5):
        torch.mm(a, b, out=out)
    calls, t0 = 0, time.perf_counter()
    while True:
        torch.mm(a, b, out=out)
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_s:
            return 2.0 * m * k * n * calls / elapsed / 1e9


def call_overhead_s(model: Any, repeats: int = 30) -> float:
    """Median wall seconds of one minibatch's forward and backward on 2 samples.

    Why: that is the part of every minibatch's cost that does not grow with
    the batch (about a thousand torch ops, each dispatched through Python and
    autograd); ``update_s`` minus it, once per minibatch, is what the batch
    size scales.
    """
    data = next(model.rollout_buffer.get(2))
    masks = {"action_masks": data.action_masks} if hasattr(data, "action_masks") else {}
    policy = model.policy

    def step() -> None:
        values, log_prob, entropy = policy.evaluate_actions(data.observations, data.actions.long().flatten(), **masks)
        (values.sum() + log_prob.sum() + (entropy.sum() if entropy is not None else 0)).backward()

    for _ in range(3):
        step()
    times = wall_times(step, repeats)
    policy.zero_grad(set_to_none=True)  # train() zeroes them before each backward anyway
    return statistics.median(times)


def update_cost(model: Any, threads: int, repeats: int) -> dict[str, Any]:
    """The figures of the module docstring for ``model.train()`` on its current rollout buffer, with ``threads``."""
    import torch

    from experiments.common.fast_learn import unchecked_distributions

    torch.set_num_threads(threads)
    hidden = int(model.policy.features_extractor.slot_enc[-2].out_features)
    K = int(model.observation_space["nodes"].shape[0])
    samples = int(model.n_steps) * int(model.n_envs)
    with unchecked_distributions():  # as fast_learn.learn trains
        model.train()  # warm-up: allocator, kernels
        flops = matmul_flops(model.train)
        times = wall_times(model.train, repeats)
        profiled, matmul = profiled_split(model.train)
        per_call = call_overhead_s(model)
    gemm = gemm_rate(int(model.batch_size) * K, hidden, hidden)
    update_s = statistics.median(times)
    calls = int(model.n_epochs) * -(-samples // int(model.batch_size))  # minibatches per update
    gflop = flops / 1e9
    per_8192 = 8192 / samples
    return {
        "threads": threads, "samples_per_update": samples, "matmul_gflop": gflop, "update_s": update_s,
        "update_s_all": times, "update_gflop_s": gflop / update_s, "profiled_s": profiled, "matmul_s": matmul,
        "matmul_share": matmul / max(1e-9, profiled), "gemm_shape": [int(model.batch_size) * K, hidden, hidden],
        "gemm_gflop_s": gemm, "floor_s": gflop / gemm, "minibatches": calls, "call_overhead_s": per_call,
        "overhead_s": per_call * calls, "overhead_share": per_call * calls / update_s,
        "per_8192_steps": {"update_s": update_s * per_8192, "floor_s": gflop / gemm * per_8192},
    }


def compiled_update_cost(model: Any, threads: int, repeats: int) -> dict[str, Any]:
    """:func:`update_cost` with the slot-set extractor under ``torch.compile`` (inductor, static shapes).

    Why measured: compiling could fuse the element-wise kernels that take
    most of the update. ``compile_s`` is the first ``train()`` call's extra
    time (tracing, code generation, C++ build) over the compiled steady state.
    The model is changed for good: run this last.
    """
    import torch

    from experiments.common.fast_learn import unchecked_distributions

    torch.set_num_threads(threads)
    fe = model.policy.features_extractor
    fe.forward = torch.compile(fe.forward, dynamic=False)
    with unchecked_distributions():
        first = wall_times(model.train, 1)[0]
    row = update_cost(model, threads, repeats)
    return {**row, "compiled": "features_extractor (torch.compile, dynamic=False)",
            "compile_s": max(0.0, first - row["update_s"])}


def build_model(overrides: Sequence[str], synth_docs: int, synth_seed: int) -> Any:
    """A MaskablePPO model of train.py's config on the synthetic ``tiny`` corpus, its rollout buffer filled once."""
    from experiments.common.config import quiet_libraries
    from experiments.common.fast_learn import learn
    from experiments.common.policy_options import policy_options
    from experiments.common.train_corpora import compose, corpus_episodes, training_setup
    from experiments.common.training import LEARNER, make_vec_env, training_env_factory
    from mage_gym.paths import cache_root
    from policies.ppo import build_model as build_ppo

    quiet_libraries()
    cfg = compose(["logger=none", "env.parser=fast", *overrides])
    root = cache_root() / "synth" / f"tiny_n{synth_docs}_s{synth_seed}"
    train, _, _ = corpus_episodes("synth", cfg, root, synth_docs, synth_seed, val_episodes=0)
    ptrain = dict(policy_options(cfg, LEARNER).get("train") or {})
    train_cfg, n_docs, n_questions = training_setup(cfg, train)  # as perf_train builds its envs
    make_one = training_env_factory(train, train_cfg, cfg["env"].get("render_mode", "visual"), min(64, n_docs),
                                    n_questions)
    vec = make_vec_env(make_one, int(cfg["train"].get("n_envs") or 8), "dummy")
    model = build_ppo(vec, algo=ptrain.get("algo", "maskable_ppo"), seed=int(cfg.get("seed", 0)),
                      net=ptrain.get("net"), hparams=ptrain.get("hparams"), device="cpu")
    learn(model, int(model.n_steps) * int(model.n_envs))  # one rollout (and its update): a real buffer
    return model


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default=None, help="comma list of torch thread counts (default: 1 and the cores)")
    ap.add_argument("--repeats", type=int, default=5, help="timed train() calls per thread count (median)")
    ap.add_argument("--synth-docs", type=int, default=7)
    ap.add_argument("--synth-seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true",
                    help="then the same with the extractor under torch.compile (most threads; slow to build)")
    ap.add_argument("--out", default="outputs/perf_update/results.json")
    ap.add_argument("overrides", nargs="*", help="train.py config overrides, e.g. policy.ppo.train.net.hidden=32")
    args = ap.parse_args(argv)
    from experiments.common.fast_learn import usable_cores
    from experiments.common.results import write_json

    threads = ([int(t) for t in args.threads.split(",")] if args.threads
               else sorted({1, usable_cores()}))
    if args.repeats < 1 or any(t < 1 for t in threads):
        ap.error("--repeats and every --threads entry must be >= 1")
    model = build_model(args.overrides, args.synth_docs, args.synth_seed)
    out: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, "experiments/perf_update.py", *(argv or sys.argv[1:])]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_start": os.getloadavg()},
        "n_envs": int(model.n_envs), "n_steps": int(model.n_steps), "batch_size": int(model.batch_size),
        "n_epochs": int(model.n_epochs), "slots": int(model.observation_space["nodes"].shape[0]),
        "parameters": sum(p.numel() for p in model.policy.parameters()), "rows": []}
    plan = [(t, update_cost) for t in threads] + ([(max(threads), compiled_update_cost)] if args.compile else [])
    for t, measure in plan:
        row = measure(model, t, args.repeats)
        out["rows"].append(row)
        if "compiled" in row:
            print(f"compiled ({row['compile_s']:.0f} s to build):", end=" ")
        print(f"threads {t}: update {row['update_s']:.3f} s per {row['samples_per_update']} samples "
              f"({row['matmul_gflop']:.1f} GFLOP of matmul, {row['update_gflop_s']:.1f} GFLOP/s); matmul "
              f"{row['matmul_share']:.0%} of the profiled time, per-call overhead {row['overhead_share']:.0%} "
              f"({row['minibatches']} x {1000 * row['call_overhead_s']:.1f} ms); GEMM {row['gemm_shape']} alone "
              f"{row['gemm_gflop_s']:.1f} GFLOP/s, floor {row['floor_s']:.3f} s; per 8,192 steps: update "
              f"{row['per_8192_steps']['update_s']:.2f} s, floor {row['per_8192_steps']['floor_s']:.2f} s",
              flush=True)
    out["machine"]["loadavg_end"] = os.getloadavg()
    print(f"results: {write_json(Path(args.out), out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
