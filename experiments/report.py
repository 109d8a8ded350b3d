"""Turn a benchmark run's episode traces into a static HTML report (one folder, opens from disk).

Run (from the repo root; ``python -m experiments.report`` works the same):

    .venv/bin/python experiments/report.py run_dir=outputs/benchmark/<run>
    .venv/bin/python experiments/report.py run_dir=<run> out=/tmp/report max_episodes=20 images.other_pages=false
    .venv/bin/python experiments/report.py run_dir=<run> dataset.name=synth dataset.root=data/synth/tiny

Reads ``<run_dir>/traces/**/*.jsonl`` (one file per policy and budget, see
:mod:`mage_gym.report.run_dir`), the run's ``.hydra/config.yaml`` (dataset
for gold, env.parser / env.graph_kwargs for the cached graphs) and
``results.json``. Writes ``<out>/index.html`` (episode index with filters and
sortable columns), ``<out>/episodes/*.html`` (per episode: reward components,
pages with element boxes, step timeline, reader input, LLM decisions, two
policies side by side; conversations get a section per turn - question,
answer, page recall, tokens, reward - and document sets show which document
each page belongs to, with its own page number, and page recall per
document), ``<out>/img/`` (downscaled JPEG renders) and
``<out>/results.json`` (counts, outcomes per policy, warnings).
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from mage_gym.bench.config import ConfigError, exit_on_config_error, plain

log = logging.getLogger("report")


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Build the report described by ``cfg`` (the keys of conf/report.yaml); returns the summary.

    A ``run_dir`` that is not a directory is a :class:`ConfigError` raised
    before anything is written (Hydra's own output goes nowhere: conf/report.yaml).
    """
    from mage_gym.report import report_data_from_run_dir, write_report

    t0 = time.perf_counter()
    run_dir = Path(cfg["run_dir"])
    if not run_dir.is_dir():
        raise ConfigError(f"run_dir={run_dir} does not exist or is not a directory (a benchmark's run directory, "
                          "e.g. outputs/benchmark/<run>)")
    out = Path(cfg["out"]) if cfg.get("out") else run_dir / "report"
    data = report_data_from_run_dir(
        run_dir, dataset=cfg.get("dataset") or None, parser=cfg.get("parser"), graph_kwargs=cfg.get("graph_kwargs"),
        build_missing=bool(cfg.get("build_missing", True)), title=cfg.get("title"),
        traces_glob=cfg.get("traces_glob") or "traces/**/*.jsonl", max_episodes=cfg.get("max_episodes"))
    index = write_report(data, out, cfg.get("images"))
    summary = json.loads((out / "report.json").read_text(encoding="utf-8"))
    summary.pop("rows", None)
    summary.update(index=str(index), seconds=round(time.perf_counter() - t0, 2), config=cfg)
    (out / "results.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    return summary


@hydra.main(version_base=None, config_path="../conf", config_name="report")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    c = plain(cfg)
    c.pop("hydra", None)
    s = run(c)
    print(f"{s['episodes']} episodes, {s['runs']} runs of {len(s['policies'])} policies "
          f"({', '.join(s['policies'])}); {s['images_written']} images written, {s['images_reused']} reused; "
          f"{s['seconds']} s")
    for w in s["warnings"][:10]:
        print(f"  warning: {w}")
    print(f"open file://{Path(s['index']).resolve()}")


if __name__ == "__main__":
    main()
