"""Results the docs cite: ``docs/results/<name>/`` holds a run's ``results.json`` and its provenance.

Why a folder per result: every number in ``docs/RESULTS.md`` must be traceable
to the command that produced it, when, and at which commit, and must never be
typed by hand. ``publish`` copies a run's ``results.json`` (and any figures
next to it) under ``docs/results/<name>/`` with a ``provenance.json``
(``command``, ``date``, ``commit``; optionally a one-line ``title``, and
``superseded_by`` / ``superseded_because`` once a later run replaces it, see
:func:`supersede`). :func:`load_published` reads them back;
:func:`result_tables` turns one result into markdown tables, which
:mod:`mage_gym.bench.results_index` assembles into a page per run and the
index ``docs/RESULTS.md``. All are plain functions so tests can call them on
temporary folders.

Machine paths (a checkout's absolute path, another machine's cache) mean
nothing to a reader: :func:`portable_paths` rewrites them in every rendered
cell and in the commands ``publish`` stores.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

PROVENANCE_KEYS = ("command", "date", "commit")
#: optional provenance keys: a one-line description, and the run that replaces this one (with why)
TITLE, SUPERSEDED_BY, SUPERSEDED_BECAUSE = "title", "superseded_by", "superseded_because"
#: figures copied beside a published results.json (the doc links them)
FIGURE_SUFFIXES = (".png", ".svg")
#: headline metrics shown first in a benchmark table (others follow in their stored order)
PREFERRED_METRICS = ("episodes", "evidence_page_recall", "tokens_rendered", "delta_recall_at_operating_budget",
                     "cost_ratio_recall_at_equal_evidence", "delta_recall_at_equal_tokens", "item_support",
                     "reward", "evidence_all_covered", "pages_rendered", "accuracy", "f1")
#: comparison figures of a benchmark run's ``equal_cost`` block shown beside its metrics on its page
SHOWN_COMPARISONS = ("delta_recall_at_operating_budget", "cost_ratio_recall_at_equal_evidence",
                     "delta_item_support_at_operating_budget", "delta_recall_at_equal_tokens")
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
            date: str | None = None, commit: str | None = None, title: str | None = None) -> Path:
    """Copy ``run_dir/results.json`` (+ figures) to ``results_root/name/`` with its provenance.

    ``commit`` names the code that produced the run when it is not the checkout's current state (default);
    ``title`` is the one line the index shows beside the run's link. The stored command goes through
    :func:`portable_paths` (no machine's absolute paths in the docs).
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
    prov: dict[str, Any] = {"command": portable_paths(command), "date": date or _dt.date.today().isoformat(),
                            "commit": commit or current_commit(repo)}
    if title:
        prov[TITLE] = " ".join(title.split())
    _write_provenance(dest, prov)
    return dest


def _write_provenance(folder: Path, prov: Mapping[str, Any]) -> None:
    (folder / "provenance.json").write_text(json.dumps(prov, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def supersede(results_root: Path, name: str, by: str, because: str) -> Path:
    """Mark published result ``name`` as replaced by ``by`` (another published result), saying why.

    Why marked rather than deleted: the docs keep the lineage (the index lists it under superseded runs,
    its page says what replaced it); delete the folder instead when nothing should point at it any more.
    """
    root = Path(results_root)
    for n in (name, by):
        if not (root / n / "results.json").is_file():
            raise FileNotFoundError(f"{root / n} holds no published results.json")
    if name == by:
        raise ValueError(f"{name} cannot supersede itself")
    if not because.strip():
        raise ValueError("say why the run is superseded (--because)")
    folder = root / name
    res = json.loads((folder / "results.json").read_text())
    prov = dict(provenance_of(folder, res))
    prov[SUPERSEDED_BY], prov[SUPERSEDED_BECAUSE] = by, " ".join(because.split())
    _write_provenance(folder, prov)
    return folder


#: roots whose paths mean the same on every machine (kept as they are)
_SYSTEM_ROOTS = ("tmp", "dev", "usr", "bin", "etc", "proc", "sys", "var")
_ABSOLUTE_PATH = re.compile(r"(^|[\s=(\[,'\"`])(/[\w.+-]+(?:/[\w.+-]*)*)")


def _portable_path(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] in _SYSTEM_ROOTS:
        return path
    if ".cache" in parts and parts[parts.index(".cache") + 1:][:1] == ["mage_gym"]:
        rest = parts[parts.index(".cache") + 2:]
        return "/".join(["$MAGE_GYM_CACHE", *rest])
    if "outputs" in parts:  # a run directory inside a checkout: relative to the repository
        return "/".join(parts[parts.index("outputs"):])
    keep = 3 if len(parts) >= 3 and "." in parts[-1] else 2  # a file keeps its folder's parent too
    return "…/" + "/".join(parts[-keep:])


def portable_paths(text: str) -> str:
    """``text`` with each machine-specific absolute path rewritten: the graph cache as ``$MAGE_GYM_CACHE/...``,
    a run folder inside a checkout relative to it (``outputs/...``), anything else as ``…/`` and its last two
    components (three for a file), e.g. ``/work/coord/s4/runs/testB_s0`` -> ``…/runs/testB_s0``.

    Why: a reader cannot open another machine's ``/work/...``; the last components still name the run or tree.
    System paths (``/tmp``, ``/dev``, ``/usr``, ...) and URLs are left alone.
    """
    return _ABSOLUTE_PATH.sub(lambda m: m.group(1) + _portable_path(m.group(2)), text)


def format_cell(v: Any) -> str:
    """One table cell: 3 decimals (thousands grouped from 1,000; 3 significant digits under 0.001, so a
    learning rate of 5e-4 is not shown as 0.001, while float noise under 1e-9 stays 0.000), ``n/a`` for null, a ``{"mean", "lo", "hi"}``
    interval as ``mean [lo, hi]`` (saying so when it rests on under 30 questions), text with portable paths."""
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        if 1e-9 < abs(v) < 1e-3:
            return f"{v:.3g}"
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, Mapping) and {"mean", "lo", "hi"} <= set(v):
        small = f" (n={v.get('n')}: under 30)" if v.get("interpretable") is False else ""
        return f"{format_cell(v['mean'])} [{format_cell(v['lo'])}, {format_cell(v['hi'])}]{small}"
    return portable_paths(str(v)).replace("|", "\\|")


def cells_table(header: list[str], rows: Iterable[list[Any]]) -> list[str]:
    """A markdown table, each cell through :func:`format_cell`."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(format_cell(c) for c in row) + " |" for row in rows]
    return out


def _is_cell(v: Any) -> bool:
    return v is None or isinstance(v, (int, float, str, bool)) or (
        isinstance(v, Mapping) and {"mean", "lo", "hi"} <= set(v))


def budget_text(b: Any) -> str:
    """A budget as ``k=5 m=4 M=24 T=6 B=16``."""
    if isinstance(b, Mapping):
        return " ".join(f"{k}={b[k]}" for k in ("k", "m", "M", "T", "B") if k in b)
    return format_cell(b)


#: a column derived at render time (not stored in results.json): see :func:`with_headroom_closed`
HEADROOM_CLOSED = "headroom_closed_at_equal_tokens"


def _privileged(run: Mapping[str, Any]) -> bool:
    """A run of a policy that reads gold: the benchmark marks such rows (``"privileged": true``)."""
    return bool(run.get("privileged"))


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
        if isinstance(v, Mapping):  # a {"mean", "lo", "hi"} cell (experiments/analysis/learned_report.py)
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


def _with_comparisons(run: Mapping[str, Any]) -> Mapping[str, Any]:
    """``run`` with the :data:`SHOWN_COMPARISONS` of its ``equal_cost`` block beside its metrics (a benchmark run
    keeps them in that block; a report over seeds already has them in its metrics)."""
    block = run.get("equal_cost")
    if not isinstance(block, Mapping) or not isinstance(run.get("metrics"), Mapping):
        return run
    extra = {k: block[k] for k in SHOWN_COMPARISONS if k in block and k not in run["metrics"]}
    return {**run, "metrics": {**run["metrics"], **extra}} if extra else run


def _runs_table(runs: list[Mapping[str, Any]]) -> list[str]:
    """A ``{"runs": [...]}`` file: one row per run, identity columns then its scalar metrics (and the derived
    :data:`HEADROOM_CLOSED` when the file has an oracle run)."""
    runs = with_headroom_closed([_with_comparisons(r) for r in runs])
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
        cells = [budget_text(r.get(k)) if k == "budget" else r.get(k) for k in ident]
        if r.get("privileged"):
            cells[0] = f"{cells[0]} (privileged)"
        rows.append(cells + [(r.get("metrics") or {}).get(k) for k in metric_keys])
    out = cells_table(ident + metric_keys, rows)
    for r in runs:  # metrics that map names to numbers (per relation, per channel): one small table per run
        title = " ".join(str(budget_text(r.get(k)) if k == "budget" else r.get(k)) for k in ident)
        for name, v in (r.get("metrics") or {}).items():  # lists of records (per turn): one row per record
            if isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
                cols = list(dict.fromkeys(k for x in v for k in x))
                out += ["", f"{title}, {name}:", ""] + cells_table(cols, [[x.get(c) for c in cols] for x in v])
        if isinstance((r.get("metrics") or {}).get("sources"), Mapping):  # mage_gym/bench/headroom_sources
            out += _sources_tables(title, r["metrics"]["sources"])
        if isinstance(r.get("evaluator"), Mapping) and r["evaluator"]:  # how an LLM evaluator's rounds were decided
            out += ["", f"{title}, evaluator:", ""] + cells_table(list(r["evaluator"]), [list(r["evaluator"].values())])
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
            out += ["", f"{title}:", ""] + cells_table(["", *group], [[k, *(v.get(k) for v in group.values())]
                                                                 for k in keys])
    return out


def _sources_tables(title: str, sources: Mapping[str, Any]) -> list[str]:
    """The headroom split by source (``metrics.sources``): per question set (all, a split, the questions with
    element-level gold), each source's recall, tokens, pages and delta at equal tokens against topk_page; then
    the element recall of each set."""
    out: list[str] = []
    for part, block in sources.items():
        rows = [[name, v.get("questions"), v.get("recall"), v.get("tokens"), v.get("pages"),
                 v.get("delta_recall_at_equal_tokens")] for name, v in (block.get("sources") or {}).items()]
        if rows:
            out += ["", f"{title}, headroom by source ({part}, {block.get('questions')} questions; privileged "
                        "except topk_page and topk_elements):", ""]
            out += cells_table(["source", "questions", "page recall", "tokens", "pages",
                             "delta recall at equal tokens vs topk_page"], rows)
    el = {part: block.get("element_recall") for part, block in sources.items() if block.get("element_recall")}
    if el:
        keys = list(dict.fromkeys(k for v in el.values() for k in v))
        out += ["", f"{title}, element recall (questions with element-level gold):", ""]
        out += cells_table(["", *el], [[k, *(v.get(k) for v in el.values())] for k in keys])
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


@dataclass(frozen=True)
class PublishedResult:
    """One published result: ``name`` is its folder under the results root (``perf_env/run1``)."""

    name: str
    folder: Path
    results: Any
    provenance: Mapping[str, Any]

    @property
    def title(self) -> str:
        return str(self.provenance.get(TITLE) or "")

    @property
    def superseded_by(self) -> str | None:
        return self.provenance.get(SUPERSEDED_BY) or None

    @property
    def superseded_because(self) -> str:
        return str(self.provenance.get(SUPERSEDED_BECAUSE) or "")

    @property
    def runs(self) -> list[Mapping[str, Any]] | None:
        """The rows of a ``{"runs": [...]}`` file (benchmark, report, training, headroom), else None."""
        runs = self.results.get("runs") if isinstance(self.results, Mapping) else None
        if isinstance(runs, list) and runs and all(isinstance(r, Mapping) for r in runs):
            return runs
        return None

    @property
    def figures(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir() if p.suffix in FIGURE_SUFFIXES)


def load_result(name: str, folder: Path) -> PublishedResult:
    """Read ``folder/results.json`` and its provenance; a broken file or a missing command/date/commit is an error."""
    path = Path(folder) / "results.json"
    try:
        res = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); publish results with experiments/results_doc.py") from e
    prov = provenance_of(Path(folder), res)
    missing = [k for k in PROVENANCE_KEYS if not prov.get(k)]
    if missing:
        raise ValueError(f"{folder}: provenance lacks {missing}; publish results with experiments/results_doc.py")
    return PublishedResult(name, Path(folder), res, prov)


def load_published(results_root: Path) -> list[PublishedResult]:
    """Every result under ``results_root`` (a folder holding a ``results.json``), sorted by name.

    A ``superseded_by`` that names no published result is an error, so the docs never link to nothing.
    """
    root = Path(results_root)
    folders = sorted(p.parent for p in root.rglob("results.json")) if root.is_dir() else []
    out = [load_result(f.relative_to(root).as_posix(), f) for f in folders]
    names = {r.name for r in out}
    for r in out:
        if r.superseded_by is not None and (r.superseded_by not in names or r.superseded_by == r.name):
            raise ValueError(f"{r.folder}/provenance.json: superseded_by {r.superseded_by!r} is not another "
                             "published result")
    return out


def result_tables(res: Any) -> list[str]:
    """Markdown tables of one ``results.json``: a ``runs`` file as one row per run (plus per-run detail
    tables), every other field flattened into ``field | value`` rows. Any JSON value renders."""
    lines: list[str] = []
    if isinstance(res, Mapping) and isinstance(res.get("runs"), list) and res["runs"] and all(
            isinstance(r, Mapping) for r in res["runs"]):
        lines += _runs_table(res["runs"])
        rest: Any = {k: v for k, v in res.items() if k != "runs"}
    else:
        rest = res
    rest = {k: v for k, v in rest.items() if k not in PROVENANCE_KEYS} if isinstance(rest, Mapping) else rest
    if rest is not None and rest != {}:
        pairs = [(k or "value", v) for k, v in _flatten(rest)]
        lines += ([""] if lines else []) + cells_table(["field", "value"], [[k, v] for k, v in pairs])
    return lines


def render_result(name: str, folder: Path) -> list[str]:
    """Markdown for one published result as a section: heading, provenance line, table(s), figures."""
    r = load_result(name, folder)
    lines = [f"## {name}", "", f"`{portable_paths(r.provenance['command'])}`  ",
             f"run {r.provenance['date']} at commit `{r.provenance['commit']}`", ""]
    lines += result_tables(r.results)
    lines += [""] + [f"![{f}](results/{name}/{f})" for f in r.figures] if r.figures else []
    return lines + [""]
