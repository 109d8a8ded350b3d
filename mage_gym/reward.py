"""Terminal reward = support - lambda1 * noise - lambda2 * cost, as plain weighted functions.

Why plain functions: every part is reported in ``info["reward_components"]``
and must be recomputable from a trace, so each is a small pure function of
the gold, the rendered reader input and the episode counters.

- **support** (oracle reader): the fraction of gold items covered by what the
  reader receives, under the one coverage rule of :mod:`mage_gym.coverage`
  (page image, or an opened node: never a summary; on pages with
  element-level gold, only the image or an opened gold element), the rule
  page recall and ``evidence_all_covered`` use too. Unanswerable episodes:
  support 1 (the reward needs a number; their evidence metrics are ``None``).
  Answerable episodes whose gold could not be placed on the graph: support 0
  (``gold_known`` is False in the metrics; such episodes are flagged by the
  loaders and best left out of training). Answering readers: support =
  ``mage_gym.scoring.score`` of the answer.
- **noise**: tokens of rendered nodes that are not gold / all rendered tokens,
  when gold is known (else 0). A page node counts as gold when its page holds
  gold; an element when it belongs to a gold item or lies on a page-level gold
  page. Wrapper tags and the question count in the denominator only.
- **cost**: rendered tokens / ``token_cap`` + operations / ``op_cap`` +
  (reader + evaluator calls) / ``call_cap``, each clipped to [0, 1], weighted
  by ``w_tokens``, ``w_ops``, ``w_calls`` (default weights sum to 1).
- :func:`potential`: ``phi`` = gold coverage of the current state, the
  potential of :class:`mage_gym.wrappers.PotentialShaping` (``gamma *
  phi(s') - phi(s)`` per move, ``phi = 0`` at termination, which leaves
  optimal policies unchanged; Ng et al., 1999). Shaping is that wrapper, on
  privileged training envs only; it is no reward setting.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

import numpy as np

from mage_gym.coverage import Coverage, GoldLike, cover, share, state_masks
from mage_gym.data.episode import Episode
from mage_gym.data.gold import GoldEvidence
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.readers.base import RenderedInput


@dataclass(frozen=True)
class RewardConfig:
    """The terminal reward's weights and caps (``env.reward`` in the experiments, same defaults).

    ``lambda_cost`` is 1.0, the experiments' calibrated value: the smallest
    of {0.1, 0.25, 0.5, 1.0} at which reading every page scores below
    topk_page on the training documents, so a controller is paid for choosing.
    """

    lambda_noise: float = 0.25  # lambda1
    lambda_cost: float = 1.0  # lambda2
    token_cap: int = 32768
    op_cap: int | None = None  # None: the budget's step cap T*(m+B+2)
    call_cap: int | None = None  # None: T + 1 (one evaluator call per round plus the reader)
    w_tokens: float = 0.5
    w_ops: float = 0.25
    w_calls: float = 0.25

    @classmethod
    def coerce(cls, value: "RewardConfig | Mapping[str, Any] | None") -> "RewardConfig":
        """A record from a mapping (``lambda1``/``lambda2`` name the two weights too); unknown keys: TypeError."""
        if value is None:
            return cls()
        if isinstance(value, RewardConfig):
            return value
        data = dict(value.items())
        aliases = {"lambda1": "lambda_noise", "lambda2": "lambda_cost"}
        data = {aliases.get(k, k): v for k, v in data.items()}
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(valid))
        if unknown:
            hint = (" (reward shaping is the PotentialShaping wrapper: gym.make(..., privileged=True, shaping=True), "
                    "train.shaping in the experiments)") if any(k.startswith("shaping") for k in unknown) else ""
            raise TypeError(f"unknown reward setting(s) {unknown}; valid: {', '.join(valid)}{hint}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gold_known(gold: GoldEvidence) -> bool:
    return gold.level != "none" and len(gold.items) > 0


def rendered_masks(graph: EvidenceGraph, rendered: RenderedInput) -> tuple[np.ndarray, np.ndarray]:
    """(opened bool [n_nodes], whole pages bool [n_pages]) from a rendered input.

    A page reached the reader whole when it was sent as an image or, in
    ``text`` mode, with its whole text (``page_text_ids``).
    """
    idx = graph.index_of
    opened = np.zeros(graph.n_nodes, dtype=bool)
    opened[[idx[nid] for nid in rendered.opened_ids]] = True
    pages = np.zeros(graph.n_pages, dtype=bool)
    pages[[idx[nid] for nid in rendered.page_image_ids]] = True  # a page's node index is its number
    pages[[idx[nid] for nid in rendered.page_text_ids]] = True
    return opened, pages


def oracle_support(episode: Episode, covered: Coverage) -> float:
    """The oracle reader's support: covered gold share; 1 when unanswerable, 0 when no gold is known."""
    if not episode.answerable:
        return 1.0
    support = covered.support
    return 0.0 if support is None else support


