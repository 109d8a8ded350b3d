"""Cross-document questions over groups of 2-3 generated reports that share entities.

A *group* is 2-3 reports by different organisations in the same domain, over
the same entities (sites, stores, segments) and the same years: so "the
revenue at the Brookwell store in 2019" exists in every report of the group,
with each report's own value. Documents are the classic generator's
(:func:`~.corpus.build_document` with a :class:`~.world.SharedWorld`), and
questions are asked over facts every report of the question actually drew:

- ``comparison``: "Which was higher in <year>: the <metric> <at entity> of A or that of B?"
- ``which_of``: "Which of A, B and C reported the highest <metric> <at entity> in <year>?"
- ``sum``: "What was the combined <metric> <at entity> in <year> of A and B?"

Gold is exact and per document: each turn's ``evidence`` holds one ordinary
synthetic Episode per document the question reads (the drawn element's box,
page and id), and the answer is computed from the drawn values. An episode
names every document of its group (a report not asked about is a
distractor); its ``group`` is the group id, so splits keep the group together.

Why shared entities rather than any two facts: a comparison question only
reads naturally, and is only hard for retrieval, when each report states the
same kind of figure for the same thing; the near-duplicates inside each
report (other years, other entities) then compete across documents too.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mage_gym.data.composite import CompositeEpisode, DocumentRef, Turn
from mage_gym.data.episode import Episode
from mage_gym.data.synth.config import SynthConfig
from mage_gym.data.synth.corpus import DocResult, build_document
from mage_gym.data.synth.provenance import check_seed
from mage_gym.data.synth.world import FactKey, SharedWorld, World, answer_number, make_names

GENERATOR = "mage_gym.data.synth.multidoc"
#: Cross-document question kinds (``Turn.task_tags[1]`` / ``extra["question_kind"]``).
CROSS_KINDS: tuple[str, ...] = ("comparison", "which_of", "sum")
#: Appended to every random stream of these documents: they never replay a classic corpus's documents.
MULTIDOC_SALT = 0x6D64
_GROUP_STREAM = 100  # third entropy word of a group's own stream (documents use 0..3)
_DOCS_PER_GROUP_SLOT = 8  # document index = group * 8 + member


def default_doc_config() -> SynthConfig:
    """Short reports without single-document questions (composites ask their own)."""
    return SynthConfig(min_pages=7, max_pages=9, questions_per_doc=0, bridge_questions_per_doc=0)


@dataclass(frozen=True)
class MultiDocConfig:
    """How many groups, how many reports a group, how many questions a group, and the reports' own config."""

    n_groups: int = 6
    min_docs: int = 2
    max_docs: int = 3
    questions_per_group: int = 6
    n_entities: int = 7
    n_years: int = 6
    kind_weights: dict[str, float] = field(default_factory=lambda: {"comparison": 1.0, "which_of": 1.0, "sum": 1.0})
    doc: SynthConfig = field(default_factory=default_doc_config)

    def __post_init__(self) -> None:
        if self.n_groups < 1:
            raise ValueError("n_groups must be >= 1")
        if not 2 <= self.min_docs <= self.max_docs <= 3:
            raise ValueError(f"need 2 <= min_docs <= max_docs <= 3, got {self.min_docs}, {self.max_docs}")
        if set(self.kind_weights) - set(CROSS_KINDS) or not any(w > 0 for w in self.kind_weights.values()):
            raise ValueError(f"kind_weights: keys among {CROSS_KINDS}, at least one weight > 0")
        if self.n_entities < 3 or self.n_years < 2:
            raise ValueError("need at least 3 entities and 2 years")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["doc"] = self.doc.to_dict()
        return d


def group_id_of(prefix: str, seed: int, group: int) -> str:
    return f"{prefix}_s{seed}_g{group:03d}"


# --- documents of a group -------------------------------------------------------------


def build_group(out_dir: str | os.PathLike[str], group: int, seed: int, n_docs: int, doc_cfg: SynthConfig,
                group_rng: np.random.Generator, prefix: str, salt: int, n_entities: int = 7,
                n_years: int = 6) -> list[tuple[DocResult, Any]]:
    """Draw what the group shares, then build its ``n_docs`` reports (each by another organisation)."""
    from mage_gym.data.synth.vocab import DOMAINS

    domain_index = int(group_rng.integers(len(DOMAINS)))
    entities = tuple(make_names(group_rng, n_entities))
    last = int(group_rng.integers(2014, 2025))
    years = tuple(range(last - n_years + 1, last + 1))
    gid = group_id_of(prefix, seed, group)
    out: list[tuple[DocResult, Any]] = []
    heads: list[str] = []
    for k in range(n_docs):
        shared = SharedWorld(domain_index, entities, years, tuple(heads))
        res, ctx = build_document(out_dir, group * _DOCS_PER_GROUP_SLOT + k, seed, doc_cfg, shared=shared,
                                  salt=(salt,), doc_id=f"{gid}_d{k}")
        heads.append(ctx.world.org.split()[0])
        out.append((res, ctx))
    return out


