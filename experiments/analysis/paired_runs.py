"""One policy in two benchmark runs on the same episodes: the per-question change, with 95 % intervals.

Why: a trained controller is judged against the model it started from (GRPO
against its SFT start), and the benchmark registers one ``llm_controller``
per run, so the two models play in two run folders. This script pairs their
``episodes.jsonl`` rows by episode and budget (failed rows dropped on both
sides) and reports ``new - base`` for reward, page recall (questions with
gold only) and tokens read, each as :func:`mage_gym.bench.equal_cost.paired_delta`
(mean, 95 % bootstrap interval over questions), plus how many questions went
up, down or stayed on each, the recall moves split by whether the new
run read more or fewer tokens, and the reward's change split into its terms
(``reward_parts``: support, noise, and each part of the cost, signed as the
reward adds them, so their means sum to the reward's change). Both runs
must hold the same episodes: an episode only one run played is an error,
not a silent drop::

    .venv/bin/python -m experiments.analysis.paired_runs --policy llm_controller \\
        --base outputs/benchmark/<sft run> --new outputs/benchmark/<grpo run> --out outputs/paired/grpo_vs_sft
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from mage_gym.bench.equal_cost import paired_delta
from mage_gym.bench.results import budget_label, write_json
from mage_gym.reward import REWARD_TERMS, RewardConfig, reward_terms
from mage_gym.trace import read_jsonl

#: (name in the output, episodes.jsonl metric, questions with gold only)
MEASURES = (("reward", None, False), ("page_recall", "evidence_page_recall", True),
            ("tokens", "tokens_rendered", False))


def policy_rows(run: Path, policy: str) -> dict[tuple[str, str], dict[str, Any]]:
    """``(episode_id, budget label) -> row`` of ``policy``'s successful episodes in ``run``."""
    path = Path(run) / "episodes.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: pass a benchmark run directory")
    rows = {}
    for row in read_jsonl(path):
        if row.get("policy") == policy and not row.get("failed"):
            rows[(str(row["episode_id"]), budget_label(row["budget"]))] = row
    if not rows:
        raise ValueError(f"{path}: no successful episodes of policy {policy!r}")
    return rows


def value(row: Mapping[str, Any], metric: str | None) -> float | None:
    got = row.get("reward") if metric is None else (row.get("metrics") or {}).get(metric)
    return None if got is None else float(got)


def run_reward_config(run: Path) -> RewardConfig:
    """The reward settings a benchmark run scored with: ``env.reward`` of its ``.hydra/config.yaml``, or the
    defaults when the run has none (:func:`mage_gym.reward.reward_terms` checks them against every row)."""
    path = Path(run) / ".hydra" / "config.yaml"
    if not path.is_file():
        return RewardConfig()
    import yaml

    env = (yaml.safe_load(path.read_text()) or {}).get("env") or {}
    return RewardConfig.coerce(env.get("reward"))


#: the two sides of a controller's reward change: what its reading earned net of the reading's own token and
#: noise charges, and what its moves and model replies cost
READING_AND_ACTING = {"reading": ("support", "noise", "cost_tokens"),
                      "moves_and_replies": ("cost_operations", "cost_calls")}


def reward_parts(base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]],
                 base_cfg: RewardConfig, new_cfg: RewardConfig) -> dict[str, Any]:
    """``new - base`` of each reward term (:data:`mage_gym.reward.REWARD_TERMS`), paired over questions.

    Why: a reward that fell while recall rose can have fallen for more
    tokens, more operations, more model replies or more noise; these say
    which, each with its interval, and their means add up to the reward's.
    """
    terms_b = [reward_terms(row["components"], base_cfg) for row in base]
    terms_n = [reward_terms(row["components"], new_cfg) for row in new]
    out: dict[str, Any] = {name: paired_delta([t[name] for t in terms_n], [t[name] for t in terms_b])
                           for name in REWARD_TERMS}
    out["sum_of_means"] = sum(out[name]["mean"] for name in REWARD_TERMS) if terms_b else None
    for group, names in READING_AND_ACTING.items():
        out[group] = paired_delta([sum(t[x] for x in names) for t in terms_n],
                                  [sum(t[x] for x in names) for t in terms_b])
    out["how"] = ("each term as the reward adds it: support, -lambda_noise * noise, -lambda_cost * w * cost part "
                  "(tokens, operations, reader + model calls); the weights are each run's env.reward")
    return out


