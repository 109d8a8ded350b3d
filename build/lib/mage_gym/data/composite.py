"""Episodes beyond one document and one question: :class:`CompositeEpisode`.

A composite episode names a *set of documents* (cross-document questions:
"how did A's margin compare with B's?") and/or a *conversation* (a list of
questions asked one after another, later ones referring back). Each question
is a :class:`Turn`; its gold is given per document as ordinary single-document
:class:`~mage_gym.data.episode.Episode` records (``Turn.evidence``), so every
existing gold rule (regions, snippets, node ids, page windows) applies
unchanged, on the document's own page numbers. The environment maps them onto
the union graph of the documents (:mod:`mage_gym.graph.union`).

Why a separate record instead of more fields on ``Episode``: single-document,
single-question episodes must keep today's behaviour and serialised form
exactly; everything that only composites need lives here.

Splits: all documents of an episode fall in one split. The split is decided by
``group`` (the generator's document group, FinanceBench's company), which
:attr:`CompositeEpisode.doc_id` returns, so the document-hash splitter in
:mod:`mage_gym.data.splits` handles composites without a special case. A
loader must put each document in one group only.

Everything but the questions and the document list is gold, as in ``Episode``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Union

from mage_gym.data.episode import Episode

#: What an episode is: one question on one document, a question on several
#: documents, a conversation on one document, or a conversation on several.
KINDS = ("single", "cross_document", "conversation", "cross_document_conversation")


@dataclass(frozen=True)
class DocumentRef:
    """One document of a composite episode: its id (the node-id prefix in graphs) and its PDF / image folder."""

    doc_id: str
    source: str


@dataclass(frozen=True)
class Turn:
    """One question of a composite episode, with its answer and its gold per document.

    ``evidence`` holds one single-document Episode per document that carries
    evidence for this question (same question text; ``doc_id`` one of the
    episode's documents). A document without evidence for the turn is simply
    absent. Unanswerable turns have ``answerable=False`` and no evidence.
    """

    question: str
    answer: str
    answer_format: str = "Str"
    answerable: bool = True
    evidence: tuple[Episode, ...] = ()
    task_tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "evidence", tuple(self.evidence))
        object.__setattr__(self, "task_tags", tuple(self.task_tags))
        if not self.question.strip():
            raise ValueError("a turn needs a question")

    @property
    def evidence_doc_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.doc_id for e in self.evidence))


@dataclass(frozen=True)
class CompositeEpisode:
    """Several documents and/or several questions played as one episode (see the module docstring)."""

    episode_id: str
    benchmark: str
    documents: tuple[DocumentRef, ...]
    turns: tuple[Turn, ...]
    group: str = ""
    split: str = "train"
    flags: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        docs = tuple(d if isinstance(d, DocumentRef) else DocumentRef(*d) for d in self.documents)
        object.__setattr__(self, "documents", docs)
        object.__setattr__(self, "turns", tuple(self.turns))
        object.__setattr__(self, "flags", tuple(self.flags))
        if not docs:
            raise ValueError(f"{self.episode_id}: a composite episode needs at least one document")
        if not self.turns:
            raise ValueError(f"{self.episode_id}: a composite episode needs at least one turn")
        ids = [d.doc_id for d in docs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{self.episode_id}: duplicate documents {ids}")
        known = set(ids)
        for i, t in enumerate(self.turns):
            stray = [e.doc_id for e in t.evidence if e.doc_id not in known]
            if stray:
                raise ValueError(f"{self.episode_id}: turn {i} has evidence in documents {stray} "
                                 f"that are not among the episode's documents {ids}")

    # --- what the env and splitters read -------------------------------------------

    @property
    def doc_id(self) -> str:
        """The split key: the group when given, else the documents joined by ``+``."""
        return self.group or "+".join(d.doc_id for d in self.documents)

    @property
    def doc_ids(self) -> tuple[str, ...]:
        return tuple(d.doc_id for d in self.documents)

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(d.source for d in self.documents)

    @property
    def source(self) -> str:
        """The first document's source (code that needs all of them reads :attr:`sources`)."""
        return self.documents[0].source

    @property
    def question(self) -> str:
        """The first question (the one asked at reset)."""
        return self.turns[0].question

    @property
    def questions(self) -> tuple[str, ...]:
        return tuple(t.question for t in self.turns)

    @property
    def n_turns(self) -> int:
        return len(self.turns)

    @property
    def kind(self) -> str:
        multi_doc, multi_turn = len(self.documents) > 1, len(self.turns) > 1
        return KINDS[int(multi_doc) + 2 * int(multi_turn)]

    @property
    def page_window(self) -> None:
        """Composite episodes span whole documents."""
        return None

    @property
    def answerable(self) -> bool:
        return any(t.answerable for t in self.turns)

    @property
    def usable_for_training(self) -> bool:
        """Every answerable turn has some gold to be scored on."""
        return all((not t.answerable) or any(e.usable_for_training for e in t.evidence) for t in self.turns)

    # --- what breakdowns read (gold: for reports only) ------------------------------

    @property
    def evidence_sources(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s for t in self.turns for e in t.evidence for s in e.evidence_sources))

    @property
    def evidence_regions(self) -> tuple:
        """Regions are per document (``Turn.evidence``); none on the episode itself."""
        return ()

    @property
    def multi_page(self) -> bool:
        """Some turn needs more than one page (pages of different documents count apart)."""
        return any(len({(e.doc_id, p) for e in t.evidence for p in e.evidence_pages}) > 1 for t in self.turns)

    def public_view(self) -> dict[str, str]:
        return {"episode_id": self.episode_id, "doc_id": "+".join(self.doc_ids), "question": self.question}

    def with_split(self, split: str) -> "CompositeEpisode":
        return replace(self, split=split,
                       turns=tuple(replace(t, evidence=tuple(e.with_split(split) for e in t.evidence))
                                   for t in self.turns))

    def turn_episode(self, i: int) -> Episode:
        """Turn ``i`` as one Episode for answer scoring (answer, format, benchmark); its gold stays per document.

        The evidence fields are left empty on purpose: page numbers are only
        meaningful per document (``Turn.evidence``).
        """
        t = self.turns[i]
        return Episode(episode_id=f"{self.episode_id}#t{i}", benchmark=self.benchmark,
                       doc_id="+".join(self.doc_ids), source=self.source, question=t.question, answer=t.answer,
                       answer_format=t.answer_format, answerable=t.answerable, task_tags=t.task_tags,
                       split=self.split)


