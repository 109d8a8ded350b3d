"""Headroom: how much page recall a controller could gain by navigating the graph (privileged: reads gold).

Run (from the repo root; one dataset per run, every dev set in turn):

    .venv/bin/python experiments/headroom.py dataset=mmlongbench dataset.split=train env.parser=fast
    .venv/bin/python experiments/headroom.py dataset=synth dataset.root=data_out/synth/tiny_seed0 \
        env.parser=fast 'ks=[3,5]'

Per budget k: the env retriever's top-k / top-2k / top-3k page recall; the
privileged oracle's page recall, pages and tokens under the same budget; for
the gold pages the entry pages miss, the share within one and two hops of
each relation kind beside its chance level, the share among the K slots at
reset, and the frontier rank of the reachable ones; and the slot-limited
reach: the share of those pages that the env's own K slots show after 0,
<= 1 and <= 2 activations of slot candidates (run on copies of the env's
state through its own transition; the two-step search is capped by
``slot_reach.width`` and ``slot_reach.max_pairs``), per relation kind, beside
its chance level (:mod:`mage_gym.bench.headroom` defines each).

``sources`` (on by default) splits the oracle's headroom by where it comes
from, against topk_page at its operating budget, by cost at equal recall and
at equal tokens (:mod:`mage_gym.bench.headroom_sources`):
reranking oracles over the top N retrieved pages (``rerank@N``,
``rerank_stop@N``), a granularity oracle (same pages, gold-bearing elements
instead of whole pages) beside the non-privileged ``topk_elements`` baseline
it implies (played through the env at each ``sources.topk_elements_n_open``),
adaptive-stop oracles (``adaptive_stop@C``) and the navigating oracle; each
with its three figures and 95 % intervals, over all questions, per
split and over the questions with element-level gold; plus element recall
where element-level gold exists. Writes ``results.json``::

    {"runs": [{"dataset", "split", "budget", "privileged": true,
               "metrics": {"episodes", "topk_recall", "top2k_recall", "top3k_recall", "oracle_recall",
                           "oracle_pages", "oracle_tokens", "reach_1hop": {kind: share},
                           "reach_2hop": {kind: share}, "chance_1hop": {kind: share}, "chance_2hop": ...,
                           "missed_in_slots_at_reset", "frontier_rank_of_reachable_gold",
                           "slot_reach_0", "slot_reach_1", "slot_reach_2": {kind: share},
                           "slot_chance_0", "slot_chance_1", "slot_chance_2": {kind: share},
                           "slot_gold_share": {level: share}, "slot_frontier_rank_0" .. "_2": {median, mean, n},
                           "slot_search": {width, max_pairs, episodes, capped_episodes, mean_states_1, ...},
                           "sources": {"all" | "train" | "val" | "test" | "element_gold": {
                               "questions", "curve_ks", "sources": {name: {"questions", "recall", "tokens", "pages",
                                   "delta_recall_at_operating_budget": {mean, lo, hi, n, interpretable, k,
                                                                        budget_cost, overspent, ...},
                                   "cost_ratio_recall_at_equal_evidence": {mean, lo, hi, ..., above_curve},
                                   "delta_recall_at_equal_tokens": {mean, lo, hi, n, interpretable, ...}}},
                               "element_gold_questions", "element_recall": {"element_recall@m", ...}}},
                           ...}}]}

and ``episodes.jsonl`` (one row per episode and budget). Every row is
privileged: it is an upper-bound reference, never a policy to compare with.
"""
from __future__ import annotations

import dataclasses
import json

import hydra
from omegaconf import DictConfig
from mage_gym.progress import progress_bar

from mage_gym.bench.benchmark import benchmark_episodes
from mage_gym.bench.config import ConfigError, exit_on_config_error, plain, quiet_libraries, run_dir, section
from mage_gym.bench.envs import make_env
from mage_gym.bench.episodes import episode_of
from mage_gym.bench.headroom import aggregate, measure_episode
from mage_gym.bench.headroom_sources import played_figures, report_sources, sources_for_env
from mage_gym.bench.results import budget_dict, write_json
from mage_gym.graph.schema import EDGE_KINDS
from mage_gym.jsonio import json_default
from mage_gym.bench.play import run_episode
from policies.oracle import OraclePolicy
from policies.topk_elements import TopKElementsPolicy


