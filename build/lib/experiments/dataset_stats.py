"""Dataset statistics: what episodes a dataset yields and what was wrong with its annotations.

Run (from the repo root):

    .venv/bin/python experiments/dataset_stats.py dataset=mmlongbench
    .venv/bin/python experiments/dataset_stats.py dataset=financebench dataset.split=test dataset.limit=10

Prints counts by split, answer format, evidence type and gold page count, the
defect flags and skipped questions, and writes ``results.json`` in the Hydra
run directory:

    {"dataset", "root", "split", "limit", "seed",
     "documents", "episodes", "flagged", "excluded_from_training",
     "by_split", "documents_by_split", "by_answer_format", "by_evidence_type",
     "by_pages": {"single", "multi", "none"}, "with_regions", "with_evidence_text",
     "flags", "skipped", "loader": {...}}

Episode counts describe the selected split/limit; ``skipped`` and ``loader``
describe the whole source file (skips happen before splitting).
``by_evidence_type`` counts an episode once per type it cites ("none" when it
cites none), so it can sum to more than ``episodes``. ``by_pages`` uses the
gold an episode is scored on: unanswerable episodes count as "none".
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from mage_gym.data.episode import Episode
from mage_gym.data.registry import load_dataset_with_report
from mage_gym.data.report import LoadReport
from mage_gym.data.splits import SPLITS

log = logging.getLogger("dataset_stats")


def _sorted(c: Counter) -> dict[str, int]:
    return {k: int(v) for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))}


def compute_stats(episodes: list[Episode], report: LoadReport) -> dict[str, Any]:
    """The counts written to ``results.json`` (pure: no I/O)."""
    by_split = Counter({s: 0 for s in SPLITS})
    by_split.update(e.split for e in episodes)
    docs_by_split: dict[str, set[str]] = {s: set() for s in SPLITS}
    for e in episodes:
        docs_by_split.setdefault(e.split, set()).add(e.doc_id)
    by_type: Counter = Counter()
    for e in episodes:
        by_type.update(set(e.evidence_sources) or {"none"})
    by_pages = Counter({"single": 0, "multi": 0, "none": 0})
    for e in episodes:
        n = len(set(e.evidence_pages)) if e.answerable else 0
        by_pages["none" if n == 0 else "single" if n == 1 else "multi"] += 1
    flags = Counter(f for e in episodes for f in set(e.flags))
    return {
        "documents": len({e.doc_id for e in episodes}),
        "episodes": len(episodes),
        "flagged": sum(1 for e in episodes if e.flags),
        "excluded_from_training": sum(1 for e in episodes if not e.usable_for_training),
        "unanswerable": sum(1 for e in episodes if not e.answerable),
        "by_split": {s: int(by_split[s]) for s in list(SPLITS) + sorted(set(by_split) - set(SPLITS))},
        "documents_by_split": {s: len(d) for s, d in docs_by_split.items()},
        "by_answer_format": _sorted(Counter(e.answer_format for e in episodes)),
        "by_evidence_type": _sorted(by_type),
        "by_pages": dict(by_pages),
        "with_regions": sum(1 for e in episodes if e.evidence_regions),
        "with_evidence_text": sum(1 for e in episodes if e.evidence_text),
        "flags": _sorted(flags),
        "skipped": _sorted(report.skipped),
        "loader": report.to_dict(),
    }


def _print(stats: dict[str, Any], n_notes: int) -> None:
    head = (f"{stats['dataset']} (split={stats['split']}, limit={stats['limit']}, seed={stats['seed']}): "
            f"{stats['episodes']} episodes over {stats['documents']} documents, "
            f"{stats['unanswerable']} unanswerable, {stats['flagged']} flagged, "
            f"{stats['excluded_from_training']} excluded from training")
    print(head)
    for key in ("by_split", "documents_by_split", "by_answer_format", "by_evidence_type", "by_pages", "flags",
                "skipped"):
        print(f"  {key:<20} {json.dumps(stats[key])}")
    print(f"  {'loader counters':<20} {json.dumps(stats['loader']['counters'])}")
    for note in stats["loader"]["notes"][:n_notes]:
        print(f"  note: {note}")


@hydra.main(config_path="../conf", config_name="dataset_stats", version_base="1.3")
def main(cfg: DictConfig) -> dict[str, Any]:
    from hydra.core.hydra_config import HydraConfig

    ds = cfg.dataset
    load = load_dataset_with_report(ds.name, root=ds.root, split=ds.split, limit=ds.limit, seed=ds.seed)
    stats = {"dataset": ds.name, "root": load.report.root, "split": ds.split, "limit": ds.limit, "seed": ds.seed}
    stats.update(compute_stats(load.episodes, load.report))
    stats["config"] = OmegaConf.to_container(cfg, resolve=True)
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(stats, indent=2, default=str), encoding="utf-8")
    _print(stats, int(cfg.get("print_notes", 10)))
    print(f"results: {out_dir / 'results.json'}")
    return stats


if __name__ == "__main__":
    main()
