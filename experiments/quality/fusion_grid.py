"""Issue 19's fusion choice on the TRAIN splits: one weighted-RRF setting for all datasets (``--select``).

The rule (``SELECTION_RULE``) is fixed before the figures it picks; val splits
only confirm. ``RankCache`` computes each channel's ranks once so the grid of a
few hundred settings costs a few seconds.
"""
from __future__ import annotations

import argparse
import itertools
from typing import Any

import numpy as np

from experiments.quality.page_scores import QuestionScores, page_recall, ranked_pages


class RankCache:
    """Competition ranks of each channel per question (what RRF uses), computed once for the grid."""

    def __init__(self, questions: list[QuestionScores], channels: tuple[str, ...]) -> None:
        from mage_gym.retrieval.fusion import competition_ranks

        self.questions = questions
        self.channels = channels
        self.ranks: list[dict[str, np.ndarray]] = []
        for q in questions:
            per: dict[str, np.ndarray] = {}
            for ch in channels:
                s = np.asarray(q.scores[ch], dtype=np.float64)
                retrieved = np.isfinite(s) & (s != 0)
                r = competition_ranks(np.where(retrieved, s, -np.inf)).astype(np.float64)
                per[ch] = np.where(retrieved, r, np.inf)  # 1/(k+inf) = 0: not retrieved
            self.ranks.append(per)

    def recall(self, weights: dict[str, float], k_rrf: float, ks: tuple[int, ...]) -> dict[int, float]:
        hits = {k: [] for k in ks}
        for q, per in zip(self.questions, self.ranks):
            fused = np.zeros(len(next(iter(per.values()))), dtype=np.float64)
            for ch, w in weights.items():
                if w:
                    fused += w / (k_rrf + per[ch])
            order = ranked_pages(fused.astype(np.float32), q.inside, max(ks))
            for k in ks:
                hits[k].append(page_recall(order[:k], q.gold))
        return {k: float(np.mean(v)) for k, v in hits.items()}


#: The fused channels the grid weighs, and the reference every candidate must not fall behind:
#: ``hybrid_elements`` (mage_gym.retrieval.HYBRID_PRESETS) is bm25 + dense at k = 60 with equal weights.
GRID_CHANNELS = ("bm25", "dense", "page_dense")
REFERENCE = {"weights": {"bm25": 1.0, "dense": 1.0, "page_dense": 0.0}, "k": 60.0}
#: Relative weights (the largest is 1: RRF ranks do not change when all weights are scaled) and RRF constants.
GRID_WEIGHTS = (0.0, 0.25, 0.5, 1.0)
GRID_K = (15.0, 30.0, 60.0, 120.0)
#: A candidate may lose at most this much summed recall@5 against the reference on any dataset's train split
#: (one question's worth: a question with one gold page that drops out of the top 5).
MAX_TRAIN_LOSS_QUESTIONS = 1.0
SELECTION_RULE = (
    "grid: relative RRF weights for bm25, dense, page_dense in {0, 1/4, 1/2, 1} with the largest 1, k in "
    "{15, 30, 60, 120}. Admissible: on every dataset's train split, summed recall@5 over its questions is at most "
    "one question below hybrid_elements (bm25 + dense, k 60). Chosen: the admissible setting with the best train "
    "recall@5 pooled over all train questions (each question counts once, whatever its dataset); ties: pooled "
    "mean recall over k, then the setting closest to equal weights and k 60. Val splits only confirm: the same "
    "admissibility test and pooled recall@5 against hybrid_elements, reported, not used to choose.")


def grid_settings() -> list[dict[str, Any]]:
    """The candidate fusions: every weight vector over :data:`GRID_WEIGHTS` whose largest weight is 1, times k."""
    weights = [dict(zip(GRID_CHANNELS, w)) for w in itertools.product(GRID_WEIGHTS, repeat=len(GRID_CHANNELS))
               if max(w) == 1.0]
    return [{"weights": w, "k": k} for w, k in itertools.product(weights, GRID_K)]


def _recall_sums(cache: RankCache, setting: dict[str, Any], ks: tuple[int, ...]) -> dict[int, float]:
    """Summed (not mean) recall at each k over a split's questions: pooling and losses count questions."""
    rec = cache.recall(setting["weights"], setting["k"], ks)
    return {k: v * len(cache.questions) for k, v in rec.items()}


def evaluate_setting(caches: dict[str, RankCache], setting: dict[str, Any], ks: tuple[int, ...],
                     reference: dict[str, dict[int, float]]) -> dict[str, Any]:
    """Per-dataset and pooled recall of one setting on one split, and its loss against the reference.

    ``reference`` holds the reference's summed recall per dataset; ``loss5`` is, per dataset, how many
    questions' worth of recall@5 the setting loses against it (negative: it gains).
    """
    sums = {ds: _recall_sums(rc, setting, ks) for ds, rc in caches.items()}
    n = {ds: len(rc.questions) for ds, rc in caches.items()}
    total = sum(n.values())
    pooled = {k: sum(s[k] for s in sums.values()) / total for k in ks} if total else {k: 0.0 for k in ks}
    loss5 = {ds: reference[ds][5] - sums[ds][5] for ds in caches}
    return {"weights": setting["weights"], "k": setting["k"],
            "recall5": {ds: sums[ds][5] / n[ds] for ds in caches},
            "pooled_recall5": pooled[5], "pooled_recall_mean": float(np.mean(list(pooled.values()))),
            "loss5_questions": loss5,
            "admissible": all(v <= MAX_TRAIN_LOSS_QUESTIONS + 1e-9 for v in loss5.values())}


