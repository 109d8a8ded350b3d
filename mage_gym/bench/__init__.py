"""The evaluation harness as a library: play episodes, compare controllers at equal cost, write results.

What the entry points in ``experiments/`` run, callable from a user's own
script. A minimal benchmark of your own controller against top-k::

    import mage_gym
    from mage_gym.bench import paired_delta, play_episodes
    from mage_gym.data.registry import load_dataset
    from policies import get_policy

    episodes = load_dataset("mmlongbench", split="val", limit=20)
    env = mage_gym.make_env(episodes=episodes, parser="fast")
    mine = play_episodes(env, get_policy("heuristic"), episodes)   # one EpisodeResult per episode
    base = play_episodes(env, get_policy("topk_page"), episodes)   # same seeds: episode i uses seed + i
    print(paired_delta([r.reward for r in mine], [r.reward for r in base]))  # mean, 95% interval

and the whole Hydra-configured run (every policy x budget, failures recorded,
resumable, optional Ray executor, equal-cost deltas with 95% intervals)::

    from mage_gym.bench import benchmark
    from policies import REGISTRY
    benchmark(cfg, out_dir, registry=REGISTRY)                # cfg: the composed conf/benchmark.yaml

Modules, one job each:

- :mod:`.protocol`: the :class:`Policy` protocol, :class:`EnvInfo`, :class:`PolicyRegistry`;
- :mod:`.play`: :func:`run_episode` (one episode, the one loop) and :func:`play_episodes` (failure handling);
- :mod:`.benchmark`: :func:`benchmark`, every policy x budget on the same episodes (resume, Ray, outputs);
- :mod:`.equal_cost`: top-k curves; a policy against them at top-k's operating budget, by cost at equal
  evidence and at equal tokens / pages, with paired bootstrap intervals; :mod:`.frontier`: the recall-token figure;
- :mod:`.metrics`, :mod:`.results`, :mod:`.plots`, :mod:`.tracking`: summaries, ``results.json`` and its
  tables, figures, Weights & Biases;
- :mod:`.episodes`, :mod:`.corpus`, :mod:`.graph_jobs`, :mod:`.envs`: a dataset node's episodes, their
  graphs built in parallel (or on Ray: :mod:`.distributed`), envs and readers from config nodes;
- :mod:`.config`, :mod:`.policy_options`: config plumbing and typed config errors;
- :mod:`.synthetic`, :mod:`.bridge_check`, :mod:`.reference_eval`: synthetic workloads and quality checks.

The harness never imports ``policies``: it builds controllers through the
:class:`PolicyRegistry` it is handed.
"""
from __future__ import annotations

from typing import Any

#: public name -> module (imported on first use: ``import mage_gym.bench`` stays light)
_EXPORTS: dict[str, str] = {
    "Policy": "protocol", "EnvInfo": "protocol", "PolicyRegistry": "protocol",
    "EpisodeResult": "play", "run_episode": "play", "play_episodes": "play",
    "benchmark": "benchmark", "RunStopped": "benchmark",
    "delta_at_equal_cost": "equal_cost", "paired_delta": "equal_cost", "delta_over_seeds": "equal_cost",
    "delta_at_operating_budget": "equal_cost", "cost_ratio_at_equal_evidence": "equal_cost",
    "summarise": "metrics", "breakdown": "metrics",
    "write_results": "results", "validate_results": "results", "trace_path": "results",
    "load_episodes": "episodes", "prepare_graphs": "episodes", "build_corpus": "corpus",
    "ConfigError": "config",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"mage_gym.bench.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'mage_gym.bench' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