def run_oracle(env: Any, episode_id: str, seed: int) -> dict[str, Any]:
    """The oracle's page recall, pages and tokens on one episode (privileged env)."""
    policy = OraclePolicy(env)
    r = run_episode(env, policy, episode_id, seed=seed)
    m = r.metrics
    return {"recall": m.get("evidence_page_recall"), "pages": m.get("pages_rendered"),
            "tokens": m.get("tokens_rendered")}


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
    slot_cfg = c.get("slot_reach") or {}
    slot_width = None if slot_cfg.get("width") is None else int(slot_cfg["width"])
    slot_max_pairs = None if slot_cfg.get("max_pairs") is None else int(slot_cfg["max_pairs"])
    src_cfg = c.get("sources") or {}
    with_sources = bool(src_cfg.get("enabled", True))
    depths = [int(n) for n in src_cfg.get("depths") or []]
    n_opens = [int(n) for n in src_cfg.get("topk_elements_n_open") or []]
    runs, rows = [], []
    for k in ks:
        budget = budget_dict({**(section(c, "env").get("budget") or {}), "k": k})
        env_cfg = {**section(c, "env"), "budget": budget, "privileged": True}
        env = make_env(episodes, {**c, "env": env_cfg}, max_graphs=8)
        # topk_elements reads elements, not pages: its own env in the elements render mode (same retriever)
        env_el = make_env(episodes, {**c, "env": {**env_cfg, "privileged": False}}, render_mode="elements",
                          max_graphs=8) if with_sources and n_opens else None
        measured = []
        figures, played = [], {}
        for i, item in enumerate(progress_bar(episodes, desc=f"headroom k={k}", unit="ep")):
            ep = episode_of(item)
            h = measure_episode(env, ep.episode_id, seed + i, k, kinds, window=ep.page_window,
                                slot_search=bool(slot_cfg.get("enabled", True)), slot_width=slot_width,
                                slot_max_pairs=slot_max_pairs)
            if h is None:
                continue
            fig = sources_for_env(env, ep, k, int(src_cfg.get("kmax", 20)), depths) if with_sources else None
            if c.get("oracle", True):
                h.oracle = run_oracle(env, ep.episode_id, seed + i)
                played.setdefault("oracle", {})[ep.episode_id] = {
                    "recall": h.oracle["recall"] or 0.0, "tokens": h.oracle["tokens"], "pages": h.oracle["pages"]}
            if env_el is not None and fig is not None:
                for n in n_opens:
                    r = run_episode(env_el, TopKElementsPolicy(n_open=n), ep.episode_id, seed=seed + i)
                    played.setdefault(f"topk_elements@{n}", {})[ep.episode_id] = played_figures(r.metrics)
            measured.append(h)
            row = dataclasses.asdict(dataclasses.replace(h, slot=None))
            row["slot"] = h.slot.to_row() if h.slot is not None else None
            if fig is not None:
                figures.append(fig)
                row["sources"] = fig.to_row()
                row["played"] = {name: per[ep.episode_id] for name, per in played.items() if ep.episode_id in per}
            rows.append({"budget": budget, "privileged": True, **row})
        env.close()
        if env_el is not None:
            env_el.close()
        metrics = aggregate(measured, kinds)
        if with_sources:
            metrics["sources"] = report_sources(figures, played, seed=seed, k=k)
        runs.append({"dataset": ds["name"], "split": ds.get("split", "all"), "budget": budget, "privileged": True,
                     "metrics": metrics})
        m = runs[-1]["metrics"]
        print(f"k={k}: {m['episodes']} episodes, top-k {m['topk_recall']}, top-2k {m['top2k_recall']}, "
              f"top-3k {m['top3k_recall']}, oracle {m['oracle_recall']} ({m['oracle_pages']} pages); "
              f"missed gold reachable in 1 hop (any relation) {m['reach_1hop']['any']} "
              f"vs chance {m['chance_1hop']['any']}")
        if "slot_reach_2" in m:
            print(f"    in the K slots (any relation), after 0 / <=1 / <=2 activations: "
                  f"{m['slot_reach_0']['any']} / {m['slot_reach_1']['any']} / {m['slot_reach_2']['any']} vs chance "
                  f"{m['slot_chance_0']['any']} / {m['slot_chance_1']['any']} / {m['slot_chance_2']['any']}")
        if with_sources:
            for name, src in m["sources"]["all"]["sources"].items():
                op, ratio = src["delta_recall_at_operating_budget"], src["cost_ratio_recall_at_equal_evidence"]
                d = src["delta_recall_at_equal_tokens"]
                print(f"    {name:20s} recall {src['recall']:.3f} at {src['tokens']:7.0f} tokens: "
                      f"at the operating budget {_interval(op)}; topk_page tokens at equal recall "
                      + ("beyond its curve" if ratio["mean"] is None else f"x{ratio['mean']:.2f}")
                      + f"; at equal tokens {_interval(d)} over {d['n']} q.")
    write_json(out / "results.json", {"runs": runs})
    with open(out / "episodes.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r, default=json_default) + "\n")
    print(f"results: {out / 'results.json'}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:+.3f}"


def _interval(d: dict[str, Any]) -> str:
    return "n/a" if d["mean"] is None else f"{d['mean']:+.3f} [{_fmt(d['lo'])}, {_fmt(d['hi'])}]"


if __name__ == "__main__":
    main()
