"""Headroom: how much page recall a controller could gain by navigating the graph (privileged: reads gold).

Run (from the repo root; one dataset per run, every dev set in turn):

    .venv/bin/python experiments/headroom.py dataset=mmlongbench dataset.split=train env.parser=fast
    .venv/bin/python experiments/headroom.py dataset=synth dataset.root=data_out/synth/tiny_seed0 \
        env.parser=fast 'ks=[3,5]'

Per budget k: the env retriever's top-k / top-2k / top-3k page recall; the
privileged oracle's page recall, pages and tokens under the same budget; for
the gold pages the entry pages miss, the share within one and two hops of
each relation kind beside its chance level, the share among the K slots at
reset, and the frontier rank of the reachable ones
(:mod:`experiments.common.headroom` defines each). Writes ``results.json``::

    {"runs": [{"dataset", "split", "budget", "privileged": true,
               "metrics": {"episodes", "topk_recall", "top2k_recall", "top3k_recall", "oracle_recall",
                           "oracle_pages", "oracle_tokens", "reach_1hop": {kind: share},
                           "reach_2hop": {kind: share}, "chance_1hop": {kind: share}, "chance_2hop": ...,
                           "missed_in_slots_at_reset", "frontier_rank_of_reachable_gold", ...}}]}

and ``episodes.jsonl`` (one row per episode and budget). Every row is
privileged: it is an upper-bound reference, never a policy to compare with.
"""
from __future__ import annotations

import dataclasses
import json

import hydra
from omegaconf import DictConfig
from tqdm import tqdm

from experiments.common.benchmarking import benchmark_episodes
from experiments.common.config import ConfigError, exit_on_config_error, plain, quiet_libraries, run_dir, section
from experiments.common.envs import make_env
from experiments.common.episodes import episode_of
from experiments.common.headroom import aggregate, measure_episode, run_oracle
from experiments.common.results import budget_dict, write_json
from mage_gym.graph.schema import EDGE_KINDS
from mage_gym.jsonio import json_default


@hydra.main(version_base=None, config_path="../conf", config_name="headroom")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    quiet_libraries()
    c = plain(cfg)
    ks = [int(k) for k in c.get("ks") or []]
    if not ks or min(ks) < 1:
        raise ConfigError(f"ks must be a non-empty list of entry-page counts >= 1, got {c.get('ks')!r}")
    out = run_dir()
    episodes = benchmark_episodes(c)
    ds = section(c, "dataset")
    kinds = [k for k in EDGE_KINDS if k != "containment"]  # containment stays on a page: it reaches no new page
    seed = int(c.get("seed", 0))
    runs, rows = [], []
    for k in ks:
        budget = budget_dict({**(section(c, "env").get("budget") or {}), "k": k})
        env_cfg = {**section(c, "env"), "budget": budget, "privileged": True}
        env = make_env(episodes, {**c, "env": env_cfg}, max_graphs=8)
        measured = []
        for i, item in enumerate(tqdm(episodes, desc=f"headroom k={k}", unit="ep")):
            ep = episode_of(item)
            h = measure_episode(env, ep.episode_id, seed + i, k, kinds, window=ep.page_window)
            if h is None:
                continue
            if c.get("oracle", True):
                h.oracle = run_oracle(env, ep.episode_id, seed + i)
            measured.append(h)
            rows.append({"budget": budget, "privileged": True, **dataclasses.asdict(h)})
        env.close()
        runs.append({"dataset": ds["name"], "split": ds.get("split", "all"), "budget": budget, "privileged": True,
                     "metrics": aggregate(measured, kinds)})
        m = runs[-1]["metrics"]
        print(f"k={k}: {m['episodes']} episodes, top-k {m['topk_recall']}, top-2k {m['top2k_recall']}, "
              f"top-3k {m['top3k_recall']}, oracle {m['oracle_recall']} ({m['oracle_pages']} pages); "
              f"missed gold reachable in 1 hop (any relation) {m['reach_1hop']['any']} "
              f"vs chance {m['chance_1hop']['any']}")
    write_json(out / "results.json", {"runs": runs})
    with open(out / "episodes.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r, default=json_default) + "\n")
    print(f"results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
