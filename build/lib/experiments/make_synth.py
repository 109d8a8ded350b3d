"""Generate a synthetic long-document corpus with questions, then check it parses as drawn.

Run: ``python experiments/make_synth.py preset=tiny`` (4 documents x 20 pages,
seconds) or ``preset=train`` (200 documents, 20-60 pages, ~2,000 questions).
Writes the corpus to ``out_dir`` (PDFs, ``corpus.json``, ``episodes.jsonl``,
``layout/``) and ``results.json`` in the Hydra run directory: corpus totals,
generation time, and the parse-check match table (gold boxes vs parser
elements, IoU >= 0.5) for a few sampled documents.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from mage_gym.data.synth import PRESETS, SynthConfig, generate_corpus
from mage_gym.data.synth.parse_check import check_corpus, format_table

log = logging.getLogger("make_synth")


def resolve_config(cfg: DictConfig) -> tuple[int, SynthConfig]:
    """Preset values, overridden by every non-null key of the run config."""
    if cfg.preset not in PRESETS:
        raise SystemExit(f"unknown preset {cfg.preset!r}; choose one of {sorted(PRESETS)}")
    base = PRESETS[cfg.preset]
    n_docs = int(cfg.n_docs) if cfg.n_docs is not None else int(base["n_docs"])
    synth: dict[str, Any] = dict(base["synth"])
    overrides = OmegaConf.to_container(cfg.synth, resolve=True) or {}
    synth.update({k: v for k, v in overrides.items() if v is not None})  # type: ignore[union-attr]
    return n_docs, SynthConfig.from_dict(synth)


@hydra.main(version_base=None, config_path="../conf", config_name="make_synth")
def main(cfg: DictConfig) -> None:
    n_docs, synth = resolve_config(cfg)
    out_dir = Path(to_absolute_path(cfg.out_dir))
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    log.info("generating %d documents (seed %d) into %s", n_docs, cfg.seed, out_dir)
    info = generate_corpus(out_dir, n_docs, seed=int(cfg.seed), cfg=synth, workers=int(cfg.workers))
    summary = info.summary()
    summary["pages_per_second"] = round(info.n_pages / max(info.seconds, 1e-9), 2)
    log.info("corpus: %s", json.dumps(summary))
    print(f"generated {info.n_docs} docs, {info.n_pages} pages, {info.n_questions} questions "
          f"in {info.seconds:.1f} s wall, {info.cpu_seconds:.1f} s CPU ({summary['mean_doc_kib']} KiB/doc) "
          f"-> {out_dir}")

    checks: dict[str, Any] = {}
    pc = cfg.parse_check
    if int(pc.n_docs) > 0 and pc.parsers:
        t0 = time.perf_counter()
        results = check_corpus(out_dir, parsers=list(pc.parsers), n_docs=int(pc.n_docs),
                               max_pages=pc.max_pages)
        table = format_table(results)
        print(table)
        checks = {name: r.to_dict() for name, r in results.items()}
        checks["seconds"] = round(time.perf_counter() - t0, 2)
        for name, r in results.items():
            if not r.required_ok():
                log.warning("parser %s does not match every text/table/picture gold box: see results.json misses",
                            name)
    results_json = {
        "command": " ".join(sys.argv),
        "preset": cfg.preset,
        "seed": int(cfg.seed),
        "out_dir": str(out_dir),
        "config": synth.to_dict(),
        "corpus": summary,
        "parse_check": checks,
    }
    (run_dir / "results.json").write_text(json.dumps(results_json, indent=1), encoding="utf-8")
    print(f"results: {run_dir / 'results.json'}")


if __name__ == "__main__":
    main()
