"""Config plumbing every entry point shares: plain containers, torch threads, the run directory, config errors.

Why a typed :class:`ConfigError`: a wrong option (an unknown parser, a policy
without options, no validation episodes) must stop a run before any work,
with one message naming the option, not as a traceback or as an empty result
much later. Entry points wrap their ``main`` in :func:`exit_on_config_error`.
"""
from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class ConfigError(ValueError):
    """A run's configuration cannot work; the message names the option and the fix."""


def exit_on_config_error(fn: F) -> F:
    """Turn a :class:`ConfigError` raised by ``fn`` into ``SystemExit("error: ...")`` (exit status 1, no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as err:
            raise SystemExit(f"error: {err}") from None

    return wrapper  # type: ignore[return-value]


def plain(cfg: Any) -> Any:
    """An OmegaConf node (or anything) as plain Python containers, interpolations resolved."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


def check_parser(name: Any, option: str = "env.parser") -> str:
    """``name`` if it is a graph parser, else a :class:`ConfigError` naming ``option`` and the choices."""
    from mage_gym.graph.parsers import PARSER_NAMES

    if name not in PARSER_NAMES:
        raise ConfigError(f"{option}={name!r} is not a graph parser; choose one of {', '.join(PARSER_NAMES)}")
    return str(name)


def quiet_libraries() -> None:
    """bm25s sets its own logger to DEBUG when imported (one line per index build): import it, then raise it."""
    try:
        import bm25s  # noqa: F401
    except ImportError:  # pragma: no cover
        pass
    for name in ("bm25s", "httpx", "urllib3", "matplotlib", "PIL"):
        logging.getLogger(name).setLevel(logging.WARNING)


def set_threads(n: int | None) -> None:
    """Cap torch's intra-op threads. One thread is much faster for PPO's tiny matrices on a shared machine."""
    if n:
        import torch

        torch.set_num_threads(int(n))


def run_dir() -> Path:
    """Hydra's output directory for this run (the working directory outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir)
    except Exception:  # noqa: BLE001 - not under Hydra
        return Path.cwd()


def link_latest(out: Path) -> Path | None:
    """Point ``<parent>/latest`` at run folder ``out`` (a relative symlink), so docs can name the newest run.

    Only a symlink named ``latest`` is ever replaced; where links are not
    allowed (some filesystems) nothing happens and None is returned.
    """
    link = out.parent / "latest"
    try:
        if link.is_symlink():
            link.unlink()
        elif link.exists():
            return None
        link.symlink_to(out.name, target_is_directory=True)
    except OSError:
        return None
    return link


def section(cfg: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``cfg[key]`` as a plain dict (empty when absent or null)."""
    return dict(plain(cfg.get(key)) or {})
