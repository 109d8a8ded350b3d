"""The learned fusion's choice (``--select-learned``): a linear ranker fitted on TRAIN, its setting chosen on VAL.

The ranker itself lives in ``mage_gym.retrieval.learned_fusion`` (what
``hybrid_learned`` ships); this module only searches its grid of feature sets
and penalties with the bar margin of ``fusion_adaptive``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from experiments.quality.fusion_adaptive import bar_margins, bar_targets
from experiments.quality.page_scores import QuestionScores

#: The learned fusion's grid: nested feature sets (mage_gym.retrieval.learned_fusion.FEATURE_SETS, simplest first)
#: and L2 penalties (strongest first: on a tie the simpler, more regularised model wins).
LEARNED_L2 = (10.0, 1.0, 0.1, 0.01, 0.001)
LEARNED_SELECTION_RULE = (
    "A linear ranker over per-page features (mage_gym.retrieval.learned_fusion: each channel's percentile and "
    "reciprocal rank in the document for bm25, dense, best_element, page_dense; then, nested, channel agreement "
    "(how many channels rank the page in their top 1/3/5/10, best reciprocal rank, RRF sum), per-document "
    "z-scored channel scores, the rank features crossed with document features (log pages, log characters per "
    "element, share of image-only pages), and crossed with question features (log tokens, has a digit); each "
    "nested set also with the anchor, the element channel's own page score (hybrid_elements: RRF of bm25 and "
    "dense, k 60) left out of the penalty, so a strong penalty keeps hybrid_elements' order), scored as "
    "standardised features x weights. Fitted on the TRAIN splits of all datasets pooled (each question once: "
    "softmax over its pages inside its page window, target spread evenly over its gold pages; L2 penalty; L-BFGS "
    "from zero). Grid: the 5 nested feature sets, then the same 5 with the anchor, x L2 in {10, 1, 0.1, 0.01, "
    "0.001}. Chosen on the VAL splits by the bar margin of ADAPTIVE_SELECTION_RULE: the largest worst-dataset val"
    " margin (summed recall@5 minus the best of hybrid_elements, page_text, and page_dense on financebench, in "
    "questions); ties: pooled val recall@5 (each question once), then grid order (unanchored sets first, fewer "
    "features, stronger penalty). The chosen setting's train fit is the shipped model. Test splits are never "
    "read.")


def ranking_example(q: QuestionScores, groups: tuple[str, ...]):
    """A question as a training example: features of the pages inside its window, gold rows among them."""
    from mage_gym.retrieval.learned_fusion import RankingExample, page_features

    x = page_features(q.scores, q.doc, q.question, groups)
    rows = np.flatnonzero(q.inside) if q.inside is not None and q.inside.any() else np.arange(len(x))
    where = {int(p): i for i, p in enumerate(rows)}
    return RankingExample(features=x[rows], gold=tuple(where[g] for g in q.gold if g in where))


def learned_settings() -> list[dict[str, Any]]:
    """The learned fusion's grid in preference order (the last tie-break)."""
    from mage_gym.retrieval.learned_fusion import FEATURE_SETS

    return [{"family": "learned", "features": fs, "l2": l2} for fs in FEATURE_SETS for l2 in LEARNED_L2]


def fit_learned(train: list[QuestionScores], setting: dict[str, Any], meta: dict[str, Any] | None = None):
    """Fit one grid setting's ranker on the pooled train questions."""
    from mage_gym.retrieval.learned_fusion import FEATURE_SETS, fit_ranker

    groups = FEATURE_SETS[setting["features"]]
    examples = [ranking_example(q, groups) for q in train]
    return fit_ranker(examples, groups, setting["l2"], meta=meta)


def select_learned(data: dict[str, dict[str, list[QuestionScores]]]) -> tuple[dict[str, Any], Any]:
    """Choose the learned fusion by :data:`LEARNED_SELECTION_RULE`; returns the report block and the chosen model."""
    splits = {sp: {ds: by[sp] for ds, by in data.items() if by.get(sp)} for sp in ("train", "val")}
    if not splits["val"]:
        raise ValueError("--select-learned chooses on the val splits: run with --splits including val")
    targets = {sp: bar_targets(qs) for sp, qs in splits.items()}
    train = [q for qs in splits["train"].values() for q in qs]
    settings = learned_settings()
    rows, models = [], []
    for setting in settings:
        model = fit_learned(train, setting)
        scored = {**setting, "model": model}
        row = {"setting": setting, "features": len(model.names), "fit": dict(model.meta["fit"]),
               "train": bar_margins(splits["train"], scored, targets["train"]),
               "val": bar_margins(splits["val"], scored, targets["val"])}
        rows.append(row)
        models.append(model)
    best = min(range(len(rows)), key=lambda i: (-round(rows[i]["val"]["worst_margin"], 9),
                                               -round(rows[i]["val"]["pooled_recall5"], 9), i))
    chosen = rows[best]
    return ({"rule": LEARNED_SELECTION_RULE,
             "questions": {sp: {ds: len(qs) for ds, qs in by.items()} for sp, by in splits.items()},
             "targets_recall5_sums": targets,
             "grid": {"feature_sets": list(dict.fromkeys(s["features"] for s in settings)), "l2": list(LEARNED_L2),
                      "settings": len(rows)},
             "settings": rows, "chosen": chosen["setting"], "chosen_train": chosen["train"],
             "chosen_val": chosen["val"],
             "meets_bar_on_train": bool(chosen["train"]["worst_margin"] >= -1e-9),
             "meets_bar_on_val": bool(chosen["val"]["worst_margin"] >= -1e-9)}, models[best])


def learned_model_matches(shipped: Any, fitted: Any) -> bool:
    """Whether the shipped ``learned_fusion.json`` is the chosen setting's train fit (same features, penalty,
    weights and scales up to the fit's tolerance)."""
    if shipped is None or shipped.names != fitted.names or shipped.l2 != fitted.l2:
        return False
    return bool(np.allclose(shipped.weights, fitted.weights, rtol=1e-5, atol=1e-6)
                and np.allclose(shipped.mean, fitted.mean, rtol=1e-9, atol=1e-12)
                and np.allclose(shipped.std, fitted.std, rtol=1e-9, atol=1e-12))