def _distance(setting: dict[str, Any]) -> float:
    """How far a setting is from equal weights and k 60 (the last tie-break: prefer the plain fusion)."""
    return sum(abs(w - 1.0) for w in setting["weights"].values()) + abs(float(np.log(setting["k"] / 60.0)))


def _preference(row: dict[str, Any]) -> tuple[float, float, float]:
    """Sort key, best first: pooled recall@5, then pooled mean recall over k, then :func:`_distance`."""
    return -round(row["pooled_recall5"], 9), -round(row["pooled_recall_mean"], 9), _distance(row)


def same_fusion(preset: dict[str, Any], setting: dict[str, Any]) -> bool:
    """Whether a hybrid preset ranks pages as ``setting`` does: same k, same weights up to a common scale."""
    def relative(w: dict[str, float]) -> dict[str, float]:
        full = {ch: float(w.get(ch, 1.0)) for ch in GRID_CHANNELS}
        top = max(full.values())
        return {ch: v / top for ch, v in full.items()}

    comps = set(preset.get("components", GRID_CHANNELS))
    weights = {ch: (float(preset.get("weights", {}).get(ch, 1.0)) if ch in comps else 0.0) for ch in GRID_CHANNELS}
    return float(preset.get("k", 60.0)) == float(setting["k"]) and all(
        abs(a - b) < 1e-9 for a, b in zip(relative(weights).values(), relative(setting["weights"]).values()))


def select_fusion(data: dict[str, dict[str, list[QuestionScores]]], args: argparse.Namespace) -> dict[str, Any]:
    """Choose one RRF setting for all datasets on the TRAIN splits (rule: :data:`SELECTION_RULE`); report val."""
    ks = tuple(args.ks)
    caches = {split: {ds: RankCache(sp[split], GRID_CHANNELS) for ds, sp in data.items() if sp.get(split)}
              for split in ("train", "val")}
    ref_sums = {split: {ds: _recall_sums(rc, REFERENCE, ks) for ds, rc in cs.items()} for split, cs in caches.items()}
    rows = [evaluate_setting(caches["train"], s, ks, ref_sums["train"]) for s in grid_settings()]
    admissible = [r for r in rows if r["admissible"]]
    admissible.sort(key=_preference)
    best = admissible[0]  # the reference itself is in the grid and loses nothing, so there is always one
    chosen = {"weights": best["weights"], "k": best["k"]}
    ref_train = evaluate_setting(caches["train"], REFERENCE, ks, ref_sums["train"])
    val = evaluate_setting(caches["val"], chosen, ks, ref_sums["val"]) if caches["val"] else None
    ref_val = evaluate_setting(caches["val"], REFERENCE, ks, ref_sums["val"]) if caches["val"] else None
    out: dict[str, Any] = {
        "rule": SELECTION_RULE,
        "train_questions": {ds: len(rc.questions) for ds, rc in caches["train"].items()},
        "val_questions": {ds: len(rc.questions) for ds, rc in caches["val"].items()},
        "grid": {"channels": list(GRID_CHANNELS), "weights": list(GRID_WEIGHTS), "k": list(GRID_K),
                 "settings": len(rows), "admissible": len(admissible)},
        "reference": {**REFERENCE, "train": ref_train, "val": ref_val},
        "chosen": chosen,
        "chosen_train": best,
        "chosen_val": val,
        "val_confirms": None if val is None or ref_val is None else bool(
            val["admissible"] and val["pooled_recall5"] >= ref_val["pooled_recall5"] - 1e-9),
        "top_admissible": admissible[:10],
        "best_inadmissible": sorted((r for r in rows if not r["admissible"]),
                                    key=lambda r: -r["pooled_recall5"])[:3],
    }
    # would a per-dataset setting be clearly better? Each dataset's own best on its train split, on its val split
    per_dataset = {}
    for ds, rc in caches["train"].items():
        mine = min((evaluate_setting({ds: rc}, s, ks, {ds: ref_sums["train"][ds]}) for s in grid_settings()),
                   key=_preference)
        own_val = shared_val = None
        if ds in caches["val"]:
            own_val = caches["val"][ds].recall(mine["weights"], mine["k"], ks)[5]
            shared_val = caches["val"][ds].recall(chosen["weights"], chosen["k"], ks)[5]
        per_dataset[ds] = {"weights": mine["weights"], "k": mine["k"], "train_recall5": mine["recall5"][ds],
                           "val_recall5": own_val, "shared_val_recall5": shared_val}
    out["per_dataset_best_on_train"] = per_dataset
    return out
