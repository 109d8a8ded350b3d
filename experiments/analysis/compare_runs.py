"""Are two benchmark runs the same, row for row? The identity check behind "behaviour unchanged" refactors.

Compares each JSONL output of two run directories (``episodes.jsonl``,
``topk_curve.jsonl`` and every trace under ``traces/``) line by line after
dropping the fields that measure wall-clock time or identify the run rather
than its results (``wall_s``, ``seconds``, ``run_key``, ...), and the
``results.json`` runs with the same fields dropped. Writes ``results.json``
with the row counts and the number of differing rows per file, plus the
first few differences, so a published check says exactly what was compared::

    python -m experiments.analysis.compare_runs --pair synth OLD_RUN NEW_RUN --pair mmlongbench OLD NEW \\
        --old-commit f0db95b --new-commit be685cf --out outputs/identity
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Iterable

from mage_gym.bench.results import write_json

#: fields that measure time or name the run, not its results
IGNORED = frozenset({"wall_s", "seconds", "run_key", "elapsed", "timestamp", "time", "model_seconds",
                     "evaluator_model_seconds", "load_seconds"})


def strip(value: Any) -> Any:
    """``value`` without :data:`IGNORED` keys, at any depth."""
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in IGNORED}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def jsonl_rows(path: Path) -> list[Any]:
    return [strip(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def compare_rows(old: list[Any], new: list[Any], max_examples: int = 3) -> dict[str, Any]:
    differing = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    out: dict[str, Any] = {"rows_old": len(old), "rows_new": len(new),
                           "differing_rows": len(differing) + abs(len(old) - len(new))}
    if differing:
        out["first_differences"] = [{"row": i, "old": old[i], "new": new[i]} for i in differing[:max_examples]]
    return out


def jsonl_files(run: Path) -> Iterable[Path]:
    for name in ("episodes.jsonl", "topk_curve.jsonl"):
        if (run / name).is_file():
            yield Path(name)
    yield from sorted(p.relative_to(run) for p in (run / "traces").rglob("*.jsonl")) if (run / "traces").is_dir() \
        else ()


def compare_runs(old: Path, new: Path) -> dict[str, Any]:
    """Every JSONL file of ``old`` against the file of the same name in ``new``, and the results.json runs."""
    files: dict[str, Any] = {}
    for rel in jsonl_files(old):
        files[str(rel)] = compare_rows(jsonl_rows(old / rel), jsonl_rows(new / rel)) if (new / rel).is_file() \
            else {"missing_in_new": True, "differing_rows": None}
    missing_in_old = sorted(str(r) for r in jsonl_files(new) if str(r) not in files)
    runs_old = strip(json.loads((old / "results.json").read_text())["runs"])
    runs_new = strip(json.loads((new / "results.json").read_text())["runs"])
    total = sum(f["differing_rows"] or 0 for f in files.values())
    missing = any(f.get("missing_in_new") for f in files.values()) or bool(missing_in_old)
    return {"files": files, "missing_in_old": missing_in_old, "results_json_runs_equal": runs_old == runs_new,
            "rows_compared": sum(f.get("rows_old", 0) for f in files.values()),
            "differing_rows": total, "identical": total == 0 and not missing and runs_old == runs_new}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", nargs=3, action="append", metavar=("NAME", "OLD_RUN", "NEW_RUN"), required=True)
    ap.add_argument("--old-commit", default="")
    ap.add_argument("--new-commit", default="")
    ap.add_argument("--check", default="", help="what the comparison is evidence of (written into results.json)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    pairs = {name: compare_runs(Path(old), Path(new)) for name, old, new in args.pair}
    result = {"check": args.check, "old_commit": args.old_commit, "new_commit": args.new_commit,
              "ignored_fields": sorted(IGNORED), "runs": pairs, "identical": all(p["identical"] for p in pairs.values())}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "results.json", result)
    for name, p in pairs.items():
        print(f"{name}: {p['rows_compared']} rows compared, {p['differing_rows']} differing, "
              f"results.json runs equal: {p['results_json_runs_equal']}")
    print(f"identical: {result['identical']} -> {args.out / 'results.json'}")
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
