"""Rewrite the oracle's chat transcripts as its ``make_room=stop`` variant would have played them (no prunes).

Why: the privileged oracle prunes a page only to make room (rule 5 of
:mod:`policies.oracle`), and it picks the page by gold it sees. A student
copying those prunes cannot see which page holds no gold, and on unseen
two-hop questions it pruned the page it needed. ``policy.oracle.make_room=
stop`` is the teacher without them: where the oracle would prune, it stops.

The oracle is deterministic and everything before its first prune is the
same under both settings, so that variant's transcript is the original cut
at the first ``prune`` reply, with a ``stop`` in its place answered as the
env answers a stop. This script makes that cut instead of replaying every
episode (the replay of 1,582 synthetic tasks took two hours here);
``tests/test_stop_for_prunes.py`` checks the cut against a real export with
``make_room=stop``. A cut row keeps its task and messages and says
``"make_room": "stop"``; its outcome fields (reward, metrics, components)
are set to null, since the env never scored that episode.

Run (from the repo root)::

    .venv/bin/python experiments/stop_for_prunes.py \\
        --transcripts outputs/transcripts/mix_bridge50/transcripts.jsonl \\
        --out outputs/transcripts/mix_bridge50_noprune/transcripts.jsonl
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from mage_gym.agent.transcripts import read_jsonl


def call_names(message: Mapping[str, Any]) -> list[str]:
    """The tool names an assistant message calls (none for other roles)."""
    if message.get("role") != "assistant":
        return []
    return [c["function"]["name"] for c in message.get("tool_calls") or []]


def stop_answer(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The env's answer to a plain ``stop`` (its ``tool`` message), as the rows record it.

    Every stop is answered with the same words; rows that disagree (another
    env version) are an error, as is a file without any stop.
    """
    answers = {json.dumps({k: v for k, v in m.items() if k != "tool_call_id"}, sort_keys=True)
               for r in rows for a, m in zip(r["messages"], r["messages"][1:])
               if call_names(a) == ["stop"] and m.get("role") == "tool"}
    if len(answers) != 1:
        raise ValueError(f"expected one way the env answers a stop, found {len(answers)}")
    return json.loads(answers.pop())


def stop_at_first_prune(row: Mapping[str, Any], answer: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """(the row as the ``make_room=stop`` oracle plays it, whether it changed); ``answer``: :func:`stop_answer`."""
    messages = list(row["messages"])
    first = next((i for i, m in enumerate(messages) if "prune" in call_names(m)), None)
    if first is None:
        return dict(row), False
    if len(call_names(messages[first])) != 1:
        raise ValueError(f"task {row['task']}: a reply with several calls; the teachers write one per reply")
    call_id = messages[first]["tool_calls"][0].get("id")
    stop_call = {"type": "function", "id": call_id, "function": {"name": "stop", "arguments": "{}"}}
    cut = messages[:first] + [{"role": "assistant", "content": messages[first].get("content", ""),
                               "tool_calls": [stop_call]}, dict(answer, tool_call_id=call_id)]
    out = dict(row, messages=cut, make_room="stop", reward=None, metrics=None, components=None, terminated=True)
    return out, True


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--transcripts", required=True, type=Path, help="the oracle's transcripts.jsonl")
    ap.add_argument("--out", required=True, type=Path, help="where to write the rewritten transcripts.jsonl")
    args = ap.parse_args(argv)
    rows = read_jsonl(args.transcripts)
    not_oracle = sorted({str(r.get("source")) for r in rows} - {"oracle"})
    if not_oracle:
        raise SystemExit(f"{args.transcripts}: rows from {not_oracle}; only the oracle's transcripts can be cut "
                         "this way (its prunes are all make-room prunes)")
    answer = stop_answer(rows)
    counts: Counter[str] = Counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        for row in rows:
            new, changed = stop_at_first_prune(row, answer)
            counts["cut" if changed else "kept"] += 1
            f.write(json.dumps(new, ensure_ascii=False) + "\n")
    summary = {"source": str(args.transcripts), "out": str(args.out), "rows": len(rows), **counts}
    Path(str(args.out) + ".json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
