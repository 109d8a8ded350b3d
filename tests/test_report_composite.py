"""The trace report on conversations and document sets: turns, their numbers, documents and their own pages.

Episodes are played on toy graphs (no PDF) by real policies with trace
recording on; the report's per-turn numbers are checked against what the
environment computed for each turn (its finished-turn outcomes), and its page
labels against the union graph's own document map. One test renders a union
of two tiny generated PDFs to check page images come from the right document.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mage_gym.data.composite import CompositeEpisode, DocumentRef, Turn
from mage_gym.data.episode import Episode
from mage_gym.env import MageRAGEnv
from mage_gym.testing import hash_query_fn
from mage_gym.env.episodes import EnvEpisode
from mage_gym.graph.union import union_graph
from mage_gym.readers.base import ReaderOutput, RenderedInput
from mage_gym.bench.results import trace_path
from mage_gym.report import build_report_data, read_trace_file, states_at, write_report
from mage_gym.testing import make_toy_graph
from mage_gym.wrappers import TraceRecording
from policies import get_policy
from mage_gym.bench.play import run_episode

QF = hash_query_fn(16)
EPP = 5  # elements per toy page
BUDGET = {"k": 2, "m": 2, "M": 6, "T": 3, "B": 6}


class RevenueReader:
    """Answers "x" (the gold of every turn) to questions about revenue and "no" otherwise: some turns right, some wrong.

    A follow-up reaches the reader after the earlier turns (``mage_gym.env.turns.reader_question``): only the
    current question ("Now answer: ...") decides.
    """

    name = "scripted"
    answers = True

    def read(self, rendered: RenderedInput) -> ReaderOutput:
        current = rendered.question.rsplit("Now answer:", 1)[-1]
        return ReaderOutput(answer="x" if "revenue" in current.lower() else "no", raw="scripted")


def _part(doc: str, eid: str, question: str, page: int) -> Episode:
    return Episode(episode_id=eid, benchmark="mmlongbench", doc_id=doc, source="<toy>", question=question,
                   answer="x", answer_format="Str", evidence_pages=(page,), gold_node_ids=(f"{doc}:p{page}:e2",))


def _turn(question: str, eid: str, parts: list[tuple[str, int]]) -> Turn:
    return Turn(question, "x", "Str", True, tuple(_part(d, eid, question, p) for d, p in parts))


@pytest.fixture(scope="module")
def graphs():
    return {"A": make_toy_graph(n_pages=6, elements_per_page=EPP, doc_id="A", dim=16, seed=0),
            "B": make_toy_graph(n_pages=5, elements_per_page=EPP, doc_id="B", dim=16, seed=1),
            "C": make_toy_graph(n_pages=8, elements_per_page=EPP, doc_id="C", dim=16, seed=2)}


@pytest.fixture(scope="module")
def episodes(graphs):
    conv = CompositeEpisode(
        episode_id="conv", benchmark="mmlongbench", documents=(DocumentRef("C", "<toy>"),), group="gc",
        turns=(_turn("Which chart shows revenue growth?", "conv#0", [("C", 4)]),
               _turn("And the asia risk margin?", "conv#1", [("C", 3)]),
               _turn("What about europe employees?", "conv#2", [("C", 7)])))
    xdoc = CompositeEpisode(
        episode_id="xdoc", benchmark="mmlongbench", documents=(DocumentRef("A", "<toy>"), DocumentRef("B", "<toy>")),
        group="gab", turns=(_turn("Compare the revenue table of both reports", "xdoc#0", [("A", 2), ("B", 3)]),))
    xconv = CompositeEpisode(
        episode_id="xconv", benchmark="mmlongbench",
        documents=(DocumentRef("A", "<toy>"), DocumentRef("B", "<toy>")), group="gab",
        turns=(_turn("Which report shows more revenue growth?", "xconv#0", [("A", 1), ("B", 4)]),
               _turn("And its employees chart?", "xconv#1", [("B", 2)])))
    return {"conv": conv, "xdoc": xdoc, "xconv": xconv}


def _pairs(graphs, episodes):
    return [EnvEpisode(ep, [graphs[d] for d in ep.doc_ids]) for ep in episodes.values()]


@pytest.fixture(scope="module")
def played(tmp_path_factory, graphs, episodes):
    """Every episode by three policies, traced; the env's own outcome of every turn kept as the truth."""
    run = tmp_path_factory.mktemp("run")
    truth: dict[tuple[str, str], list] = {}
    traces = []
    for name in ("heuristic", "topk_page", "random"):
        env = MageRAGEnv(episodes=_pairs(graphs, episodes), query_fn=QF, K=16, reader=RevenueReader(), budget=BUDGET,
                         final_open_pass=name == "heuristic")  # opened nodes to carry into the next question
        path = trace_path(run, name, env.budget.to_dict())
        wrapped = TraceRecording(env, path)
        for i, eid in enumerate(episodes):
            res = run_episode(wrapped, get_policy(name), eid, seed=i)
            conv = env._conv  # the env's finished turns: each turn's own outcome (test-only look inside)
            truth[(name, eid)] = [t.outcome for t in conv.finished] if conv.is_conversation else [res]
        traces += read_trace_file(path, name)
    return run, traces, truth