AnyEpisode = Union[Episode, CompositeEpisode]


def episode_sources(ep: AnyEpisode) -> tuple[str, ...]:
    """Every document source an episode needs a graph for."""
    return ep.sources if isinstance(ep, CompositeEpisode) else (str(ep.source),)


def episode_kind(ep: AnyEpisode) -> str:
    return ep.kind if isinstance(ep, CompositeEpisode) else "single"


# --- JSON ---------------------------------------------------------------------------


def composite_to_dict(ep: CompositeEpisode) -> dict[str, Any]:
    from mage_gym.data.io import episode_to_dict

    return {
        "episode_id": ep.episode_id, "benchmark": ep.benchmark,
        "documents": [asdict(d) for d in ep.documents],
        "turns": [{"question": t.question, "answer": t.answer, "answer_format": t.answer_format,
                   "answerable": t.answerable, "task_tags": list(t.task_tags),
                   "evidence": [episode_to_dict(e) for e in t.evidence]} for t in ep.turns],
        "group": ep.group, "split": ep.split, "flags": list(ep.flags), "extra": dict(ep.extra),
    }


def composite_from_dict(d: dict[str, Any]) -> CompositeEpisode:
    from mage_gym.data.io import episode_from_dict

    turns = tuple(Turn(question=t["question"], answer=t["answer"], answer_format=t.get("answer_format", "Str"),
                       answerable=bool(t.get("answerable", True)), task_tags=tuple(t.get("task_tags", ())),
                       evidence=tuple(episode_from_dict(e) for e in t.get("evidence", ())))
                  for t in d["turns"])
    return CompositeEpisode(episode_id=d["episode_id"], benchmark=d["benchmark"],
                            documents=tuple(DocumentRef(x["doc_id"], x["source"]) for x in d["documents"]),
                            turns=turns, group=d.get("group", ""), split=d.get("split", "train"),
                            flags=tuple(d.get("flags", ())), extra=dict(d.get("extra") or {}))


__all__ = ["KINDS", "DocumentRef", "Turn", "CompositeEpisode", "AnyEpisode", "episode_sources", "episode_kind",
           "composite_to_dict", "composite_from_dict"]
