"""Synthetic conversations: 2-4 questions on one report (or a group of reports) whose later turns refer back.

On one report, the first turn names everything ("What was the revenue at the
Brookwell store in 2019 (in $ million)?"); each later turn leaves out what the
conversation already fixed, so it can only be resolved with the earlier turns:

- ``prior_year``: "And in the prior year?" (same entity and metric, one year earlier)
- ``other_year``: "And in 2016?" (same entity and metric)
- ``other_metric``: "What about its <other metric> in the same year?" (same entity and year)
- ``other_entity``: "And the Carrfield store?" (same metric and year)
- ``section``: "Which section of the report gives that figure?" (the section holding the last figure)

On a group of reports that share entities (:mod:`.multidoc`), a conversation
asks for a figure in one report, then "And according to B?", then "Which of
the two was higher?" and "What is their combined total?".

Each turn has its own exact gold (the drawn element of its figure; for
``section`` also the section's heading) and its own answer from the drawn
values. The fully spelled-out question of every turn is kept as gold-side
metadata (``extra["standalone_questions"]``), so a run can compare a
conversation with a reset every turn on the same questions.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from mage_gym.data.composite import CompositeEpisode, DocumentRef, Turn
from mage_gym.data.synth.config import SynthConfig
from mage_gym.data.synth.corpus import DocResult, build_document
from mage_gym.data.synth.multidoc import (
    GroupFacts,
    _run,
    build_group,
    default_doc_config,
    group_id_of,
    group_rng_of,
    unit_hint,
)
from mage_gym.data.synth.provenance import check_seed
from mage_gym.data.synth.world import FactKey, answer_number

GENERATOR = "mage_gym.data.synth.conversation"
FOLLOW_UPS: tuple[str, ...] = ("prior_year", "other_year", "other_metric", "other_entity", "section")
CROSS_FOLLOW_UPS: tuple[str, ...] = ("other_document", "compare", "combine")
#: Appended to every random stream of these documents (see :data:`.multidoc.MULTIDOC_SALT`).
CONVERSATION_SALT = 0x6376
PREFIX = "synth_cv"


@dataclass(frozen=True)
class ConversationConfig:
    """Single-report conversations, plus optional conversations over groups of 2 reports."""

    n_docs: int = 6  # single-report groups
    conversations_per_doc: int = 3
    cross_groups: int = 2  # groups of 2 reports sharing entities (0: none)
    conversations_per_cross_group: int = 2
    min_turns: int = 2
    max_turns: int = 4
    doc: SynthConfig = field(default_factory=default_doc_config)

    def __post_init__(self) -> None:
        if self.n_docs < 0 or self.cross_groups < 0 or self.n_docs + self.cross_groups < 1:
            raise ValueError("need at least one single-report or cross-report group")
        if not 2 <= self.min_turns <= self.max_turns <= 4:
            raise ValueError(f"need 2 <= min_turns <= max_turns <= 4, got {self.min_turns}, {self.max_turns}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["doc"] = self.doc.to_dict()
        return d


@dataclass(frozen=True)
class _Step:
    kind: str
    question: str
    standalone: str
    answer: str
    fmt: str
    keys: tuple[FactKey, ...]  # the figure(s) the turn reads
    docs: tuple[int, ...]  # which reports (indices into the group)
    with_heading: bool = False


class ConversationMaker:
    """Chains of turns over one report's drawn facts (module docstring)."""

    def __init__(self, facts: GroupFacts, rng: np.random.Generator) -> None:
        self.f = facts
        self.rng = rng
        self.w = facts.world(0)
        self.stated = facts.stated[0]

    def _heading_el(self, key: FactKey) -> tuple[str, Any] | None:
        """Title and drawn heading of the section holding ``key``'s figure (None when it has none)."""
        ctx, main = self.f.ctxs[0], self.f.makers[0].main
        number = ctx.plan.blocks[ctx.plan.fact_block[key]].section
        for s in ctx.plan.sections:
            if s.number == number and number and s.heading_block in main:
                return s.title, main[s.heading_block]
        return None

    def _value_step(self, kind: str, question: str, key: FactKey) -> _Step:
        return _Step(kind, question, self.f.makers[0]._ask_value(key), self.w.answer(key), self.w.answer_format(key),
                     (key,), (0,))

    def _options(self, cur: FactKey, seen: set[FactKey], section_done: bool) -> dict[str, list[_Step]]:
        _, e, mk, y = cur
        w = self.w
        opts: dict[str, list[_Step]] = {}

        def ok(k: FactKey) -> bool:
            return k in self.stated and k not in seen

        prior = ("actual", e, mk, y - 1)
        if ok(prior):
            opts["prior_year"] = [self._value_step("prior_year", "And in the prior year?", prior)]
        years = [k for k in self.stated if k[1] == e and k[2] == mk and k[3] not in (y, y - 1) and ok(k)]
        if years:
            opts["other_year"] = [self._value_step("other_year", f"And in {k[3]}?", k) for k in sorted(years)]
        metrics = [k for k in self.stated if k[1] == e and k[3] == y and k[2] != mk and ok(k)]
        if metrics:
            opts["other_metric"] = [self._value_step(
                "other_metric", f"What about its {w.metrics[k[2]].name} in the same year{unit_hint(w, k[2])}?", k)
                for k in sorted(metrics)]
        ents = [k for k in self.stated if k[2] == mk and k[3] == y and k[1] != e and ok(k)]
        if ents:
            opts["other_entity"] = [self._value_step("other_entity", f"And {w.ent(k[1])}?", k) for k in sorted(ents)]
        head = None if section_done else self._heading_el(cur)
        if head is not None:
            m = w.metrics[mk]
            opts["section"] = [_Step("section", "Which section of the report gives that figure?",
                                     f"Which section of the report gives the {m.name} {w.at(e)} in {y}?",
                                     head[0], "Str", (cur,), (0,), with_heading=True)]
        return opts

    def make_one(self, n_turns: int) -> list[_Step] | None:
        keys = sorted(self.stated)
        for _ in range(30):
            if not keys:
                return None
            cur = keys[int(self.rng.integers(len(keys)))]
            steps = [self._value_step("first", self.f.makers[0]._ask_value(cur), cur)]
            seen, section_done = {cur}, False
            while len(steps) < n_turns:
                opts = self._options(cur, seen, section_done)
                if not opts:
                    break
                kinds = sorted(opts)
                kind = kinds[int(self.rng.integers(len(kinds)))]
                step = opts[kind][int(self.rng.integers(len(opts[kind])))]
                steps.append(step)
                if kind == "section":
                    section_done = True
                else:
                    cur = step.keys[0]
                    seen.add(cur)
            if len(steps) >= 2:
                return steps
        return None

    def evidence(self, step: _Step) -> tuple[Any, ...]:
        extra_els: list[Any] = []
        if step.with_heading:
            head = self._heading_el(step.keys[0])
            extra_els = [head[1]] if head else []
        return (self.f.evidence(0, f"conversation:{step.kind}", step.question, step.answer, step.fmt,
                                list(step.keys), {"standalone_question": step.standalone}, extra_els),)