@pytest.fixture(scope="module")
def data(played, graphs, episodes):
    _, traces, _ = played
    return build_report_data(traces, dict(episodes), dict(graphs))


def _ep(data, eid):
    return next(e for e in data.episodes if e.episode_id == eid)


# --- conversations -----------------------------------------------------------------------------------


def test_conversation_turns_carry_each_turns_own_numbers(data, played, episodes):
    _, _, truth = played
    ep = _ep(data, "conv")
    assert ep.kind == "conversation" and [t["question"] for t in ep.turns] == list(episodes["conv"].questions)
    assert [t["gold_pages"] for t in ep.turns] == [[4], [3], [7]]
    assert ep.evidence_pages == [3, 4, 7] and ep.documents == []  # one document: no document table
    for pol, run in ep.runs.items():
        outcomes = truth[(pol, "conv")]
        assert [t["turn"] for t in run.turns] == [0, 1, 2], pol
        for t, o in zip(run.turns, outcomes):
            assert t["reward"] == pytest.approx(o.reward), (pol, t["turn"])
            assert t["support"] == pytest.approx(o.components["support"]), (pol, t["turn"])
            assert t["components"]["noise"] == pytest.approx(o.components["noise"]), (pol, t["turn"])
            assert t["evidence_page_recall"] == pytest.approx(o.metrics["evidence_page_recall"])
            assert t["tokens_rendered"] == o.metrics["tokens_rendered"]
            assert t["covered"] == bool(o.metrics["evidence_all_covered"])
            assert t["metrics"]["activations"] == o.metrics["activations"]
        # the reader answers "x" (gold) to the revenue question only
        assert [t["answer"] for t in run.turns] == ["x", "no", "no"]
        assert [t["correct"] for t in run.turns] == [True, False, False]
        assert run.correct is False
        assert run.turns[-1]["derived"] and not run.turns[0]["derived"]  # the last turn's support is recovered
        assert run.covered == all(bool(o.metrics["evidence_all_covered"]) for o in outcomes)


