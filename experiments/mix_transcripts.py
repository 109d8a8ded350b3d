"""Mix chat transcripts by question type into one SFT file (``experiments/train_llm.py algo=sft sft.transcripts=...``).

Why: a teacher's transcripts follow the corpus's mix of question types. On
the synthetic corpus a third are bridge questions, where the controller must
act (activate the element that names the question's programme, then the page
it points to), and a third of the rest stop at once. A small student trained
on that mix learns to stop; the val agreement by type shows where it lags.
This script writes a mixture with a stated share per type, chosen on train
and val only, and records what it took in ``<out>.json`` beside the file.

Run (from the repo root)::

    .venv/bin/python experiments/mix_transcripts.py \\
        --transcripts outputs/transcripts/oracle_synth_train_tight/transcripts.jsonl \\
        --episodes data_out/synth/train_seed0/episodes.jsonl --share bridge=0.5 --skip 790 \\
        --out outputs/transcripts/mix_bridge50/transcripts.jsonl

A type is the first generator tag of the question (``bridge``,
``fact_lookup``, ...); rows whose question is not in ``--episodes`` are an
error (the file and the corpus must match). ``--skip N`` leaves out the first
N rows (those an earlier run trained on), so a continued run sees new tasks.
"""
from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from mage_gym.agent.tasks import TaskId
from mage_gym.agent.transcripts import read_jsonl
from mage_gym.data.io import DatasetError, iter_jsonl


def question_type(row: Mapping[str, Any], tags: Mapping[str, Sequence[str]]) -> str:
    """The first generator tag of the question the row's task id names."""
    episode = TaskId.parse(row["task"]).episode_id
    if episode not in tags:
        raise KeyError(f"transcript task {row['task']!r} names no question of the episodes file")
    return (list(tags[episode]) or ["untagged"])[0]


def episode_tags(path: Path) -> dict[str, list[str]]:
    """``episode_id -> task_tags`` of an episodes.jsonl (a bad line is an error naming it)."""
    tags = {}
    for _, rec, err in iter_jsonl(path, "episode file"):
        if err:
            raise DatasetError(err)
        tags[rec["episode_id"]] = rec.get("task_tags") or []
    return tags


def mix(rows: Sequence[Mapping[str, Any]], types: Sequence[str], shares: Mapping[str, float],
        seed: int = 0) -> list[Mapping[str, Any]]:
    """Rows with each type in ``shares`` at that share of the result; the other types share the rest in
    proportion. The result is as large as the scarcest constrained group allows, shuffled with ``seed``."""
    if any(not 0.0 < s < 1.0 for s in shares.values()) or sum(shares.values()) >= 1.0:
        raise ValueError(f"shares must each lie in (0, 1) and sum below 1, got {dict(shares)}")
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row, t in zip(rows, types):
        groups.setdefault(t if t in shares else "_rest", []).append(row)
    missing = [t for t in shares if t not in groups]
    if missing or "_rest" not in groups:
        raise ValueError(f"no rows of type(s) {missing or ['(any other)']} to mix")
    rest_share = 1.0 - sum(shares.values())
    total = int(min([len(groups[t]) / s for t, s in shares.items()] + [len(groups["_rest"]) / rest_share]))
    rng = random.Random(seed)
    out: list[Mapping[str, Any]] = []
    for t, s in [*shares.items(), ("_rest", rest_share)]:
        out += rng.sample(groups[t], int(round(total * s)))
    rng.shuffle(out)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transcripts", type=Path, required=True, help="JSONL of experiments/export_transcripts.py")
    ap.add_argument("--episodes", type=Path, required=True, help="the corpus's episodes.jsonl (its task_tags)")
    ap.add_argument("--share", action="append", default=[], metavar="TYPE=SHARE", required=True,
                    help="e.g. bridge=0.5 (repeatable)")
    ap.add_argument("--skip", type=int, default=0, help="leave out the first N rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    shares = {}
    for s in a.share:
        name, _, value = s.partition("=")
        try:
            shares[name] = float(value)
        except ValueError:
            ap.error(f"--share wants TYPE=SHARE, got {s!r}")
    tags = episode_tags(a.episodes)
    rows = read_jsonl(a.transcripts)[a.skip:]
    types = [question_type(r, tags) for r in rows]
    out = mix(rows, types, shares, seed=a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    summary = {"kind": "transcript_mix", "transcripts": str(a.transcripts), "episodes": str(a.episodes),
               "skip": a.skip, "seed": a.seed, "shares": shares, "rows_in": len(rows),
               "types_in": dict(Counter(types)), "rows_out": len(out),
               "types_out": dict(Counter(question_type(r, tags) for r in out))}
    Path(str(a.out) + ".json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
