"""Learned (learning-to-rank) fusion of the page channels: a linear ranker over per-page features.

Why learned: four hand-made fusions (weighted RRF, score sums, interleaving,
a density gate) each fixed one way of trading the element-based channels
against the page-text ones, and none held on every dataset. A linear ranker
can weigh every channel's rank, their agreement, and crosses with what the
document and the question look like, from data instead of by hand, while
staying small, deterministic and cheap at reset (one matrix-vector product).

Features of page ``i`` (all available at query time, no gold):

* ``ranks``: per channel (``bm25``, ``dense``, ``best_element``, ``page_dense``)
  its percentile in the document (1 - (rank - 1) / n) and its reciprocal rank
  (0 when the channel does not retrieve the page: score 0 or non-finite);
* ``agree``: how many channels put the page in their top 1, 3, 5 and 10, the
  best reciprocal rank over channels, and the plain RRF sum (k 60);
* ``scores``: each channel's score z-scored over the document's pages
  (how far above the rest a page stands, which ranks alone lose);
* ``doc``: the ``ranks`` features crossed with document features (log pages,
  log characters per element, share of image-only pages);
* ``question``: the ``ranks`` features crossed with question features (log
  token count, whether it holds a digit);
* ``anchor``: one column, the element channel's page score (``hybrid_elements``:
  RRF of bm25 and dense, k 60), left out of the L2 penalty. With it the
  ranker learns a correction to the env's default ranking instead of a ranking
  from nothing: the stronger the penalty, the closer its order stays to
  ``hybrid_elements`` (at an infinite penalty, the same order). Why: on
  MMLongBench the element channel is the best single channel on some splits
  and not others, and an unanchored ranker shrinks towards no signal, not
  towards it, so the penalty the selection picks cannot say "stay close to the
  default unless the data says otherwise".

``best_element`` is a page's best element vector (max of the dense channel's
element scores over the page's elements).

The model (:class:`LinearRanker`) scores ``standardised features @ weights``;
it is fitted by :func:`fit_ranker` with a listwise softmax loss (each question
once: the softmax over its pages, the target spread evenly over its gold
pages) plus an L2 penalty, by L-BFGS from zero (deterministic). The shipped
weights (``learned_fusion.json`` beside this module) were fitted on the dev
sets' TRAIN splits, the feature set and penalty chosen on VAL by
``experiments/quality/embed_quality.py --select-learned`` (``LEARNED_SELECTION_RULE``
there); the file records its command.

:class:`LearnedFusionHybrid` (``get_retriever("hybrid_learned")``) ranks pages
with the model; elements keep ``hybrid_elements``' ranking (RRF of bm25 and
dense, k 60), as ``hybrid_pages`` does.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from mage_gym.cache import Cache
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.retrieval.base import Query, Retriever, Scores
from mage_gym.retrieval.fusion import competition_ranks, normalized, rrf
from mage_gym.retrieval.hybrid import HybridRetriever

#: Page channels the ranker reads, in feature order.
LEARNED_CHANNELS: tuple[str, ...] = ("bm25", "dense", "best_element", "page_dense")
#: Feature groups (module docstring) and the nested feature sets the selection searches: each set alone, then
#: each set with the unpenalised ``anchor`` column (a correction to ``hybrid_elements``' ranking).
FEATURE_GROUPS: tuple[str, ...] = ("ranks", "agree", "scores", "doc", "question", "anchor")
_NESTED: dict[str, tuple[str, ...]] = {
    "ranks": ("ranks",),
    "ranks_agree": ("ranks", "agree"),
    "ranks_agree_scores": ("ranks", "agree", "scores"),
    "ranks_agree_scores_doc": ("ranks", "agree", "scores", "doc"),
    "all": ("ranks", "agree", "scores", "doc", "question"),
}
FEATURE_SETS: dict[str, tuple[str, ...]] = {**_NESTED, **{f"anchor+{n}": (*g, "anchor") for n, g in _NESTED.items()}}
#: The anchor column's name; :func:`fit_ranker` does not penalise columns whose name starts with ``anchor_``.
ANCHOR_FEATURE = "anchor_hybrid_elements"
#: The anchor's channels and RRF constant: ``hybrid_elements``' page fusion (``HYBRID_PRESETS``).
ANCHOR_CHANNELS: tuple[str, ...] = ("bm25", "dense")
ANCHOR_K = 60.0
#: Where the shipped model lives.
DEFAULT_MODEL_PATH = Path(__file__).with_name("learned_fusion.json")
_AGREE_TOPS = (1, 3, 5, 10)
_DIGIT = re.compile(r"\d")
_WORD = re.compile(r"\w+")


def document_features(graph: EvidenceGraph) -> dict[str, float]:
    """What the ranker knows of a document: pages, text density, share of image-only pages."""
    from mage_gym.retrieval.hybrid import document_text_density

    density = document_text_density(graph)
    n = max(1, graph.n_pages)
    return {"n_pages": float(graph.n_pages), "chars_per_element": density["chars_per_element"],
            "mean_page_chars": density["mean_page_chars"],
            "image_only_share": sum(1 for p in graph.pages if p.image_only) / n}


def question_features(text: str) -> dict[str, float]:
    """What the ranker knows of a question: its length in word tokens and whether it holds a digit."""
    return {"n_tokens": float(len(_WORD.findall(text or ""))), "has_digit": float(bool(_DIGIT.search(text or "")))}


def best_element_scores(element_scores: np.ndarray, element_page: np.ndarray, n_pages: int) -> np.ndarray:
    """Each page's best element score (0 for a page without elements), float32 [n_pages]."""
    best = np.zeros(n_pages, dtype=np.float32)
    if len(element_page):
        best[:] = -np.inf
        np.maximum.at(best, element_page, np.asarray(element_scores, dtype=np.float32))
        best[~np.isfinite(best)] = 0.0
    return best