def test_conversation_steps_are_split_by_turn_and_states_restart_at_each_question(data):
    ep = _ep(data, "conv")
    seen = {"opened kept": False, "pruned lifted": False}
    for pol, run in ep.runs.items():
        rp = run.replay
        assert rp.mismatch == () and all(d == () for d in rp.turn_mismatch.values()), pol
        assert [ts.turn for ts in rp.turn_starts] == [1, 2]
        turn_ends = [r for r in run.trace.records if r.get("kind") == "turn_end"]
        for t in run.turns:
            steps = rp.steps[t["first_step"]: t["end_step"]]
            assert steps and {s.turn for s in steps} == {t["turn"]}, (pol, t["turn"])
            if t["turn"] < 2:  # the state after the turn's last step is what its turn_end recorded
                assert states_at(rp, t["end_step"] - 1) == turn_ends[t["turn"]]["final_states"]
                assert t["stop_reason"] == turn_ends[t["turn"]]["stop_reason"]
        for ts in rp.turn_starts:  # a new question starts on the carried working set (pruning lifted)
            before = states_at(rp, ts.after_step - 1)
            assert ts.carried
            assert {n for n, s in before.items() if s in ("activated", "opened")} <= set(ts.states)
            assert "pruned" not in ts.states.values()
            first = next(s for s in rp.steps if s.turn == ts.turn)
            assert states_at(rp, first.index) == {**ts.states, **dict(first.changes)}
        assert states_at(rp, len(rp.steps)) == rp.final
        for ts in rp.turn_starts:
            before = states_at(rp, ts.after_step - 1)
            seen["opened kept"] |= any(before.get(n) == "opened" for n, s in ts.states.items() if s == "opened")
            seen["pruned lifted"] |= "pruned" in before.values()
    assert all(seen.values()), seen  # the traces exercised both rules


def test_a_fresh_working_set_per_turn_replays_too(graphs, episodes, tmp_path):
    env = MageRAGEnv(episodes=_pairs(graphs, {"conv": episodes["conv"]}), query_fn=QF, K=16, reader="oracle",
                     budget=BUDGET, carry_over=False)
    path = tmp_path / "fresh.jsonl"
    run_episode(TraceRecording(env, path), get_policy("heuristic"), "conv", seed=0)
    run = build_report_data(read_trace_file(path, "heuristic"), dict(episodes)).episodes[0].runs["heuristic"]
    assert run.replay.mismatch == () and all(d == () for d in run.replay.turn_mismatch.values())
    assert not all(ts.carried for ts in run.replay.turn_starts)


# --- documents ---------------------------------------------------------------------------------------


def test_cross_document_pages_map_to_their_own_documents(data, played, graphs):
    _, _, truth = played
    union = union_graph([graphs["A"], graphs["B"]])
    nA = graphs["A"].n_pages
    ep = _ep(data, "xdoc")
    doc = data.docs[ep.doc_key]
    assert ep.kind == "cross_document" and ep.doc_id == "A+B" and doc.n_pages == union.n_pages
    assert ep.documents == [{"doc_id": "A", "page_offset": 0, "n_pages": nA, "gold_pages": [2]},
                            {"doc_id": "B", "page_offset": nA, "n_pages": graphs["B"].n_pages, "gold_pages": [3]}]
    assert ep.evidence_pages == [2, nA + 3] and ep.gold_pages == [2, nA + 3]
    assert set(ep.gold_nodes) == {"A:p2:e2", "B:p3:e2"}
    for p in range(union.n_pages):
        d, local = doc.locate(p)
        assert (d, local) == (union.doc_ids[int(union.doc_of_page[p])], union.local_page(p))
        assert doc.page_node_id(p) == union.pages[p].node_id == f"{d}:p{local}"
        assert doc.page_label(p) == f"{d} p{local}"
    for pol, run in ep.runs.items():
        assert run.turns == []  # one question: the end record is the turn
        recorded = truth[(pol, "xdoc")][0].metrics["per_document_recall"]
        assert set(recorded) == {"A", "B"} and run.metrics["per_document_recall"] == pytest.approx(recorded)
        for p in run.touched_pages:
            assert 0 <= p < union.n_pages
    rows = [r for r in data.index_rows() if r["episode_id"] == "xdoc"]
    assert rows and all(r["n_documents"] == 2 and r["n_turns"] == 1 for r in rows)


