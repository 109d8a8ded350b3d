"""Time a newcomer's first setup: a clean clone, a fresh venv, an empty pip cache, up to a collected test suite.

What runs, per measured run, in a new temporary folder:

* ``git clone`` of this checkout at ``--commit`` (default: HEAD);
* ``bash scripts/setup_venv.sh`` with ``PIP_CACHE_DIR`` set to a new empty
  folder (nothing downloaded earlier is reused) - figure ``setup_s``;
* ``bash scripts/run_tests.sh --co -q``: the README's test command up to a
  collected suite (setup re-check, the browser step, pytest collection) -
  figure ``collect_s``; ``first_setup_s`` = ``setup_s + collect_s``, what a
  newcomer waits before the first test runs.

``--baseline COMMIT`` times the same steps on another commit (for example
the one before the install change) in the same session, interleaved with the
measured runs, so the ratio ``first_setup_s`` measured / baseline compares
runs under the same machine load. Each run's venv size, installed package
count, pip cache size at the start (must be 0) and the machine's load average
are recorded. The clone and its venv are deleted after each run.

Run (from the repo root; a run takes minutes and uses the network to PyPI)::

    .venv/bin/python experiments/perf/perf_setup.py --runs 3                     # outputs/perf_setup/<time>/results.json
    .venv/bin/python experiments/perf/perf_setup.py --runs 3 --baseline be2093b --baseline-runs 1
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: Variables of the calling shell that would make the clone's scripts use another checkout or venv.
_DROP_ENV = ("PYTHONPATH", "VIRTUAL_ENV", "MAGE_GYM_VENV", "MAGE_GYM_CACHE", "PIP_CACHE_DIR", "PYTHONHOME")


def _git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path, timeout: float) -> tuple[float, int]:
    t0 = time.perf_counter()
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    return round(time.perf_counter() - t0, 2), proc.returncode


def one_run(commit: str, label: str, index: int, work: Path, timeout: float) -> dict[str, Any]:
    """Clone ``commit``, set it up with an empty pip cache, collect the suite; the run's figures."""
    root = Path(tempfile.mkdtemp(prefix=f"setup_{label}_{index}_", dir=work))
    clone, cache, log = root / "repo", root / "pip-cache", root / "log.txt"
    cache.mkdir()
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    _git("checkout", "--quiet", commit, cwd=clone)
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
    env["PIP_CACHE_DIR"] = str(cache)
    row: dict[str, Any] = {"label": label, "commit": _git("rev-parse", "--short=10", "HEAD", cwd=clone),
                           "run": index, "pip_cache_bytes_at_start": _folder_bytes(cache),
                           "load_average_before": [round(x, 2) for x in os.getloadavg()]}
    row["setup_s"], rc_setup = _timed(["bash", "scripts/setup_venv.sh"], clone, env, log, timeout)
    row["collect_s"], rc_collect = _timed(["bash", "scripts/run_tests.sh", "--co", "-q"], clone, env, log, timeout)
    row["first_setup_s"] = round(row["setup_s"] + row["collect_s"], 2)
    row["ok"] = rc_setup == 0 and rc_collect == 0
    text = log.read_text(errors="replace")
    tail = [line for line in text.splitlines() if line.strip()][-3:]
    # run_tests.sh passes -q and we add -q: pytest prints one "tests/file.py: N" line per file, no summary
    counts = [re.fullmatch(r"(tests/\S+\.py): (\d+)", line.strip()) for line in text.splitlines()]
    row["tests_collected"] = sum(int(m.group(2)) for m in counts if m) or None
    venv = clone / ".venv"
    row["venv_bytes"] = _folder_bytes(venv) if venv.is_dir() else None
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                            capture_output=True, text=True, env=env)
    names = {p["name"].lower() for p in json.loads(listed.stdout or "[]")}
    row["packages"] = len(names)
    row["llama_cpp_python_installed"] = "llama_cpp_python" in names or "llama-cpp-python" in names
    row["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if not row["ok"]:
        row["log_tail"] = tail
    shutil.rmtree(root, ignore_errors=True)
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["ok"]]
    out: dict[str, Any] = {"runs": len(rows), "ok": len(ok)}
    for key in ("first_setup_s", "setup_s", "collect_s"):
        vals = [r[key] for r in ok]
        if vals:
            out[key] = {"median": round(statistics.median(vals), 2), "min": min(vals), "max": max(vals)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--commit", default="HEAD", help="commit to measure (default: this checkout's HEAD)")
    ap.add_argument("--baseline", default=None, help="commit to time side by side (e.g. the one before a change)")
    ap.add_argument("--baseline-runs", type=int, default=1)
    ap.add_argument("--target-s", type=float, default=240.0, help="the first-setup target (default: 4 min)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per step")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out = args.out or REPO / "outputs" / "perf_setup" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    commit = _git("rev-parse", "--short=10", args.commit)
    plan = [("measured", commit, i) for i in range(args.runs)]
    if args.baseline:
        base = _git("rev-parse", "--short=10", args.baseline)
        for i in range(args.baseline_runs):  # interleaved: baseline run i after measured run i
            plan.insert(min(len(plan), 2 * i + 1), ("baseline", base, i))
    rows = []
    with tempfile.TemporaryDirectory(prefix="perf_setup_") as work:
        for label, sha, i in plan:
            row = one_run(sha, label, i, Path(work), args.timeout)
            rows.append(row)
            print(f"[perf_setup] {label} {sha} run {i}: first setup {row['first_setup_s']} s "
                  f"(setup {row['setup_s']} s + collect {row['collect_s']} s), ok={row['ok']}, "
                  f"{row['packages']} packages, load {row['load_average_before']}", flush=True)
    measured = summary([r for r in rows if r["label"] == "measured"])
    result: dict[str, Any] = {"measured": measured, "rows": rows}
    if args.baseline:
        baseline = summary([r for r in rows if r["label"] == "baseline"])
        result["baseline"] = baseline
        if "first_setup_s" in measured and "first_setup_s" in baseline:
            result["ratio_first_setup_measured_vs_baseline"] = round(
                measured["first_setup_s"]["median"] / baseline["first_setup_s"]["median"], 3)
    med = measured.get("first_setup_s", {}).get("median")
    result["target"] = {"first_setup_s": args.target_s, "met": med is not None and med <= args.target_s}
    result["setup"] = {"command": "bash scripts/setup_venv.sh; bash scripts/run_tests.sh --co -q",
                       "pip_cache": "a new empty PIP_CACHE_DIR per run", "cpus": os.cpu_count(),
                       "python": platform.python_version(), "machine": platform.machine(),
                       "note": "shared machine: other sessions' jobs ran at the same time (load averages per run)"}
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"measured": measured, "baseline": result.get("baseline"),
                      "ratio": result.get("ratio_first_setup_measured_vs_baseline"), "target": result["target"]},
                     indent=1))
    print(f"[perf_setup] wrote {out / 'results.json'}")
    return 0 if measured.get("ok") == len([r for r in rows if r["label"] == "measured"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