def group_rng_of(seed: int, group: int, salt: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, group, _GROUP_STREAM, salt]))


class GroupFacts:
    """The drawn facts of each report of a group, with the helpers that turn them into gold Episodes."""

    def __init__(self, ctxs: Sequence[Any], cfg: SynthConfig) -> None:
        from mage_gym.data.synth.questions import QuestionMaker

        self.ctxs = list(ctxs)
        # the makers' own random streams are never used: only their gold helpers (_episode, _fact_el)
        self.makers = [QuestionMaker(c, cfg, np.random.default_rng(0)) for c in self.ctxs]
        self.stated: list[dict[FactKey, Any]] = []
        for c, m in zip(self.ctxs, self.makers):
            self.stated.append({k: m._fact_el(k) for k, b in c.plan.fact_block.items()
                                if k[0] == "actual" and b in m.main})

    def world(self, i: int) -> World:
        return self.ctxs[i].world

    def org(self, i: int) -> str:
        return self.ctxs[i].world.org

    def common(self, docs: Sequence[int]) -> list[FactKey]:
        """Actual-value facts drawn in every one of ``docs`` (sorted: set order is not deterministic)."""
        keys = set(self.stated[docs[0]])
        for i in docs[1:]:
            keys &= set(self.stated[i])
        return sorted(keys)

    def evidence(self, i: int, kind: str, question: str, answer: str, fmt: str, keys: Sequence[FactKey],
                 extra: dict[str, Any] | None = None, extra_elements: Sequence[Any] = ()) -> Episode:
        """Document ``i``'s gold for a question: the drawn elements of ``keys`` (plus ``extra_elements``)."""
        els = list(extra_elements) + [self.stated[i][k] for k in keys]
        w = self.world(i)
        ex = {"facts": [list(k) for k in keys], "document_values": [w.answer(k) for k in keys], "org": w.org}
        ex.update(extra or {})
        return self.makers[i]._episode(kind, question, answer, fmt, els, ex)


def unit_hint(w: World, mk: str) -> str:
    unit = w.metrics[mk].unit
    return f" (in {unit})" if unit and unit != "%" else (" (in %)" if unit == "%" else "")


