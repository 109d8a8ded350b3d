"""The Episode record: one (document, question) pair with its gold.

Everything here except ``question`` and the document is *gold* and must never
reach a policy (observation, text view, mask, reader prompt, or ``info``
before the episode ends). :meth:`Episode.public_view` is the only part the
environment may show.

Conventions inside the project, whatever the source used:
- pages are 0-based;
- region boxes are normalised to [0, 1] of the page;
- ``answer_format`` keeps the source's spelling (MMLongBench ``Int/Float/Str/
  List/None``, LongDocURL ``Integer/Float/String/List/None``, FinanceBench and
  the generator use ``Str`` for free text unless stated);
- an unanswerable question has ``answerable=False`` (MMLongBench's ``None``
  format / "Not answerable");
- ``evidence_hops`` (generator only; real loaders leave it empty) gives the
  hop of each evidence region, 1-based and parallel to ``evidence_regions``:
  a two-hop *bridge* question has hop-1 regions (where the question's named
  thing is, and the link to follow) and hop-2 regions (where the answer is).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from mage_gym.graph.schema import BBox

Benchmark = Literal["mmlongbench", "longdocurl", "financebench", "synth"]

#: Defect flags a loader may set (counted by the dataset report).
FLAG_PAGES_OUT_OF_RANGE = "evidence_pages_out_of_range"  # some (not all) pages dropped
FLAG_ALL_PAGES_OUT_OF_RANGE = "evidence_all_out_of_range"
FLAG_EMPTY_EVIDENCE = "answerable_without_evidence"
FLAG_UNANSWERABLE_WITH_EVIDENCE = "unanswerable_with_evidence"
FLAG_REGION_UNMATCHED = "region_unmatched"  # a gold region could not be placed on a page
FLAG_BAD_FIELD = "unparseable_field"


@dataclass(frozen=True)
class Region:
    """A gold evidence region: page (0-based) and normalised bbox."""

    page: int
    bbox: BBox
    type: str = "unknown"  # evidence source type when the source says


@dataclass(frozen=True)
class EvidenceHop:
    """The gold of one hop of a multi-hop question (see :meth:`Episode.hops`)."""

    hop: int  # 1-based
    pages: tuple[int, ...]  # 0-based, sorted
    regions: tuple[Region, ...]


@dataclass(frozen=True)
class Episode:
    episode_id: str
    benchmark: str
    doc_id: str
    source: str  # PDF path, or folder of page images
    question: str
    answer: str
    answer_format: str
    answerable: bool = True
    evidence_pages: tuple[int, ...] = ()  # 0-based
    evidence_regions: tuple[Region, ...] = ()
    evidence_text: tuple[str, ...] = ()  # FinanceBench's evidence_text snippets
    gold_node_ids: tuple[str, ...] = ()  # exact element-level gold (generator)
    evidence_sources: tuple[str, ...] = ()  # e.g. Table, Chart, Pure-text
    task_tags: tuple[str, ...] = ()
    page_window: tuple[int, int] | None = None  # 0-based inclusive window (LongDocURL)
    split: str = "train"
    flags: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    evidence_hops: tuple[int, ...] = ()  # hop (1-based) of each evidence region; () = single hop / unknown

    def __post_init__(self) -> None:
        hops = tuple(int(h) for h in self.evidence_hops)  # JSON gives a list; keep the record hashable
        if hops and len(hops) != len(self.evidence_regions):
            raise ValueError(f"evidence_hops has {len(hops)} entries for {len(self.evidence_regions)} regions")
        if any(h < 1 for h in hops):
            raise ValueError(f"evidence_hops must be >= 1, got {hops}")
        object.__setattr__(self, "evidence_hops", hops)

    @property
    def usable_for_training(self) -> bool:
        """Answerable episodes need some in-range gold to be scored on evidence."""
        if not self.answerable:
            return True
        return bool(self.evidence_pages or self.evidence_regions or self.gold_node_ids)

    @property
    def n_hops(self) -> int:
        """1 for ordinary questions, 2 for a bridge question (the highest hop of any region)."""
        return max(self.evidence_hops, default=1)

    def hops(self) -> tuple[EvidenceHop, ...]:
        """Gold grouped by hop, hop 1 first (one hop holding everything when hops are not given).

        Gold, like every field but ``question``: for the env's reward, metrics
        and privileged policies only.
        """
        if not self.evidence_hops:
            return (EvidenceHop(1, tuple(sorted(set(self.evidence_pages))), self.evidence_regions),)
        out = []
        for h in sorted(set(self.evidence_hops)):
            regions = tuple(r for r, rh in zip(self.evidence_regions, self.evidence_hops) if rh == h)
            out.append(EvidenceHop(h, tuple(sorted({r.page for r in regions})), regions))
        return tuple(out)

    @property
    def multi_page(self) -> bool:
        return len(set(self.evidence_pages)) > 1

    def public_view(self) -> dict[str, str]:
        """What a policy and the reader may see about the episode."""
        return {"episode_id": self.episode_id, "doc_id": self.doc_id, "question": self.question}

    def with_split(self, split: str) -> "Episode":
        return replace(self, split=split)
