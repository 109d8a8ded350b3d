"""Material for two-hop *bridge* questions: where a question's answer is, and how to get there.

A bridge question names a programme ("the Lumen Retrofit Scheme") and asks for
one of its attributes (money per stage, people taking part, the firm that
delivers it...). The programme is named on the first hop's page; the attribute
is stated on a second page that never names it and shares no content word
with the question, so retrieval by the question alone does not find it. What
leads from the first page to the second is one relation the evidence graph
builds from the parsed PDF:

* ``reference``: the first hop's text cites the target by its label: "Table 7",
  "(Exhibit 2)", "Figure 3", "Section 4.5", "Appendix B", "Note 3", or "page 12"
  with the *printed* page label (which differs from the PDF page index: see
  :class:`PageLabels`);
* ``section``: the first hop is the introduction of the programme's section,
  and the answer is in a sub-section nested under it (it speaks of "the"
  programme without its name, as real reports do);
* ``semantic``: the first hop names an unusual entity (a delivery firm, a
  programme lead) that is named again, with the answer, on the second page.

Why targets come first (backward references): a "Table 7" mention needs the
table's number when the mention is written, and numbers must run in reading
order; so funding tables, charts, spotlight paragraphs, review sub-sections and
partner profiles are drawn as *unbound* targets, and a later programme binds
one of them with its anchor sentence ("... is broken down by phase in Table 7
above"). Targets never bound stay in the document as near-duplicate
distractors. End matter (appendices and notes on the last page) is planned up
front, so anchors can cite it forward; its page is promised by index.

Everything here draws from its own random stream and numbers its blocks from
``BRIDGE_ID_BASE``, so the classic content of a document is unchanged by it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np

from mage_gym.data.synth.blocks import Block, ChartBlock, ChartSpec, Heading, PageBreak, Paragraph, TableBlock
from mage_gym.data.synth.config import BRIDGE_TYPES, SynthConfig
from mage_gym.data.synth.world import World, answer_number, format_number, make_names

if TYPE_CHECKING:  # pragma: no cover
    from mage_gym.data.synth.planner import Planner, SectionInfo

#: Placeholder for a printed page label in paragraph text, resolved by the page writer when it draws
#: the paragraph: ``\x00pg:i12\x00`` = label of page index 12; ``\x00pg:b100007\x00`` = label of the
#: page where block 100007 was drawn (it must already be drawn).
PAGE_MARK = "\x00pg:{}\x00"

# --- vocabulary ----------------------------------------------------------------------------------
# Programme names of standalone anchors: words outside the classic initiative vocabulary, so a
# standalone programme never shares a name with a classic one.
PROG_ADJ: tuple[str, ...] = (
    "Basalt", "Corona", "Driftwood", "Elmstead", "Fjord", "Garnet", "Heron", "Indigo", "Jasper", "Kingfisher",
    "Larch", "Moorland", "Nimbus", "Onyx", "Peregrine", "Quartz", "Rowan", "Sable", "Topaz", "Umber", "Vireo",
    "Willow", "Zenith", "Osprey",
)
PROG_NOUN: tuple[str, ...] = (
    "Uplift", "Compass", "Lifeline", "Greenway", "Bridgeworks", "Homestead", "Threshold", "Crossing", "Lantern",
    "Anchorage", "Waymark", "Springboard",
)
PROG_KIND: tuple[str, ...] = ("Compact", "Venture", "Mission", "Drive", "Accord")
FIRM_HEADS: tuple[str, ...] = ("Vost", "Quar", "Brax", "Dell", "Morv", "Tsel", "Ivr", "Oxl", "Kess", "Prim", "Zell",
                               "Gorr", "Ulv", "Jast")
FIRM_TAILS: tuple[str, ...] = ("rel", "nby", "ton", "vik", "ora", "eth", "ard", "ine", "usk", "amb")
FIRM_SUFFIX: tuple[str, ...] = ("Partners", "Engineering", "Consulting", "Contracting", "Associates")
PERSON_TITLES: tuple[str, ...] = ("Dr", "Prof.")
PERSON_FIRST: tuple[str, ...] = ("Ilse", "Tomas", "Anouk", "Rafe", "Saskia", "Oren", "Mireille", "Casimir", "Linnea",
                                 "Evander", "Petra", "Joakim", "Soraya", "Dorian")
#: How a report describes its partners and leads, the same way wherever it names them (which is also
#: what makes the two mentions of one name semantically close).
FIRM_ROLES: tuple[str, ...] = ("our delivery partner", "our principal contractor", "our engineering partner")
PERSON_ROLES: tuple[str, ...] = ("our head of delivery", "our delivery director", "our chief engineer")
PERSON_FIELDS: tuple[str, ...] = ("civil engineering", "public administration", "logistics", "corporate finance",
                                  "community development", "software delivery")
REVIEW_TITLES: tuple[str, ...] = ("Delivery Review", "Implementation Summary", "Supplementary Data",
                                  "Delivery Statistics", "Implementation Data")
SUB_TITLES: tuple[str, ...] = ("Progress to Date", "Delivery Update", "Implementation Review", "Milestones Reached")
APPENDIX_TITLES: tuple[str, ...] = ("Delivery Data", "Implementation Summary", "Supplementary Metrics",
                                   "Enrolment and Coverage", "Capital Commitments")
ORDINALS: tuple[str, ...] = ("first", "second", "third", "fourth")
BLANK_NOTICE = "This page is intentionally left blank."


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


# --- printed page labels -----------------------------------------------------------------------------

_ROMAN = ((10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i"))


def roman(n: int) -> str:
    """Lower-case roman numeral of ``1 <= n < 40`` (front matter is short)."""
    out = ""
    for v, s in _ROMAN:
        while n >= v:
            out += s
            n -= v
    return out


@dataclass(frozen=True)
class PageLabels:
    """The page numbers a reader sees, which differ from PDF page indices.

    ``arabic``: page index i prints ``i + 1`` (footer "Page 3 of 20").
    ``roman_front``: the first ``n_front`` pages (cover, a blank page) print
    i, ii...; body pages restart at 1, so index 5 prints "4" when
    ``n_front == 2``. The PDF carries the same labels (``/PageLabels``).
    ``footer`` picks the footer text: ``page_of`` ("Page 4 of 18", counting
    body pages), ``number`` ("4") or ``page`` ("Page 4").
    """

    style: str = "arabic"
    n_front: int = 0
    footer: str = "page_of"

    def label(self, index: int) -> str:
        if self.style == "roman_front":
            return roman(index + 1) if index < self.n_front else str(index - self.n_front + 1)
        return str(index + 1)

    def footer_text(self, index: int, n_pages: int) -> str:
        lab = self.label(index)
        if self.style == "roman_front" and index < self.n_front:
            return lab
        total = n_pages - (self.n_front if self.style == "roman_front" else 0)
        if self.footer == "number":
            return lab
        if self.footer == "page":
            return f"Page {lab}"
        return f"Page {lab} of {total}"

    def pdf_rules(self) -> list[dict]:
        """``pymupdf.Document.set_page_labels`` rules ([] = the PDF default 1, 2, 3...)."""
        if self.style != "roman_front":
            return []
        return [{"startpage": 0, "prefix": "", "style": "r", "firstpagenum": 1},
                {"startpage": self.n_front, "prefix": "", "style": "D", "firstpagenum": 1}]

    def to_dict(self) -> dict:
        return {"style": self.style, "n_front": self.n_front, "footer": self.footer}


# --- attributes: what a target states and how a question asks for it ---------------------------------------


@dataclass(frozen=True)
class Attribute:
    """One askable fact of a bridge target.

    ``questions`` are templates with ``{prog}`` (the programme phrase, e.g.
    "the Lumen Retrofit Scheme"); their words are chosen to differ from the
    statement's (e.g. "people took part" vs "participants had enrolled"), and
    the question maker still checks every word against the page as drawn.
    """

    key: str
    answer: str
    answer_format: str
    questions: tuple[str, ...]
    detail: tuple[tuple[str, str], ...] = ()


STATEMENT_KEYS: tuple[str, ...] = ("participants", "locations", "completion", "spend")

_Q: dict[str, tuple[str, ...]] = {
    "participants": ("How many people took part in {prog}?", "What number of people joined {prog}?"),
    "locations": ("At how many places has {prog} been active?", "Across how many places does {prog} operate?"),
    "completion": ("When is {prog} due to wrap up?", "By when should {prog} be finished?"),
    "spend": ("How much money, in millions, has been spent on {prog} so far?",
              "In millions, how much has {prog} cost so far?"),
    "capital_phase": ("How much money, in millions, was earmarked for the {ord} stage of {prog}?",
                      "In millions, what sum went to the {ord} stage of {prog}?"),
    "workforce": ("How many people work for the firm that delivers {prog}?",
                  "How large is the staff of the firm delivering {prog}?"),
    "founded": ("When was the firm that delivers {prog} set up?",
                "When did the firm delivering {prog} start trading?"),
    "town": ("In which town is the firm that delivers {prog} based?", "Where is the firm delivering {prog} based?"),
    "joined": ("When did the leader of {prog} first arrive?", "When did the person heading {prog} come aboard?"),
}


# --- targets and stories ----------------------------------------------------------------------------------


@dataclass(eq=False)
class Target:
    """Where a bridge answer is stated, before or after a programme claims it.

    ``kind``: funding_table | funding_exhibit | funding_chart | spotlight |
    review_section | firm_profile | person_profile | appendix | note |
    subsection. ``block`` holds the answer (table, chart or paragraph);
    ``label_block`` carries the label a mention cites (heading of a section or
    appendix; the table/chart itself; the note paragraph). ``mention`` is the
    label as cited ("Table 7", "Section 2.5", "Appendix B", "Note 3").
    """

    kind: str
    block: int
    label_block: int
    mention: str | None
    attributes: list[Attribute]
    created_at: int  # subsection counter when drawn (backward targets) or -1 (end matter)
    entity: str | None = None  # firm or person named in a profile
    bound: bool = False
    promised_page: int | None = None  # end matter: the page index it will be drawn on
    role: str | None = None  # how the report describes the entity ("our delivery partner")


@dataclass(eq=False)
class BridgeStory:
    """One programme linked to one target: the material of (at most) one bridge question."""

    type: str  # reference | section | semantic
    pattern: str  # reference: table|exhibit|figure|section|appendix|note|page; section: subsection; semantic: firm|person
    programme: str  # with its article: "the Lumen Retrofit Scheme"
    hop1_blocks: list[int]
    target: Target | None = None
    anchor_block: int | None = None
    mention: str | None = None  # as written ("Table 7", "page \x00pg:..\x00" resolved after layout)
    intro_block: int | None = None  # the classic intro paragraph naming an attached initiative


# --- the planner -------------------------------------------------------------------------------------------


class BridgePlanner:
    """Adds bridge material to a :class:`~mage_gym.data.synth.planner.Planner`'s block stream."""

    def __init__(self, world: World, cfg: SynthConfig, rng: np.random.Generator, target_pages: int) -> None:
        self.w = world
        self.cfg = cfg
        self.rng = rng
        self.enabled = cfg.bridge_questions_per_doc > 0
        big = self.enabled and target_pages >= 8
        self.end_pages = 1 if big else 0
        self.body_pages = target_pages - self.end_pages
        if big and rng.random() < 0.5:
            self.labels = PageLabels("roman_front", 2, ("page_of", "number", "page")[int(rng.integers(3))])
        else:
            self.labels = PageLabels()
        demand = 2.5 * cfg.bridge_questions_per_doc + 2
        self.p_story = float(np.clip(demand / max(1, self.body_pages), 0.2, 0.9)) if self.enabled else 0.0
        self.p_pool = float(np.clip(0.45 * self.p_story, 0.08, 0.5)) if self.enabled else 0.0
        # The body fills exactly ``body_pages`` pages (the driver stops at the first group that does not
        # fit once there), so the end matter starts on page index ``body_pages``: cited forward by index.
        self.end_page_index: int | None = self.body_pages if self.end_pages else None
        self.p: Planner | None = None
        self.stories: list[BridgeStory] = []
        self.pool: list[Target] = []
        self.end_slots: list[Target] = []
        self._pending_section: dict[int, BridgeStory] = {}  # id(SectionInfo) -> section story
        self._sub = 0  # subsections seen
        self._names: set[str] = set()
        self._used: dict[str, set[str]] = {}
        self._n_exhibits = 0
        self._money_unit = next((m.unit for m in world.domain.metrics if m.unit.startswith("million")), "million USD")

    def attach(self, planner: "Planner") -> None:
        """Called once the classic planner exists: plan the end matter (its labels are cited forward)."""
        self.p = planner
        planner.record.bridges = self.stories
        if self.end_pages:
            self._plan_end_matter()

    # --- helpers ------------------------------------------------------------------------------------

    def _pick(self, seq):  # noqa: ANN001
        return seq[int(self.rng.integers(len(seq)))]

    def _unique(self, key: str, draw: Callable[[], str]) -> str:
        """A value not used before for ``key`` in this document (so no two targets give the same answer)."""
        used = self._used.setdefault(key, set())
        v = draw()
        for _ in range(20):
            if v not in used:
                break
            v = draw()
        used.add(v)
        return v

    def _block(self, cls, **kw) -> Block:  # noqa: ANN001
        assert self.p is not None
        return self.p.new_bridge_block(cls, **kw)

    def _new_name(self) -> str:
        for _ in range(50):
            name = f"{self._pick(PROG_ADJ)} {self._pick(PROG_NOUN)} {self._pick(PROG_KIND)}"
            if name not in self._names:
                self._names.add(name)
                return name
        name = f"{self._pick(PROG_ADJ)} {self._pick(PROG_NOUN)} {self._pick(PROG_KIND)} {len(self._names) + 2}"
        self._names.add(name)
        return name

    def _firm(self) -> str:
        def one() -> str:
            return self._pick(FIRM_HEADS) + self._pick(FIRM_TAILS)
        return self._unique("firm", lambda: f"{one()} {one()} {self._pick(FIRM_SUFFIX)}")

    def _person(self) -> str:
        last = lambda: self._pick(FIRM_HEADS) + self._pick(FIRM_TAILS) + self._pick(("by", "wick", "ley", "mont"))  # noqa: E731
        return self._unique("person", lambda: f"{self._pick(PERSON_TITLES)} {self._pick(PERSON_FIRST)} {last()}")

    # --- attribute statements ---------------------------------------------------------------------------

    def _statement(self, keys: tuple[str, ...] | None = None) -> tuple[str, list[Attribute]]:
        """2-3 sentences stating programme attributes without naming the programme."""
        w, rng = self.w, self.rng
        if keys is None:
            k = int(rng.integers(2, 4))
            keys = tuple(STATEMENT_KEYS[i] for i in sorted(rng.choice(len(STATEMENT_KEYS), k, replace=False)))
        sents: list[str] = []
        attrs: list[Attribute] = []
        for key in keys:
            if key == "participants":
                n = int(self._unique(key, lambda: str(int(np.exp(rng.uniform(np.log(150), np.log(25000)))))))
                y = int(rng.integers(w.years[0], w.report_year + 1))
                sents.append(self._pick((f"By the close of {y}, {format_number(n, 0)} participants had enrolled.",
                                         f"Some {format_number(n, 0)} participants had enrolled by the close of {y}.")))
                attrs.append(Attribute(key, str(n), "Int", _Q[key]))
            elif key == "locations":
                n = int(self._unique(key, lambda: str(int(rng.integers(3, 80)))))
                sents.append(self._pick((f"Works covered {n} locations.", f"Activity extended to {n} locations.")))
                attrs.append(Attribute(key, str(n), "Int", _Q[key]))
            elif key == "completion":
                y = int(self._unique(key, lambda: str(int(rng.integers(w.report_year + 1, w.report_year + 9)))))
                sents.append(self._pick((f"Completion is scheduled for {y}.", f"Final completion is scheduled for {y}.")))
                attrs.append(Attribute(key, str(y), "Int", _Q[key]))
            elif key == "spend":
                v = float(self._unique(key, lambda: f"{rng.uniform(0.5, 60.0):.1f}"))
                sents.append(self._pick((f"Expenditure to date amounts to {v:.1f} {self._money_unit}.",
                                         f"Expenditure to date stands at {v:.1f} {self._money_unit}.")))
                attrs.append(Attribute(key, answer_number(v, 1), "Float", _Q[key]))
        order = rng.permutation(len(sents))
        return " ".join(sents[i] for i in order), attrs

    def _phases(self) -> tuple[list[tuple[str, str, float]], list[Attribute]]:
        """(phase label, start year, capital) rows of a funding profile, and their attributes."""
        w, rng = self.w, self.rng
        n = int(rng.integers(3, 5))
        start = int(rng.integers(w.years[0], w.report_year))
        rows, attrs = [], []
        for i in range(n):
            v = float(self._unique("capital", lambda: f"{rng.uniform(0.4, 30.0):.1f}"))
            rows.append((f"Phase {i + 1}", str(start + i), v))
            qs = tuple(q.replace("{ord}", ORDINALS[i]) for q in _Q["capital_phase"])
            attrs.append(Attribute("capital_phase", answer_number(v, 1), "Float", qs, (("phase", str(i + 1)),)))
        return rows, attrs

    # --- targets drawn in the body (cited backward) -------------------------------------------------------

    def _pool_target(self) -> list[Block]:
        kinds = ("funding_table", "funding_exhibit", "funding_chart", "spotlight", "firm_profile", "person_profile")
        weights = np.array([1.0, 0.6, 1.0, 1.2, 1.4, 0.8])
        kind = kinds[int(self.rng.choice(len(kinds), p=weights / weights.sum()))]
        assert self.p is not None
        unit = self._money_unit
        if kind in ("funding_table", "funding_exhibit"):
            rows, attrs = self._phases()
            if kind == "funding_table":
                n = self.p.next_table_number()
                label = f"Table {n}"
            else:
                self._n_exhibits += 1
                n = self._n_exhibits
                label = f"Exhibit {n}"
            t = self._block(TableBlock, number=n, caption=f"{label}: Committed capital by phase ({unit})",
                            header=("Phase", "Start", f"Capital ({unit})"),
                            rows=tuple((a, b, format_number(v, 1)) for a, b, v in rows), facts=())
            self.pool.append(Target(kind, t.block_id, t.block_id, label, attrs, self._sub))
            return [t]
        if kind == "funding_chart":
            rows, attrs = self._phases()
            n = self.p.next_figure_number()
            spec = ChartSpec("bar", tuple(r[0] for r in rows), tuple(r[2] for r in rows),
                             tuple(format_number(r[2], 1) for r in rows), unit, int(self.rng.integers(1 << 16)))
            c = self._block(ChartBlock, number=n, caption=f"Figure {n}: Committed capital by phase ({unit})",
                            spec=spec, facts=())
            self.pool.append(Target(kind, c.block_id, c.block_id, f"Figure {n}", attrs, self._sub))
            return [c]
        if kind == "spotlight":
            text, attrs = self._statement()
            b = self._block(Paragraph, text=f"Delivery spotlight. {text}", role="bridge_target")
            self.pool.append(Target(kind, b.block_id, b.block_id, None, attrs, self._sub))
            return [b]
        if kind == "firm_profile":
            firm = self._firm()
            town = self._unique("town", lambda: make_names(self.rng, 1, exclude=set(self.w.entities))[0])
            y = int(self._unique("founded", lambda: str(int(self.rng.integers(1950, self.w.years[0])))))
            n = int(self._unique("workforce", lambda: str(int(np.exp(self.rng.uniform(np.log(40), np.log(9000)))))))
            role = self._pick(FIRM_ROLES)
            text = self._pick((f"{firm}, {role}, is headquartered in {town}; it was founded in {y} and has a "
                               f"workforce of {format_number(n, 0)}.",
                               f"{firm}, {role}, was founded in {y}. Headquartered in {town}, it has a workforce "
                               f"of {format_number(n, 0)}."))
            attrs = [Attribute("workforce", str(n), "Int", _Q["workforce"]),
                     Attribute("founded", str(y), "Int", _Q["founded"]),
                     Attribute("town", town, "Str", _Q["town"])]
            b = self._block(Paragraph, text=text, role="bridge_target")
            self.pool.append(Target(kind, b.block_id, b.block_id, None, attrs, self._sub, entity=firm, role=role))
            return [b]
        person = self._person()
        role = self._pick(PERSON_ROLES)
        y = int(self._unique("joined", lambda: str(int(self.rng.integers(self.w.years[0] - 15, self.w.report_year)))))
        text = f"{person}, {role}, joined the organisation in {y} after a career in {self._pick(PERSON_FIELDS)}."
        b = self._block(Paragraph, text=text, role="bridge_target")
        attrs = [Attribute("joined", str(y), "Int", _Q["joined"])]
        self.pool.append(Target("person_profile", b.block_id, b.block_id, None, attrs, self._sub, entity=person,
                                role=role))
        return [b]

    # --- end matter (cited forward) ------------------------------------------------------------------------

    def _plan_end_matter(self) -> None:
        n_app = 2
        n_notes = int(self.rng.integers(3, 5))
        for i in range(n_app):
            letter = "ABC"[i]
            title = APPENDIX_TITLES[int(self.rng.integers(len(APPENDIX_TITLES)))]
            h = self._block(Heading, level=1, number="", title=f"Appendix {letter}: {title}")
            h.section = f"Appendix {letter}"
            text, attrs = self._statement()
            b = self._block(Paragraph, text=text, role="bridge_target")
            b.section = f"Appendix {letter}"
            self.end_slots.append(Target("appendix", b.block_id, h.block_id, f"Appendix {letter}", attrs, -1,
                                         promised_page=self.end_page_index))
        self._notes_heading = self._block(Heading, level=1, number="", title="Notes")
        self._notes_heading.section = "Notes"
        for i in range(n_notes):
            text, attrs = self._statement(tuple(STATEMENT_KEYS[j] for j in sorted(
                self.rng.choice(len(STATEMENT_KEYS), int(self.rng.integers(1, 3)), replace=False))))
            b = self._block(Paragraph, text=f"Note {i + 1}. {text}", role="bridge_target")
            b.section = "Notes"
            self.end_slots.append(Target("note", b.block_id, b.block_id, f"Note {i + 1}", attrs, -1,
                                         promised_page=self.end_page_index))

    def end_matter(self) -> Iterator[list[Block]]:
        """The last page: appendices, then numbered notes (planned in :meth:`attach`)."""
        if not self.end_pages or self.p is None:
            return
        yield [self._block(PageBreak)]
        blocks = self.p.record.blocks
        for t in self.end_slots:
            if t.kind == "appendix":
                yield [blocks[t.label_block], blocks[t.block]]
        notes = [t for t in self.end_slots if t.kind == "note"]
        if notes:
            yield [self._notes_heading, blocks[notes[0].block]]
            for t in notes[1:]:
                yield [blocks[t.block]]

    # --- hooks called by the classic planner ------------------------------------------------------------

    def front_matter(self) -> Iterator[list[Block]]:
        """A blank left-hand page after the cover when the front matter is numbered i, ii."""
        if self.labels.style == "roman_front" and self.labels.n_front == 2:
            yield [self._block(Paragraph, text=BLANK_NOTICE, role="notice")]
            yield [self._block(PageBreak)]

    def before_content(self, theme) -> Iterator[list[Block]]:  # noqa: ANN001 - a vocab Theme
        if self.enabled and self.rng.random() < self.p_pool:
            yield self._pool_target()

    def chapter_end(self, number: str) -> Iterator[list[Block]]:
        """Sometimes a short review sub-section closes the chapter: a target cited as "Section 2.5"."""
        if not self.enabled or self.rng.random() >= 0.5 * self.p_story + 0.1:
            return
        assert self.p is not None
        h = self.p.bridge_heading(2, number, self._pick(REVIEW_TITLES))
        text, attrs = self._statement()
        b = self._block(Paragraph, text=text, role="bridge_target")
        self.pool.append(Target("review_section", b.block_id, h.block_id, f"Section {number}", attrs, self._sub))
        yield [h, b]

    def subsection_end(self, info: "SectionInfo", number: str) -> Iterator[list[Block]]:
        """The nested sub-section of a ``section`` story: it states the programme's figures without its name."""
        story = self._pending_section.pop(id(info), None)
        if story is None:
            return
        assert self.p is not None
        h = self.p.bridge_heading(3, number, self._pick(SUB_TITLES))
        text, attrs = self._statement()
        b = self._block(Paragraph, text=text, role="bridge_target")
        story.target = Target("subsection", b.block_id, h.block_id, None, attrs, self._sub, bound=True)
        yield [h, b]

    def after_subsection_intro(self, info: "SectionInfo") -> Iterator[list[Block]]:
        """Maybe start a story for this sub-section's programme (or a standalone one): its anchor goes here."""
        self._sub += 1
        if not self.enabled or self.rng.random() >= self.p_story:
            return
        attached = info.initiative is not None and info.initiative_block is not None
        if not attached and self.rng.random() < 0.5:
            return
        name = info.initiative if attached else self._new_name()
        prog = f"the {name}"
        options = self._options(attached)
        if not options:
            return
        types = [t for t in BRIDGE_TYPES if t in options]
        wts = np.array([self.cfg.bridge_weights.get(t, 0.0) for t in types], dtype=np.float64)
        if wts.sum() <= 0:
            return
        btype = types[int(self.rng.choice(len(types), p=wts / wts.sum()))]
        if btype == "section":
            story = BridgeStory("section", "subsection", prog, [info.heading_block, info.initiative_block],
                                intro_block=info.initiative_block)
            self.stories.append(story)
            self._pending_section[id(info)] = story
            return
        pattern, target = options[btype][int(self.rng.integers(len(options[btype])))]
        target.bound = True
        story = BridgeStory(btype, pattern, prog, [], target=target,
                            intro_block=info.initiative_block if attached else None)
        anchor = self._anchor(story)
        story.anchor_block = anchor.block_id
        story.hop1_blocks = [anchor.block_id]
        self.stories.append(story)
        yield [anchor]

    def _options(self, attached: bool) -> dict[str, list[tuple[str, Target]]]:
        """Feasible (pattern, target) pairs per bridge type; backward targets from an earlier sub-section."""
        out: dict[str, list[tuple[str, Target]]] = {}
        if attached and self.cfg.bridge_weights.get("section", 0.0) > 0:
            out["section"] = []
        earlier = [t for t in self.pool if not t.bound and t.created_at < self._sub]
        ref: list[tuple[str, Target]] = []
        by_kind = {"funding_table": "table", "funding_exhibit": "exhibit", "funding_chart": "figure",
                   "review_section": "section", "spotlight": "page"}
        for t in earlier:
            if t.kind in by_kind:
                ref.append((by_kind[t.kind], t))
        for t in self.end_slots:
            if not t.bound:
                ref.append((t.kind, t))
                ref.append(("page", t))
        if ref:
            # one option per pattern, so rare patterns are as likely as common ones
            per: dict[str, list[tuple[str, Target]]] = {}
            for pat, t in ref:
                per.setdefault(pat, []).append((pat, t))
            out["reference"] = [opts[0] for opts in per.values()]
        sem = [("firm" if t.kind == "firm_profile" else "person", t) for t in earlier
               if t.kind in ("firm_profile", "person_profile")]
        if sem:
            out["semantic"] = sem[:1]
        return out

    def _anchor(self, story: BridgeStory) -> Paragraph:
        """The first hop: a sentence naming the programme and citing (or naming the entity of) its target."""
        assert self.p is not None and story.target is not None
        t, prog, pat = story.target, story.programme, story.pattern
        Prog = _cap(prog)
        if story.type == "semantic":
            e, role = t.entity or "", t.role or ""
            if pat == "firm":
                text = self._pick((f"{e}, {role}, was appointed to run {prog}.",
                                   f"{e}, {role}, delivers {prog} under a multi-year contract."))
            else:
                text = self._pick((f"{e}, {role}, has led {prog} since its launch.",
                                   f"{e}, {role}, leads {prog} and reports to the executive committee."))
            b = self._block(Paragraph, text=text, role="bridge_anchor")
            return b  # type: ignore[return-value]
        if pat == "page":
            mark = PAGE_MARK.format(f"i{t.promised_page}" if t.promised_page is not None else f"b{t.block}")
            m = f"page {mark}"
            text = self._pick((f"Details of {prog} appear on {m}.", f"Further information on {prog} is provided on {m}.",
                               f"{Prog} is summarised on {m}."))
        else:
            m = t.mention or ""
            text = self._pick({
                "table": (f"Capital committed to {prog} is broken down by phase in {m} above.",
                          f"{Prog} has been funded in phases (see {m}).",
                          f"Phase-by-phase funding of {prog} is set out in {m}."),
                "exhibit": (f"The phased funding of {prog} is shown in {m}.",
                            f"Funding for {prog} was released in stages ({m})."),
                "figure": (f"{Prog} has drawn its capital in phases ({m}).",
                           f"Funding of {prog} by phase is illustrated in {m}.",
                           f"See {m} for the phased funding of {prog}."),
                "section": (f"Progress on {prog} is described in {m}.", f"{Prog} is reviewed in more detail in {m}.",
                            f"For the figures of {prog}, see {m}."),
                "appendix": (f"Delivery data for {prog} are given in {m}.", f"{Prog} is documented further in {m}.",
                             f"Figures for {prog} appear in {m}."),
                "note": (f"Enrolment and spending for {prog} are disclosed in {m}.",
                         f"{Prog} is accounted for as described in {m}.", f"{Prog} ({m}) continued during the year."),
            }[pat])
        b = self._block(Paragraph, text=text, role="bridge_anchor")
        story.mention = m
        self.p.add_reference(b.block_id, m, pat, t.label_block if pat != "page" else t.block,
                             target_page=t.promised_page if pat == "page" else None)
        return b  # type: ignore[return-value]
