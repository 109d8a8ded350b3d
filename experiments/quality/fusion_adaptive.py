"""Adaptive fusion families aimed at issue 19's bar (``--select-adaptive``), and the bar margin they share.

Four families (weighted RRF, normalised score sums, interleaving, a density
gate), each with parameters chosen on TRAIN and the family on VAL by the
worst dataset's bar margin (``ADAPTIVE_SELECTION_RULE``). ``fused_scores``
scores any candidate of any family, the learned one included, so every
selection measures its settings the same way.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from experiments.quality.fusion_grid import GRID_CHANNELS, GRID_K, grid_settings
from experiments.quality.page_scores import QuestionScores, bar_rivals, page_recall, ranked_pages

#: Gate grids: the document text density a gate reads, and the values of ``lo`` searched for it.
GATE_LO = {"chars_per_element": (60.0, 80.0, 100.0, 120.0, 150.0), "mean_page_chars": (500.0, 1000.0, 1500.0, 2000.0,
                                                                                        2500.0)}
#: Gate widths as multiples of ``lo`` (0: a step at ``lo``) and the RRF constants of the gated family.
GATE_WIDTH = (0.0, 0.5, 1.0, 2.0)
GATE_K = (30.0, 60.0, 120.0)
NORMALISATIONS = ("z", "minmax")
FAMILIES = ("rrf", "norm", "interleave", "gated")
ADAPTIVE_SELECTION_RULE = (
    "Four fusion families over bm25, dense and page_dense, each with a fixed grid: rrf (relative weights in "
    "{0, 1/4, 1/2, 1}, largest 1, k in {15, 30, 60, 120}); norm (weighted sum of per-question z-scored or min-max "
    "scaled scores, the same weights); interleave (pages taken alternately from the hybrid_elements and page_text "
    "rankings, either one leading); gated (RRF with weights bm25 1, dense 1 - g, page_dense g, where "
    "g = clip((d - lo) / width, 0, 1) and d is the document's characters per element (lo in {60, 80, 100, 120, 150}) "
    "or mean characters per page (lo in {500, 1000, 1500, 2000, 2500}), width = lo x {0 (a step), 1/2, 1, 2}, "
    "k in {30, 60, 120}). Bar margin of a setting on one dataset's split: its summed recall@5 minus the largest "
    "summed recall@5 of hybrid_elements, page_text (and page_dense on financebench) there, in questions. Step 1, "
    "TRAIN splits only: in each family, the setting with the largest worst-dataset margin; ties: pooled train "
    "recall@5 (each question once), then grid order. Step 2, VAL splits: among the four family winners, the one "
    "with the largest worst-dataset val margin; ties: pooled val recall@5. Test splits are never read.")


def adaptive_settings() -> list[dict[str, Any]]:
    """Every candidate of :data:`FAMILIES`, in grid order (earlier = simpler, the last tie-break)."""
    out: list[dict[str, Any]] = [{"family": "rrf", **s} for s in grid_settings()]
    weights = [s["weights"] for s in grid_settings() if s["k"] == GRID_K[0]]
    out += [{"family": "norm", "how": how, "weights": w} for how in NORMALISATIONS for w in weights]
    out += [{"family": "interleave", "first": first} for first in ("hybrid_elements", "page_text")]
    out += [{"family": "gated", "feature": feat, "lo": lo, "width": lo * wf, "k": k}
            for feat, los in GATE_LO.items() for lo in los for wf in GATE_WIDTH for k in GATE_K]
    return out


def _rival_scores(q: QuestionScores) -> dict[str, np.ndarray]:
    """The bar's rivals as page scores: hybrid_elements and page_text (RRF, k 60) and page_dense alone."""
    from mage_gym.retrieval.fusion import rrf

    return {"hybrid_elements": rrf([q.scores["bm25"], q.scores["dense"]], [1.0, 1.0], 60.0),
            "page_text": rrf([q.scores["bm25"], q.scores["page_dense"]], [1.0, 1.0], 60.0),
            "page_dense": q.scores["page_dense"]}


