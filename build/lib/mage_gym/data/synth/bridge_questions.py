"""Two-hop bridge questions over a laid-out report, with gold for both hops.

Why the lexical check happens here, after layout: "the answer page shares no
content word with the question" is a property of the page *as drawn* (the
running header with the report title, the printed footer, every element on
the page and the words drawn inside charts), which is only known once the
writer has placed everything. A question is kept only if its content words
(the retrieval tokeniser's: lower-case, English stop words dropped) and the
answer page's are disjoint; each attribute has several phrasings, tried in
turn.

Gold: hop 1 is the element that names the programme and carries the link (the
anchor sentence; for ``section`` stories the section's heading and its
introduction), hop 2 the element that states the answer (a table, a chart or
a paragraph). ``Episode.evidence_hops`` marks each region's hop;
``extra["bridge"]`` says how the hops are linked.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mage_gym.data.episode import Episode
from mage_gym.data.synth.bridge import Attribute, BridgeStory, Target
from mage_gym.data.synth.blocks import ChartBlock, FigureBlock
from mage_gym.data.synth.config import BRIDGE_TYPES, SynthConfig

if TYPE_CHECKING:  # pragma: no cover
    from mage_gym.data.synth.layout import DrawnElement
    from mage_gym.data.synth.questions import DocContext


def content_tokens(text: str) -> set[str]:
    """Content words as lexical retrieval sees them (the project's BM25 tokeniser)."""
    from mage_gym.retrieval.text import tokenize

    return set(tokenize(text))


def drawn_page_texts(ctx: "DocContext") -> list[str]:
    """Everything a page shows in words: furniture, element texts, and words drawn in its pictures."""
    parts: list[list[str]] = [list(f) for f in ctx.page_furniture] or [[] for _ in range(ctx.n_pages)]
    while len(parts) < ctx.n_pages:
        parts.append([])
    for el in ctx.elements:
        parts[el.page].append(el.text)
        if el.elem_id == f"b{el.block_id}":
            block = ctx.plan.blocks.get(el.block_id)
            if isinstance(block, ChartBlock):
                parts[el.page] += [*block.spec.labels, *block.spec.value_texts, block.spec.axis_label]
            elif isinstance(block, FigureBlock):
                parts[el.page] += list(block.spec.labels)
    return ["\n".join(p) for p in parts]


class BridgeQuestionMaker:
    """Turns the plan's bridge stories into questions (see module docstring)."""

    def __init__(self, ctx: "DocContext", cfg: SynthConfig, rng: np.random.Generator,
                 main: dict[int, "DrawnElement"], region) -> None:  # noqa: ANN001 - QuestionMaker._region
        self.ctx = ctx
        self.cfg = cfg
        self.rng = rng
        self.main = main
        self.region = region
        self._page_text = drawn_page_texts(ctx)
        self._page_tokens: dict[int, set[str]] = {}
        targets: list[Target] = []
        for s in ctx.plan.bridges:
            if s.target is not None:
                targets.append(s.target)
        self.targets = list({id(t): t for t in targets + list(ctx.bridge_targets)}.values())

    def tokens_of_page(self, page: int) -> set[str]:
        if page not in self._page_tokens:
            self._page_tokens[page] = content_tokens(self._page_text[page])
        return self._page_tokens[page]

    def _pages_naming(self, name: str) -> set[int]:
        return {el.page for el in self.ctx.elements if name in el.text}

    def _valid(self, story: BridgeStory) -> list[tuple[Attribute, str]]:
        """(attribute, question) pairs of a story that pass every check; [] when the story is unusable."""
        t = story.target
        if t is None or t.block not in self.main or any(b not in self.main for b in story.hop1_blocks):
            return []
        p1 = {self.main[b].page for b in story.hop1_blocks}
        p2 = self.main[t.block].page
        if p2 in p1:
            return []
        if story.type == "reference" and t.label_block not in self.main:
            return []
        # the programme must be named only where hop 1 is (or its classic introduction): else ambiguous
        allowed = set(p1)
        if story.intro_block is not None and story.intro_block in self.main:
            allowed.add(self.main[story.intro_block].page)
        name = story.programme.removeprefix("the ")
        if not self._pages_naming(name) <= allowed:
            return []
        attrs = list(t.attributes)
        if story.pattern == "page":  # a page cites no element: the asked fact must be stated once on it
            others = {a.key for o in self.targets if o is not t and o.block in self.main
                      and self.main[o.block].page == p2 for a in o.attributes}
            attrs = [a for a in attrs if a.key not in others]
        page_tokens = self.tokens_of_page(p2)
        out = []
        for a in attrs:
            for j in self.rng.permutation(len(a.questions)):
                q = a.questions[int(j)].format(prog=story.programme)
                if not content_tokens(q) & page_tokens:
                    out.append((a, q))
                    break
        return out

    def _distractors(self, t: Target, a: Attribute, gold_pages: set[int]) -> list[dict[str, Any]]:
        """Other targets stating the same kind of fact (another programme's): near-duplicates."""
        out = []
        for o in self.targets:
            if o is t or o.block not in self.main:
                continue
            if not any(b.key == a.key for b in o.attributes):
                continue
            el = self.main[o.block]
            if el.page in gold_pages:
                continue
            r = self.region(el)
            out.append({"page": r.page, "bbox": list(r.bbox), "type": r.type, "relation": "other_programme",
                        "element_id": el.elem_id})
        out.sort(key=lambda d: d["page"])
        return out[:8]

    def make(self, n: int) -> list[Episode]:
        if n <= 0:
            return []
        valid = [(s, v) for s in self.ctx.plan.bridges for v in [self._valid(s)] if v]
        by_type: dict[str, list[tuple[BridgeStory, list[tuple[Attribute, str]]]]] = {}
        for s, v in valid:
            by_type.setdefault(s.type, []).append((s, v))
        out: list[Episode] = []
        while len(out) < n and any(by_type.values()):
            types = [t for t in BRIDGE_TYPES if by_type.get(t)]
            wts = np.array([max(self.cfg.bridge_weights.get(t, 0.0), 1e-9) for t in types])
            btype = types[int(self.rng.choice(len(types), p=wts / wts.sum()))]
            story, pairs = by_type[btype].pop(int(self.rng.integers(len(by_type[btype]))))
            attr, question = pairs[int(self.rng.integers(len(pairs)))]
            out.append(self._episode(story, attr, question))
        return out

    def _episode(self, story: BridgeStory, attr: Attribute, question: str) -> Episode:
        from mage_gym.data.synth.questions import NOT_ANSWERABLE, SOURCE_OF_TYPE

        assert story.target is not None and attr.answer != NOT_ANSWERABLE
        t = story.target
        hop1 = [self.main[b] for b in story.hop1_blocks]
        hop2 = [self.main[t.block]]
        els = hop1 + hop2
        regions = tuple(self.region(el) for el in els)
        pages = tuple(sorted({el.page for el in els}))
        gold_pages = set(pages)
        bridge = {
            "type": story.type, "pattern": story.pattern, "programme": story.programme,
            "mention": story.mention, "entity": t.entity, "attribute": attr.key,
            "attribute_detail": dict(attr.detail),
            "hop1": {"pages": sorted({el.page for el in hop1}), "element_ids": [el.elem_id for el in hop1]},
            "hop2": {"pages": [hop2[0].page], "element_ids": [hop2[0].elem_id],
                     "label_element_id": f"b{t.label_block}" if t.label_block in self.main else None},
        }
        extra = {"question_kind": "bridge", "gold_element_ids": [el.elem_id for el in els], "bridge": bridge,
                 "distractors": self._distractors(t, attr, gold_pages)}
        return Episode(
            episode_id="", benchmark="synth", doc_id=self.ctx.doc_id, source=self.ctx.source, question=question,
            answer=attr.answer, answer_format=attr.answer_format, answerable=True, evidence_pages=pages,
            evidence_regions=regions, evidence_sources=tuple(dict.fromkeys(SOURCE_OF_TYPE[el.type] for el in els)),
            task_tags=("bridge", f"bridge:{story.type}"), extra=extra,
            evidence_hops=tuple([1] * len(hop1) + [2] * len(hop2)))
