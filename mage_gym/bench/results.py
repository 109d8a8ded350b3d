"""The documented ``results.json`` shape and the files written beside it (CSV, markdown, JSON).

``results.json`` (the shape other tools read)::

    {"schema_version": 2,
     "runs": [{"policy": str, "budget": {"k","m","M","T","B"(,"tokens")}, "dataset": str, "split": str,
               "metrics": {<METRIC_KEYS>,
                           "per_turn": [{"turn", "episodes", "reward", "evidence_page_recall",
                                         "tokens_rendered"}],    # conversations only
                           "per_document_recall": {"mean", "min", "by_position", "pairs",
                                                   "episodes"}},  # several documents per episode only
               "n": {<METRIC_KEYS>: int},              # episodes each mean is over (benchmark runs)
               "checkpoint": {"path", "sha256"},      # learned policies only
               "failed": {"episodes": int, "episode_ids": [str]},   # benchmark runs
               "evaluator": {<EVALUATOR_KEYS>: int},  # LLM-evaluator runs only
               "privileged": true,                     # the oracle only: it read gold
               "training": {"recipe", "shaping", ...},  # experiments/train.py: how the policy was trained
               "equal_cost": {"baseline": "topk_page", "render_mode", "ks",
                              "operating_budget": {"k", "tokens"},   # topk_page's mean tokens at the run's k
                              "delta_recall_at_operating_budget": {"mean", "lo", "hi", "n", "interpretable",
                                                                   "k", "budget_cost", "cost", "overspent"},
                              "delta_support_at_operating_budget": ...,
                              "delta_item_support_at_operating_budget": ...,   # questions with item gold
                              "cost_ratio_recall_at_equal_evidence": {"mean", "lo", "hi", "n", "interpretable",
                                                                      "topk_cost", "cost", "above_curve"},
                              "cost_ratio_support_at_equal_evidence": ...,
                              "delta_recall_at_equal_tokens": {"mean", "lo", "hi", "n", "interpretable",
                                                               "cost", "topk_at_cost"},
                              "delta_recall_at_equal_pages": ..., "delta_support_at_equal_tokens": ...,
                              "delta_support_at_equal_pages": ...}}]}   # every policy but topk_page

``budget.tokens`` is there only for a run under a reader-token budget
(:mod:`mage_gym.env.token_budget`); without one the budget has exactly k, m,
M, T, B, as before the budget existed.

Metrics are means over episodes; ``null`` where a metric does not apply
(accuracy/F1 with the oracle reader, evidence metrics without gold).
``wall_s`` is the mean wall-clock seconds per episode. ``checkpoint`` names
the file a learned policy acted with (absolute path and sha256), so a row
can be traced to its weights after files are moved or retrained.

``equal_cost`` compares the run with topk_page run at every integer k in
the run's own render mode and reader (whole page images for ``elements``),
three ways (:mod:`.equal_cost`; 95 % paired bootstrap over questions;
``interpretable`` is false under 30 questions): *at the operating budget*
(evidence minus topk_page's at the run's k, the policy allowed up to
topk_page's tokens there: the "finds more evidence" claim), *cost at equal
evidence* (the tokens topk_page needs to reach the run's evidence over the
run's tokens: the efficiency claim), and *at equal cost* (at the run's mean
tokens and pages, interpolated between neighbouring k, never extrapolated).

``failed`` counts the episodes whose reader or evaluator failed past its
retries (recorded in ``episodes.jsonl`` with the error, left out of the
means; a re-run in the same directory retries them). ``evaluator`` sums the
evaluator's counters over the run's episodes, so a backend that failed is
never hidden behind its fallback: ``calls`` are replies received from the
model in this run, ``cache_hits`` replies taken from the response cache,
``backend_errors`` rounds whose call failed (decided by the fallback),
``strict`` / ``lenient`` / ``fallback`` how each round was decided.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from mage_gym.bench.config import plain
from mage_gym.bench.metrics import COMPOSITE_METRIC_KEYS, METRIC_KEYS
from mage_gym.jsonio import json_default

RUN_KEYS: tuple[str, ...] = ("policy", "budget", "dataset", "split", "metrics")
OPTIONAL_RUN_KEYS: tuple[str, ...] = ("checkpoint", "failed", "evaluator", "n", "privileged", "equal_cost",
                                       "training")
#: version of the results.json shape; 2: ``schema_version``, per-metric ``n``, ``privileged``, ``equal_cost``, and
#: evidence metrics under one coverage rule (mage_gym/coverage.py: a summary never covers a gold page)
SCHEMA_VERSION = 2
#: ``evaluator`` block keys: the policy's ``evaluator_<key>`` counters summed over a run's episodes
EVALUATOR_KEYS: tuple[str, ...] = ("rounds", "calls", "cache_hits", "requests", "backend_errors", "strict",
                                   "lenient", "unusable", "fallback")
BUDGET_KEYS: tuple[str, ...] = ("k", "m", "M", "T", "B")
#: budget keys a run has only when set (the reader-token budget; :class:`mage_gym.env.Budget` omits it when off)
OPTIONAL_BUDGET_KEYS: tuple[str, ...] = ("tokens",)
TABLE_COLUMNS = ("policy", "budget", "dataset", "split", "episodes", "reward", "evidence_page_recall",
                 "evidence_all_covered", "element_recall", "element_precision", "tokens_rendered", "pages_rendered",
                 "accuracy", "f1", "Δrecall@budget vs topk", "topk tokens ratio@recall", "Δrecall@tokens vs topk",
                 "Δrecall@pages vs topk", "evaluator_calls",
                 "evaluator calls/errors/strict/lenient/fallback", "failed", "wall_s")
#: table columns read from a run's equal_cost block
_EQUAL_COST_CELLS = {"Δrecall@budget vs topk": "delta_recall_at_operating_budget",
                     "topk tokens ratio@recall": "cost_ratio_recall_at_equal_evidence",
                     "Δrecall@tokens vs topk": "delta_recall_at_equal_tokens",
                     "Δrecall@pages vs topk": "delta_recall_at_equal_pages"}
#: table columns that are not metrics: how each is read from a run
_EVALUATOR_CELL = ("calls", "backend_errors", "strict", "lenient", "fallback")


def budget_dict(budget: Any) -> dict[str, int]:
    """A full budget (k, m, M, T, B, and tokens when set) from a partial mapping or Budget (missing keys: the env
    defaults)."""
    from mage_gym.env import Budget

    return Budget.coerce(plain(budget)).to_dict()


def make_run(policy: str, budget: Any, dataset: str, split: str, metrics: Mapping[str, Any],
             checkpoint: Mapping[str, str] | None = None, failed: Sequence[str] | None = None,
             evaluator: Mapping[str, int] | None = None, counts: Mapping[str, int] | None = None,
             privileged: bool = False, training: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One ``runs`` entry; ``checkpoint`` (path + sha256) only for a learned policy acting from a file.

    ``failed`` (episode ids) adds the ``failed`` block; ``evaluator`` (counter
    totals, :data:`EVALUATOR_KEYS`) the ``evaluator`` block.
    """
    run = {"policy": policy, "budget": budget_dict(budget), "dataset": dataset, "split": split,
           "metrics": {k: metrics.get(k) for k in METRIC_KEYS}}
    for k in COMPOSITE_METRIC_KEYS:  # runs over conversations / document sets only
        if metrics.get(k) is not None:
            run["metrics"][k] = metrics[k]
    if checkpoint:
        run["checkpoint"] = dict(checkpoint)
    if failed is not None:
        run["failed"] = {"episodes": len(failed), "episode_ids": [str(x) for x in failed]}
    if evaluator is not None:
        run["evaluator"] = {k: int(evaluator.get(k, 0)) for k in EVALUATOR_KEYS}
    if counts is not None:
        run["n"] = {k: int(counts.get(k, 0)) for k in METRIC_KEYS}
    if privileged:  # an upper bound that read gold (the oracle): never a baseline to compare with
        run["privileged"] = True
    if training is not None:  # train.py: recipe, whether shaping was used, imitation agreement and recall gap
        run["training"] = dict(training)
    return run