def test_cross_document_conversation_per_turn_and_per_document_recall(data, played, graphs):
    _, _, truth = played
    nA = graphs["A"].n_pages
    ep = _ep(data, "xconv")
    assert ep.kind == "cross_document_conversation"
    assert [t["gold_pages"] for t in ep.turns] == [[1, nA + 4], [nA + 2]]
    assert [t["evidence_labels"] for t in ep.turns] == [["A p1", "B p4"], ["B p2"]]
    assert [d["gold_pages"] for d in ep.documents] == [[1], [2, 4]]
    for pol, run in ep.runs.items():
        outcomes = truth[(pol, "xconv")]
        for t, o in zip(run.turns, outcomes):
            assert t["per_document_recall"] == pytest.approx(o.metrics["per_document_recall"]), (pol, t["turn"])
            assert t["reward"] == pytest.approx(o.reward)
        assert "per_document_recall" in run.turns[-1]["derived"]
        assert run.turns[-1]["per_document_recall"]["A"] is None  # the last question has no gold in A


def test_without_graphs_pages_are_placed_from_the_node_ids(played, episodes, graphs):
    _, traces, _ = played
    data = build_report_data([t for t in traces if t.episode_id == "xdoc"])  # no episodes, no graphs
    ep = data.episodes[0]
    doc = data.docs[ep.doc_key]
    assert ep.kind == "cross_document" and [s.doc_id for s in doc.spans] == ["A", "B"]
    for run in ep.runs.values():
        for nid in run.replay.final:
            p = doc.page_of(nid)
            m = re.match(r"^(\w+):p(\d+)", nid)
            assert p is not None and doc.page_label(p) == f"{m.group(1)} p{m.group(2)}"
            assert doc.page_node_id(p) == f"{m.group(1)}:p{m.group(2)}"


# --- the site ----------------------------------------------------------------------------------------


