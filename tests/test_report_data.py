"""Report data: states recomputed per step from traces, outcomes, touched pages, run-dir layout, escaping.

Traces come from the real environment run on synthetic graphs (no PDF, no
model): a hash encoder stands in for MiniLM, the dense retriever ranks pages.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mage_gym.data.episode import Episode
from mage_gym.env import Budget, EnvEpisode, MageRAGEnv
from mage_gym.testing import hash_query_fn, make_large_graph
from mage_gym.readers.base import ReaderOutput, RenderedInput
from mage_gym.report import (
    ImageOptions, RunDirError, TraceEpisode, TraceFormatError, build_report_data, read_trace_file, replay_states,
    report_data_from_run_dir, split_episodes, states_at, write_report,
)
from mage_gym.bench.results import trace_path
from mage_gym.report.data import outcome_counts, slug
from mage_gym.report.images import ImageWriter
from mage_gym.report.run_dir import discover, read_traces
from mage_gym.trace import TraceRecorder
from mage_gym.wrappers import TraceRecording
from policies import get_policy
from policies.llm_evaluator import CallableBackend
from mage_gym.bench.play import run_episode

EPP = 6  # elements per page


def _graph(n_pages: int = 12, doc_id: str = "synthetic"):
    return make_large_graph(n_pages=n_pages, elements_per_page=EPP, dim=64, doc_id=doc_id)


def _episodes(g, n: int = 3) -> list[Episode]:
    specs = [("revenue sales growth quarter", "Int", (3,), ("Table",)),
             ("employees headcount staff hiring", "Str", (5, 8), ("Chart", "Pure-text (Plain-text)")),
             ("risk exposure hedging credit", "None", (), ())]
    out = []
    for i, (q, fmt, pages, src) in enumerate(specs[:n]):
        out.append(Episode(
            episode_id=f"ep{i}", benchmark="synth", doc_id=g.doc_id, source=g.source.path, question=q,
            answer="42" if pages else "Not answerable", answer_format=fmt, answerable=bool(pages),
            evidence_pages=pages, gold_node_ids=tuple(g.elements[p * EPP + 2].node_id for p in pages),
            evidence_sources=src))
    return out


class AnswerWhenGoldPageSeen:
    """A stand-in answering reader: answers "42" when an evidence page reached it, else abstains.

    It reads the gold only to simulate a good reader, so the report gets both
    correct and incorrect runs without a language model.
    """

    name = "fake"
    answers = True

    def __init__(self, gold_pages: dict[str, set[str]]) -> None:
        self.gold_pages = gold_pages

    def read(self, rendered: RenderedInput) -> ReaderOutput:
        pages = self.gold_pages.get(rendered.question, set())
        seen = any(re.search(rf'<page id="{re.escape(p)}"', rendered.xml) for p in pages)
        return ReaderOutput(answer="42" if seen else "Not answerable", raw="scripted")


def scripted_llm(system: str, user: str) -> str:
    """Round 1 activates candidates, round 2 opens + prunes + searches, round 3 stops."""
    m = re.search(r'<budget round="(\d+)"', user)
    rnd = int(m.group(1)) if m else 1
    if rnd == 1:
        return "<agent_decision><selected_actions><action index=\"1\"/><action index=\"2\"/></selected_actions></agent_decision>"
    if rnd == 2:
        acts = re.findall(r'<node id="([^"]+)" type="[^"]*" state="activated"', user)[:2]
        pages = re.findall(r'<page id="([^"]+)" number="\d+" state="activated">', user)
        opens = "".join(f'<node id="{a}"/>' for a in acts)
        prune = f'<prune_requests><page id="{pages[-1]}"><reason>off topic</reason></page></prune_requests>' if pages else ""
        return (f"Thinking... <agent_decision><open_requests>{opens}</open_requests>{prune}"
                "<search_request><query>growth table</query></search_request></agent_decision>")
    return "<agent_decision><stop>true</stop></agent_decision>"


def make_policy(name: str):
    if name == "llm_evaluator":
        return get_policy(name, backend=CallableBackend(scripted_llm, "scripted"), cache=False)
    return get_policy(name)


def run_policies(run_dir: Path, g, episodes: list[Episode], policies=("heuristic", "random", "topk_page"),
                 reader=None, budget=None) -> list[TraceEpisode]:
    """Run each policy on every episode with traces in the benchmark layout; return the trace episodes."""
    traces = []
    for name in policies:
        path = trace_path(run_dir, name, Budget.coerce(budget).to_dict())
        env = TraceRecording(MageRAGEnv(episodes=[EnvEpisode(e, g) for e in episodes], retriever="dense",
                                        query_fn=hash_query_fn(64), reader=reader or "oracle", budget=budget), path)
        policy = make_policy(name)
        for i, e in enumerate(episodes):
            run_episode(env, policy, e.episode_id, seed=i)
        traces += read_trace_file(path, name)
    return traces


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    g = _graph()
    eps = _episodes(g)
    run = tmp_path_factory.mktemp("run")
    reader = AnswerWhenGoldPageSeen({e.question: {g.pages[p].node_id for p in e.evidence_pages} for e in eps})
    traces = run_policies(run, g, eps, ("heuristic", "random", "topk_page", "llm_evaluator"), reader=reader)
    return g, eps, run, traces


# --- states per step ---------------------------------------------------------------------------


def test_replayed_states_match_the_recorded_final_states(world):
    g, eps, run, traces = world
    assert len(traces) == 12
    for t in traces:
        rp = replay_states(t)
        assert rp.mismatch == (), (t.policy, t.episode_id, rp.mismatch[:3])
        assert rp.final == {k: v for k, v in t.end["final_states"].items()}
        assert states_at(rp, -1) == {p: "activated" for p in t.reset["entry_pages"]}
        assert states_at(rp, len(rp.steps) - 1) == rp.final


def test_each_step_sets_the_state_its_operation_implies(world):
    _, _, _, traces = world
    seen_ops = set()
    for t in traces:
        rp = replay_states(t)
        for s in rp.steps:
            before, after = states_at(rp, s.index - 1), states_at(rp, s.index)
            if not s.ok:
                assert s.changes == () and before == after
                continue
            seen_ops.add(s.op)
            expect = {"OpenNode": "opened", "PruneNode": "pruned"}.get(s.op, "activated")
            for nid, state in s.changes:
                assert state == expect and after[nid] == expect
            untouched = set(before) - {n for n, _ in s.changes}
            assert all(after[n] == before[n] for n in untouched)
    assert {"ActivateNode", "OpenNode", "PruneNode", "SearchEvidence"} <= seen_ops


def test_a_tampered_trace_is_reported_as_a_mismatch(world):
    _, _, _, traces = world
    t = next(t for t in traces if any(r.get("op") == "OpenNode" and r.get("ok") for r in t.records))
    records = [dict(r) for r in t.records]
    i = next(i for i, r in enumerate(records) if r.get("op") == "OpenNode" and r.get("ok"))
    records[i]["changed"] = []
    rp = replay_states(TraceEpisode(t.policy, tuple(records), "tampered"))
    assert t.records[i]["changed"][0] in rp.mismatch


def test_split_episodes_and_bad_traces():
    recs = [{"kind": "step"}, {"kind": "reset", "episode_id": "a"}, {"kind": "end"},
            {"kind": "reset", "episode_id": "b"}, {"kind": "step", "op": "OpenNode", "ok": False, "changed": []}]
    eps = split_episodes(recs, "p")
    assert [e.episode_id for e in eps] == ["a", "b"]
    assert eps[0].end is not None and eps[1].end is None
    with pytest.raises(TraceFormatError):
        TraceEpisode("p", ({"kind": "step"},))
    bad = TraceEpisode("p", ({"kind": "reset", "episode_id": "x", "entry_pages": []},
                             {"kind": "step", "op": "Teleport", "ok": True, "changed": ["d:p1"]}))
    with pytest.raises(TraceFormatError, match="Teleport"):
        replay_states(bad)


# --- report model --------------------------------------------------------------------------------


def test_outcomes_gold_and_rounds(world):
    g, eps, _, traces = world
    data = build_report_data(traces, {e.episode_id: e for e in eps}, {g.doc_id: g})
    assert data.warnings == []
    rows = data.index_rows()
    assert len(rows) == 12 and set(data.policies) == {"heuristic", "random", "topk_page", "llm_evaluator"}
    for r in rows:
        run = next(ep for ep in data.episodes if ep.episode_id == r["episode_id"]).runs[r["policy"]]
        assert r["correct"] == (run.components["support"] >= 0.5)
        assert r["reward"] == pytest.approx(run.components["reward"])
    assert {r["correct"] for r in rows} == {True, False}
    counts = outcome_counts(rows)
    assert sum(c["rows"] for c in counts.values()) == 12
    ep1 = next(ep for ep in data.episodes if ep.episode_id == "ep1")
    assert ep1.page_scope == "multi" and ep1.evidence_sources == ["Chart", "Pure-text (Plain-text)"]
    assert set(ep1.gold_nodes) >= {g.elements[5 * EPP + 2].node_id, g.elements[8 * EPP + 2].node_id}
    assert {5, 8} <= set(ep1.touched_pages)
    ep2 = next(ep for ep in data.episodes if ep.episode_id == "ep2")
    assert ep2.page_scope == "none" and ep2.gold_nodes == []
    llm = ep1.runs["llm_evaluator"]
    assert len(llm.rounds) >= 2 and all(r["raw"] for r in llm.rounds)
    assert [r["after_step"] for r in llm.rounds] == sorted(r["after_step"] for r in llm.rounds)
    assert "Thinking..." in llm.rounds[1]["raw"]
    assert llm.rounds[0]["decision"]["activate"] == [1, 2]


def test_without_episodes_or_graph_the_trace_alone_is_shown(world):
    _, _, _, traces = world
    data = build_report_data(traces)
    ep = data.episodes[0]
    assert ep.question == traces[0].reset["question"] and ep.gold_answer is None and ep.gold_nodes == []
    doc = data.docs[ep.doc_key]
    assert doc.graph is None and doc.n_pages >= max(ep.touched_pages) + 1
    assert doc.page_node_id(3) == "synthetic:p3"


def test_a_graph_that_does_not_match_the_trace_is_dropped_with_a_warning(world):
    _, eps, _, traces = world
    other = _graph(n_pages=3)  # same doc id, fewer pages: trace node ids are missing
    data = build_report_data(traces, {e.episode_id: e for e in eps}, {other.doc_id: other})
    assert any("not in the graph" in w for w in data.warnings)
    assert all(data.docs[ep.doc_key].graph is None for ep in data.episodes)


def test_long_document_episode_page_holds_only_touched_pages(tmp_path):
    """50 steps over a 300-page document: element boxes only for touched pages; other pages stay lazy."""
    g = _graph(n_pages=300, doc_id="long")
    ep = Episode(episode_id="long0", benchmark="synth", doc_id=g.doc_id, source=g.source.path,
                 question="cash liquidity debt capital", answer="1", answer_format="Int", evidence_pages=(150,),
                 gold_node_ids=(g.elements[150 * EPP].node_id,))
    env = MageRAGEnv(episodes=[EnvEpisode(ep, g)], retriever="dense", query_fn=hash_query_fn(64),
                     budget={"k": 3, "m": 3, "M": 40, "T": 20, "B": 20})
    trace = TraceRecorder()  # in memory (what the TraceRecording wrapper attaches)
    env.add_observer(trace)
    env.reset(seed=0, options={"episode_id": "long0"})
    rng = np.random.default_rng(0)
    for _ in range(50):
        mask = env.action_masks()
        mask[0] = False
        if not mask.any() or env.state.stopped:
            break
        env.step(int(rng.choice(np.flatnonzero(mask))))
    if not env.state.stopped:
        env.step(0)
    t = TraceEpisode("random", tuple(trace.records))
    assert len(replay_states(t).steps) >= 40
    data = build_report_data([t], {"long0": ep}, {g.doc_id: g})
    touched = data.episodes[0].touched_pages
    assert 150 in touched and len(touched) < 120
    write_report(data, tmp_path / "r", progress=False)
    html = (tmp_path / "r" / "episodes" / f"{data.episodes[0].slug}.html").read_text()
    payload = json.loads(re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1))
    assert sorted(int(p) for p in payload["doc"]["elements"]) == touched
    assert len(payload["doc"]["pages"]) == 300
    assert all(p["src"] is None for p in payload["doc"]["pages"])  # synthetic: blank placeholders


# --- the site ------------------------------------------------------------------------------------


def test_written_site_escapes_document_text_and_embeds_data(world, tmp_path):
    g, eps, _, traces = world
    evil = "</script><script>alert(1)</script> & <b>"
    eps2 = [replace(e, question=evil) if e.episode_id == "ep0" else e for e in eps]
    data = build_report_data(traces, {e.episode_id: e for e in eps2}, {g.doc_id: g})
    index = write_report(data, tmp_path / "site", progress=False)
    assert index.is_file() and all((tmp_path / "site" / "assets" / a).is_file()
                                   for a in ("report.css", "index.js", "episode.js"))
    for f in [index, *(tmp_path / "site" / "episodes").glob("*.html")]:
        text = f.read_text()
        assert "<script>alert(1)" not in text
        payload = json.loads(re.search(r'id="report-data">(.*?)</script>', text, re.S).group(1))
        assert payload
    idx = json.loads(re.search(r'id="report-data">(.*?)</script>', index.read_text(), re.S).group(1))
    assert evil in {r["question"] for r in idx["rows"]}
    assert all(r["href"].startswith("episodes/") for r in idx["rows"])
    report = json.loads((tmp_path / "site" / "report.json").read_text())
    assert report["runs"] == 12 and report["episodes"] == 3


def test_image_writer_renders_real_pdf_pages_downscaled(tmp_path):
    import pymupdf

    from mage_gym.graph.schema import DocumentSource
    from mage_gym.report.records import DocView
    from mage_gym.testing import make_toy_graph
    from PIL import Image

    pdf = tmp_path / "doc.pdf"
    doc = pymupdf.open()
    for i in range(2):
        page = doc.new_page(width=612, height=792)
        page.insert_text((72, 100), f"Page {i} revenue table", fontsize=24)
    doc.save(pdf)
    g = make_toy_graph(n_pages=2)
    g.source = DocumentSource("pdf", str(pdf))
    dv = DocView("k", g.doc_id, 2, [(612.0, 792.0)] * 2, g, str(pdf))
    w = ImageWriter(tmp_path / "out", ImageOptions(page_max_side=200, thumb_max_side=50, reader_max_side=120))
    rel = w.page(dv, 1)
    assert rel and max(Image.open(tmp_path / "out" / rel).size) == 200
    assert max(Image.open(tmp_path / "out" / w.page(dv, 0, thumb=True)).size) == 50
    crop = w.reader_image(dv, {"node_id": g.elements[0].node_id, "kind": "crop", "page": 0, "width": 900, "height": 300})
    assert crop and max(Image.open(tmp_path / "out" / crop).size) <= 120
    assert w.page(dv, 1) == rel and w.reused == 1  # written once per folder
    toy = DocView("t", "toy", 2, [(612.0, 792.0)] * 2, make_toy_graph(n_pages=2), "<toy>")
    assert w.page(toy, 0) is None and w.reader_image(toy, {"node_id": "toy:p0", "kind": "page", "page": 0}) is None
    with pytest.raises(ValueError):
        ImageOptions(page_max_side=4)


# --- run directory layout --------------------------------------------------------------------


def test_run_dir_layout_labels_policies_and_budgets(tmp_path):
    g = _graph()
    eps = _episodes(g, 2)
    run_policies(tmp_path, g, eps, ("heuristic",), budget={"k": 2, "m": 2, "M": 6, "T": 3, "B": 4})
    run_policies(tmp_path, g, eps, ("heuristic", "topk_page"), budget={"k": 3, "m": 2, "M": 6, "T": 3, "B": 4})
    rd = discover(tmp_path)
    assert {p for p, _ in rd.trace_files} == {"heuristic", "topk_page"}
    labels = {t.policy for t in read_traces(rd)}
    assert labels == {"heuristic [k2 m2 M6 T3 B4]", "heuristic [k3 m2 M6 T3 B4]", "topk_page"}
    # gold needs the dataset: without it the report still builds, and says why gold is missing
    data = report_data_from_run_dir(tmp_path)
    assert len(data.episodes) == 2 and any("dataset is unknown" in w for w in data.warnings)
    with pytest.raises(RunDirError):
        discover(tmp_path / "traces" / "heuristic")
    with pytest.raises(RunDirError):
        discover(tmp_path / "missing")


def test_slugs_are_file_safe_and_distinct():
    a, b = slug("mmlb/../x?y"), slug("mmlb/../x?z")
    assert a != b and re.fullmatch(r"[A-Za-z0-9._-]+", a)
