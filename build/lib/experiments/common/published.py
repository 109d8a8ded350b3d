"""Results the docs cite: ``docs/results/<name>/`` holds a run's ``results.json`` and its provenance.

Why a folder per result: every number in ``docs/RESULTS.md`` must be traceable
to the command that produced it, when, and at which commit, and must never be
typed by hand. ``publish`` copies a run's ``results.json`` (and any figures
next to it) under ``docs/results/<name>/`` with a ``provenance.json``
(``command``, ``date``, ``commit``); ``render`` turns every published result
into the markdown of ``docs/RESULTS.md``. Both are plain functions so tests can
call them on temporary folders.
"""
from __future__ import annotations

import datetime as _dt
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterable, Mapping

PROVENANCE_KEYS = ("command", "date", "commit")
#: figures copied beside a published results.json (the doc links them)
FIGURE_SUFFIXES = (".png", ".svg")
#: headline metrics shown first in a benchmark table (others follow in their stored order)
PREFERRED_METRICS = ("episodes", "reward", "evidence_page_recall", "evidence_all_covered", "tokens_rendered",
                     "pages_rendered", "accuracy", "f1")
MAX_COLUMNS = 10


def current_commit(repo: Path) -> str:
    """The repository's HEAD commit (short), with ``+dirty`` when the tree has uncommitted changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short=10", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def publish(run_dir: Path, name: str, command: str, results_root: Path, repo: Path,
            date: str | None = None, commit: str | None = None) -> Path:
    """Copy ``run_dir/results.json`` (+ figures) to ``results_root/name/`` with its provenance.

    ``commit`` names the code that produced the run when it is not the checkout's current state (default).
    """
    src = Path(run_dir) / "results.json"
    if not src.is_file():
        raise FileNotFoundError(f"{src} does not exist: publish a run directory that holds a results.json")
    parts = name.split("/") if name else []
    if not parts or any(not p or p.startswith(".") for p in parts):
        raise ValueError(f"bad result name {name!r}: use a folder name such as 'benchmark_mmlongbench' "
                         "(or a nested one, 'reference_quality/synth')")
    json.loads(src.read_text())  # refuse to publish a broken file
    dest = Path(results_root) / name
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest / "results.json")
    for fig in sorted(Path(run_dir).iterdir()):
        if fig.suffix in FIGURE_SUFFIXES:
            shutil.copy2(fig, dest / fig.name)
    prov = {"command": command, "date": date or _dt.date.today().isoformat(), "commit": commit or current_commit(repo)}
    (dest / "provenance.json").write_text(json.dumps(prov, indent=1) + "\n")
    return dest


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, Mapping) and {"mean", "lo", "hi"} <= set(v):
        small = f" (n={v.get('n')}: under 30)" if v.get("interpretable") is False else ""
        return f"{_fmt(v['mean'])} [{_fmt(v['lo'])}, {_fmt(v['hi'])}]{small}"
    return str(v)


def _table(header: list[str], rows: Iterable[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return out


def _is_cell(v: Any) -> bool:
    return v is None or isinstance(v, (int, float, str, bool)) or (
        isinstance(v, Mapping) and {"mean", "lo", "hi"} <= set(v))


def _budget_label(b: Any) -> str:
    if isinstance(b, Mapping):
        return " ".join(f"{k}={b[k]}" for k in ("k", "m", "M", "T", "B") if k in b)
    return _fmt(b)


#: a column derived at render time (not stored in results.json): see :func:`with_headroom_closed`
HEADROOM_CLOSED = "headroom_closed_at_equal_tokens"


def _privileged(run: Mapping[str, Any]) -> bool:
    """A run marked privileged, or of a registered policy whose class reads gold (older files lack the mark)."""
    if run.get("privileged"):
        return True
    from experiments.common.benchmarking import is_privileged

    try:
        return is_privileged(str(run.get("policy")))
    except ValueError:  # not a registered policy (a channel, a setting)
        return False


def with_headroom_closed(runs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``runs`` with :data:`HEADROOM_CLOSED` added to each unprivileged run's metrics where the file holds a
    privileged run (the oracle) of the same dataset, split, subset and budget with a positive gain at equal tokens.

    Why derived here: it is (the run's ``delta_recall_at_equal_tokens``) / (the oracle's), the share of the
    oracle's headroom over topk_page a controller closes, which issue 14's report asks for; both figures are
    already in the file, so the docs compute it rather than a script storing it twice.
    """
    def key(r: Mapping[str, Any]) -> str:
        return json.dumps([r.get(k) for k in ("dataset", "split", "subset", "budget")], sort_keys=True, default=str)

    def gain(r: Mapping[str, Any]) -> float | None:
        v = (r.get("metrics") or {}).get("delta_recall_at_equal_tokens")
        if isinstance(v, Mapping):  # a {"mean", "lo", "hi"} cell (experiments/learned_report.py)
            v = v.get("mean")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    privileged = [_privileged(r) for r in runs]
    oracle = {key(r): gain(r) for r, p in zip(runs, privileged) if p}
    out: list[Mapping[str, Any]] = []
    for r, p in zip(runs, privileged):
        own, best = gain(r), oracle.get(key(r))
        if p or own is None or best is None or best <= 0:
            out.append(r)
        else:
            out.append({**r, "metrics": {**r["metrics"], HEADROOM_CLOSED: own / best}})
    return out