def fused_scores(q: QuestionScores, setting: dict[str, Any]) -> np.ndarray:
    """One question's page scores under one :func:`adaptive_settings` candidate (library fusion functions)."""
    from mage_gym.retrieval.fusion import density_gate, interleave_scores, normalized_sum, rrf

    fam = setting["family"]
    arrays = [q.scores[ch] for ch in GRID_CHANNELS]
    if fam == "rrf":
        return rrf(arrays, [setting["weights"][ch] for ch in GRID_CHANNELS], setting["k"])
    if fam == "norm":
        return normalized_sum(arrays, [setting["weights"][ch] for ch in GRID_CHANNELS], setting["how"])
    if fam == "interleave":
        rivals = _rival_scores(q)
        other = "page_text" if setting["first"] == "hybrid_elements" else "hybrid_elements"
        return interleave_scores(rivals[setting["first"]], rivals[other])
    if fam == "gated":
        g = density_gate(q.density[setting["feature"]], setting["lo"], setting["width"])
        return rrf(arrays, [1.0, 1.0 - g, g], setting["k"])
    if fam == "learned":  # a fitted LinearRanker (mage_gym.retrieval.learned_fusion), as hybrid_learned scores
        return setting["model"].score_pages(q.scores, q.doc, q.question)
    raise ValueError(f"unknown fusion family {fam!r}")


def _recall5(q: QuestionScores, scores: np.ndarray) -> float:
    return page_recall(ranked_pages(scores, q.inside, 5), q.gold)


def bar_targets(questions: dict[str, list[QuestionScores]]) -> dict[str, float]:
    """Per dataset, the summed recall@5 a fused retriever must reach (the bar's best rival on these questions)."""
    out = {}
    for ds, qs in questions.items():
        rivals = bar_rivals(ds)
        sums = {r: 0.0 for r in rivals}
        for q in qs:
            sc = _rival_scores(q)
            for r in rivals:
                sums[r] += _recall5(q, sc[r])
        out[ds] = max(sums.values())
    return out


def bar_margins(questions: dict[str, list[QuestionScores]], setting: dict[str, Any],
                targets: dict[str, float]) -> dict[str, Any]:
    """A setting's summed recall@5 per dataset, its margin over the bar's target, the worst margin and pooled R@5."""
    sums = {ds: float(sum(_recall5(q, fused_scores(q, setting)) for q in qs)) for ds, qs in questions.items()}
    n = sum(len(qs) for qs in questions.values())
    margins = {ds: sums[ds] - targets[ds] for ds in questions}
    return {"recall5": {ds: sums[ds] / len(qs) for ds, qs in questions.items()}, "margin_questions": margins,
            "worst_margin": min(margins.values()), "pooled_recall5": sum(sums.values()) / n if n else 0.0}


def select_adaptive(data: dict[str, dict[str, list[QuestionScores]]]) -> dict[str, Any]:
    """Choose a fusion by :data:`ADAPTIVE_SELECTION_RULE`: parameters per family on TRAIN, the family on VAL."""
    splits = {sp: {ds: by[sp] for ds, by in data.items() if by.get(sp)} for sp in ("train", "val")}
    targets = {sp: bar_targets(qs) for sp, qs in splits.items()}
    settings = adaptive_settings()
    winners: dict[str, dict[str, Any]] = {}
    for fam in FAMILIES:
        best = None
        for order, s in enumerate(x for x in settings if x["family"] == fam):
            row = {"setting": s, "train": bar_margins(splits["train"], s, targets["train"])}
            key = (-round(row["train"]["worst_margin"], 9), -round(row["train"]["pooled_recall5"], 9), order)
            if best is None or key < best[0]:
                best = (key, row)
        assert best is not None
        row = best[1]
        row["val"] = bar_margins(splits["val"], row["setting"], targets["val"]) if splits["val"] else None
        winners[fam] = row
    ranked = sorted(FAMILIES, key=lambda f: (-round(winners[f]["val"]["worst_margin"], 9),
                                             -round(winners[f]["val"]["pooled_recall5"], 9)) if winners[f]["val"]
                    else (0.0, 0.0))
    chosen = winners[ranked[0]]
    return {"rule": ADAPTIVE_SELECTION_RULE,
            "questions": {sp: {ds: len(qs) for ds, qs in by.items()} for sp, by in splits.items()},
            "targets_recall5_sums": targets,
            "grid_sizes": {f: sum(1 for s in settings if s["family"] == f) for f in FAMILIES},
            "family_winners": winners, "chosen_family": ranked[0], "chosen": chosen["setting"],
            "meets_bar_on_train": bool(chosen["train"]["worst_margin"] >= -1e-9),
            "meets_bar_on_val": None if chosen["val"] is None else bool(chosen["val"]["worst_margin"] >= -1e-9)}


def adaptive_preset_matches(preset: dict[str, Any], chosen: dict[str, Any]) -> bool:
    """Whether ``hybrid_adaptive``'s preset (``hybrid.HYBRID_ADAPTIVE``) is the chosen gated setting."""
    if chosen.get("family") != "gated":
        return False
    return (preset.get("feature") == chosen["feature"] and float(preset.get("bm25_weight", 1.0)) == 1.0
            and all(abs(float(preset[k]) - float(chosen[k])) < 1e-9 for k in ("lo", "width", "k")))