def validate_results(obj: Mapping[str, Any]) -> None:
    """Raise ValueError unless ``obj`` has exactly the documented results.json shape."""
    if set(obj) != {"runs", "schema_version"} or not isinstance(obj["runs"], list):
        raise ValueError("results.json must be {'schema_version': 2, 'runs': [...]}")
    if obj["schema_version"] != SCHEMA_VERSION:
        raise ValueError(f"results.json schema_version {obj['schema_version']!r} != {SCHEMA_VERSION}")
    for run in obj["runs"]:
        if not set(RUN_KEYS) <= set(run) <= set(RUN_KEYS) | set(OPTIONAL_RUN_KEYS):
            raise ValueError(f"run keys {sorted(run)} != {sorted(RUN_KEYS)} (+ optional {list(OPTIONAL_RUN_KEYS)})")
        if not set(BUDGET_KEYS) <= set(run["budget"]) <= set(BUDGET_KEYS) | set(OPTIONAL_BUDGET_KEYS):
            raise ValueError(f"budget keys {sorted(run['budget'])} != {sorted(BUDGET_KEYS)} (+ optional "
                             f"{list(OPTIONAL_BUDGET_KEYS)})")
        if not set(METRIC_KEYS) <= set(run["metrics"]) <= set(METRIC_KEYS) | set(COMPOSITE_METRIC_KEYS):
            raise ValueError(f"metric keys differ: {sorted(set(run['metrics']) ^ set(METRIC_KEYS))}")
        _validate_composite_metrics(run["metrics"])
        for k, v in run["metrics"].items():
            if k in COMPOSITE_METRIC_KEYS:
                continue
            if v is not None and not isinstance(v, (int, float)):
                raise ValueError(f"metric {k} must be a number or null, got {v!r}")
        ck = run.get("checkpoint")
        if "checkpoint" in run and not (isinstance(ck, Mapping) and set(ck) == {"path", "sha256"}
                                        and all(isinstance(v, str) for v in ck.values())):
            raise ValueError(f"checkpoint must be {{'path': str, 'sha256': str}}, got {ck!r}")
        fl = run.get("failed")
        if "failed" in run and not (isinstance(fl, Mapping) and set(fl) == {"episodes", "episode_ids"}
                                    and fl["episodes"] == len(fl["episode_ids"])):
            raise ValueError(f"failed must be {{'episodes': n, 'episode_ids': [n ids]}}, got {fl!r}")
        if "n" in run and not (isinstance(run["n"], Mapping) and set(run["n"]) == set(METRIC_KEYS)
                               and all(isinstance(v, int) for v in run["n"].values())):
            raise ValueError(f"n must map every metric to an episode count, got {run['n']!r}")
        tr = run.get("training")
        if "training" in run and not (isinstance(tr, Mapping) and {"recipe", "shaping"} <= set(tr)
                                      and isinstance(tr["shaping"], bool)):
            raise ValueError(f"training must be a mapping with recipe and shaping (bool), got {tr!r}")
        if "privileged" in run and run["privileged"] is not True:
            raise ValueError("privileged is present only as true")
        if "equal_cost" in run:
            from mage_gym.bench.equal_cost import validate_block

            validate_block(run["equal_cost"])
        ev = run.get("evaluator")
        if "evaluator" in run and not (isinstance(ev, Mapping) and set(ev) == set(EVALUATOR_KEYS)
                                       and all(isinstance(v, int) for v in ev.values())):
            raise ValueError(f"evaluator must map {list(EVALUATOR_KEYS)} to integers, got {ev!r}")


