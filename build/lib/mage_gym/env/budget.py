"""The budget vector of an episode: how much a controller may grow the working subgraph.

Why a frozen dataclass: the budget is part of the task definition (two policies
are only comparable under the same budget), so it is fixed per environment and
read by the transition, the mask, the observation and the reward.

Defaults follow the reference implementation of MAGE-RAG where it has an
equivalent (github laonuo2004/MAGE-RAG, ``baselines/magerag/builder.py``):
5 entry pages, at most 4 selected activations per round, 24 activations in
total, 6 rounds. The reference has no open budget during the search (it opens
nodes in a final pass limited to 16, 8 for MMLongBench); we use ``B = 16`` as
the open budget so the final pass, when enabled, matches its default limit.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Budget:
    """``k`` entry pages (free), ``m`` activations per round, ``M`` activations in total,
    ``B`` opened nodes in total, ``T`` rounds."""

    k: int = 5
    m: int = 4
    M: int = 24
    T: int = 6
    B: int = 16

    def __post_init__(self) -> None:
        for name in ("k", "m", "M", "T", "B"):
            value = getattr(self, name)
            if not isinstance(value, (int,)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"budget {name} must be a non-negative int, got {value!r}")
        if self.m < 1 or self.T < 1:
            raise ValueError(f"budget m and T must be >= 1, got m={self.m}, T={self.T}")

    @property
    def max_steps(self) -> int:
        """Hard step cap ``T * (m + B + 2)``: reaching it is an implicit Stop."""
        return self.T * (self.m + self.B + 2)

    @property
    def max_working_set(self) -> int:
        """Upper bound on nodes ever activated: entry pages, paid activations, and
        the pages ActivateNode activates for free."""
        return self.k + 2 * self.M

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def coerce(cls, value: "Budget | Mapping[str, Any] | None") -> "Budget":
        """Accept a Budget, a mapping (Hydra/OmegaConf config) or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, Budget):
            return value
        if isinstance(value, Mapping) or hasattr(value, "items"):
            data = {str(k): int(v) for k, v in dict(value.items()).items()}
            unknown = set(data) - {"k", "m", "M", "T", "B"}
            if unknown:
                raise ValueError(f"unknown budget keys {sorted(unknown)}; expected k, m, M, T, B")
            return cls(**data)
        raise TypeError(f"cannot build a Budget from {type(value).__name__}")
