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

``tokens`` (off by default) caps what the reader is sent: the reader tokens of
the working subgraph's render (:func:`mage_gym.render.render`'s ``tokens``,
question included) never pass it (:mod:`mage_gym.env.token_budget`). Why
optional and left out of :meth:`Budget.to_dict` when off: every budget label,
results file, run key and task id written before it existed stays the same.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

#: The budget's count fields, always present; ``tokens`` is optional (None: no reader-token budget).
COUNT_KEYS: tuple[str, ...] = ("k", "m", "M", "T", "B")
KEYS: tuple[str, ...] = COUNT_KEYS + ("tokens",)


@dataclass(frozen=True)
class Budget:
    """``k`` entry pages (free), ``m`` activations per round, ``M`` activations in total,
    ``B`` opened nodes in total, ``T`` rounds; ``tokens``: reader tokens of the render at most (None: no cap)."""

    k: int = 5
    m: int = 4
    M: int = 24
    T: int = 6
    B: int = 16
    tokens: int | None = None

    def __post_init__(self) -> None:
        for name in COUNT_KEYS:
            value = getattr(self, name)
            if not isinstance(value, (int,)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"budget {name} must be a non-negative int, got {value!r}")
        if self.m < 1 or self.T < 1:
            raise ValueError(f"budget m and T must be >= 1, got m={self.m}, T={self.T}")
        t = self.tokens
        if t is not None and (not isinstance(t, int) or isinstance(t, bool) or t < 1):
            raise ValueError(f"budget tokens must be None (no reader-token budget) or an int >= 1, got {t!r}")

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
        """k, m, M, T, B, and ``tokens`` only when set (so a budget without it writes what it always wrote)."""
        out = asdict(self)
        if out["tokens"] is None:
            del out["tokens"]
        return out

    @classmethod
    def coerce(cls, value: "Budget | Mapping[str, Any] | None") -> "Budget":
        """Accept a Budget, a mapping (Hydra/OmegaConf config; ``tokens: null`` is off) or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, Budget):
            return value
        if isinstance(value, Mapping) or hasattr(value, "items"):
            data = {str(k): v for k, v in dict(value.items()).items()}
            unknown = set(data) - set(KEYS)
            if unknown:
                raise ValueError(f"unknown budget keys {sorted(unknown)}; expected k, m, M, T, B (and tokens)")
            return cls(**{k: _as_int(k, v) for k, v in data.items()})
        raise TypeError(f"cannot build a Budget from {type(value).__name__}")


def _as_int(key: str, value: Any) -> int | None:
    """A config value as the field's int; ``tokens`` may be None and must be a whole number (5355.5 is an error,
    not a silent 5355)."""
    if key != "tokens":
        return int(value)
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"budget tokens must be None or an int >= 1, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"budget tokens must be None or an int >= 1, got {value!r}") from None
    if isinstance(value, float) and number != value:
        raise ValueError(f"budget tokens must be a whole number, got {value!r}")
    return number
