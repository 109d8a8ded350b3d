"""Experiment tracking: Weights & Biases (offline unless ``WANDB_MODE`` says otherwise) or nothing (``logger=none``).

Why a null object: entry points call ``logger.log(...)`` unconditionally,
and a tracking failure (no wandb, a broken install) must never stop an
experiment: :func:`make_logger` falls back to :class:`NullLogger` with a warning.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from mage_gym.bench.config import plain

log = logging.getLogger("experiments.tracking")


class NullLogger:
    """``logger=none``: every call is a no-op."""

    def log(self, data: Mapping[str, Any], step: int | None = None) -> None: ...

    def table(self, name: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None: ...

    def images(self, paths: Mapping[str, Path]) -> None: ...

    def summary(self, data: Mapping[str, Any]) -> None: ...

    def finish(self) -> None: ...


class WandbLogger(NullLogger):
    """Weights & Biases, offline unless ``WANDB_MODE`` says otherwise (no account or network needed)."""

    def __init__(self, project: str, name: str, config: Mapping[str, Any], run_dir: Path, job_type: str,
                 mode: str | None = None, tags: Sequence[str] = ()) -> None:
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, name=name, config=dict(config), dir=str(run_dir), job_type=job_type,
                              mode=mode or os.environ.get("WANDB_MODE", "offline"), tags=list(tags),
                              reinit="finish_previous")

    def log(self, data: Mapping[str, Any], step: int | None = None) -> None:
        self.run.log({k: v for k, v in data.items() if v is not None}, step=step)

    def table(self, name: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        self.run.log({name: self.wandb.Table(columns=list(columns), data=[list(r) for r in rows])})

    def images(self, paths: Mapping[str, Path]) -> None:
        self.run.log({k: self.wandb.Image(str(p)) for k, p in paths.items() if Path(p).is_file()})

    def summary(self, data: Mapping[str, Any]) -> None:
        for k, v in data.items():
            if v is not None:
                self.run.summary[k] = v

    def finish(self) -> None:
        self.run.finish()


def make_logger(cfg: Mapping[str, Any], name: str, job_type: str, out: Path) -> NullLogger:
    """The ``logger`` node's tracker (``wandb`` or ``none``), never an exception."""
    lg = dict(plain(cfg.get("logger")) or {"name": "none"})
    if lg.get("name", "none") in ("none", None, False):
        return NullLogger()
    try:
        return WandbLogger(project=lg.get("project", "mage-gym"), name=name, config=plain(cfg), run_dir=out,
                           job_type=job_type, mode=lg.get("mode"), tags=lg.get("tags") or ())
    except Exception as err:  # noqa: BLE001 - logging must never stop an experiment
        log.warning("W&B logging disabled: %s: %s", type(err).__name__, err)
        return NullLogger()


def run_name(*parts: Any) -> str:
    """CleanRL-style ``env__policy__seed__time``."""
    return "__".join(str(p) for p in parts) + "__" + time.strftime("%Y%m%d-%H%M%S")
