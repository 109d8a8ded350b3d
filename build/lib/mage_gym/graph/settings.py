"""Build settings as frozen dataclasses that read from and write to plain dicts.

Why a shared base: the edge and embedding settings come from Hydra configs and
keyword arguments as mappings, are part of the graph cache key as dicts, and
must reject a misspelt key loudly (a typo would otherwise build, and cache, a
graph with the default instead).
"""
from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, ClassVar, Mapping, TypeVar

S = TypeVar("S", bound="Settings")


class Settings:
    """Mixin for a frozen dataclass of build settings: :meth:`from_dict` and :meth:`to_dict`."""

    #: what the settings are about, for error messages ("edge", "embed")
    kind: ClassVar[str] = "build"

    @classmethod
    def from_dict(cls: type[S], cfg: Mapping[str, Any] | S | None) -> S:
        """Settings from a mapping (missing keys keep their defaults), an instance, or None (all defaults)."""
        if cfg is None:
            return cls()
        if isinstance(cfg, cls):
            return cfg
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = set(cfg) - known
        if unknown:
            raise ValueError(f"unknown {cls.kind} config keys {sorted(unknown)}; known: {sorted(known)}")
        return cls(**dict(cfg))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]
