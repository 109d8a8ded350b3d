"""End to end: a short benchmark run -> ``experiments/report.py`` -> the report driven in headless Chromium.

Runs in CI and is not skipped: it needs Debian's ``chromium`` and
``chromium-driver`` (``scripts/install_browser.sh``; no tool downloads a
browser). The run uses a few episodes of real documents from
``../shared/data`` (MMLongBench-Doc, the smallest documents, first 8 pages)
when present, else a small generated corpus. Policies: ``heuristic``,
``topk_page`` and the LLM evaluator driven by a scripted backend (no model),
with the oracle reader; traces are written in the layout the report reads
(:func:`mage_gym.report.trace_path`).

Set ``MAGE_GYM_UPDATE_SCREENSHOT=1`` to copy the screenshot to docs/report.png.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mage_gym.data.episode import Episode
from mage_gym import make_env
from mage_gym.env import Budget
from mage_gym.bench.results import trace_path
from policies import get_policy
from policies.llm_evaluator import CallableBackend
from mage_gym.bench.play import run_episode

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MAGE_GYM_DATA", REPO.parent / "shared" / "data"))
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROME_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync")
BUDGET = {"k": 2, "m": 2, "M": 6, "T": 3, "B": 4}
MAX_PAGES = 8
PARSER = "fast"
POLICIES = ("heuristic", "topk_page", "llm_evaluator")

pytestmark = pytest.mark.slow


def scripted_llm(system: str, user: str) -> str:
    """A stand-in evaluator: round 1 activates two candidates, round 2 opens and searches, then stops."""
    m = re.search(r'<budget round="(\d+)"', user)
    rnd = int(m.group(1)) if m else 1
    if rnd == 1:
        return '<agent_decision><selected_actions><action index="1"/><action index="2"/></selected_actions></agent_decision>'
    if rnd == 2:
        acts = re.findall(r'<node id="([^"]+)" type="[^"]*" state="activated"', user)[:2]
        opens = "".join(f'<node id="{a}"/>' for a in acts)
        return (f"<agent_decision><open_requests>{opens}</open_requests>"
                "<search_request><query>results table</query></search_request></agent_decision>")
    return "<agent_decision><stop>true</stop></agent_decision>"


def _real_episodes(data: Path) -> tuple[list[Episode], dict]:
    """A few answerable episodes of the two smallest text PDFs, evidence within the first MAX_PAGES pages."""
    import pymupdf

    from mage_gym.data.registry import load_dataset

    root = data / "mmlongbench-dev"
    eps = load_dataset("mmlongbench", root=root, split="all")
    docs = {}
    for src in sorted({e.source for e in eps}):
        with pymupdf.open(src) as d:
            if len(d[0].get_text()) > 200:  # a text layer: no OCR needed, so the test stays quick
                docs[src] = d.page_count
    chosen: list[Episode] = []
    for src in sorted(docs, key=lambda s: (docs[s], s))[:2]:
        cands = [e for e in eps if e.source == src and e.answerable and e.evidence_pages
                 and max(e.evidence_pages) < MAX_PAGES]
        by_format: dict[str, Episode] = {}
        for e in cands:
            by_format.setdefault(e.answer_format, e)
        chosen += list(by_format.values())[:3]
    return chosen, {"name": "mmlongbench", "root": str(root)}


def _synthetic_episodes(tmp: Path) -> tuple[list[Episode], dict]:
    from mage_gym.data.synth import SynthConfig, generate_corpus, load_synth

    root = tmp / "synth"
    generate_corpus(root, 2, seed=0, cfg=SynthConfig(min_pages=4, max_pages=6, questions_per_doc=3), workers=1,
                    progress=False)
    return load_synth(root)[:5], {"name": "synth", "root": str(root)}


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> tuple[Path, dict]:
    """A benchmark-shaped run directory with traces, and the report built by experiments/report.py."""
    tmp = tmp_path_factory.mktemp("bench")
    if (DATA / "mmlongbench-dev").is_dir():
        episodes, dataset = _real_episodes(DATA)
    else:
        episodes, dataset = _synthetic_episodes(tmp)
    assert len(episodes) >= 3
    run = tmp / "run"
    (run / ".hydra").mkdir(parents=True)
    cfg = {"dataset": dataset, "env": {"parser": PARSER, "graph_kwargs": {"max_pages": MAX_PAGES}, "budget": BUDGET}}
    (run / ".hydra" / "config.yaml").write_text(json.dumps(cfg))  # JSON is YAML: what Hydra saves for the run
    results = []
    for name in POLICIES:
        policy = (get_policy(name, backend=CallableBackend(scripted_llm, "scripted"), cache=False)
                  if name == "llm_evaluator" else get_policy(name))
        env = make_env(episodes=episodes, parser=PARSER, graph_kwargs={"max_pages": MAX_PAGES}, budget=BUDGET,
                       render_mode=policy.render_mode or "visual",
                       trace_path=str(trace_path(run, name, Budget.coerce(BUDGET).to_dict())))
        rs = [run_episode(env, policy, e.episode_id, seed=i) for i, e in enumerate(episodes)]
        results.append({"policy": name, "budget": Budget.coerce(BUDGET).to_dict(), "dataset": dataset["name"],
                        "split": "all", "metrics": {"episodes": len(rs), "reward": sum(r.reward for r in rs) / len(rs)}})
        env.close()
    (run / "results.json").write_text(json.dumps({"runs": results}))
    proc = subprocess.run([sys.executable, str(REPO / "experiments" / "report.py"), f"run_dir={run}"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = run / "report"
    assert (out / "index.html").is_file(), proc.stdout
    summary = json.loads((out / "report.json").read_text())
    return out, summary


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(f"{CHROMIUM} and {CHROMEDRIVER} are required: run `bash scripts/install_browser.sh` (as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in CHROME_ARGS:
        opts.add_argument(a)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    opts.add_argument("--window-size=1440,1000")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _rows(driver) -> list:
    return driver.find_elements("css selector", "#runs tbody tr.run-row")


def _select(driver, element_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", element_id)).select_by_value(value)


def _box_states(driver) -> dict[str, str]:
    return driver.execute_script(
        "var o={}; document.querySelectorAll('.pane .box').forEach(function(b){o[b.dataset.id]=b.dataset.state;});"
        "return o;")


def _severe_logs(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def test_report_in_chromium(report_dir, browser, tmp_path):
    out, summary = report_dir
    rows = summary["rows"]
    assert summary["runs"] == len(rows) and set(summary["policies"]) == set(POLICIES)
    assert not [w for w in summary["warnings"] if "mismatch" in w or "not in the graph" in w]
    d = browser

    # --- the index: filters change the visible rows ---
    d.get((out / "index.html").resolve().as_uri())
    assert len(_rows(d)) == len(rows)
    _select(d, "f-policy", "topk_page")
    visible = _rows(d)
    assert 0 < len(visible) < len(rows)
    assert {r.get_attribute("data-policy") for r in visible} == {"topk_page"}
    _select(d, "f-policy", "")
    for outcome, key, want in (("covered", "covered", True), ("missed", "covered", False)):
        _select(d, "f-outcome", outcome)
        assert len(_rows(d)) == sum(r[key] is want for r in rows)
    _select(d, "f-outcome", "")
    for scope in ("single", "multi"):
        _select(d, "f-pages", scope)
        assert len(_rows(d)) == sum(r["page_scope"] == scope for r in rows)
    _select(d, "f-pages", "")
    fmt = rows[0]["answer_format"]
    _select(d, "f-format", fmt)
    assert len(_rows(d)) == sum(r["answer_format"] == fmt for r in rows)
    _select(d, "f-format", "")
    d.find_element("css selector", 'th[data-sort="reward"]').click()  # numbers sort descending first
    first = _rows(d)[0]
    best = max(r["reward"] for r in rows)
    assert first.get_attribute("data-episode") in {r["episode_id"] for r in rows if r["reward"] == best}
    assert _severe_logs(d) == []

    # --- an episode: clicking a step recolours the boxes ---
    row = next(r for r in rows if r["policy"] == "heuristic")
    d.get((out / row["href"].split("#")[0]).resolve().as_uri() + "#run=heuristic")
    panes = d.find_elements("css selector", "section.pane")
    assert len(panes) == 1 and panes[0].get_attribute("data-policy") == "heuristic"
    assert d.find_elements("css selector", ".pane .box"), "touched pages must show element boxes"
    final = _box_states(d)
    d.find_element("css selector", '.timeline li[data-step="-1"]').click()
    at_reset = _box_states(d)
    assert at_reset != final
    assert set(at_reset.values()) == {"unvisited"}  # reset activates pages only
    changed = []  # (boxes highlighted, step element) for every step
    for li in d.find_elements("css selector", ".timeline li.step"):
        li.click()
        assert "current" in li.get_attribute("class")
        changed.append((len(d.find_elements("css selector", ".pane .box.changed")), li))
    n_changed, busiest = max(changed, key=lambda c: c[0])
    assert n_changed > 0, "no step highlighted the boxes it changed"
    busiest.click()
    assert _box_states(d) != at_reset
    # page renders are real images beside the HTML, loaded lazily
    imgs = d.find_elements("css selector", "figure.page img")
    if (out / "img").is_dir():
        assert imgs and all(i.get_attribute("loading") == "lazy" for i in imgs)
        d.execute_script("arguments[0].scrollIntoView()", imgs[0])
        deadline = time.time() + 10
        while time.time() < deadline and not d.execute_script("return arguments[0].naturalWidth", imgs[0]):
            time.sleep(0.2)
        assert d.execute_script("return arguments[0].naturalWidth", imgs[0]) > 0
    d.execute_script("window.scrollTo(0, 0)")
    shot = tmp_path / "report.png"
    d.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("MAGE_GYM_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, REPO / "docs" / "report.png")

    # --- two policies side by side, and the evaluator's raw decisions ---
    d.get(d.current_url.split("#")[0] + "#compare=heuristic,llm_evaluator")
    panes = d.find_elements("css selector", "section.pane")
    assert [p.get_attribute("data-policy") for p in panes] == ["heuristic", "llm_evaluator"]
    raws = d.execute_script("return Array.from(document.querySelectorAll('.pane[data-policy=\"llm_evaluator\"] "
                            "details.rounds pre.raw')).map(function(p){return p.textContent;})")
    assert raws and all("agent_decision" in r for r in raws)
    d.save_screenshot(str(tmp_path / "compare.png"))
    assert _severe_logs(d) == []
