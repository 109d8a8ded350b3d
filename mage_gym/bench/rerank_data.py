"""Questions, candidate passages and training groups for the cross-encoder reranker.

Why one module: training (``experiments/train_reranker.py``) and measuring
(``experiments/rerank_quality.py``) must read exactly the passages the
``hybrid_rerank`` retriever reads at run time - the first stage's top pages,
each through its best page-text chunks by dense cosine - so both go through
:meth:`mage_gym.retrieval.rerank.RerankedRetriever.passages_of` with the same
settings.

Training groups come from TRAIN-split gold only: for a question, one group
per gold page (at most ``max_positives``): a positive passage of that page
and ``negatives`` hard negatives, the best passage of non-gold pages drawn
from the first stage's top ``negative_depth``. The positive passage of a gold
page is the chunk that holds its gold: the chunk containing an element-level
gold element's text (MMDocIR boxes, FinanceBench evidence snippets, synthetic
regions), else a chunk containing the answer string, else the chunk of best
dense cosine (what the reranker reads first).
"""
from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

_WS = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _WS.sub(" ", text or "").strip().lower()


@dataclass
class RerankQuestion:
    """One question with gold pages: the first stage's top pages and the passages the reranker would read."""

    dataset: str
    split: str
    episode_id: str
    doc_id: str
    question: str
    gold: tuple[int, ...]  # gold pages inside the graph (and the page window)
    order: list[int]  # the first stage's top pages (depth_max), inside the window
    passages: list[list[str]]  # per page of ``order``: its passages, best dense cosine first (chunks_max)
    positives: dict[int, str] = field(default_factory=dict)  # gold page -> positive passage (train only)
    first_seconds: float = 0.0  # first-stage scoring time of this question


def positive_passage(chunks: Sequence[str], gold_texts: Sequence[str], answer: str, best: int) -> str:
    """The chunk of a gold page that holds the gold (module docstring); ``best``: the chunk of best cosine."""
    normed = [_norm(c) for c in chunks]
    for text in gold_texts:
        probe = _norm(text)[:80]
        if len(probe) >= 12:
            for c, n in zip(chunks, normed):
                if probe in n:
                    return c
    ans = _norm(answer)
    if len(ans) >= 3 and ans != "not answerable":
        for c, n in zip(chunks, normed):
            if ans in n:
                return c
    return chunks[best]


def collect_questions(dataset: str, split: str, reranker: Any, depth_max: int, root: str | None = None,
                      parser: str = "fast", with_positives: bool = False, max_questions: int | None = None,
                      seed: int = 0) -> tuple[list[RerankQuestion], dict[str, int]]:
    """The questions of one split with gold pages, their first-stage top pages and passages.

    ``reranker``: a :class:`~mage_gym.retrieval.rerank.RerankedRetriever` (its first stage and passage
    settings; its scorer is not called). Documents without a cached graph are skipped and counted.
    """
    import time

    from mage_gym.data import load_dataset
    from mage_gym.data.gold import resolve_gold
    from mage_gym.graph.build import load_graph
    from mage_gym.graph.store import GraphNotBuiltError
    from mage_gym.retrieval import make_query
    from mage_gym.retrieval.page_text import page_chunks

    kw = {"root": root} if dataset == "synth" and root else {}
    episodes = load_dataset(dataset, split=split, **kw)
    if max_questions is not None and len(episodes) > max_questions:
        episodes = sorted(random.Random(seed).sample(list(episodes), max_questions), key=lambda e: e.episode_id)
    by_source: dict[str, list] = defaultdict(list)
    for ep in episodes:
        by_source[ep.source].append(ep)
    out: list[RerankQuestion] = []
    skipped = {"no_graph": 0, "no_gold": 0}
    for source in sorted(by_source):
        try:
            graph = load_graph(source, parser=parser)
        except GraphNotBuiltError:
            skipped["no_graph"] += len(by_source[source])
            continue
        chunks = page_chunks(graph, reranker.passages.chunk_chars) if with_positives else None
        for ep in by_source[source]:
            gold = resolve_gold(ep, graph)
            pages = tuple(p for p in gold.pages if 0 <= p < graph.n_pages)
            if not pages:
                skipped["no_gold"] += 1
                continue
            query = make_query(ep.question)
            t0 = time.perf_counter()
            fused, _ = reranker._first(graph, query)
            seconds = time.perf_counter() - t0
            fp = np.asarray(fused.pages, dtype=np.float64)
            order = np.lexsort((np.arange(graph.n_pages), -fp))
            if ep.page_window is not None:
                lo, hi = int(ep.page_window[0]), int(ep.page_window[1])
                order = order[(order >= lo) & (order <= hi)]
            top = order[:depth_max].tolist()
            texts, owners = reranker.passages_of(graph, query, top)
            per = {p: [] for p in top}
            for t, p in zip(texts, owners):
                per[p].append(t)
            q = RerankQuestion(dataset, split, ep.episode_id, ep.doc_id, ep.question, pages, top,
                               [per[p] for p in top], first_seconds=seconds)
            if with_positives:
                q.positives = _positives(graph, gold, chunks, query, reranker, ep.answer)
            out.append(q)
    return out, skipped