def _validate_composite_metrics(metrics: Mapping[str, Any]) -> None:
    turns = metrics.get("per_turn")
    if "per_turn" in metrics and not (isinstance(turns, list) and all(
            isinstance(t, Mapping) and set(t) == {"turn", "episodes", "reward", "evidence_page_recall",
                                                  "tokens_rendered"} for t in turns)):
        raise ValueError(f"per_turn must list {{turn, episodes, reward, evidence_page_recall, tokens_rendered}}, "
                         f"got {turns!r}")
    docs = metrics.get("per_document_recall")
    if "per_document_recall" in metrics and not (isinstance(docs, Mapping) and set(docs) == {
            "mean", "min", "by_position", "pairs", "episodes"}):
        raise ValueError(f"per_document_recall must have mean, min, by_position, pairs, episodes, got {docs!r}")


def write_json(path: Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically (numpy values through :func:`mage_gym.jsonio.json_default`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=json_default))
    os.replace(tmp, path)
    return path


def write_results(path: Path, runs: Sequence[Mapping[str, Any]]) -> Path:
    obj = {"schema_version": SCHEMA_VERSION, "runs": [dict(r) for r in runs]}
    validate_results(obj)
    return write_json(path, obj)


def write_csv(path: Path, runs: Sequence[Mapping[str, Any]]) -> Path:
    import csv

    keys = BUDGET_KEYS + tuple(k for k in OPTIONAL_BUDGET_KEYS if any(k in r["budget"] for r in runs))
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "dataset", "split", *keys, *METRIC_KEYS, "failed_episodes",
                    *(f"evaluator_{k}" for k in EVALUATOR_KEYS)])
        for r in runs:
            ev = r.get("evaluator") or {}
            w.writerow([r["policy"], r["dataset"], r["split"], *(r["budget"].get(k, "") for k in keys),
                        *("" if r["metrics"][k] is None else r["metrics"][k] for k in METRIC_KEYS),
                        (r.get("failed") or {}).get("episodes", ""), *(ev.get(k, "") for k in EVALUATOR_KEYS)])
    return path


