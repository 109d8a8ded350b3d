"""One entry point for every episode source: ``load_dataset(name, ...)``.

Why: experiments (benchmark, training, dataset stats) choose a dataset by a
Hydra group (``dataset=mmlongbench`` ...) and must get the same episodes, the
same splits and the same ``limit`` sample for the same settings. Splitting
(by document hash, :mod:`mage_gym.data.splits`) and limiting happen here,
after loading, so every loader stays a plain file reader.

Default roots live under ``$MAGE_GYM_DATA`` (default ``<repo>/../shared/data``):
``mmlongbench-dev``, ``longdocurl-sample``, ``financebench-dev``. The
synthetic corpus is produced by :mod:`mage_gym.data.synth` (imported lazily);
its default root is ``$MAGE_GYM_SYNTH`` if set, else whatever default
``load_synth`` itself declares, else ``<repo>/data/synth``.

Composite datasets (:class:`~mage_gym.data.composite.CompositeEpisode`
records; splits by group, so a group's documents stay together):
``synth_multidoc`` (cross-document questions) and ``synth_conversation``
(conversations) read ``root``, or with no root generate (once, then reuse) a
small default corpus under ``$MAGE_GYM_CACHE/synth``;
``financebench_conversation`` regroups FinanceBench by company (a format
check, not real follow-ups; its report lists the groups it formed).
"""
from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from mage_gym.data.episode import Episode
from mage_gym.data.io import data_root
from mage_gym.data.report import DatasetLoad, LoadReport
from mage_gym.data.splits import ALL, DEFAULT_RATIOS, limit_episodes, select_split

REAL_DATASETS: dict[str, str] = {
    "mmlongbench": "mmlongbench-dev",
    "longdocurl": "longdocurl-sample",
    "financebench": "financebench-dev",
}
#: Datasets of composite episodes (several documents and/or several turns).
COMPOSITE_DATASETS: tuple[str, ...] = ("synth_multidoc", "synth_conversation", "financebench_conversation")
DATASETS: tuple[str, ...] = tuple(REAL_DATASETS) + ("synth",) + COMPOSITE_DATASETS
_ALIASES = {"mmlongbench-doc": "mmlongbench", "mmlb": "mmlongbench", "ldu": "longdocurl", "fb": "financebench"}


def canonical_name(name: str) -> str:
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {DATASETS}")
    return key


def default_root(name: str) -> Path | None:
    """Where ``name`` is read from when no root is given (None: let ``load_synth`` decide)."""
    key = canonical_name(name)
    if key in REAL_DATASETS:
        return data_root(REAL_DATASETS[key])
    if key == "financebench_conversation":
        return data_root(REAL_DATASETS["financebench"])
    if key in COMPOSITE_DATASETS:
        return None  # generated (or reused) under $MAGE_GYM_CACHE/synth by the loader
    env = os.environ.get("MAGE_GYM_SYNTH")
    if env:
        return Path(env)
    return None


def _real_loader(key: str) -> Callable[..., DatasetLoad]:
    if key == "mmlongbench":
        from mage_gym.data.mmlongbench import load_mmlongbench
        return load_mmlongbench
    if key == "longdocurl":
        from mage_gym.data.longdocurl import load_longdocurl
        return load_longdocurl
    from mage_gym.data.financebench import load_financebench
    return load_financebench


def _composite_loader(key: str) -> Callable[..., DatasetLoad]:
    if key == "synth_multidoc":
        from mage_gym.data.synth.multidoc import load_synth_multidoc
        return load_synth_multidoc
    if key == "synth_conversation":
        from mage_gym.data.synth.conversation import load_synth_conversation
        return load_synth_conversation
    from mage_gym.data.financebench_conversation import load_financebench_conversation
    return load_financebench_conversation


def _load_synth(root: Path | None, **kw: Any) -> DatasetLoad:
    from mage_gym.data.synth import load_synth  # written by the generator's owner; import lazily

    if root is None:
        params = inspect.signature(load_synth).parameters
        has_default = "root" in params and params["root"].default is not inspect.Parameter.empty
        out = load_synth(**kw) if has_default else load_synth(Path(__file__).resolve().parents[2] / "data" / "synth",
                                                               **kw)
    else:
        out = load_synth(root, **kw)
    if isinstance(out, DatasetLoad):
        return out
    if hasattr(out, "episodes") and hasattr(out, "report"):  # a compatible record from the generator
        return DatasetLoad(list(out.episodes), out.report)
    episodes = list(out)
    return DatasetLoad(episodes, LoadReport(benchmark="synth", root=str(root or "")).finalise(episodes))


def load_dataset_with_report(name: str, root: str | os.PathLike[str] | None = None, split: str = ALL,
                             limit: int | None = None, seed: int = 0,
                             ratios: Sequence[float] = DEFAULT_RATIOS, **kw: Any) -> DatasetLoad:
    """Like :func:`load_dataset` but also returns the loader's report (of the whole file)."""
    key = canonical_name(name)
    path = Path(root) if root is not None else default_root(key)
    if key == "synth":
        load = _load_synth(path, **kw)
    elif key in COMPOSITE_DATASETS:
        load = _composite_loader(key)(path, **kw)
    else:
        load = _real_loader(key)(path, **kw)
    episodes = select_split(load.episodes, split, seed, ratios)
    episodes = limit_episodes(episodes, limit, seed)
    return DatasetLoad(episodes, load.report)


def load_dataset(name: str, root: str | os.PathLike[str] | None = None, split: str = ALL,
                 limit: int | None = None, seed: int = 0, **kw: Any) -> list[Episode]:
    """Episodes of ``name`` (mmlongbench, longdocurl, financebench, synth, or a composite dataset).

    ``split`` is ``all`` or ``train``/``val``/``test`` (by document hash with
    ``seed``; every episode carries its split label); ``limit`` keeps a
    deterministic hash-chosen subset in file order; other keywords go to the
    loader (e.g. ``use_mmdocir=False``, ``ratios=(0.8, 0.1, 0.1)``).
    """
    return load_dataset_with_report(name, root, split, limit, seed, **kw).episodes


class NoEpisodesError(ValueError):
    """A dataset load that gave no episodes (wrong root, an empty split, a limit of 0)."""


def require_episodes(name: str, root: str | os.PathLike[str] | None = None, split: str = ALL,
                     limit: int | None = None, seed: int = 0, **kw: Any) -> list[Episode]:
    """:func:`load_dataset`, raising :class:`NoEpisodesError` (naming the settings) when it gives none.

    Why: an env or trainer built on zero episodes fails later and far from
    the cause (an empty task table, a reset with nothing to draw); every
    builder that takes a dataset by name loads it through here.
    """
    episodes = load_dataset(name, root, split, limit, seed, **kw)
    if not episodes:
        raise NoEpisodesError(f"dataset {name!r} (root={str(root) if root is not None else 'default'}, "
                              f"split={split!r}, limit={limit}) has no episodes")
    return episodes


__all__ = ["DATASETS", "REAL_DATASETS", "COMPOSITE_DATASETS", "NoEpisodesError", "canonical_name", "default_root",
           "load_dataset", "load_dataset_with_report", "require_episodes"]