def answer_support(episode: Episode, answer: str | None) -> float:
    """Benchmark score of an answering reader's answer (imported lazily)."""
    from mage_gym.scoring import score

    bench = episode.benchmark if episode.benchmark in ("mmlongbench", "longdocurl", "financebench", "synth") \
        else "mmlongbench"
    return float(score(answer, episode.answer, episode.answer_format, bench))


def gold_node_mask(graph: EvidenceGraph, gold: GoldEvidence) -> np.ndarray:
    """bool [n_nodes]: nodes whose rendered tokens are not noise."""
    mask = np.zeros(graph.n_nodes, dtype=bool)
    if not gold_known(gold):
        return mask
    nodes = np.asarray(gold.gold_nodes, dtype=np.int64)
    mask[nodes[(nodes >= 0) & (nodes < graph.n_nodes)]] = True
    node_page = graph.node_page
    gold_pages = [p for p in gold.pages if 0 <= p < graph.n_pages]
    mask[gold_pages] = True
    page_level = [p for p, is_page in zip(gold.item_pages, gold.item_is_page) if is_page and 0 <= p < graph.n_pages]
    if page_level:
        mask |= np.isin(node_page, page_level)
    return mask


def noise(graph: EvidenceGraph, gold: GoldEvidence, rendered: RenderedInput, is_gold: np.ndarray | None = None
          ) -> float:
    if not gold_known(gold) or rendered.tokens <= 0:
        return 0.0
    if is_gold is None:
        is_gold = gold_node_mask(graph, gold)
    idx = graph.index_of
    # one gather of the gold flags, then a plain Python sum of the (int) token counts of non-gold nodes
    flags = is_gold[[idx[nid] for nid, _ in rendered.node_tokens]].tolist()
    non_gold = sum([t for (_, t), gold_node in zip(rendered.node_tokens, flags) if not gold_node])
    return float(min(1.0, non_gold / rendered.tokens))


def cost(tokens: int, operations: int, calls: int, cfg: RewardConfig, op_cap: int, call_cap: int
         ) -> tuple[float, dict[str, float]]:
    parts = {
        "cost_tokens": min(1.0, max(0.0, tokens / max(1, cfg.token_cap))),
        "cost_operations": min(1.0, max(0.0, operations / max(1, op_cap))),
        "cost_calls": min(1.0, max(0.0, calls / max(1, call_cap))),
    }
    total = cfg.w_tokens * parts["cost_tokens"] + cfg.w_ops * parts["cost_operations"] + \
        cfg.w_calls * parts["cost_calls"]
    return float(total), parts


def total_reward(support: float, noise_value: float, cost_value: float, cfg: RewardConfig) -> float:
    return float(support - cfg.lambda_noise * noise_value - cfg.lambda_cost * cost_value)


#: the reward's terms in :func:`reward_terms`, in the order the reward adds them
REWARD_TERMS: tuple[str, ...] = ("support", "noise", "cost_tokens", "cost_operations", "cost_calls")