def _runs_table(runs: list[Mapping[str, Any]]) -> list[str]:
    """A ``{"runs": [...]}`` file: one row per run, identity columns then its scalar metrics (and the derived
    :data:`HEADROOM_CLOSED` when the file has an oracle run)."""
    runs = with_headroom_closed(runs)
    ident = [k for k in ("policy", "dataset", "split", "subset", "budget", "render_mode", "channel", "k")
             if any(k in r for r in runs)]
    metric_keys: list[str] = []
    for r in runs:
        for k, v in (r.get("metrics") or {}).items():
            if _is_cell(v) and k not in metric_keys and any((x.get("metrics") or {}).get(k) is not None for x in runs):
                metric_keys.append(k)
    derived = [k for k in metric_keys if k == HEADROOM_CLOSED]
    metric_keys = [k for k in metric_keys if k != HEADROOM_CLOSED]
    metric_keys.sort(key=lambda k: (PREFERRED_METRICS.index(k) if k in PREFERRED_METRICS else len(PREFERRED_METRICS)))
    metric_keys = metric_keys[:MAX_COLUMNS] + derived
    rows = []
    for r in runs:
        cells = [_budget_label(r.get(k)) if k == "budget" else r.get(k) for k in ident]
        if r.get("privileged"):
            cells[0] = f"{cells[0]} (privileged)"
        rows.append(cells + [(r.get("metrics") or {}).get(k) for k in metric_keys])
    out = _table(ident + metric_keys, rows)
    for r in runs:  # metrics that map names to numbers (per relation, per channel): one small table per run
        title = " ".join(str(_budget_label(r.get(k)) if k == "budget" else r.get(k)) for k in ident)
        for name, v in (r.get("metrics") or {}).items():  # lists of records (per turn): one row per record
            if isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
                cols = list(dict.fromkeys(k for x in v for k in x))
                out += ["", f"{title}, {name}:", ""] + _table(cols, [[x.get(c) for c in cols] for x in v])
        if isinstance(r.get("evaluator"), Mapping) and r["evaluator"]:  # how an LLM evaluator's rounds were decided
            out += ["", f"{title}, evaluator:", ""] + _table(list(r["evaluator"]), [list(r["evaluator"].values())])
        nested = {k: _spread_lists(v) for k, v in (r.get("metrics") or {}).items()
                  if isinstance(v, Mapping) and v and not _is_cell(v)}  # a {"mean", "lo", "hi"} cell is in the row
        nested = {k: v for k, v in nested.items()
                  if all(_is_cell(x) and not isinstance(x, Mapping) for x in v.values())}
        if not nested:
            continue
        groups: dict[tuple[str, ...], dict[str, Mapping[str, Any]]] = {}
        for name, v in nested.items():  # metrics over the same keys share a table
            groups.setdefault(tuple(v), {})[name] = v
        for keys, group in groups.items():
            out += ["", f"{title}:", ""] + _table(["", *group], [[k, *(v.get(k) for v in group.values())]
                                                                 for k in keys])
    return out