def compare(base: Mapping[tuple, Mapping[str, Any]], new: Mapping[tuple, Mapping[str, Any]],
            base_cfg: RewardConfig | None = None, new_cfg: RewardConfig | None = None) -> dict[str, Any]:
    """``new - base`` per measure over the episodes both hold (they must hold the same ones); ``*_cfg``: the
    reward settings each run scored with (default: the defaults)."""
    if set(base) != set(new):
        only = sorted(set(base) ^ set(new))[:5]
        raise ValueError(f"the runs played different episodes ({len(set(base) ^ set(new))} differ, e.g. {only})")
    keys = sorted(base)
    out: dict[str, Any] = {"episodes": len(keys)}
    for name, metric, gold_only in MEASURES:
        pairs = [(value(new[k], metric), value(base[k], metric)) for k in keys]
        pairs = [p for p in pairs if p[0] is not None and p[1] is not None] if gold_only else pairs
        if any(a is None or b is None for a, b in pairs):
            raise ValueError(f"a row lacks {metric or 'reward'}")
        a, b = [p[0] for p in pairs], [p[1] for p in pairs]
        out[name] = {"base": sum(b) / len(b) if b else None, "new": sum(a) / len(a) if a else None,
                     "delta": paired_delta(a, b)}
        out[name]["questions"] = direction_counts(pairs)
    out["recall_by_token_change"] = recall_by_token_change([base[k] for k in keys], [new[k] for k in keys])
    if all("components" in base[k] and "components" in new[k] for k in keys):
        out["reward_parts"] = reward_parts([base[k] for k in keys], [new[k] for k in keys],
                                           base_cfg or RewardConfig(), new_cfg or RewardConfig())
    return out


def direction(new: float, base: float) -> str:
    """``higher``, ``lower`` or ``same``: where ``new`` stands against ``base``."""
    return "higher" if new > base else "lower" if new < base else "same"


def direction_counts(pairs: Sequence[tuple[float, float]]) -> dict[str, int]:
    """How many ``(new, base)`` pairs went up, down or stayed."""
    moves = [direction(new, base) for new, base in pairs]
    return {side: moves.count(side) for side in ("higher", "lower", "same")}


#: the token move of a question -> the name of its group in ``recall_by_token_change``
TOKEN_GROUPS = {"higher": "more_tokens", "lower": "fewer_tokens", "same": "same_tokens"}


def recall_by_token_change(base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Questions with gold, split by whether the new run read more, fewer or the same tokens, each split by how
    its recall moved.

    Why: a trained controller that reads more is worth it only where the extra
    reading finds evidence; "read more on 8 questions, found more on 3" says
    that, a mean token change and a mean recall change apart do not.
    """
    groups: dict[str, list[tuple[float, float]]] = {group: [] for group in TOKEN_GROUPS.values()}
    for b, n in zip(base, new):
        rb, rn = value(b, "evidence_page_recall"), value(n, "evidence_page_recall")
        tb, tn = value(b, "tokens_rendered"), value(n, "tokens_rendered")
        if None not in (rb, rn, tb, tn):
            groups[TOKEN_GROUPS[direction(tn, tb)]].append((rn, rb))
    return {group: direction_counts(pairs) for group, pairs in groups.items()}


def main(argv: Sequence[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", required=True, help="the policy name in both runs' episodes.jsonl")
    ap.add_argument("--base", type=Path, required=True, help="the run compared against (e.g. the SFT start)")
    ap.add_argument("--new", type=Path, required=True, help="the run whose change is reported")
    ap.add_argument("--out", type=Path, required=True, help="folder for results.json")
    args = ap.parse_args(argv)
    result = {"kind": "paired_runs", "policy": args.policy, "base_run": str(args.base), "new_run": str(args.new),
              **compare(policy_rows(args.base, args.policy), policy_rows(args.new, args.policy),
                        run_reward_config(args.base), run_reward_config(args.new))}
    path = write_json(args.out / "results.json", result)
    print(json.dumps({k: result[k] for k in ("episodes", "reward", "page_recall")}, indent=1))
    print(f"results: {path}")
    return path


if __name__ == "__main__":
    main()
