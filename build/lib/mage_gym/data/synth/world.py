"""The world a synthetic report describes: entities, metrics, years, values.

Why a precomputed world: every number the document states (in a sentence, a
table cell, a chart bar) is read from one table of true values, so two
mentions of the same fact can never disagree, near-duplicates (same metric,
another year or entity, a target instead of the actual) are true statements
too, and a question's gold answer is the world value, not anything parsed
back from the PDF. Each fact key is rendered at most once per document (the
planner enforces it), which keeps gold evidence exact.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from mage_gym.data.synth.vocab import DOMAINS, NAME_HEADS, NAME_TAILS, ORG_HEADS, Domain, Metric

Qualifier = Literal["actual", "target", "intensity", "share"]
#: (qualifier, entity, metric key, year): one stated number.
FactKey = tuple[str, str, str, int]

N_YEARS = 6


def make_names(rng: np.random.Generator, n: int, exclude: set[str] | None = None) -> list[str]:
    """``n`` distinct invented place names (head + tail syllables)."""
    exclude = exclude or set()
    out: list[str] = []
    seen = set(exclude)
    while len(out) < n:
        name = NAME_HEADS[int(rng.integers(len(NAME_HEADS)))] + NAME_TAILS[int(rng.integers(len(NAME_TAILS)))]
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def format_number(value: float, decimals: int) -> str:
    """How the document prints a number: thousands separators, fixed decimals."""
    return f"{value:,.{decimals}f}"


def answer_number(value: float, decimals: int) -> str:
    """How a gold answer spells a number: no separators (MMLongBench style)."""
    return f"{value:.{decimals}f}"


@dataclass
class World:
    domain: Domain
    org: str
    report_kind: str
    report_year: int
    years: tuple[int, ...]
    entities: tuple[str, ...]
    metrics: dict[str, Metric]
    values: dict[FactKey, float]

    @property
    def title(self) -> str:
        return f"{self.org} {self.report_kind} {self.report_year}"

    # --- phrases -------------------------------------------------------------

    def ent(self, name: str) -> str:
        """Entity phrase: ``the Kelden site``."""
        return self.domain.entity_pattern.format(name)

    def at(self, name: str) -> str:
        """Entity phrase with its preposition: ``at the Kelden site``."""
        return f"{self.domain.entity_prep} {self.ent(name)}"

    def unit_of(self, key: FactKey) -> str:
        m = self.metrics[key[2]]
        if key[0] == "intensity":
            return m.intensity_unit
        if key[0] == "share":
            return "%"
        return m.unit

    def decimals_of(self, key: FactKey) -> int:
        if key[0] in ("intensity", "share"):
            return 1
        return self.metrics[key[2]].decimals

    def value(self, key: FactKey) -> float:
        return self.values[key]

    def shown(self, key: FactKey) -> str:
        """The number with its unit as printed in text: ``1,234.5 GWh`` / ``93.4%``."""
        num = format_number(self.values[key], self.decimals_of(key))
        unit = self.unit_of(key)
        if unit == "%":
            return num + "%"
        return f"{num} {unit}" if unit else num

    def answer(self, key: FactKey) -> str:
        return answer_number(self.values[key], self.decimals_of(key))

    def answer_format(self, key: FactKey) -> str:
        return "Int" if self.decimals_of(key) == 0 else "Float"

    def has(self, key: FactKey) -> bool:
        return key in self.values


@dataclass(frozen=True)
class SharedWorld:
    """What the reports of one document group share (cross-document questions compare them).

    The same domain (so the same metric names), the same entities (segment /
    site names) and the same years; each report keeps its own organisation
    (its head never one of ``exclude_org_heads``) and draws its own values.
    """

    domain_index: int
    entities: tuple[str, ...]
    years: tuple[int, ...]
    exclude_org_heads: tuple[str, ...] = ()


def build_world(rng: np.random.Generator, n_entities: int | None = None, n_years: int = N_YEARS,
                shared: SharedWorld | None = None) -> World:
    """Draw a domain, an organisation, entities and every value it may state.

    Longer documents need more entities and years so that facts stay unique
    (each fact key is stated once) without running out of material.
    ``shared`` fixes domain, entities and years for a document group (the
    random draws without it are unchanged, so existing corpora stay identical).
    """
    if shared is not None:
        return _build_shared_world(rng, shared)
    domain = DOMAINS[int(rng.integers(len(DOMAINS)))]
    head = ORG_HEADS[int(rng.integers(len(ORG_HEADS)))]
    org = f"{head} {domain.org_suffixes[int(rng.integers(len(domain.org_suffixes)))]}"
    report_kind = domain.report_kinds[int(rng.integers(len(domain.report_kinds)))]
    report_year = int(rng.integers(2014, 2025))
    years = tuple(range(report_year - n_years + 1, report_year + 1))
    entities = tuple(make_names(rng, n_entities if n_entities else int(rng.integers(9, 13))))
    return _fill_values(rng, domain, org, report_kind, report_year, years, entities)


def _build_shared_world(rng: np.random.Generator, shared: SharedWorld) -> World:
    domain = DOMAINS[shared.domain_index % len(DOMAINS)]
    heads = [h for h in ORG_HEADS if h not in set(shared.exclude_org_heads)] or list(ORG_HEADS)
    head = heads[int(rng.integers(len(heads)))]
    org = f"{head} {domain.org_suffixes[int(rng.integers(len(domain.org_suffixes)))]}"
    report_kind = domain.report_kinds[int(rng.integers(len(domain.report_kinds)))]
    return _fill_values(rng, domain, org, report_kind, shared.years[-1], tuple(shared.years),
                        tuple(shared.entities))


def _fill_values(rng: np.random.Generator, domain: Domain, org: str, report_kind: str, report_year: int,
                 years: tuple[int, ...], entities: tuple[str, ...]) -> World:
    metrics = {m.key: m for m in domain.metrics}
    values: dict[FactKey, float] = {}
    for e in entities:
        for m in domain.metrics:
            base = float(np.exp(rng.uniform(np.log(m.lo), np.log(m.hi))))
            per_employee = float(np.exp(rng.uniform(np.log(0.5), np.log(150.0))))
            v = base
            for i, y in enumerate(years):
                if i:
                    v *= 1.0 + m.trend + float(rng.normal(0.0, 0.05))
                if m.unit == "%":
                    v = float(np.clip(v, 1.0, 99.5))
                actual = round(v, m.decimals)
                if m.decimals == 0:
                    actual = float(max(1, int(actual)))
                values[("actual", e, m.key, y)] = actual
                target = round(actual * (1.0 + float(rng.choice([-1, 1])) * float(rng.uniform(0.04, 0.15))), m.decimals)
                if m.unit == "%":
                    target = min(target, 99.9)
                if target == actual:
                    target = actual + (10.0 ** -m.decimals)
                values[("target", e, m.key, y)] = float(target)
                if m.intensity_unit:
                    ratio = actual / base * float(rng.uniform(0.95, 1.05))
                    values[("intensity", e, m.key, y)] = round(per_employee * ratio, 1)
    world = World(domain, org, report_kind, report_year, years, entities, metrics, values)
    _add_shares(world)
    return world


def _add_shares(world: World) -> None:
    """Percent shares of additive metrics, as a pie chart would show them (1 decimal)."""
    for m in world.metrics.values():
        if not m.additive:
            continue
        for y in world.years:
            vals = np.array([world.values[("actual", e, m.key, y)] for e in world.entities], dtype=np.float64)
            total = float(vals.sum())
            for e, v in zip(world.entities, vals):
                world.values[("share", e, m.key, y)] = round(100.0 * float(v) / total, 1)