def _join(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


class CrossDocQuestionMaker:
    """Comparison, which-of and sum questions over the facts a group's reports share (module docstring)."""

    def __init__(self, facts: GroupFacts, mcfg: MultiDocConfig, rng: np.random.Generator) -> None:
        self.f = facts
        self.mcfg = mcfg
        self.rng = rng
        self.used: set[tuple[str, FactKey, tuple[int, ...]]] = set()

    def _subset(self, kind: str) -> tuple[int, ...] | None:
        n = len(self.f.ctxs)
        if kind == "which_of":
            return tuple(range(n)) if n >= 3 else None
        size = 2 if kind == "comparison" or n == 2 or self.rng.random() < 0.5 else n
        return tuple(int(i) for i in self.rng.choice(n, size=size, replace=False))

    def _candidates(self, kind: str, docs: tuple[int, ...]) -> list[FactKey]:
        w = self.f.world(docs[0])
        out = []
        for k in self.f.common(docs):
            m = w.metrics[k[2]]
            vals = [self.f.world(i).value(k) for i in docs]
            if kind == "sum":
                if m.additive and m.unit != "%":
                    out.append(k)
            elif len(set(vals)) == len(vals):  # no tie: one right answer
                out.append(k)
        return [k for k in out if (kind, k, tuple(sorted(docs))) not in self.used]

    def make_one(self, kind: str) -> Turn | None:
        for _ in range(8):
            docs = self._subset(kind)
            if docs is None:
                return None
            cands = self._candidates(kind, docs)
            if not cands:
                continue
            key = cands[int(self.rng.integers(len(cands)))]
            self.used.add((kind, key, tuple(sorted(docs))))
            return self._turn(kind, key, docs)
        return None

    def _turn(self, kind: str, key: FactKey, docs: tuple[int, ...]) -> Turn:
        _, e, mk, y = key
        w = self.f.world(docs[0])
        m = w.metrics[mk]
        orgs = [self.f.org(i) for i in docs]
        vals = [self.f.world(i).value(key) for i in docs]
        if kind == "comparison":
            q = f"Which was higher in {y}: the {m.name} {w.at(e)} of {orgs[0]} or that of {orgs[1]}?"
            ans, fmt = orgs[int(np.argmax(vals))], "Str"
        elif kind == "which_of":
            q = f"Which of {_join(orgs)} reported the highest {m.name} {w.at(e)} in {y}?"
            ans, fmt = orgs[int(np.argmax(vals))], "Str"
        else:
            q = f"What was the combined {m.name} {w.at(e)} in {y} of {_join(orgs)}{unit_hint(w, mk)}?"
            ans = answer_number(round(sum(vals), m.decimals), m.decimals)
            fmt = "Int" if m.decimals == 0 else "Float"
        evidence = tuple(self.f.evidence(i, kind, q, ans, fmt, [key]) for i in docs)
        return Turn(question=q, answer=ans, answer_format=fmt, evidence=evidence, task_tags=("cross_document", kind))

    def make(self, n: int) -> list[Turn]:
        kinds = [k for k in CROSS_KINDS if self.mcfg.kind_weights.get(k, 0.0) > 0]
        if len(self.f.ctxs) < 3:
            kinds = [k for k in kinds if k != "which_of"] or ["comparison"]
        wts = np.array([self.mcfg.kind_weights.get(k, 1.0) for k in kinds], dtype=np.float64)
        wts = wts / wts.sum() if wts.sum() > 0 else np.full(len(kinds), 1.0 / len(kinds))
        out: list[Turn] = []
        for _ in range(n * 3):
            if len(out) >= n:
                break
            t = self.make_one(kinds[int(self.rng.choice(len(kinds), p=wts))])
            if t is not None:
                out.append(t)
        return out


# --- corpus ------------------------------------------------------------------------------------


def _make_group(args: tuple[str, int, int, MultiDocConfig]) -> tuple[list[DocResult], list[CompositeEpisode]]:
    out_dir, group, seed, mcfg = args
    rng = group_rng_of(seed, group, MULTIDOC_SALT)
    n_docs = int(rng.integers(mcfg.min_docs, mcfg.max_docs + 1))
    built = build_group(out_dir, group, seed, n_docs, mcfg.doc, rng, "synth_md", MULTIDOC_SALT,
                        mcfg.n_entities, mcfg.n_years)
    facts = GroupFacts([c for _, c in built], mcfg.doc)
    turns = CrossDocQuestionMaker(facts, mcfg, rng).make(mcfg.questions_per_group)
    gid = group_id_of("synth_md", seed, group)
    docs = tuple(DocumentRef(r.doc_id, r.file) for r, _ in built)
    episodes = []
    for j, t in enumerate(turns):
        eid = f"{gid}-q{j:02d}"
        t = replace(t, evidence=tuple(replace(e, episode_id=f"{eid}@{e.doc_id}") for e in t.evidence))
        episodes.append(CompositeEpisode(
            episode_id=eid, benchmark="synth", documents=docs, turns=(t,), group=gid,
            extra={"dataset": "synth_multidoc", "question_kind": t.task_tags[1],
                   "orgs": {r.doc_id: c.world.org for r, c in built}}))
    return [r for r, _ in built], episodes


def generate_multidoc_corpus(out_dir: str | os.PathLike[str], seed: int = 0, mcfg: MultiDocConfig | None = None,
                             workers: int = 1, role: str | None = None) -> dict[str, Any]:
    """Generate ``mcfg.n_groups`` groups of reports and their cross-document questions; returns the manifest.

    A pure function of ``(seed, mcfg)`` (a pool gives the same bytes as a serial run).
    """
    from mage_gym.data.synth.composite_corpus import write_composite_corpus

    mcfg = mcfg or MultiDocConfig()
    role = check_seed(seed, role)
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    jobs = [(str(root), g, int(seed), mcfg) for g in range(mcfg.n_groups)]
    results = _run(jobs, _make_group, workers)
    docs = [(r, group_id_of("synth_md", seed, g)) for g, (rs, _) in enumerate(results) for r in rs]
    episodes = [ep for _, eps in results for ep in eps]
    return write_composite_corpus(root, generator=GENERATOR, seed=seed, role=role, config=mcfg.to_dict(),
                                  docs=docs, episodes=episodes)


def load_synth_multidoc(root: str | os.PathLike[str] | None = None, corpus_seed: int = 0,
                        mcfg: MultiDocConfig | None = None, workers: int = 1) -> Any:
    """``dataset=synth_multidoc``: the corpus at ``root``, or the small default one (generated once, then reused).

    The default lives at ``$MAGE_GYM_CACHE/synth/multidoc_s<corpus_seed>`` and is
    regenerated only when its manifest (generator version, seed, config) differs.
    """
    from mage_gym.data.report import DatasetLoad
    from mage_gym.data.synth.composite_corpus import composite_report, load_composite_corpus, load_or_generate

    mcfg = mcfg or MultiDocConfig()
    path, made = load_or_generate(root, name="multidoc", generator=GENERATOR, seed=corpus_seed, config=mcfg.to_dict(),
                                  make=lambda p: generate_multidoc_corpus(p, corpus_seed, mcfg, workers))
    episodes = load_composite_corpus(path)
    return DatasetLoad(episodes, composite_report("synth_multidoc", path, episodes, made))  # type: ignore[arg-type]


def _run(jobs: list[Any], fn: Any, workers: int) -> list[Any]:
    if workers <= 1 or len(jobs) <= 1:
        return [fn(j) for j in jobs]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from mage_gym.data.synth.corpus import _start_method

    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context(_start_method())) as ex:
        return list(ex.map(fn, jobs, chunksize=1))


__all__ = ["GENERATOR", "CROSS_KINDS", "MULTIDOC_SALT", "MultiDocConfig", "default_doc_config", "GroupFacts",
           "CrossDocQuestionMaker", "build_group", "group_rng_of", "group_id_of", "generate_multidoc_corpus",
           "load_synth_multidoc"]
