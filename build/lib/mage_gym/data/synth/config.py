"""Knobs of the synthetic long-document generator, and named presets.

Why a frozen dataclass: the config is written verbatim into ``corpus.json`` so
a corpus says how it was made, it is hashed into nothing else, and every
worker process receives the same immutable copy. Difficulty lives here
(pages, evidence spread, distractor density, questions per document), never
in code paths, so an experiment can sweep it from Hydra.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

#: Question kinds the generator emits (``Episode.task_tags`` / ``extra["question_kind"]``).
QUESTION_KINDS: tuple[str, ...] = (
    "fact_lookup",  # one fact stated in a paragraph
    "table_lookup",  # one cell of a ruled table
    "chart_reading",  # a value only visible in a chart's pixels
    "multi_page",  # compare or combine two facts on distant pages
    "section_locate",  # which section discusses a named initiative
    "list_count",  # how many items a bulleted/numbered list holds
    "unanswerable",  # plausible but absent: an unknown entity, a year before the data, an unnamed programme
)

#: How a bridge question's second hop is reached from its first (``extra["bridge"]["type"]``):
#: an explicit cross-reference, the section tree, or a named entity mentioned on both pages.
BRIDGE_TYPES: tuple[str, ...] = ("reference", "section", "semantic")
#: Mention patterns of ``reference`` bridges (``extra["bridge"]["pattern"]``).
REFERENCE_PATTERNS: tuple[str, ...] = ("table", "exhibit", "figure", "section", "appendix", "note", "page")

#: Content block kinds the planner mixes into sections (relative weights).
BLOCK_KINDS: tuple[str, ...] = ("paragraph", "table", "chart", "figure", "list")


class SynthConfigError(ValueError):
    """A generator setting is out of range or unknown."""


def _default_kind_weights() -> dict[str, float]:
    return {
        "fact_lookup": 2.0,
        "table_lookup": 2.0,
        "chart_reading": 2.0,
        "multi_page": 1.5,
        "section_locate": 1.0,
        "list_count": 1.0,
        "unanswerable": 1.0,
    }


def _default_bridge_weights() -> dict[str, float]:
    return {"reference": 2.0, "section": 1.0, "semantic": 1.0}


def _default_block_weights() -> dict[str, float]:
    return {"paragraph": 5.0, "table": 1.1, "chart": 0.7, "figure": 0.35, "list": 0.7}


@dataclass(frozen=True)
class SynthConfig:
    """How each document and its questions are made.

    ``evidence_spread`` is the minimum distance, as a fraction of the
    document's pages, between the two facts of a multi-page question.
    ``distractor_density`` is the expected number of extra near-duplicate
    mentions (same metric with another year, entity or qualifier) scheduled on
    later pages for every stated fact: 0 leaves only incidental overlaps.

    ``bridge_questions_per_doc`` two-hop *bridge* questions are added on top of
    the ``questions_per_doc`` classic ones (fewer when the document offers
    fewer valid ones); ``bridge_weights`` sets the mix of bridge types
    (:data:`BRIDGE_TYPES`). 0 bridge questions also leaves out the bridge
    material (front matter, end matter, anchors), i.e. version-1 style
    documents with version-2 page furniture.
    """

    min_pages: int = 20
    max_pages: int = 60
    questions_per_doc: int = 10
    evidence_spread: float = 0.3
    distractor_density: float = 1.0
    kind_weights: dict[str, float] = field(default_factory=_default_kind_weights)
    block_weights: dict[str, float] = field(default_factory=_default_block_weights)
    bridge_questions_per_doc: int = 5
    bridge_weights: dict[str, float] = field(default_factory=_default_bridge_weights)
    footnote_rate: float = 0.12  # share of fact paragraphs carrying a footnote
    chart_dpi: int = 100  # chart raster resolution (values must stay legible)
    page_width: float = 612.0  # US Letter, PDF points
    page_height: float = 792.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_pages <= self.max_pages:
            raise SynthConfigError(f"need 1 <= min_pages <= max_pages, got {self.min_pages}, {self.max_pages}")
        if self.max_pages > 2000:
            raise SynthConfigError(f"max_pages {self.max_pages} is beyond what the generator is meant for (2000)")
        if self.questions_per_doc < 0:
            raise SynthConfigError("questions_per_doc must be >= 0")
        if self.bridge_questions_per_doc < 0:
            raise SynthConfigError("bridge_questions_per_doc must be >= 0")
        if not 0.0 <= self.evidence_spread <= 0.9:
            raise SynthConfigError(f"evidence_spread must be in [0, 0.9], got {self.evidence_spread}")
        if not 0.0 <= self.distractor_density <= 5.0:
            raise SynthConfigError(f"distractor_density must be in [0, 5], got {self.distractor_density}")
        if not 0.0 <= self.footnote_rate <= 1.0:
            raise SynthConfigError("footnote_rate must be in [0, 1]")
        if not 50 <= self.chart_dpi <= 300:
            raise SynthConfigError("chart_dpi must be in [50, 300]")
        for name, weights, known in (("kind_weights", self.kind_weights, QUESTION_KINDS),
                                     ("block_weights", self.block_weights, BLOCK_KINDS),
                                     ("bridge_weights", self.bridge_weights, BRIDGE_TYPES)):
            unknown = set(weights) - set(known)
            if unknown:
                raise SynthConfigError(f"{name}: unknown keys {sorted(unknown)}; expected some of {known}")
            if any(float(w) < 0 for w in weights.values()) or not any(float(w) > 0 for w in weights.values()):
                raise SynthConfigError(f"{name}: weights must be >= 0 with at least one > 0")
        if self.block_weights.get("paragraph", 0.0) <= 0:
            raise SynthConfigError("block_weights: paragraph weight must be > 0 (facts live in paragraphs)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "SynthConfig":
        """Build from a plain mapping (e.g. a Hydra node); unknown keys are an error."""
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise SynthConfigError(f"unknown SynthConfig keys {sorted(unknown)}")
        for k in ("kind_weights", "block_weights", "bridge_weights"):
            if k in d and d[k] is not None:
                base = getattr(cls(), k)
                base.update({str(a): float(b) for a, b in dict(d[k]).items()})
                d[k] = base
        return cls(**{k: v for k, v in d.items() if v is not None})

    def with_overrides(self, **kw: Any) -> "SynthConfig":
        return replace(self, **kw)


#: Named presets: ``tiny`` for tests and the README job, ``train`` for the
#: default training corpus (a third of its questions are bridge questions),
#: ``test`` for held-out synthetic test corpora (same documents as ``train``,
#: role ``test``: seeds from the test range only, see :mod:`.provenance`),
#: ``long`` for stress (up to 300 pages). ``role`` (optional) is the corpus
#: role the preset is for; presets without one take the role their seed says.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"n_docs": 4, "synth": {"min_pages": 20, "max_pages": 20, "questions_per_doc": 8,
                                    "bridge_questions_per_doc": 2}},
    "train": {"n_docs": 200, "role": "train", "synth": {"min_pages": 20, "max_pages": 60, "questions_per_doc": 10,
                                                         "bridge_questions_per_doc": 5}},
    "test": {"n_docs": 50, "role": "test", "synth": {"min_pages": 20, "max_pages": 60, "questions_per_doc": 10,
                                                      "bridge_questions_per_doc": 5}},
    "eval": {"n_docs": 50, "synth": {"min_pages": 30, "max_pages": 120, "questions_per_doc": 12,
                                     "bridge_questions_per_doc": 6, "distractor_density": 1.5}},
    "long": {"n_docs": 10, "synth": {"min_pages": 150, "max_pages": 300, "questions_per_doc": 20,
                                     "bridge_questions_per_doc": 10, "evidence_spread": 0.5}},
}


def preset(name: str) -> tuple[int, SynthConfig]:
    """``(n_docs, config)`` of a named preset."""
    if name not in PRESETS:
        raise SynthConfigError(f"unknown preset {name!r}; expected one of {sorted(PRESETS)}")
    p = PRESETS[name]
    return int(p["n_docs"]), SynthConfig.from_dict(p["synth"])


def preset_role(name: str) -> str | None:
    """The corpus role a preset is made for (``None``: the seed's range decides)."""
    if name not in PRESETS:
        raise SynthConfigError(f"unknown preset {name!r}; expected one of {sorted(PRESETS)}")
    return PRESETS[name].get("role")
