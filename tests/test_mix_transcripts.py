"""experiments/mix_transcripts.py: the mixture holds each named type at its share, never invents rows, and refuses
files that do not match the corpus."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from experiments.mix_transcripts import main, mix, question_type


def _row(episode: str) -> dict:
    return {"task": f"synth/doc/{episode}/k2-m2-M8-T4-B4/s0", "messages": [], "reward": 0.0}


def test_question_type_reads_the_first_tag_of_the_question():
    tags = {"e1": ["bridge", "bridge:reference"], "e2": ["fact_lookup"], "e3": []}
    assert question_type(_row("e1"), tags) == "bridge"
    assert question_type(_row("e2"), tags) == "fact_lookup"
    assert question_type(_row("e3"), tags) == "untagged"
    with pytest.raises(KeyError, match="names no question"):
        question_type(_row("e9"), tags)


def test_mix_keeps_the_share_and_takes_rows_only_from_the_input():
    rows = [_row(f"b{i}") for i in range(30)] + [_row(f"o{i}") for i in range(90)]
    types = ["bridge"] * 30 + ["fact_lookup"] * 45 + ["list_count"] * 45
    out = mix(rows, types, {"bridge": 0.5}, seed=1)
    assert len(out) == 60  # the 30 bridge rows bound the mixture: 30 / 0.5
    kinds = Counter("bridge" if r["task"].split("/")[2].startswith("b") else "other" for r in out)
    assert kinds == {"bridge": 30, "other": 30}
    assert len({r["task"] for r in out}) == 60  # sampled without replacement
    assert all(r in rows for r in out)
    assert mix(rows, types, {"bridge": 0.5}, seed=1) == out  # the seed fixes it
    other = mix(rows, types, {"bridge": 0.5}, seed=2)
    assert {r["task"] for r in other} != {r["task"] for r in out}  # a sample of the rest, not its first rows


def test_mix_is_bounded_by_the_rest_when_the_named_type_is_plentiful():
    rows = [_row(f"b{i}") for i in range(100)] + [_row(f"o{i}") for i in range(10)]
    out = mix(rows, ["bridge"] * 100 + ["other"] * 10, {"bridge": 0.75})
    assert Counter(r["task"].split("/")[2][0] for r in out) == {"b": 30, "o": 10}


@pytest.mark.parametrize("shares", [{"bridge": 0.0}, {"bridge": 1.0}, {"bridge": 0.6, "list_count": 0.5}])
def test_mix_refuses_shares_that_cannot_be_met(shares):
    with pytest.raises(ValueError, match="shares"):
        mix([_row("b0")], ["bridge"], shares)


def test_mix_refuses_a_type_the_file_does_not_hold():
    with pytest.raises(ValueError, match="no rows"):
        mix([_row("o0")], ["fact_lookup"], {"bridge": 0.5})


def test_the_command_skips_rows_and_records_what_it_took(tmp_path):
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text("".join(json.dumps({"episode_id": f"e{i}", "task_tags": ["bridge" if i % 2 else "fact_lookup"]})
                                + "\n" for i in range(20)))
    transcripts = tmp_path / "t.jsonl"
    transcripts.write_text("".join(json.dumps(_row(f"e{i}")) + "\n" for i in range(20)))
    out = tmp_path / "mix" / "t.jsonl"
    main(["--transcripts", str(transcripts), "--episodes", str(episodes), "--share", "bridge=0.5",
          "--skip", "4", "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["task"].split("/")[2] for r in rows} == {f"e{i}" for i in range(4, 20)}
    summary = json.loads((tmp_path / "mix" / "t.jsonl.json").read_text())
    assert summary["rows_in"] == 16 and summary["types_out"] == {"bridge": 8, "fact_lookup": 8}


def test_the_command_rejects_a_malformed_share(tmp_path):
    with pytest.raises(SystemExit):
        main(["--transcripts", str(tmp_path / "t"), "--episodes", str(tmp_path / "e"), "--share", "bridge",
              "--out", str(tmp_path / "o")])
