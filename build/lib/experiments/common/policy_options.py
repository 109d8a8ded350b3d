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

from experiments.common.config import ConfigError, section

#: policies that act from a trained checkpoint (``policy.<name>.checkpoint``)
LEARNED: tuple[str, ...] = ("ppo",)
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


def check_policies(cfg: Mapping[str, Any], names: Sequence[str]) -> None:
    """Every name in ``names`` is a registered policy with composed options (one error before any work)."""
    from policies import POLICIES

    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise ConfigError(f"unknown policies {unknown} in `policies`; choose from {sorted(POLICIES)}")
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


def checkpoint_of(name: str, opts: Mapping[str, Any]) -> dict[str, str] | None:
    """The checkpoint identity of a learned policy's options (None for rule policies or an in-memory model)."""
    ckpt = opts.get("checkpoint")
    if name == "ppo" and not ckpt:  # no path given: the policy loads the shipped checkpoint
        from policies.ppo import SHIPPED_CHECKPOINT

        ckpt = SHIPPED_CHECKPOINT
    if name not in LEARNED or not ckpt or not Path(str(ckpt)).expanduser().is_file():
        return None
    return checkpoint_identity(str(ckpt))