# --- tables -------------------------------------------------------------------------------------

def budget_label(b: Mapping[str, int]) -> str:
    """``k5 m4 M24 T6 B16``, with `` tok5355`` under a reader-token budget."""
    tokens = b.get("tokens")
    return f"k{b['k']} m{b['m']} M{b['M']} T{b['T']} B{b['B']}" + ("" if tokens is None else f" tok{tokens}")


def fmt(v: Any, nd: int = 3) -> str:
    """A metric for a table: ``-`` for null, integers without decimals, ``nd`` decimals below 100."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and float(v).is_integer() and abs(v) >= 100):
        return f"{int(v)}"
    if isinstance(v, float):
        return f"{v:.{nd}f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def _cell(run: Mapping[str, Any], column: str) -> str:
    """One table cell: a metric, or the evaluator / failed-episode totals (``-`` where a run has none)."""
    if column == "failed":
        failed = run.get("failed")
        return "-" if failed is None else str(failed["episodes"])
    if column.startswith("evaluator calls/"):
        ev = run.get("evaluator")
        return "-" if ev is None else "/".join(str(ev[k]) for k in _EVALUATOR_CELL)
    if column in _EQUAL_COST_CELLS:
        d = (run.get("equal_cost") or {}).get(_EQUAL_COST_CELLS[column])
        if not d or d.get("mean") is None:
            return "above curve" if d and d.get("above_curve") else "-"
        spec = ".2f" if column.startswith("topk tokens ratio") else "+.3f"  # a ratio, not a delta
        ci = "" if d.get("lo") is None else f" [{d['lo']:{spec}}, {d['hi']:{spec}}]"
        return f"{d['mean']:{spec}}{ci}" + ("" if d.get("interpretable") else " (n<30)")
    return fmt(run["metrics"].get(column))


def table_rows(runs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    return [[r["policy"], budget_label(r["budget"]), r["dataset"], r["split"]]
            + [_cell(r, c) for c in TABLE_COLUMNS[4:]] for r in runs]


def markdown_table(runs: Sequence[Mapping[str, Any]]) -> str:
    head = "| " + " | ".join(TABLE_COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in TABLE_COLUMNS) + "|"
    return "\n".join([head, sep] + ["| " + " | ".join(row) + " |" for row in table_rows(runs)])


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def trace_path(run_dir: str | Path, policy: str, budget: Mapping[str, Any] | None = None) -> Path:
    """Where a benchmark writes the trace of ``policy`` under ``budget`` (pass it as the env's ``trace_path``).

    ``<run_dir>/traces/<policy>/<k5_m4_M24_T6_B16>.jsonl`` (``..._tok5355`` under a token budget); the trace report
    (:mod:`mage_gym.report`) reads exactly this layout (one file per policy
    and budget, never mixed).
    """
    name = _UNSAFE.sub("_", str(policy)).strip("._") or "policy"
    stem = "_".join(f"{'tok' if k == 'tokens' else k}{budget[k]}" for k in BUDGET_KEYS + OPTIONAL_BUDGET_KEYS
                    if budget.get(k) is not None) if budget else "trace"
    return Path(run_dir) / "traces" / name / f"{_UNSAFE.sub('_', stem)}.jsonl"