class CrossConversationMaker:
    """A figure in one report, the same figure in another, then compare and combine them."""

    def __init__(self, facts: GroupFacts, rng: np.random.Generator) -> None:
        self.f = facts
        self.rng = rng

    def make_one(self, n_turns: int, used: set[FactKey]) -> list[_Step] | None:
        f = self.f
        cands = [k for k in f.common((0, 1)) if k not in used and f.world(0).value(k) != f.world(1).value(k)]
        if not cands:
            return None
        key = cands[int(self.rng.integers(len(cands)))]
        used.add(key)
        a, b = (0, 1) if self.rng.random() < 0.5 else (1, 0)
        w = f.world(a)
        _, e, mk, y = key
        m = w.metrics[mk]
        hint = unit_hint(w, mk)
        oa, ob = f.org(a), f.org(b)
        va, vb = f.world(a).value(key), f.world(b).value(key)
        spelled = f"the {m.name} {w.at(e)} in {y}"
        steps = [
            _Step("first", f"According to {oa}, what was {spelled}{hint}?",
                  f"According to {oa}, what was {spelled}{hint}?", f.world(a).answer(key),
                  w.answer_format(key), (key,), (a,)),
            _Step("other_document", f"And according to {ob}?", f"According to {ob}, what was {spelled}{hint}?",
                  f.world(b).answer(key), w.answer_format(key), (key,), (b,)),
            _Step("compare", "Which of the two reported the higher figure?",
                  f"Which was higher: {spelled} of {oa} or that of {ob}?", oa if va > vb else ob, "Str",
                  (key,), (a, b)),
        ]
        if m.additive and m.unit != "%":
            steps.append(_Step("combine", f"What is their combined total{hint}?",
                               f"What was the combined {m.name} {w.at(e)} in {y} of {oa} and {ob}{hint}?",
                               answer_number(round(va + vb, m.decimals), m.decimals),
                               "Int" if m.decimals == 0 else "Float", (key,), (a, b)))
        return steps[:n_turns]

    def evidence(self, step: _Step) -> tuple[Any, ...]:
        return tuple(self.f.evidence(i, f"conversation:{step.kind}", step.question, step.answer, step.fmt,
                                     list(step.keys), {"standalone_question": step.standalone}) for i in step.docs)