def reward_terms(components: Mapping[str, float], cfg: RewardConfig) -> dict[str, float]:
    """Each term's signed share of the reward, from ``info["reward_components"]``: they sum to the reward.

    ``support``, ``-lambda_noise * noise`` and ``-lambda_cost * w * part`` for
    each cost part. The lambdas are the ones the components carry (what the
    episode was scored with); the cost weights come from ``cfg``, and must
    reproduce the components' own ``cost``, else ValueError (so a wrong guess
    at a run's weights cannot pass unseen).

    Why: "the reward fell" has several causes (more tokens, more operations,
    more model replies, more noise) that move different ways; a change split
    into these shares says which one did it.
    """
    parts = {"cost_tokens": cfg.w_tokens, "cost_operations": cfg.w_ops, "cost_calls": cfg.w_calls}
    cost_value = sum(w * float(components[k]) for k, w in parts.items())
    if abs(cost_value - float(components["cost"])) > 1e-6:
        raise ValueError(f"cost weights {parts} give cost {cost_value:.6f}, the components say "
                         f"{float(components['cost']):.6f}: pass the weights the episode was scored with")
    lam_cost = float(components.get("lambda_cost", cfg.lambda_cost))
    terms = {"support": float(components["support"]),
             "noise": -float(components.get("lambda_noise", cfg.lambda_noise)) * float(components["noise"])}
    terms.update({k: -lam_cost * w * float(components[k]) for k, w in parts.items()})
    return terms


def potential(gold: GoldLike, node_state: np.ndarray, node_page: np.ndarray, n_pages: int, visual: bool,
              answerable: bool, whole_text: np.ndarray | None = None) -> float:
    """Shaping potential: gold coverage the current state would give (0 without gold).

    ``whole_text``: in ``text`` mode, the pages whose whole text an activated
    page sends (:func:`mage_gym.render.whole_text_pages`).
    """
    if not answerable or not gold_known(gold):
        return 0.0
    opened, pages = state_masks(node_state, n_pages, visual, whole_text)
    return cover(gold, opened, pages, node_page).support or 0.0


def episode_metrics(graph: EvidenceGraph, gold: GoldEvidence, rendered: RenderedInput, covered: Coverage,
                    opened: np.ndarray | None = None, is_gold: np.ndarray | None = None) -> dict[str, Any]:
    """Evidence metrics at the end of an episode (None where undefined).

    Page recall and all-covered come from ``covered`` (:func:`mage_gym.coverage.cover`),
    the same rule as support, so a page whose only rendered node is a summary
    is not recalled.
    """
    known = gold_known(gold)
    idx = graph.index_of
    rendered_idx = np.fromiter((idx[nid] for nid in rendered.node_ids), dtype=np.int64, count=len(rendered.node_ids))
    if opened is None:
        opened, _ = rendered_masks(graph, rendered)
    if is_gold is None:
        is_gold = gold_node_mask(graph, gold)
    opened_el = opened[graph.n_pages:].nonzero()[0] + graph.n_pages
    el_items = [i for i, is_page in enumerate(gold.item_is_page) if not is_page]
    el_recall = None
    if known and el_items:
        hits = [bool(opened[[n for n in gold.items[i] if 0 <= n < graph.n_nodes]].any()) for i in el_items]
        el_recall = share(hits)
    n_page_nodes = int(np.count_nonzero(rendered_idx < graph.n_pages))
    return {
        "gold_known": known,
        "evidence_page_recall": covered.page_recall if known else None,
        "evidence_all_covered": covered.all_covered if known else None,
        "element_recall": el_recall,
        "element_precision": share(is_gold[opened_el]) if (known and len(opened_el)) else None,
        "item_support": covered.item_support if known else None,
        "gold_pages_by_any_element": covered.pages_by_any_element if known else None,
        "pages_rendered": n_page_nodes,
        "elements_rendered": len(rendered_idx) - n_page_nodes,
        "images_rendered": len(rendered.images),
        "tokens_rendered": int(rendered.tokens),
    }