def _rank_features(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(competition rank with not-retrieved pages tied last, percentile, reciprocal rank or 0)."""
    s = np.asarray(scores, dtype=np.float64)
    n = len(s)
    retrieved = np.isfinite(s) & (s != 0)
    rank = competition_ranks(np.where(retrieved, s, -np.inf)).astype(np.float64)
    pct = 1.0 - (rank - 1.0) / max(1, n)
    rr = np.where(retrieved, 1.0 / rank, 0.0)
    return np.where(retrieved, rank, np.inf), pct, rr


def feature_names(groups: Sequence[str]) -> list[str]:
    """Column names of :func:`page_features` for ``groups`` (in :data:`FEATURE_GROUPS` order)."""
    unknown = set(groups) - set(FEATURE_GROUPS)
    if unknown or "ranks" not in groups:
        raise ValueError(f"feature groups must include 'ranks' and come from {FEATURE_GROUPS}, got {list(groups)}")
    base = [f"{kind}_{c}" for c in LEARNED_CHANNELS for kind in ("pct", "rr")]
    names: list[str] = []
    for g in FEATURE_GROUPS:
        if g not in groups:
            continue
        if g == "ranks":
            names += base
        elif g == "agree":
            names += [f"n_top{t}" for t in _AGREE_TOPS] + ["best_rr", "rrf60"]
        elif g == "scores":
            names += [f"z_{c}" for c in LEARNED_CHANNELS]
        elif g == "doc":
            names += [f"{b}*{d}" for d in ("log_pages", "log_chars_per_element", "image_only_share") for b in base]
        elif g == "question":
            names += [f"{b}*{q}" for q in ("log_tokens", "has_digit") for b in base]
        elif g == "anchor":
            names.append(ANCHOR_FEATURE)
    return names


def anchor_scores(channel_scores: Mapping[str, np.ndarray]) -> np.ndarray:
    """The element channel's page scores (``hybrid_elements``: RRF of bm25 and dense, k 60), float64 [n_pages]."""
    return np.asarray(rrf([channel_scores[c] for c in ANCHOR_CHANNELS], [1.0] * len(ANCHOR_CHANNELS), ANCHOR_K),
                      dtype=np.float64)


def page_features(channel_scores: Mapping[str, np.ndarray], doc: Mapping[str, float], question: str,
                  groups: Sequence[str]) -> np.ndarray:
    """Per-page feature matrix float64 [n_pages, len(feature_names(groups))] (raw, not standardised).

    ``channel_scores`` holds each of :data:`LEARNED_CHANNELS` as page scores;
    ``doc`` is :func:`document_features` of the document.
    """
    names = feature_names(groups)  # validates groups
    missing = [c for c in LEARNED_CHANNELS if c not in channel_scores]
    if missing:
        raise ValueError(f"channel scores missing for {missing}")
    n = len(channel_scores[LEARNED_CHANNELS[0]])
    ranks, cols = [], []
    for c in LEARNED_CHANNELS:
        s = np.asarray(channel_scores[c], dtype=np.float64)
        if s.shape != (n,):
            raise ValueError(f"channel {c!r} scores have shape {s.shape}, expected ({n},)")
        rank, pct, rr = _rank_features(s)
        ranks.append(rank)
        cols += [pct, rr]
    base = np.stack(cols, axis=1) if n else np.zeros((0, len(cols)))
    blocks = []
    for g in FEATURE_GROUPS:
        if g not in groups:
            continue
        if g == "ranks":
            blocks.append(base)
        elif g == "agree":
            r = np.stack(ranks, axis=1)
            rr = base[:, 1::2]
            agree = [np.sum(r <= t, axis=1).astype(np.float64) for t in _AGREE_TOPS]
            agree += [rr.max(axis=1) if n else np.zeros(0), np.sum(1.0 / (60.0 + r), axis=1)]
            blocks.append(np.stack(agree, axis=1) if n else np.zeros((0, len(agree))))
        elif g == "scores":
            blocks.append(np.stack([normalized(channel_scores[c], "z") for c in LEARNED_CHANNELS], axis=1)
                          if n else np.zeros((0, len(LEARNED_CHANNELS))))
        elif g == "doc":
            d = (math.log1p(float(doc["n_pages"])), math.log1p(float(doc["chars_per_element"])),
                 float(doc["image_only_share"]))
            blocks += [base * v for v in d]
        elif g == "question":
            qf = question_features(question)
            blocks += [base * math.log1p(qf["n_tokens"]), base * qf["has_digit"]]
        elif g == "anchor":
            blocks.append(anchor_scores(channel_scores)[:, None])
    x = np.concatenate(blocks, axis=1)
    assert x.shape[1] == len(names)
    return x


@dataclass(frozen=True)
class LinearRanker:
    """Page scores ``((x - mean) / std) @ weights`` over the features of ``groups``.

    The JSON form (:meth:`to_json` / :meth:`load`) keeps feature names so a
    file fitted on another feature set cannot be applied silently.
    """

    groups: tuple[str, ...]
    names: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray
    l2: float
    meta: Mapping[str, Any]

    def __post_init__(self) -> None:
        if list(self.names) != feature_names(self.groups):
            raise ValueError("feature names do not match the feature groups (model from another version?)")
        d = len(self.names)
        if not (self.mean.shape == self.std.shape == self.weights.shape == (d,)):
            raise ValueError(f"model arrays must have shape ({d},)")
        if not (np.all(np.isfinite(self.weights)) and np.all(self.std > 0)):
            raise ValueError("model weights must be finite and scales positive")

    def score_features(self, x: np.ndarray) -> np.ndarray:
        """Scores float32 [n] of a raw feature matrix (float32: the precision every caller ranks with)."""
        return (((x - self.mean) / self.std) @ self.weights).astype(np.float32)

    def score_pages(self, channel_scores: Mapping[str, np.ndarray], doc: Mapping[str, float],
                    question: str) -> np.ndarray:
        return self.score_features(page_features(channel_scores, doc, question, self.groups))

    def to_json(self) -> dict[str, Any]:
        return {"groups": list(self.groups), "l2": self.l2, "features": [
            {"name": n, "mean": float(m), "std": float(s), "weight": float(w)}
            for n, m, s, w in zip(self.names, self.mean, self.std, self.weights)], "meta": dict(self.meta)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LinearRanker":
        feats = data["features"]
        return cls(groups=tuple(data["groups"]), names=tuple(f["name"] for f in feats),
                   mean=np.array([f["mean"] for f in feats], dtype=np.float64),
                   std=np.array([f["std"] for f in feats], dtype=np.float64),
                   weights=np.array([f["weight"] for f in feats], dtype=np.float64),
                   l2=float(data["l2"]), meta=dict(data.get("meta", {})))

    @classmethod
    def load(cls, path: str | Path | None = None) -> "LinearRanker":
        return cls.from_json(json.loads(Path(path or DEFAULT_MODEL_PATH).read_text()))

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return p


@dataclass(frozen=True)
class RankingExample:
    """One training question: its pages' raw features (rows the ranker may choose from) and gold rows."""

    features: np.ndarray  # float64 [n_rows, d]
    gold: tuple[int, ...]  # row indices of gold pages (at least one)


def fit_ranker(examples: Sequence[RankingExample], groups: Sequence[str], l2: float,
               meta: Mapping[str, Any] | None = None, max_iter: int = 2000) -> LinearRanker:
    """Fit a :class:`LinearRanker` by the listwise softmax loss with an L2 penalty (module docstring).

    Loss: mean over questions of ``logsumexp(s) - mean(s[gold])`` with
    ``s = standardised features @ w``, plus ``l2 / 2 * |w|^2`` over every
    weight but the ``anchor`` column's (so a strong penalty leaves the anchor's
    order, not a flat score). Convex, so L-BFGS from zero reaches the same
    optimum every run (unique unless the anchor alone separates gold from the
    rest in every question, which real data does not). Standardisation
    uses the mean and standard deviation over all training rows (a constant
    column gets scale 1 and, carrying no ranking signal, weight 0).
    """
    from scipy.optimize import minimize

    examples = [e for e in examples if e.gold and len(e.features)]
    if not examples:
        raise ValueError("no training question with gold pages")
    if l2 <= 0:
        raise ValueError(f"l2 must be > 0 (it keeps the optimum unique), got {l2}")
    names = feature_names(groups)
    x = np.concatenate([e.features for e in examples], axis=0)
    if x.shape[1] != len(names):
        raise ValueError(f"examples have {x.shape[1]} features, the groups {list(groups)} have {len(names)}")
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std = np.where(std > 1e-12, std, 1.0)
    z = (x - mean) / std
    sizes = np.array([len(e.features) for e in examples])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    seg = np.repeat(np.arange(len(examples)), sizes)
    target = np.zeros(len(z))
    for e, s0 in zip(examples, starts):
        target[s0 + np.asarray(e.gold)] = 1.0 / len(e.gold)
    nq = len(examples)
    penalised = np.array([not n.startswith("anchor_") for n in names], dtype=np.float64)

    def loss_grad(w: np.ndarray) -> tuple[float, np.ndarray]:
        s = z @ w
        smax = np.maximum.reduceat(s, starts)
        e = np.exp(s - smax[seg])
        tot = np.add.reduceat(e, starts)
        lse = smax + np.log(tot)
        p = e / tot[seg]
        wp = w * penalised
        loss = float(np.sum(lse) - target @ s) / nq + 0.5 * l2 * float(wp @ wp)
        grad = z.T @ (p - target) / nq + l2 * wp
        return loss, grad

    res = minimize(loss_grad, np.zeros(len(names)), jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "gtol": 1e-9, "ftol": 1e-14})
    info = {"questions": nq, "rows": int(len(z)), "loss": float(res.fun), "iterations": int(res.nit),
            "converged": bool(res.success)}
    return LinearRanker(groups=tuple(g for g in FEATURE_GROUPS if g in groups), names=tuple(names), mean=mean,
                        std=std, weights=np.asarray(res.x, dtype=np.float64), l2=float(l2),
                        meta={**(dict(meta) if meta else {}), "fit": info})


class LearnedFusionHybrid(HybridRetriever):
    """Pages ranked by a :class:`LinearRanker` over bm25, dense (pages and best element) and page_dense.

    Elements are fused as ``hybrid_elements`` fuses them (RRF of bm25 and
    dense, k ``element_k``): the page-text channel gives every element of a
    page its page's score. ``model``: a :class:`LinearRanker`, a path to its
    JSON, or None for the shipped ``learned_fusion.json``. Document features
    and the element-to-page map are computed once per graph and cached.
    """

    COMPONENTS = ("bm25", "dense", "page_dense")

    def __init__(self, components: Mapping[str, Retriever] | None = None, model: LinearRanker | str | Path | None = None,
                 element_k: float = 60.0, ignore_zero: bool = True, name: str = "hybrid_learned",
                 max_graphs: int = 8) -> None:
        if components is None:
            from mage_gym.retrieval.bm25 import BM25Retriever
            from mage_gym.retrieval.dense import DenseRetriever
            from mage_gym.retrieval.page_text import PageTextDenseRetriever

            components = {"bm25": BM25Retriever(), "dense": DenseRetriever(), "page_dense": PageTextDenseRetriever()}
        if set(components) != set(self.COMPONENTS):
            raise ValueError(f"the learned fusion reads exactly {self.COMPONENTS}, got {sorted(components)}")
        super().__init__(components={n: components[n] for n in self.COMPONENTS}, k=element_k,
                         ignore_zero=ignore_zero, element_weights={"bm25": 1.0, "dense": 1.0, "page_dense": 0.0},
                         element_k=element_k, name=name)
        self.model = model if isinstance(model, LinearRanker) else LinearRanker.load(model)
        self._docs: Cache[tuple[dict[str, float], np.ndarray]] = Cache("retrieval.hybrid_learned.documents",
                                                                     max_graphs, per_graph=True)

    @staticmethod
    def _document(graph: EvidenceGraph) -> tuple[dict[str, float], np.ndarray]:
        el_page = np.fromiter((e.page for e in graph.elements), dtype=np.intp, count=graph.n_elements)
        return document_features(graph), el_page

    def fuse(self, components: Mapping[str, Scores]) -> Scores:  # type: ignore[override]
        """Not available: the model also reads the document and the question (use :meth:`score_with_components`)."""
        raise TypeError("a learned fusion needs the graph and the query; call score_with_components")

    def fuse_pages(self, graph: EvidenceGraph, query: Query, components: Mapping[str, Scores]) -> np.ndarray:
        """The model's page scores (float32 [n_pages]) from the components' scores."""
        doc, el_page = self._docs.get(graph, None, lambda: self._document(graph))
        channels = {"bm25": components["bm25"].pages, "dense": components["dense"].pages,
                    "best_element": best_element_scores(components["dense"].elements, el_page, graph.n_pages),
                    "page_dense": components["page_dense"].pages}
        return self.model.score_pages(channels, doc, query.text)

    def score_with_components(self, graph: EvidenceGraph, query: Query) -> tuple[Scores, dict[str, Scores]]:
        comps = self.score_components(graph, query)
        names = list(self.COMPONENTS)
        elements = rrf([comps[n].elements for n in names], [self.element_weights[n] for n in names],
                       self.element_k, self.ignore_zero)
        return Scores(pages=self.fuse_pages(graph, query, comps), elements=elements), comps

    def score(self, graph: EvidenceGraph, query: Query) -> Scores:
        return self.score_with_components(graph, query)[0]
