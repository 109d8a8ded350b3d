"""Questions over a laid-out synthetic report, with gold taken from the drawing.

Why questions are chosen *after* layout: only then do we know on which page
each fact landed, so multi-page questions can demand a minimum page distance
(``evidence_spread``) and every question can list the near-duplicate
statements that sit on *other* pages (its distractors). Gold boxes are the
writer's own placements, normalised to the page; nothing here parses the PDF.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mage_gym.data.episode import Episode, Region
from mage_gym.data.synth.blocks import ChartBlock, ListBlock, Paragraph, TableBlock
from mage_gym.data.synth.config import QUESTION_KINDS, SynthConfig
from mage_gym.data.synth.layout import DrawnElement
from mage_gym.data.synth.planner import PlanRecord
from mage_gym.data.synth.vocab import INITIATIVE_ADJ, INITIATIVE_KIND, INITIATIVE_NOUN
from mage_gym.data.synth.world import FactKey, World, answer_number, make_names

#: MMLongBench-Doc evidence source names, by drawn element type.
SOURCE_OF_TYPE: dict[str, str] = {
    "paragraph": "Pure-text (Plain-text)",
    "table": "Table",
    "chart": "Chart",
    "figure": "Figure",
    "list": "Generalized-text (Layout)",
    "title": "Generalized-text (Layout)",
}
NOT_ANSWERABLE = "Not answerable"


@dataclass(frozen=True)
class DocContext:
    """Everything about one generated document the question maker needs."""

    doc_id: str
    source: str  # PDF path relative to the corpus root
    world: World
    plan: PlanRecord
    elements: tuple[DrawnElement, ...]
    n_pages: int
    page_size: tuple[float, float]
    full_text: str
    page_furniture: tuple[tuple[str, ...], ...] = ()  # running header/footer texts of each page
    bridge_targets: tuple[Any, ...] = ()  # every bridge Target drawn or planned (bound or not)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


class QuestionMaker:
    def __init__(self, ctx: DocContext, cfg: SynthConfig, rng: np.random.Generator) -> None:
        self.ctx = ctx
        self.cfg = cfg
        self.rng = rng
        self.w = ctx.world
        self.main: dict[int, DrawnElement] = {}
        for el in ctx.elements:
            if el.elem_id == f"b{el.block_id}":
                self.main[el.block_id] = el
        self.by_metric: dict[str, list[FactKey]] = {}
        for key in ctx.plan.fact_block:
            if ctx.plan.fact_block[key] in self.main:
                self.by_metric.setdefault(key[2], []).append(key)
        self.used: set[Any] = set()

    # --- gold helpers ---------------------------------------------------------------

    def _region(self, el: DrawnElement) -> Region:
        W, H = self.ctx.page_size
        x0, y0, x1, y1 = el.bbox
        box = (round(max(0.0, x0 / W), 5), round(max(0.0, y0 / H), 5), round(min(1.0, x1 / W), 5),
               round(min(1.0, y1 / H), 5))
        return Region(page=el.page, bbox=box, type=el.type)

    def _fact_el(self, key: FactKey) -> DrawnElement:
        return self.main[self.ctx.plan.fact_block[key]]

    def _distractors(self, keys: list[FactKey], gold_pages: set[int]) -> list[dict[str, Any]]:
        """Near-duplicate statements on pages without gold: same metric, another year/entity/qualifier."""
        out: list[dict[str, Any]] = []
        seen: set[tuple[FactKey, int]] = set()
        for key in keys:
            q, e, m, y = key
            for other in self.by_metric.get(m, []):
                if other in keys:
                    continue
                oq, oe, _, oy = other
                if oe == e and oy == y and oq != q:
                    rel = f"other_qualifier:{oq}"
                elif oe == e and oq == q and oy != y:
                    rel = "other_year"
                elif oy == y and oq == q and oe != e:
                    rel = "other_entity"
                else:
                    continue
                el = self._fact_el(other)
                if el.page in gold_pages or (other, el.page) in seen:
                    continue
                seen.add((other, el.page))
                r = self._region(el)
                out.append({"page": r.page, "bbox": list(r.bbox), "type": r.type, "relation": rel,
                            "element_id": el.elem_id})
        out.sort(key=lambda d: (d["relation"] != "other_year", d["page"]))
        return out[:8]

    def _episode(self, kind: str, question: str, answer: str, fmt: str, els: list[DrawnElement],
                 extra: dict[str, Any] | None = None, answerable: bool = True) -> Episode:
        regions = tuple(self._region(el) for el in els)
        pages = tuple(sorted({el.page for el in els}))
        sources = tuple(dict.fromkeys(SOURCE_OF_TYPE[el.type] for el in els))
        ex = {"question_kind": kind, "gold_element_ids": [el.elem_id for el in els]}
        ex.update(extra or {})
        return Episode(
            episode_id="", benchmark="synth", doc_id=self.ctx.doc_id, source=self.ctx.source, question=question,
            answer=answer, answer_format=fmt, answerable=answerable, evidence_pages=pages, evidence_regions=regions,
            evidence_sources=sources, task_tags=(kind,), extra=ex)

    # --- phrasing -------------------------------------------------------------------------

    def _ask_value(self, key: FactKey, chart_hint: bool = False) -> str:
        q, e, mk, y = key
        m = self.w.metrics[mk]
        if q == "share":
            return f"What share of the {y} {m.name} came from {self.w.ent(e)}, in percent?"
        unit = self.w.unit_of(key)
        hint = f" (in {unit})" if unit and unit != "%" else (" (in %)" if unit == "%" else "")
        lead = "According to the chart, w" if chart_hint else "W"
        return f"{lead}hat was the {m.name} {self.w.at(e)} in {y}{hint}?"

    # --- kinds ----------------------------------------------------------------------------------

    def _weighted_pick(self, cands: list[Any], has_distractor) -> Any | None:  # noqa: ANN001
        cands = [c for c in cands if c not in self.used]
        if not cands:
            return None
        if self.cfg.distractor_density > 0:
            wts = np.array([3.0 if has_distractor(c) else 1.0 for c in cands])
        else:
            wts = np.ones(len(cands))
        c = cands[int(self.rng.choice(len(cands), p=wts / wts.sum()))]
        self.used.add(c)
        return c

    def _value_question(self, kind: str, block_type: type) -> Episode | None:
        plan = self.ctx.plan
        cands = [k for k, b in plan.fact_block.items()
                 if isinstance(plan.blocks[b], block_type) and b in self.main
                 and (k[0] == "actual" or (kind == "chart_reading" and k[0] == "share"))]

        def has_d(k: FactKey) -> bool:
            return bool(self._distractors([k], {self._fact_el(k).page}))

        key = self._weighted_pick(cands, has_d)
        if key is None:
            return None
        el = self._fact_el(key)
        chart_hint = kind == "chart_reading" and self.rng.random() < 0.5
        fmt = "Float" if key[0] == "share" else self.w.answer_format(key)
        extra = {"fact": list(key), "distractors": self._distractors([key], {el.page})}
        return self._episode(kind, self._ask_value(key, chart_hint), self.w.answer(key), fmt, [el], extra)

    def _multi_page(self) -> Episode | None:
        plan = self.ctx.plan
        min_gap = max(2, int(np.ceil(self.cfg.evidence_spread * self.ctx.n_pages)))
        stated = [k for k in plan.fact_block if k[0] == "actual" and plan.fact_block[k] in self.main
                  and isinstance(plan.blocks[plan.fact_block[k]], (Paragraph, TableBlock, ChartBlock))]
        for _ in range(60):
            if len(stated) < 2:
                return None
            a = stated[int(self.rng.integers(len(stated)))]
            partners = [b for b in self.by_metric.get(a[2], []) if b[0] == "actual" and b != a
                        and abs(self._fact_el(b).page - self._fact_el(a).page) >= min_gap
                        and self.w.value(b) != self.w.value(a) and (b[1] != a[1] or b[3] != a[3])]
            if not partners:
                continue
            b = partners[int(self.rng.integers(len(partners)))]
            if self._fact_el(b).page < self._fact_el(a).page:
                a, b = b, a
            pair = (a, b)
            if pair in self.used:
                continue
            self.used.add(pair)
            return self._pair_question(a, b)
        return None

    def _pair_question(self, a: FactKey, b: FactKey) -> Episode:
        m = self.w.metrics[a[2]]
        va, vb = self.w.value(a), self.w.value(b)
        els = [self._fact_el(a), self._fact_el(b)]
        unit = m.unit
        hint = f" (in {unit})" if unit and unit != "%" else (" (in percentage points)" if unit == "%" else "")
        mode = "compare" if self.rng.random() < 0.4 else ("sum" if m.additive else "difference")
        if mode == "compare":
            if a[1] != b[1]:
                q = (f"Which had the higher {m.name}: {self.w.ent(a[1])} in {a[3]} or {self.w.ent(b[1])} "
                     f"in {b[3]}?")
                ans, fmt = (a[1] if va > vb else b[1]), "Str"
            else:
                q = f"In which year was the {m.name} {self.w.at(a[1])} higher: {a[3]} or {b[3]}?"
                ans, fmt = str(a[3] if va > vb else b[3]), "Int"
        elif mode == "sum":
            q = (f"What was the combined {m.name} of {self.w.ent(a[1])} in {a[3]} and {self.w.ent(b[1])} "
                 f"in {b[3]}{hint}?")
            ans, fmt = answer_number(round(va + vb, m.decimals), m.decimals), ("Int" if m.decimals == 0 else "Float")
        else:
            q = (f"What is the difference between the {m.name} {self.w.at(a[1])} in {a[3]} and "
                 f"{self.w.at(b[1])} in {b[3]}{hint}?")
            ans = answer_number(round(abs(va - vb), m.decimals), m.decimals)
            fmt = "Int" if m.decimals == 0 else "Float"
        gold_pages = {el.page for el in els}
        extra = {"facts": [list(a), list(b)], "operation": mode, "page_gap": abs(els[1].page - els[0].page),
                 "distractors": self._distractors([a, b], gold_pages)}
        return self._episode("multi_page", q, ans, fmt, els, extra)

    def _section_locate(self) -> Episode | None:
        cands = [s for s in self.ctx.plan.sections
                 if s.initiative and s.initiative_block in self.main and s.heading_block in self.main]
        s = self._weighted_pick(cands, lambda _s: False)
        if s is None:
            return None
        q = f"Which section of the report discusses the {s.initiative}?"
        els = [self.main[s.heading_block], self.main[s.initiative_block]]
        return self._episode("section_locate", q, s.title, "Str", els,
                             {"section_number": s.number, "initiative": s.initiative})

    def _list_count(self) -> Episode | None:
        cands = [li for li in self.ctx.plan.lists if li.list_block in self.main and li.intro_block in self.main]
        plan = self.ctx.plan

        def has_d(li) -> bool:  # noqa: ANN001
            return any(o.topic == li.topic and o is not li for o in plan.lists)

        li = self._weighted_pick(cands, has_d)
        if li is None:
            return None
        q = f"How many {li.topic} does the report list {self.w.at(li.entity)} for {li.year}?"
        els = [self.main[li.list_block], self.main[li.intro_block]]
        gold_pages = {el.page for el in els}
        distractors = []
        for o in plan.lists:
            if o is li or o.topic != li.topic or o.list_block not in self.main:
                continue
            el = self.main[o.list_block]
            if el.page not in gold_pages:
                r = self._region(el)
                distractors.append({"page": r.page, "bbox": list(r.bbox), "type": r.type,
                                    "relation": "other_entity" if o.entity != li.entity else "other_year",
                                    "element_id": el.elem_id})
        block = plan.blocks[li.list_block]
        assert isinstance(block, ListBlock)
        return self._episode("list_count", q, str(li.n_items), "Int", els,
                             {"list_topic": li.topic, "numbered": block.numbered, "distractors": distractors})

    def _unanswerable(self) -> Episode | None:
        text = self.ctx.full_text
        for _ in range(40):
            r = self.rng.random()
            if r < 0.55 and self.by_metric:  # an entity the report never mentions
                metrics = list(self.by_metric)
                mk = metrics[int(self.rng.integers(len(metrics)))]
                fake = make_names(self.rng, 1, exclude=set(self.w.entities))[0]
                if fake in text:
                    continue
                y = self.w.years[int(self.rng.integers(len(self.w.years)))]
                q = self._ask_value(("actual", fake, mk, y))
                absent = fake
            elif r < 0.8 and self.by_metric:  # a real entity and metric, in a year before the report's data
                metrics = list(self.by_metric)
                mk = metrics[int(self.rng.integers(len(metrics)))]
                e = self.w.entities[int(self.rng.integers(len(self.w.entities)))]
                y = self.w.years[0] - int(self.rng.integers(2, 6))
                if str(y) in text:
                    continue
                q = self._ask_value(("actual", e, mk, y))
                absent = str(y)
            else:  # a programme the report never names
                name = (f"{INITIATIVE_ADJ[int(self.rng.integers(len(INITIATIVE_ADJ)))]} "
                        f"{INITIATIVE_NOUN[int(self.rng.integers(len(INITIATIVE_NOUN)))]} "
                        f"{INITIATIVE_KIND[int(self.rng.integers(len(INITIATIVE_KIND)))]}")
                if name in text:
                    continue
                q = f"Which section of the report discusses the {name}?"
                absent = name
            if q in self.used:
                continue
            self.used.add(q)
            return Episode(
                episode_id="", benchmark="synth", doc_id=self.ctx.doc_id, source=self.ctx.source, question=q,
                answer=NOT_ANSWERABLE, answer_format="None", answerable=False, task_tags=("unanswerable",),
                extra={"question_kind": "unanswerable", "gold_element_ids": [], "absent": absent})
        return None

    # --- driver ------------------------------------------------------------------------------------

    def make(self, n: int) -> list[Episode]:
        kinds = [k for k in QUESTION_KINDS if self.cfg.kind_weights.get(k, 0.0) > 0]
        wts = np.array([self.cfg.kind_weights[k] for k in kinds], dtype=np.float64)
        plan: list[str] = list(kinds[:n]) if n >= len(kinds) else \
            [kinds[i] for i in self.rng.choice(len(kinds), size=n, replace=False, p=wts / wts.sum())]
        while len(plan) < n:
            plan.append(kinds[int(self.rng.choice(len(kinds), p=wts / wts.sum()))])
        out: list[Episode] = []
        fallback = ["fact_lookup", "table_lookup", "chart_reading", "multi_page", "list_count"]
        for kind in plan:
            ep = self._make_one(kind)
            tries = 0
            while ep is None and tries < len(fallback):
                ep = self._make_one(fallback[tries])
                tries += 1
            if ep is not None:
                out.append(ep)
        return out

    def _make_one(self, kind: str) -> Episode | None:
        if kind == "fact_lookup":
            return self._value_question(kind, Paragraph)
        if kind == "table_lookup":
            return self._value_question(kind, TableBlock)
        if kind == "chart_reading":
            return self._value_question(kind, ChartBlock)
        if kind == "multi_page":
            return self._multi_page()
        if kind == "section_locate":
            return self._section_locate()
        if kind == "list_count":
            return self._list_count()
        if kind == "unanswerable":
            return self._unanswerable()
        raise ValueError(f"unknown question kind {kind!r}")