def _spread_lists(v: Mapping[str, Any]) -> dict[str, Any]:
    """``{"by_position": [a, b]}`` -> ``{"by_position[1]": a, "by_position[2]": b}`` (short lists of numbers)."""
    out: dict[str, Any] = {}
    for k, x in v.items():
        if isinstance(x, list) and len(x) <= 12 and all(_is_cell(y) for y in x):
            out.update({f"{k}[{i + 1}]": y for i, y in enumerate(x)})
        else:
            out[k] = x
    return out


def _flatten(obj: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    if _is_cell(obj) or depth >= 4:
        return [(prefix, obj if _is_cell(obj) else json.dumps(obj)[:80])]
    if isinstance(obj, Mapping):
        out: list[tuple[str, Any]] = []
        for k, v in obj.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)
        return out
    if isinstance(obj, list) and len(obj) <= 12:
        out = []
        for i, v in enumerate(obj):
            out += _flatten(v, f"{prefix}[{i}]", depth + 1)
        return out
    return [(prefix, f"list of {len(obj)}")]


def provenance_of(folder: Path, res: Any) -> dict[str, Any]:
    """``provenance.json`` beside the result, else the command/date/commit a script wrote into the result itself."""
    path = folder / "provenance.json"
    if path.is_file():
        return json.loads(path.read_text())
    if not isinstance(res, Mapping):
        return {}
    for src in (res, res.get("config"), res.get("provenance")):
        if isinstance(src, Mapping) and all(src.get(k) for k in PROVENANCE_KEYS):
            return {k: src[k] for k in PROVENANCE_KEYS}
    return {}


def render_result(name: str, folder: Path) -> list[str]:
    """Markdown for one published result: heading, provenance line, table(s), figures."""
    res = json.loads((folder / "results.json").read_text())
    prov = provenance_of(folder, res)
    missing = [k for k in PROVENANCE_KEYS if not prov.get(k)]
    if missing:
        raise ValueError(f"{folder}: provenance lacks {missing}; publish results with experiments/results_doc.py")
    lines = [f"## {name}", "", f"`{prov['command']}`  ", f"run {prov['date']} at commit `{prov['commit']}`", ""]
    if isinstance(res, Mapping) and isinstance(res.get("runs"), list) and res["runs"] and all(
            isinstance(r, Mapping) for r in res["runs"]):
        lines += _runs_table(res["runs"])
        rest = {k: v for k, v in res.items() if k != "runs"}
    else:
        rest = res
    rest = {k: v for k, v in rest.items() if k not in PROVENANCE_KEYS} if isinstance(rest, Mapping) else rest
    if rest:
        pairs = [(k, v) for k, v in _flatten(rest) if k]
        lines += ([""] if lines[-1] else []) + _table(["field", "value"], [[k, v] for k, v in pairs])
    figs = sorted(p.name for p in folder.iterdir() if p.suffix in FIGURE_SUFFIXES)
    lines += [""] + [f"![{f}](results/{name}/{f})" for f in figs] if figs else []
    return lines + [""]


def render(results_root: Path, generator_command: str) -> str:
    """The whole ``docs/RESULTS.md``: every published result, sorted by name."""
    root = Path(results_root)
    folders = sorted(p.parent for p in root.rglob("results.json")) if root.is_dir() else []
    head = ["# Measured results", "",
            f"Generated by `{generator_command}` from `docs/results/*/results.json`; do not edit by hand.",
            "Each section names the command, date and commit that produced it. Figures are measured on the",
            "reference machine (2 shared CPU cores, no GPU) unless the command says otherwise.", ""]
    body: list[str] = []
    for f in folders:
        body += render_result(f.relative_to(root).as_posix(), f)
    return "\n".join(head + body).rstrip() + "\n"