def _payload(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert m
    return json.loads(m.group(1))


def test_the_site_carries_turns_and_documents(data, tmp_path):
    index = write_report(data, tmp_path / "site", {"other_pages": False}, progress=False)
    rows = json.loads((tmp_path / "site" / "report.json").read_text())["rows"]
    assert {(r["episode_id"], r["n_turns"], r["n_documents"]) for r in rows} == {
        ("conv", 3, 1), ("xdoc", 1, 2), ("xconv", 2, 2)}
    ep = _ep(data, "xconv")
    page = _payload((index.parent / "episodes" / f"{ep.slug}.html").read_text())
    nA = data.docs[ep.doc_key].spans[1].page_offset
    assert [d["doc_id"] for d in page["doc"]["documents"]] == ["A", "B"]
    assert page["doc"]["pages"][nA + 2]["label"] == "B p2" and page["doc"]["pages"][nA + 2]["id"] == "B:p2"
    assert [t["question"] for t in page["meta"]["turns"]] == list(ep.turns[i]["question"] for i in range(2))
    run = page["runs"]["heuristic"]
    assert [t["turn"] for t in run["turns"]] == [0, 1] and len(run["turn_starts"]) == 1
    assert all("turn" in s for s in run["steps"])
    single = _payload((index.parent / "episodes" / f"{_ep(data, 'xdoc').slug}.html").read_text())
    assert single["runs"]["heuristic"]["turns"] == [] and "label" in single["doc"]["pages"][0]


# --- pixels from the right document ------------------------------------------------------------------


def test_union_pages_render_from_their_own_pdf(tmp_path):
    from mage_gym.data.synth import SynthConfig, generate_corpus, read_manifest
    from mage_gym.graph.build import build_graph
    from mage_gym.report.images import ImageOptions, ImageWriter
    from mage_gym.testing import HashingEncoder

    root = tmp_path / "synth"
    generate_corpus(root, 2, seed=5, cfg=SynthConfig(min_pages=2, max_pages=3, questions_per_doc=2,
                                                     bridge_questions_per_doc=0), workers=1, progress=False)
    docs = read_manifest(root)["docs"]
    members = [build_graph(str(root / d["file"]), parser="fast", cache_dir=tmp_path / "cache",
                           encoder=HashingEncoder(16), progress=False) for d in docs]
    a, b = members
    ep = CompositeEpisode(episode_id="px", benchmark="synth", group="g",
                          documents=tuple(DocumentRef(g.doc_id, str(g.source.path)) for g in members),
                          turns=(_turn("Compare revenue", "px#0", [(a.doc_id, 0), (b.doc_id, 1)]),))
    env = MageRAGEnv(episodes=[EnvEpisode(ep, members)], query_fn=QF, K=16, reader="oracle", budget=BUDGET)
    path = tmp_path / "t.jsonl"
    run_episode(TraceRecording(env, path), get_policy("topk_page"), "px", seed=0)
    data = build_report_data(read_trace_file(path, "topk_page"), {"px": ep},
                             lambda e, d: [{g.doc_id: g for g in members}[x] for x in e.doc_ids])
    assert data.warnings == []
    doc = data.docs[data.episodes[0].doc_key]
    assert doc.has_pixels and [s.doc_id for s in doc.spans] == [a.doc_id, b.doc_id]
    writer = ImageWriter(tmp_path / "img", ImageOptions(page_max_side=64, thumb_max_side=32))
    from PIL import Image, ImageChops

    for p in (a.n_pages, a.n_pages + 1):  # B's pages inside the union are B's own renders
        rel = writer.page(doc, p)
        assert rel is not None
        got = Image.open(tmp_path / "img" / rel).convert("L")
        want = b.page_image(p - a.n_pages, dpi=144, max_side=64).convert("L")
        other = a.page_image(min(p - a.n_pages, a.n_pages - 1), dpi=144, max_side=64).convert("L")
        diff = ImageChops.difference(got, want.resize(got.size)).getbbox()
        assert diff is None or _mean_abs(got, want) < _mean_abs(got, other)


def _mean_abs(x, y) -> float:
    import numpy as np

    x = np.asarray(x, dtype=float)
    y = np.asarray(y.resize((x.shape[1], x.shape[0])), dtype=float)
    return float(np.abs(x - y).mean())


# --- in a browser ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_conversation_page_in_chromium(data, tmp_path):
    """The episode page of a cross-document conversation runs without script errors and replays turn starts."""
    chromium, driver_bin = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
    assert chromium.exists() and driver_bin.exists(), \
        "needs Debian's chromium and chromium-driver: run `bash scripts/install_browser.sh` (as root)"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    index = write_report(data, tmp_path / "site", {"other_pages": False}, progress=False)
    ep = _ep(data, "xconv")
    run = ep.runs["heuristic"]
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(chromium)
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(str(driver_bin)), options=opts)
    try:
        d.get((index.parent / "episodes" / f"{ep.slug}.html").resolve().as_uri() + "#run=heuristic")
        assert len(d.find_elements("css selector", ".turns-table tr[data-turn]")) == 2
        assert len(d.find_elements("css selector", "table.documents tr[data-doc]")) == 2
        assert len(d.find_elements("css selector", ".timeline li.turn-start")) == 1
        labels = d.execute_script(
            "return Array.from(document.querySelectorAll('figure.page figcaption span:first-child'))"
            ".map(function(s){return s.textContent.split(' · ')[0];})")
        assert labels and all(re.fullmatch(r"[AB] p\d+", x) for x in labels)
        ts = run.replay.turn_starts[0]
        first = next(s for s in run.replay.steps if s.turn == ts.turn)
        d.find_element("css selector", f'.timeline li[data-step="{first.index}"]').click()
        pages = d.execute_script(
            "var o={}; document.querySelectorAll('figure.page').forEach(function(f){o[f.dataset.id]=f.dataset.state;});"
            "return o;")
        want = states_at(run.replay, first.index)
        assert pages and all(pages[n] == want.get(n, "unvisited") for n in pages)
        assert [e["message"] for e in d.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        d.quit()