def _positives(graph: Any, gold: Any, chunks: Any, query: Any, reranker: Any, answer: str) -> dict[int, str]:
    """Gold page -> its positive passage (:func:`positive_passage`)."""
    sims = None
    if reranker.passages.can_score(graph, query):
        sims = reranker.passages.index(graph).vectors @ reranker.passages.query_vector(graph, query)
    gold_text: dict[int, list[str]] = defaultdict(list)
    for nodes, page, is_page in zip(gold.items, gold.item_pages, gold.item_is_page):
        if is_page:
            continue
        for n in nodes:
            j = int(n) - graph.n_pages
            if 0 <= j < graph.n_elements:
                gold_text[int(page)].append(graph.elements[j].text or "")
    out: dict[int, str] = {}
    for p in sorted({int(x) for x in gold.pages if 0 <= int(x) < graph.n_pages}):
        rows = np.flatnonzero(chunks.page == p)
        if not len(rows):
            continue
        best = int(np.argmax(sims[rows])) if sims is not None else 0
        out[p] = positive_passage([chunks.texts[i] for i in rows], gold_text.get(p, []), answer, best)
    return out


@dataclass(frozen=True)
class Group:
    """One listwise training example: the question, the positive passage first, then the negatives."""

    question: str
    passages: tuple[str, ...]


def training_groups(questions: Sequence[RerankQuestion], negatives: int, negative_depth: int, max_positives: int,
                    seed: int = 0) -> list[Group]:
    """One group per gold page with a positive (at most ``max_positives`` per question), ``negatives`` hard
    negatives each: the best passage of non-gold pages among the first stage's top ``negative_depth``, drawn
    at random (seeded). Questions without a negative or a positive give no group."""
    rng = random.Random(seed)
    out: list[Group] = []
    for q in questions:
        pool = [ps[0] for p, ps in zip(q.order[:negative_depth], q.passages[:negative_depth])
                if p not in q.gold and ps]
        if not pool or not q.positives:
            continue
        pos = list(q.positives.items())[:max_positives]
        for _, text in pos:
            negs = rng.sample(pool, min(negatives, len(pool)))
            while len(negs) < negatives:  # pad by repetition so every group has the same size (a batch tensor)
                negs.append(negs[len(negs) % len(pool)])
            out.append(Group(q.question, (text, *negs)))
    return out


# --- evaluation of settings from scored passages --------------------------------------------------------------


def reranked_order(q: RerankQuestion, scores: Sequence[np.ndarray], depth: int, chunks_per_page: int, combine: str,
                   rrf_k: float = 60.0) -> list[int]:
    """The page order :class:`~mage_gym.retrieval.rerank.RerankedRetriever` gives with these settings, from the
    passages' scores (``scores[i]``: the scores of ``q.passages[i]``, best-cosine passage first)."""
    from mage_gym.retrieval.rerank import rerank_positions

    top = q.order[:depth]
    ce = np.array([float(np.max(s[:chunks_per_page])) if len(s) else -np.inf for s in scores[:depth]])
    return [top[i] for i in rerank_positions(ce, combine, rrf_k)] + q.order[depth:]


def recall_at(order: Sequence[int], gold: Sequence[int], k: int) -> float:
    return len(set(order[:k]) & set(gold)) / len(gold)
