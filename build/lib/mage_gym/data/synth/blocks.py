"""Content blocks the planner emits and the page writer draws.

Why separate from drawing: the planner decides *what* a report says (and
which world facts each block states); the writer decides *where* it lands.
Gold evidence joins the two through ``block_id``: questions are chosen from
blocks, their boxes and pages come from the writer's placements.
"""
from __future__ import annotations

from dataclasses import dataclass

from mage_gym.data.synth.world import FactKey

#: Placeholder in paragraph text where the writer puts the footnote marker.
FOOTNOTE_MARK = "\x00fn\x00"


@dataclass
class Block:
    block_id: int
    section: str  # number of the innermost enclosing section ("" before the first)


@dataclass
class Heading(Block):
    level: int  # 0 = document title, 1..3 = numbered sections
    number: str  # "2.1" ("" for the document title)
    title: str

    @property
    def text(self) -> str:
        return f"{self.number} {self.title}" if self.number else self.title


@dataclass
class Paragraph(Block):
    text: str
    facts: tuple[FactKey, ...] = ()
    footnote: str | None = None  # text of the footnote referenced by FOOTNOTE_MARK
    initiative: str | None = None  # named programme introduced here (section locating)
    role: str = "body"  # body | intro | subtitle | list_intro | table_ref | figure_ref


@dataclass
class ListBlock(Block):
    items: tuple[str, ...]
    numbered: bool
    topic: str
    entity: str
    year: int


@dataclass
class TableBlock(Block):
    number: int
    caption: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    facts: tuple[FactKey, ...]  # every numeric cell's fact key


@dataclass(frozen=True)
class ChartSpec:
    kind: str  # bar | line | pie
    labels: tuple[str, ...]
    values: tuple[float, ...]
    value_texts: tuple[str, ...]  # annotations drawn in the pixels
    axis_label: str
    style: int  # picks a colour scheme


@dataclass
class ChartBlock(Block):
    number: int
    caption: str
    spec: ChartSpec
    facts: tuple[FactKey, ...]


@dataclass(frozen=True)
class FigureSpec:
    kind: str  # photo | diagram
    seed: int
    labels: tuple[str, ...] = ()  # diagram step names


@dataclass
class FigureBlock(Block):
    number: int
    caption: str
    spec: FigureSpec


@dataclass
class PageBreak(Block):
    pass