def _episode(eid: str, gid: str, docs: tuple[DocumentRef, ...], steps: list[_Step], maker: Any) -> CompositeEpisode:
    turns = []
    for i, s in enumerate(steps):
        ev = tuple(replace(e, episode_id=f"{eid}#t{i}@{e.doc_id}") for e in maker.evidence(s))
        turns.append(Turn(question=s.question, answer=s.answer, answer_format=s.fmt, evidence=ev,
                          task_tags=("conversation", s.kind)))
    return CompositeEpisode(episode_id=eid, benchmark="synth", documents=docs, turns=tuple(turns), group=gid,
                            extra={"dataset": "synth_conversation", "question_kind": "conversation",
                                   "turn_kinds": [s.kind for s in steps],
                                   "standalone_questions": [s.standalone for s in steps]})


def _make_group(args: tuple[str, int, int, ConversationConfig]) -> tuple[list[DocResult], list[CompositeEpisode]]:
    out_dir, group, seed, ccfg = args
    rng = group_rng_of(seed, group, CONVERSATION_SALT)
    gid = group_id_of(PREFIX, seed, group)
    cross = group >= ccfg.n_docs
    if cross:
        built = build_group(out_dir, group, seed, 2, ccfg.doc, rng, PREFIX, CONVERSATION_SALT)
        n_conv = ccfg.conversations_per_cross_group
    else:
        built = [build_document(out_dir, group * 8, seed, ccfg.doc, salt=(CONVERSATION_SALT,), doc_id=f"{gid}_d0")]
        n_conv = ccfg.conversations_per_doc
    facts = GroupFacts([c for _, c in built], ccfg.doc)
    docs = tuple(DocumentRef(r.doc_id, r.file) for r, _ in built)
    maker: Any = CrossConversationMaker(facts, rng) if cross else ConversationMaker(facts, rng)
    used: set[FactKey] = set()
    firsts: set[str] = set()
    episodes = []
    for _ in range(n_conv * 3):
        if len(episodes) >= n_conv:
            break
        n_turns = int(rng.integers(ccfg.min_turns, ccfg.max_turns + 1))
        steps = maker.make_one(n_turns, used) if cross else maker.make_one(n_turns)
        if not steps or len(steps) < ccfg.min_turns or steps[0].question in firsts:
            continue
        firsts.add(steps[0].question)
        episodes.append(_episode(f"{gid}-c{len(episodes):02d}", gid, docs, steps, maker))
    return [r for r, _ in built], episodes


def generate_conversation_corpus(out_dir: str | os.PathLike[str], seed: int = 0,
                                 ccfg: ConversationConfig | None = None, workers: int = 1,
                                 role: str | None = None) -> dict[str, Any]:
    """Generate the reports and conversations of ``ccfg``; returns the manifest (a pure function of seed, ccfg)."""
    from mage_gym.data.synth.composite_corpus import write_composite_corpus

    ccfg = ccfg or ConversationConfig()
    role = check_seed(seed, role)
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    jobs = [(str(root), g, int(seed), ccfg) for g in range(ccfg.n_docs + ccfg.cross_groups)]
    results = _run(jobs, _make_group, workers)
    docs = [(r, group_id_of(PREFIX, seed, g)) for g, (rs, _) in enumerate(results) for r in rs]
    episodes = [ep for _, eps in results for ep in eps]
    return write_composite_corpus(root, generator=GENERATOR, seed=seed, role=role, config=ccfg.to_dict(),
                                  docs=docs, episodes=episodes)


def load_synth_conversation(root: str | os.PathLike[str] | None = None, corpus_seed: int = 0,
                            ccfg: ConversationConfig | None = None, workers: int = 1) -> Any:
    """``dataset=synth_conversation``: the corpus at ``root``, or the small default one (generated once, then reused).

    The default lives at ``$MAGE_GYM_CACHE/synth/conversation_s<corpus_seed>``.
    """
    from mage_gym.data.report import DatasetLoad
    from mage_gym.data.synth.composite_corpus import composite_report, load_composite_corpus, load_or_generate

    ccfg = ccfg or ConversationConfig()
    path, made = load_or_generate(root, name="conversation", generator=GENERATOR, seed=corpus_seed,
                                  config=ccfg.to_dict(),
                                  make=lambda p: generate_conversation_corpus(p, corpus_seed, ccfg, workers))
    episodes = load_composite_corpus(path)
    return DatasetLoad(episodes, composite_report("synth_conversation", path, episodes, made))  # type: ignore[arg-type]


__all__ = ["load_synth_conversation", "GENERATOR", "FOLLOW_UPS", "CROSS_FOLLOW_UPS", "CONVERSATION_SALT",
           "ConversationConfig", "ConversationMaker", "CrossConversationMaker", "generate_conversation_corpus"]
