"""experiments/perf/perf_service.py runs as docs/LLM_TRAINING.md shows it, at test scale: one synthetic document
(its graph built first: the benchmark serves pre-built graphs only), 1 and 2 sessions, one and two workers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openenv")
REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_perf_command_at_test_scale(tmp_path):
    from agent_helpers import one_document_corpus
    from mage_gym.data.synth.corpus import load_synth
    from mage_gym.graph import build_graph

    corpus = one_document_corpus(tmp_path / "corpus", pages=3, questions=2)
    episodes = load_synth(corpus)
    build_graph(episodes[0].source, parser="fast", progress=False)
    doc = (REPO / "docs" / "LLM_TRAINING.md").read_text()
    cmd = next(line for line in doc.splitlines() if "perf_service.py" in line and line.startswith("nice"))
    args = cmd.split()[3:] + ["--dataset", "synth", "--root", str(corpus), "--docs", episodes[0].doc_id,
                              "--levels", "1", "2", "--worker-levels", "2", "--episodes", "2", "--repeats", "1",
                              "--out", str(tmp_path / "out")]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, *args[1:]], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["kind"] == "perf_service" and res["errors_total"] == 0
    assert [(x["sessions"], x["workers"]) for x in res["levels"]] == [(1, 1), (2, 1), (2, 2)]
    for level in res["levels"]:
        assert level["episodes"] >= 2 and level["step"]["n"] >= 2 and level["rss_peak_mb"] > 0
    assert res["floor"]["episodes"] == 2 and res["floor"]["step"]["p50_ms"] > 0
    assert "sessions_2" in res["workers"] and res["goal"]["sessions"] == 64
