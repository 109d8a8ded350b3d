"""What a synthetic report says, section by section, as a stream of block groups.

Why a stream: the page count is only known once blocks are laid out, so the
corpus driver pulls groups (blocks that should share a page, such as a heading
and its first paragraph) until the writer reaches the document's target page
count. The planner keeps the bookkeeping that makes gold exact and questions
hard: every fact key is stated at most once; named initiatives, list topics
and section titles are unique; and each stated fact schedules near-duplicates
(same metric with another year, entity, or a target/per-employee variant) a
few pages later, at the rate ``distractor_density``.

Bridge material (front matter, anchors and targets of two-hop questions, end
matter) comes from :class:`~mage_gym.data.synth.bridge.BridgePlanner`, which
draws from its own random stream and numbers its blocks from
:data:`BRIDGE_ID_BASE`: the classic content (every fact, list and initiative,
and the block ids that schedule near-duplicates) is the same with or without
it; only where it lands on the pages, and the printed numbers of tables and
figures (one sequence for both), differ.

Every cross-reference the text makes ("Table 3", "Section 2.1", "Note 4",
"page 12") is recorded in :attr:`PlanRecord.references` with its target, so
the layout file can list exact mention -> target pairs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from mage_gym.data.synth.blocks import (
    FOOTNOTE_MARK,
    Block,
    ChartBlock,
    ChartSpec,
    FigureBlock,
    FigureSpec,
    Heading,
    ListBlock,
    PageBreak,
    Paragraph,
    TableBlock,
)
from mage_gym.data.synth.config import BLOCK_KINDS, SynthConfig
from mage_gym.data.synth.vocab import (
    FILLER,
    FOOTNOTES,
    INITIATIVE_ADJ,
    INITIATIVE_KIND,
    INITIATIVE_NOUN,
    LIST_TOPICS,
    SUBSECTION_TEMPLATES,
    SUBSUBSECTION_TEMPLATES,
    Theme,
)
from mage_gym.data.synth.world import FactKey, World, format_number

if TYPE_CHECKING:  # pragma: no cover
    from mage_gym.data.synth.bridge import BridgePlanner

#: Block ids of bridge material start here (classic blocks count from 0).
BRIDGE_ID_BASE = 100_000

_DIAGRAM_STEPS = ("Collect", "Validate", "Review", "Approve", "Report", "Archive", "Escalate", "Plan",
                  "Schedule", "Inspect", "Record", "Close")


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


@dataclass(eq=False)  # identity hash: the question maker keeps a set of used ones
class SectionInfo:
    """A numbered section as planned (its heading block and what it introduces)."""

    number: str
    title: str
    level: int
    heading_block: int
    initiative: str | None = None
    initiative_block: int | None = None


@dataclass(eq=False)
class ListInfo:
    list_block: int
    intro_block: int
    topic: str
    entity: str
    year: int
    n_items: int


@dataclass
class Reference:
    """One explicit cross-reference in the text: ``mention`` in block ``source`` points at ``target``.

    ``kind`` is table | exhibit | figure | section | appendix | note | page.
    ``target`` is the block that carries the label (table, chart, heading,
    note paragraph); for ``page`` it is the block whose page is meant, or None
    with ``target_page`` set when the page was promised by index (end matter).
    """

    source: int
    mention: str
    kind: str
    target: int | None
    target_page: int | None = None


@dataclass
class PlanRecord:
    """What the question generator needs to know about the plan."""

    blocks: dict[int, Block] = field(default_factory=dict)
    sections: list[SectionInfo] = field(default_factory=list)
    lists: list[ListInfo] = field(default_factory=list)
    fact_block: dict[FactKey, int] = field(default_factory=dict)  # where each stated fact lives
    references: list[Reference] = field(default_factory=list)
    bridges: list[Any] = field(default_factory=list)  # BridgeStory records (see bridge.py)


class Planner:
    """Streams block groups for one document; see module docstring."""

    def __init__(self, world: World, cfg: SynthConfig, rng: np.random.Generator,
                 bridge: "BridgePlanner | None" = None) -> None:
        self.w = world
        self.cfg = cfg
        self.rng = rng
        self.record = PlanRecord()
        self.bridge = bridge
        self._next_id = 0
        self._next_bridge_id = BRIDGE_ID_BASE
        self._n_tables = 0  # classic tables only: it steers random draws, so bridge tables must not count
        self._table_numbers: list[tuple[int, int]] = []  # (printed number, block id) of classic tables
        self._printed_tables = 0  # printed numbering, shared by classic and bridge tables
        self._printed_figures = 0
        self._titles: set[str] = set()
        self._initiatives: set[str] = set()
        self._list_keys: set[tuple[str, str, int]] = set()
        self._pending: list[tuple[int, FactKey]] = []  # (due block id, key) near-duplicates to state later
        self._pending_lists: list[tuple[int, str]] = []  # (due block id, topic)
        self._section = ""
        self._last_footnote = 0
        self._done_sections: list[SectionInfo] = []
        self._block_kinds = [k for k in BLOCK_KINDS if cfg.block_weights.get(k, 0.0) > 0]
        bw = np.array([cfg.block_weights[k] for k in self._block_kinds], dtype=np.float64)
        self._block_p = bw / bw.sum()

    # --- helpers --------------------------------------------------------------

    def _pick(self, seq):  # noqa: ANN001 - any sequence
        return seq[int(self.rng.integers(len(seq)))]

    def _new(self, cls, **kw) -> Block:  # noqa: ANN001
        b = cls(block_id=self._next_id, section=self._section, **kw)
        self._next_id += 1
        self.record.blocks[b.block_id] = b
        return b

    def new_bridge_block(self, cls, **kw) -> Block:  # noqa: ANN001
        """A block of bridge material: own id range, so classic block ids (and their schedules) stay put."""
        b = cls(block_id=self._next_bridge_id, section=self._section, **kw)
        self._next_bridge_id += 1
        self.record.blocks[b.block_id] = b
        return b

    def next_table_number(self) -> int:
        self._printed_tables += 1
        return self._printed_tables

    def next_figure_number(self) -> int:
        self._printed_figures += 1
        return self._printed_figures

    def add_reference(self, source: int, mention: str, kind: str, target: int | None,
                      target_page: int | None = None) -> None:
        self.record.references.append(Reference(source, mention, kind, target, target_page))

    def _mark_used(self, keys: tuple[FactKey, ...], block_id: int) -> None:
        for k in keys:
            self.record.fact_block[k] = block_id

    def _free(self, key: FactKey) -> bool:
        return self.w.has(key) and key not in self.record.fact_block

    def _filler(self, theme: Theme, n: int) -> list[str]:
        metric = self.w.metrics[self._pick(theme.metrics)].name
        out = []
        for _ in range(n):
            t = self._pick(FILLER)
            out.append(t.format(org=self.w.org, topic=theme.topic.lower(), ent=self.w.ent(self._pick(self.w.entities)),
                                plural=self.w.domain.entity_plural, metric=metric, kind=self.w.domain.entity_kind))
        return out

    # --- fact sentences ----------------------------------------------------------

    def fact_sentence(self, key: FactKey) -> str:
        qual, e, mk, y = key
        m = self.w.metrics[mk]
        val = self.w.shown(key)
        at = self.w.at(e)
        if qual == "target":
            if self.rng.random() < 0.5:
                return f"For {y}, {self.w.ent(e)} had set a target for {m.name} of {val}."
            return f"The {y} target for {m.name} {at} was {val}."
        if qual == "intensity":
            return f"{_cap(m.name)} per employee {at} came to {val} in {y}."
        r = int(self.rng.integers(4 if not m.name.startswith("number of") else 3))
        if r == 0:
            return f"In {y}, {m.name} {at} was {val}."
        if r == 1:
            verb = self._pick(("stood at", "reached", "amounted to", "came to", "totalled"))
            return f"{_cap(m.name)} {at} {verb} {val} in {y}."
        if r == 2:
            return f"During {y}, {m.name} {at} {self._pick(('was', 'stood at', 'reached'))} {val}."
        return f"{_cap(self.w.ent(e))} reported {m.name} of {val} for {y}."

    def _schedule_near_duplicates(self, key: FactKey, now: int) -> None:
        """Queue true statements that look like ``key`` for later pages."""
        n = int(self.rng.poisson(self.cfg.distractor_density))
        _, e, mk, y = key
        variants: list[FactKey] = []
        for yy in self.w.years:
            if yy != y:
                variants.append(("actual", e, mk, yy))
        for ee in self.w.entities:
            if ee != e:
                variants.append(("actual", ee, mk, y))
        variants += [("target", e, mk, y), ("intensity", e, mk, y)]
        variants = [v for v in variants if self._free(v)]
        for _ in range(min(n, len(variants))):
            v = variants.pop(int(self.rng.integers(len(variants))))
            self._pending.append((now + int(self.rng.integers(8, 40)), v))

    def _choose_facts(self, theme: Theme, n: int) -> list[FactKey]:
        now = self._next_id
        out: list[FactKey] = []
        due = [i for i, (d, k) in enumerate(self._pending) if d <= now and self._free(k)][:n]
        taken = set(due)
        out += list(dict.fromkeys(self._pending[i][1] for i in due))
        self._pending = [(d, k) for j, (d, k) in enumerate(self._pending) if j not in taken and self._free(k)]
        tries = 0
        while len(out) < n and tries < 40:
            tries += 1
            r = self.rng.random()
            qual = "actual" if r < 0.8 else ("target" if r < 0.9 else "intensity")
            key = (qual, self._pick(self.w.entities), self._pick(theme.metrics), self._pick(self.w.years))
            if self._free(key) and key not in out:
                out.append(key)
        for k in out:
            if k[0] == "actual":
                self._schedule_near_duplicates(k, now)
        return out

    # --- blocks -------------------------------------------------------------------

    def _fact_paragraph(self, theme: Theme, role: str = "body", lead: str | None = None,
                        n_facts: int | None = None) -> Paragraph:
        n = int(self.rng.integers(1, 4)) if n_facts is None else n_facts
        facts = self._choose_facts(theme, n)
        sentences = self._filler(theme, int(self.rng.integers(1, 4)))
        fact_sents = [self.fact_sentence(k) for k in facts]
        footnote = None
        if fact_sents and self.rng.random() < self.cfg.footnote_rate:
            j = int(self.rng.integers(len(fact_sents)))
            fact_sents[j] = fact_sents[j] + FOOTNOTE_MARK
            step = 1 + int(self.rng.integers(len(FOOTNOTES) - 1))  # never the same note twice in a row
            self._last_footnote = (self._last_footnote + step) % len(FOOTNOTES)
            footnote = FOOTNOTES[self._last_footnote].format(kind=self.w.domain.entity_kind)
        for s in fact_sents:
            sentences.insert(int(self.rng.integers(len(sentences) + 1)), s)
        refs: list[tuple[str, str, int]] = []  # (mention, kind, target block)
        if self._done_sections and self.rng.random() < 0.25:
            ref = self._pick(self._done_sections)
            sentences.append(f"As discussed in Section {ref.number}, {theme.topic.lower()} remains a priority "
                             f"for {self.w.org}.")
            refs.append((f"Section {ref.number}", "section", ref.heading_block))
        elif self._n_tables and self.rng.random() < 0.15:
            t = int(self.rng.integers(1, self._n_tables + 1))
            number, block = self._table_numbers[t - 1]
            sentences.append(f"Comparable figures for earlier periods are given in Table {number}.")
            refs.append((f"Table {number}", "table", block))
        if lead:
            sentences.insert(0, lead)
        p = self._new(Paragraph, text=" ".join(sentences), facts=tuple(facts), footnote=footnote, role=role)
        self._mark_used(tuple(facts), p.block_id)
        for mention, kind, target in refs:
            self.add_reference(p.block_id, mention, kind, target)
        return p  # type: ignore[return-value]

    def _table(self, theme: Theme) -> list[Block] | None:
        w = self.w
        kind = w.domain.entity_kind
        for _ in range(12):
            if self.rng.random() < 0.7:  # entities x years, one metric
                mk = self._pick(theme.metrics)
                m = w.metrics[mk]
                n_years = int(self.rng.integers(3, 6))
                y_end = int(self.rng.integers(w.years[0] + n_years - 1, w.years[-1] + 1))
                years = list(range(y_end - n_years + 1, y_end + 1))
                ents = self._free_entities(int(self.rng.integers(3, 8)),
                                           lambda e: [("actual", e, mk, y) for y in years])
                if ents is None:
                    continue
                unit = f" ({m.unit})" if m.unit else ""
                header = (_cap(kind),) + tuple(str(y) for y in years)
                rows, facts = [], []
                for e in ents:
                    keys = [("actual", e, mk, y) for y in years]
                    rows.append((e,) + tuple(format_number(w.value(k), w.decimals_of(k)) for k in keys))
                    facts += keys
                desc = f"{m.name} by {kind}, {years[0]}\u2013{years[-1]}{unit}"
                caption = _cap(desc)
            else:  # entities x metrics, one year
                y = self._pick(w.years)
                mks = list(dict.fromkeys(theme.metrics))
                if len(mks) < 2:
                    continue
                ents = self._free_entities(int(self.rng.integers(3, 8)),
                                           lambda e: [("actual", e, mk, y) for mk in mks])
                if ents is None:
                    continue
                header = (_cap(kind),) + tuple(
                    _cap(w.metrics[mk].name) + (f" ({w.metrics[mk].unit})" if w.metrics[mk].unit else "") for mk in mks)
                rows, facts = [], []
                for e in ents:
                    keys = [("actual", e, mk, y) for mk in mks]
                    rows.append((e,) + tuple(format_number(w.value(k), w.decimals_of(k)) for k in keys))
                    facts += keys
                caption = f"{theme.title} indicators by {kind}, {y}"
                desc = f"key {theme.topic.lower()} indicators by {kind} for {y}"
            self._n_tables += 1
            n = self.next_table_number()
            self._table_numbers.append((n, -1))  # the lead paragraph may cite this very table: block id below
            # A paragraph opening with "Table 3 ..." reads as a caption to rule-based parsers: lead in with words.
            lead = self._pick((f"The figures in Table {n} summarise {desc}.",
                               f"As set out in Table {n}, {desc} varied across "
                               f"{w.domain.entity_plural}.",
                               f"An overview of {desc} is given in Table {n}."))
            ref = self._fact_paragraph(theme, role="table_ref", lead=lead, n_facts=int(self.rng.integers(0, 2)))
            t = self._new(TableBlock, number=n, caption=f"Table {n}: {caption}", header=header,
                          rows=tuple(rows), facts=tuple(facts))
            self._mark_used(tuple(facts), t.block_id)
            self._table_numbers[-1] = (n, t.block_id)
            for r in self.record.references:
                if r.target == -1:
                    r.target = t.block_id
            self.add_reference(ref.block_id, f"Table {n}", "table", t.block_id)
            return [ref, t]
        return None

    def _free_entities(self, n: int, keys_of) -> list[str] | None:  # noqa: ANN001
        ents = [e for e in self.w.entities if all(self._free(k) for k in keys_of(e))]
        if len(ents) < 3:
            return None
        idx = sorted(self.rng.choice(len(ents), size=min(n, len(ents)), replace=False).tolist())
        return [ents[i] for i in idx]

    def _chart(self, theme: Theme) -> list[Block] | None:
        w = self.w
        kind, plural = w.domain.entity_kind, w.domain.entity_plural
        for _ in range(12):
            r = self.rng.random()
            mk = self._pick(theme.metrics)
            m = w.metrics[mk]
            unit = m.unit
            if r < 0.5:  # bar: entities for one year
                y = self._pick(w.years)
                ents = self._free_entities(int(self.rng.integers(4, 8)), lambda e: [("actual", e, mk, y)])
                if ents is None:
                    continue
                keys = tuple(("actual", e, mk, y) for e in ents)
                spec = ChartSpec("bar", tuple(ents), tuple(w.value(k) for k in keys),
                                 tuple(format_number(w.value(k), m.decimals) for k in keys),
                                 unit or m.name, int(self.rng.integers(1 << 16)))
                caption = f"{_cap(m.name)} by {kind}, {y}" + (f" ({unit})" if unit else "")
                desc = f"{m.name} by {kind} for {y}"
            elif r < 0.8 or not m.additive:  # line: one entity over years
                cands = [e for e in w.entities if sum(self._free(("actual", e, mk, y)) for y in w.years) >= 4]
                if not cands:
                    continue
                e = self._pick(cands)
                years = [y for y in w.years if self._free(("actual", e, mk, y))]
                keys = tuple(("actual", e, mk, y) for y in years)
                spec = ChartSpec("line", tuple(str(y) for y in years), tuple(w.value(k) for k in keys),
                                 tuple(format_number(w.value(k), m.decimals) for k in keys),
                                 unit or m.name, int(self.rng.integers(1 << 16)))
                caption = f"{_cap(m.name)} {w.at(e)}, {years[0]}\u2013{years[-1]}" + (f" ({unit})" if unit else "")
                desc = f"{m.name} {w.at(e)} between {years[0]} and {years[-1]}"
            else:  # pie: shares of the largest entities
                y = self._pick(w.years)
                ranked = sorted(w.entities, key=lambda e: -w.value(("actual", e, mk, y)))
                top = ranked[: int(self.rng.integers(3, 6))]
                keys = tuple(("share", e, mk, y) for e in top)
                if not all(self._free(k) for k in keys):
                    continue
                shares = [w.value(k) for k in keys]
                other = round(100.0 - sum(shares), 1)
                if other <= 0.5:
                    continue
                spec = ChartSpec("pie", tuple(top) + (f"Other {plural}",), tuple(shares) + (other,),
                                 tuple(f"{v:.1f}%" for v in shares) + (f"{other:.1f}%",), "",
                                 int(self.rng.integers(1 << 16)))
                caption = f"Share of {m.name} by {kind}, {y}"
                desc = f"the share of each {kind} in total {m.name} for {y}"
            n = self.next_figure_number()
            group: list[Block] = []
            if self.rng.random() < 0.5:  # a lead-in that cites the figure (never opening with "Figure N")
                lead = f"{_cap(desc)} is shown in Figure {n}."
                group.append(self._fact_paragraph(theme, role="figure_ref", lead=lead,
                                                  n_facts=int(self.rng.integers(0, 2))))
            c = self._new(ChartBlock, number=n, caption=f"Figure {n}: {caption}", spec=spec, facts=keys)
            self._mark_used(keys, c.block_id)
            if group:
                self.add_reference(group[0].block_id, f"Figure {n}", "figure", c.block_id)
            return group + [c]
        return None

    def _figure(self) -> list[Block]:
        n = self.next_figure_number()
        if self.rng.random() < 0.5:
            fac = self._pick(self.w.domain.facilities)
            caption = f"Figure {n}: The {fac} {self.w.at(self._pick(self.w.entities))}"
            spec = FigureSpec("photo", int(self.rng.integers(1 << 30)))
        else:
            proc = self._pick(self.w.domain.processes)
            k = int(self.rng.integers(3, 6))
            steps = tuple(_DIAGRAM_STEPS[i] for i in sorted(self.rng.choice(len(_DIAGRAM_STEPS), k, replace=False)))
            caption = f"Figure {n}: Overview of the {proc} process"
            spec = FigureSpec("diagram", int(self.rng.integers(1 << 30)), steps)
        return [self._new(FigureBlock, number=n, caption=caption, spec=spec)]

    def _list(self, theme: Theme) -> list[Block] | None:
        now = self._next_id
        topics = list(LIST_TOPICS)
        due = [t for d, t in self._pending_lists if d <= now]
        for _ in range(10):
            topic = due.pop(0) if due else self._pick(topics)
            e, y = self._pick(self.w.entities), self._pick(self.w.years)
            if (topic, e, y) in self._list_keys:
                continue
            self._list_keys.add((topic, e, y))
            self._pending_lists = [(d, t) for d, t in self._pending_lists if t != topic or d > now]
            if self.rng.random() < min(1.0, self.cfg.distractor_density):
                self._pending_lists.append((now + int(self.rng.integers(8, 40)), topic))
            pool = LIST_TOPICS[topic]
            k = int(self.rng.integers(3, 9))
            items = tuple(_cap(pool[i]) for i in sorted(self.rng.choice(len(pool), size=k, replace=False)))
            if self.rng.random() < 0.5:
                lead = f"The {topic} identified {self.w.at(e)} in {y} were:"
            else:
                lead = f"For {y}, {self.w.ent(e)} recorded the following {topic}:"
            intro = self._new(Paragraph, text=" ".join(self._filler(theme, 1) + [lead]), role="list_intro")
            lst = self._new(ListBlock, items=items, numbered=bool(self.rng.random() < 0.4), topic=topic, entity=e,
                            year=y)
            self.record.lists.append(ListInfo(lst.block_id, intro.block_id, topic, e, y, k))
            return [intro, lst]
        return None

    def _content_group(self, theme: Theme) -> list[Block]:
        kind = self._block_kinds[int(self.rng.choice(len(self._block_kinds), p=self._block_p))]
        group: list[Block] | None = None
        if kind == "table":
            group = self._table(theme)
        elif kind == "chart":
            group = self._chart(theme)
        elif kind == "figure":
            group = self._figure()
        elif kind == "list":
            group = self._list(theme)
        return group or [self._fact_paragraph(theme)]

    # --- structure ------------------------------------------------------------------

    def _unique_title(self, templates: tuple[str, ...], theme: Theme) -> str:
        w = self.w
        for i in range(30):
            t = self._pick(templates).format(
                topic=theme.topic, Kind=_cap(w.domain.entity_kind), Ent=self._pick(w.entities),
                year=w.report_year, next_year=w.report_year + 1, first_year=w.years[0])
            if i >= 15:
                t = f"{t}: {self._pick(w.entities)}"
            if t not in self._titles:
                self._titles.add(t)
                return t
        t = f"{theme.topic} Notes {len(self._titles) + 1}"
        self._titles.add(t)
        return t

    def _chapter_title(self, ch: int) -> tuple[str, Theme]:
        themes = self.w.domain.themes
        theme = themes[(ch - 1) % len(themes)] if ch <= len(themes) else self._pick(themes)
        if theme.title not in self._titles:
            self._titles.add(theme.title)
            return theme.title, theme
        for _ in range(30):
            t = f"{theme.title}: {self._pick(self.w.entities)} Review"
            if t not in self._titles:
                self._titles.add(t)
                return t, theme
        t = f"{theme.title} ({ch})"
        self._titles.add(t)
        return t, theme

    def _heading(self, level: int, number: str, title: str) -> Heading:
        self._section = number
        h = self._new(Heading, level=level, number=number, title=title)
        info = SectionInfo(number, title, level, h.block_id)
        self.record.sections.append(info)
        return h  # type: ignore[return-value]

    def bridge_heading(self, level: int, number: str, title: str) -> Heading:
        """A heading of bridge material (a section of the tree, outside the classic section bookkeeping)."""
        self._section = number
        h = self.new_bridge_block(Heading, level=level, number=number, title=title)
        return h  # type: ignore[return-value]

    def _initiative(self) -> str | None:
        for _ in range(20):
            name = (f"{self._pick(INITIATIVE_ADJ)} {self._pick(INITIATIVE_NOUN)} "
                    f"{self._pick(INITIATIVE_KIND)}")
            if name not in self._initiatives:
                self._initiatives.add(name)
                return name
        return None

    def groups(self) -> Iterator[list[Block]]:
        """Cover page, then chapters without end; the caller stops pulling."""
        w = self.w
        title = self._new(Heading, level=0, number="", title=w.title)
        sub = self._new(Paragraph, text=f"{w.org} \u2022 Reporting period 1 January to 31 December {w.report_year}",
                        role="subtitle")
        scope = self._new(Paragraph, role="intro", text=(
            f"This report describes the performance of {w.org} across its {len(w.entities)} "
            f"{w.domain.entity_plural}: {', '.join(w.entities[:-1])} and {w.entities[-1]}. "
            f"Unless stated otherwise, figures refer to the calendar year and are presented on a consistent basis "
            f"with earlier reports."))
        yield [title, sub, scope]
        yield [self._new(PageBreak)]
        b = self.bridge
        if b is not None:
            yield from b.front_matter()
        ch = 0
        while True:
            ch += 1
            ch_title, theme = self._chapter_title(ch)
            h = self._heading(1, str(ch), ch_title)
            ch_section = self.record.sections[-1]
            intro = self._fact_paragraph(theme, role="intro", n_facts=int(self.rng.integers(0, 2)))
            yield [h, intro]
            n_sub = int(self.rng.integers(2, 5))
            for sub_i in range(1, n_sub + 1):
                number = f"{ch}.{sub_i}"
                h2 = self._heading(2, number, self._unique_title(SUBSECTION_TEMPLATES, theme))
                info = self.record.sections[-1]
                lead = None
                if self.rng.random() < 0.6:
                    name = self._initiative()
                    if name:
                        info.initiative = name
                        lead = (f"This section describes the {name}, which {w.org} launched to strengthen "
                                f"{theme.topic.lower()} practice across its {w.domain.entity_plural}.")
                first = self._fact_paragraph(theme, role="intro", lead=lead, n_facts=int(self.rng.integers(0, 2)))
                if lead:
                    info.initiative_block = first.block_id
                yield [h2, first]
                if b is not None:
                    yield from b.after_subsection_intro(info)
                n_blocks = int(self.rng.integers(2, 6))
                has_h3 = False
                for j in range(n_blocks):
                    if j == n_blocks // 2 and self.rng.random() < 0.2:
                        h3 = self._heading(3, f"{number}.1", self._unique_title(SUBSUBSECTION_TEMPLATES, theme))
                        has_h3 = True
                        yield [h3, self._fact_paragraph(theme)]
                    if b is not None:
                        yield from b.before_content(theme)
                    yield self._content_group(theme)
                if b is not None:
                    yield from b.subsection_end(info, f"{number}.{2 if has_h3 else 1}")
                self._done_sections.append(info)
            if b is not None:
                yield from b.chapter_end(f"{ch}.{n_sub + 1}")
            self._done_sections.append(ch_section)
