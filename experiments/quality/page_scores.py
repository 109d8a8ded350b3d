"""One question's page scores per retrieval channel, and the recall arithmetic every fusion choice shares.

Why a module of its own: ``embed_quality.py`` collects these records from the
graphs, and each fusion selection (``fusion_grid``, ``fusion_adaptive``,
``fusion_learned``) and the ruling (``fusion_ruling``) reads them; none of
those needs a graph, a retriever or the command line.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KS = (1, 3, 5, 10)
SPLITS = ("train", "val", "test")
#: Single page channels stored per question (``QuestionScores.scores``).
CHANNELS = ("bm25", "dense", "best_element", "page_dense")


@dataclass
class QuestionScores:
    """One question's page scores per channel, its gold pages and its page window."""

    episode_id: str
    doc_id: str
    gold: tuple[int, ...]
    scores: dict[str, np.ndarray]  # channel -> float32 [n_pages]
    inside: np.ndarray | None  # bool [n_pages] for a page window, else None
    fused: dict[str, list[int]] = field(default_factory=dict)  # fused retriever -> top pages (window applied)
    density: dict[str, float] = field(default_factory=dict)  # the document's text density (hybrid.DENSITY_FEATURES)
    question: str = ""  # the question text (the learned fusion's question features)
    doc: dict[str, float] = field(default_factory=dict)  # learned_fusion.document_features of the document


def ranked_pages(scores: np.ndarray, inside: np.ndarray | None, k: int) -> list[int]:
    """Top ``k`` pages by score, ties by page index (as the env orders entry pages), inside the window."""
    order = np.lexsort((np.arange(len(scores)), -np.asarray(scores, dtype=np.float64)))
    if inside is not None and inside.any():
        order = order[inside[order]]
    return order[:k].tolist()


def bar_rivals(dataset: str) -> list[str]:
    """The single channels issue 19's bar holds a fused ranking against on ``dataset`` (page_dense on FinanceBench
    too, where it alone was strongest)."""
    return ["hybrid_elements", "page_text"] + (["page_dense"] if dataset == "financebench" else [])


def page_recall(top: list[int], gold: tuple[int, ...]) -> float:
    """Share of the gold pages among ``top`` (the env's ``evidence_page_recall`` of those pages)."""
    return len(set(top) & set(gold)) / len(gold)


def question_recall5(q: QuestionScores, name: str) -> float:
    """One question's recall@5 under a channel or a fused ranking (as :func:`recall_rows` computes it)."""
    top = ranked_pages(q.scores[name], q.inside, 5) if name in CHANNELS else q.fused[name][:5]
    return page_recall(top, q.gold)
