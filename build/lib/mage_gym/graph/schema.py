"""Records of the offline evidence graph: pages, elements, typed edges.

Why these shapes: the environment's step loop works on integer node indices and
numpy arrays, while people (and LLM policies) read stable string ids. Every
node therefore has both: ``node_id`` (``{doc}:p{page}`` or
``{doc}:p{page}:e{index}``) and a dense integer index (pages first, then
elements in reading order) used by :class:`~mage_gym.graph.graph.EvidenceGraph`.

Parsers produce :class:`ParsedDocument` (raw, in PDF points); the builder turns
that into frozen :class:`Page` / :class:`Element` records with normalised boxes,
ids, reading order and section paths, then adds edges and embeddings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# --- vocabularies -----------------------------------------------------------

#: Element types a parser may emit. ``page`` is reserved for page nodes.
ELEMENT_TYPES: tuple[str, ...] = (
    "title",  # section header / document title (has ``heading_level``)
    "paragraph",
    "list",
    "table",
    "figure",  # picture that is not recognisably a chart
    "chart",
    "caption",
    "formula",
    "footnote",
)
NODE_TYPES: tuple[str, ...] = ("page",) + ELEMENT_TYPES
#: Types whose evidence lives (partly) in pixels: the renderer adds a crop.
VISUAL_TYPES: frozenset[str] = frozenset({"figure", "chart", "table"})

EdgeKind = Literal["containment", "reading_order", "layout", "section", "semantic", "reference"]
#: The paper's five relations, then ``reference`` (explicit cross-references; mage_gym/graph/references.py).
#: New kinds go last so the indices stored in cached graphs keep their meaning.
EDGE_KINDS: tuple[str, ...] = ("containment", "reading_order", "layout", "section", "semantic", "reference")

BBox = tuple[float, float, float, float]  # (x0, y0, x1, y1)


# --- parser output (raw) ------------------------------------------------------


@dataclass
class ParsedElement:
    """One region found by a parser, in PDF points (or pixels for images).

    Parsers should emit elements in their best guess of reading order.
    """

    type: str
    bbox: BBox
    text: str = ""
    table_markdown: str | None = None
    heading_level: int | None = None  # 1 = top level, only for ``title``
    ocr: bool = False  # text came from OCR rather than a text layer

    def __post_init__(self) -> None:
        if self.type not in ELEMENT_TYPES:
            raise ValueError(f"unknown element type {self.type!r}; expected one of {ELEMENT_TYPES}")


@dataclass
class ParsedPage:
    """A page as a parser saw it. Headers/footers are attributes, not elements."""

    index: int  # 0-based
    width: float
    height: float
    elements: list[ParsedElement] = field(default_factory=list)
    header_text: str = ""
    footer_text: str = ""
    image_only: bool = False  # no text layer: text (if any) came from OCR
    warnings: list[str] = field(default_factory=list)
    failure: "PageFailure | None" = None  # set when the page's content is missing because something failed


@dataclass
class ParsedDocument:
    pages: list[ParsedPage]
    parser: str
    warnings: list[str] = field(default_factory=list)


# --- graph records ------------------------------------------------------------


@dataclass(frozen=True)
class DocumentSource:
    """Where a document's pixels come from, so crops can be rendered lazily.

    ``kind`` is ``"pdf"`` (``path`` is the PDF) or ``"images"`` (``page_files``
    lists one image per page, in page order; ``path`` is their folder).
    """

    kind: Literal["pdf", "images"]
    path: str
    page_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Page:
    node_id: str
    index: int  # 0-based page number
    width: float  # in points (PDF) or pixels (images)
    height: float
    text: str  # all element text of the page, in reading order
    summary: str  # short extractive summary (first sentences / headings)
    header_text: str = ""
    footer_text: str = ""
    image_only: bool = False
    n_elements: int = 0


@dataclass(frozen=True)
class Element:
    node_id: str
    page: int  # 0-based page number
    index: int  # 0-based index of the element within its page
    type: str
    bbox: BBox  # normalised to [0, 1] of the page
    text: str
    summary: str
    reading_order: int  # document-wide position, 0-based
    section_path: tuple[str, ...] = ()  # titles of enclosing headings, outermost first
    heading_level: int | None = None
    table_markdown: str | None = None
    ocr: bool = False

    @property
    def crop_ref(self) -> tuple[int, BBox]:
        """Page and normalised box: enough to render the crop on demand."""
        return (self.page, self.bbox)

    @property
    def area(self) -> float:
        x0, y0, x1, y1 = self.bbox
        return max(0.0, x1 - x0) * max(0.0, y1 - y0)


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    kind: str  # one of EDGE_KINDS
    weight: float = 1.0  # similarity for semantic, inverse distance for layout, else 1
    label: str = ""  # e.g. "left", "below", "next", "child"


def page_id(doc_id: str, page: int) -> str:
    return f"{doc_id}:p{page}"


def element_id(doc_id: str, page: int, index: int) -> str:
    return f"{doc_id}:p{page}:e{index}"


def bbox_iou(a: BBox, b: BBox) -> float:
    ix0, iy0 = max(a[0], b[0]), max(a[1], b[1])
    ix1, iy1 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, ix1 - ix0) * max(0.0, iy1 - iy0)
    area_a = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])
    area_b = max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])
    union = area_a + area_b - inter
    return inter / union if union > 0 else 0.0


def bbox_inside_fraction(inner: BBox, outer: BBox) -> float:
    """Share of ``inner``'s area that lies inside ``outer``."""
    ix0, iy0 = max(inner[0], outer[0]), max(inner[1], outer[1])
    ix1, iy1 = min(inner[2], outer[2]), min(inner[3], outer[3])
    inter = max(0.0, ix1 - ix0) * max(0.0, iy1 - iy0)
    area = max(0.0, inner[2] - inner[0]) * max(0.0, inner[3] - inner[1])
    return inter / area if area > 0 else 0.0


#: Stages at which a page can fail (:attr:`PageFailure.stage`).
FAILURE_STAGES: tuple[str, ...] = ("parse", "image")


@dataclass(frozen=True)
class PageFailure:
    """A page whose content is missing from the graph because something failed.

    Why a record: the builder refuses to cache a graph with failed pages (the
    failure may be transient: out of memory, an install broken mid-run), and
    corpus reports count failures by stage and error type. Code reads these
    fields; :meth:`warning` is the same fact in words for people.

    ``stage`` is ``"parse"`` (the parser raised on a PDF page) or ``"image"``
    (a page image could not be read); ``error_type`` is the exception's class
    name and ``message`` its text.
    """

    page: int
    stage: str
    error_type: str
    message: str

    @classmethod
    def from_exception(cls, page: int, stage: str, exc: BaseException) -> "PageFailure":
        if stage not in FAILURE_STAGES:
            raise ValueError(f"unknown failure stage {stage!r}; expected one of {FAILURE_STAGES}")
        return cls(page=int(page), stage=stage, error_type=exc.__class__.__name__, message=str(exc))

    @classmethod
    def from_dict(cls, d: dict) -> "PageFailure":
        return cls(page=int(d["page"]), stage=str(d["stage"]), error_type=str(d["error_type"]),
                   message=str(d["message"]))

    def to_dict(self) -> dict:
        return {"page": self.page, "stage": self.stage, "error_type": self.error_type, "message": self.message}

    def warning(self) -> str:
        """The page warning people read (the graph's ``meta["warnings"]`` prefixes it with ``p<page>: ``)."""
        what = "parse failed" if self.stage == "parse" else "image unreadable"
        return f"{what}: {self.error_type}: {self.message}"
