"""A policy's options from the composed config, and which checkpoint a learned policy acted with.

Hydra composes every ``conf/policy/<name>.yaml`` under ``policy.<name>``
(``conf/common.yaml``), so ``policy.heuristic.open_min_rel=0.5`` on the
command line and ``policy: {llm_evaluator: {limit: 3}}`` in a config file
reach the policy the same way; nothing re-reads the YAML files.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from mage_gym.bench.config import ConfigError, section
from mage_gym.bench.protocol import PolicyRegistry

#: options the benchmark reads (first N episodes; base budget only), not the policy
BENCHMARK_OPTIONS: tuple[str, ...] = ("limit", "only_base_budget")


def policy_options(cfg: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``policy.<name>`` as a plain dict without its ``name`` key; a :class:`ConfigError` when absent."""
    composed = section(cfg, "policy")
    opts = composed.get(name)
    if not isinstance(opts, Mapping):
        raise ConfigError(f"policy {name!r} has no options under policy.{name} (composed: {sorted(composed)}); "
                          f"a new policy needs conf/policy/{name}.yaml and a line in conf/common.yaml")
    opts = dict(opts)
    opts.pop("name", None)
    return opts


def check_policies(cfg: Mapping[str, Any], names: Sequence[str], registry: PolicyRegistry) -> None:
    """Every name in ``names`` is a registered policy with composed options (one error before any work)."""
    known = list(registry.names())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"unknown policies {unknown} in `policies`; choose from {sorted(known)}")
    for n in names:
        policy_options(cfg, n)


def checkpoint_identity(path: str | Path) -> dict[str, str]:
    """``{"path": absolute path, "sha256": hex digest of the file}``: which checkpoint a result row used."""
    p = Path(path).expanduser().resolve()
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"path": str(p), "sha256": h.hexdigest()}


def checkpoint_of(name: str, opts: Mapping[str, Any], registry: PolicyRegistry) -> dict[str, str] | None:
    """The checkpoint identity of a learned policy's options (None for rule policies or an in-memory model)."""
    ckpt = registry.learned_checkpoint(name, opts)
    if not ckpt or not Path(str(ckpt)).expanduser().is_file():
        return None
    return checkpoint_identity(str(ckpt))


def limited(episodes: Sequence[Any], opts: Mapping[str, Any]) -> list[Any]:
    """The episodes a policy runs on: the first ``limit`` (all when ``limit`` is null)."""
    limit = opts.get("limit")
    return list(episodes)[: int(limit)] if limit else list(episodes)


def policy_kwargs(opts: Mapping[str, Any]) -> dict[str, Any]:
    """A policy's options without the ones the benchmark reads itself."""
    return {k: v for k, v in opts.items() if k not in BENCHMARK_OPTIONS}
