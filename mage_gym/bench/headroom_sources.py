"""The oracle's headroom split by where it comes from, at equal tokens against topk_page (privileged).

Why: the navigating oracle beats topk_page by a wide margin at equal tokens,
but that figure does not say what a real controller should learn. Each
privileged oracle here changes exactly one thing against topk_page's reader
input, so its gain at equal tokens is the headroom of that one source:

- ``rerank@N``: the same number of pages k, but gold pages among the
  retriever's top N are moved to the front (then the retriever's order):
  what a perfect *reranker* of the retrieved pages would give;
- ``rerank_stop@N``: exactly the gold pages among the top N, nothing else
  (a perfect reranker that also knows when to stop; no gold there: nothing
  is read);
- ``granularity``: the same k entry pages, but in the ``elements`` render
  mode (:mod:`mage_gym.render`: page summaries, opened elements with crops)
  with exactly the gold-bearing elements opened - every node of each
  element-level gold item, and every element of a page whose gold is only
  page-level (which of its elements bears it is unknown). Its non-privileged
  twin is :class:`policies.topk_elements.TopKElementsPolicy` (same pages, the
  n most relevant elements opened), played through the env;
- ``adaptive_stop@C``: the retriever's order, but each question stops at
  the smallest k in 1..C that already holds every gold page of the top C;
- the navigating oracle (:class:`policies.oracle.OraclePolicy`, played
  through the env under the same budget: :func:`experiments.headroom.run_oracle`).

Every figure is computed on node-state tables with the env's own render
(:func:`mage_gym.render.render`, token rule included) and coverage rule
(:func:`mage_gym.coverage.cover`), from the env's own page order (its
retriever, inside the episode's page window) and the gold of its privileged
view; topk_page's curve is the same thing for the first j pages, j = 0..kmax
(j = 0: nothing is read, recall 0: the curve's floor, so a source reading
less than one page is still compared, by interpolation, not extrapolation).
Each source is compared with topk_page three ways (:mod:`mage_gym.bench.equal_cost`),
each with a 95 % paired bootstrap interval over questions: its page recall
minus topk_page's at topk_page's operating budget (its tokens at the run's k;
no credit for reading less: the "finds more evidence" figure), the tokens
topk_page needs to reach the source's recall over the source's own (the
efficiency figure), and its recall minus topk_page's at the same mean tokens.

Element recall (questions with element-level gold: MMDocIR boxes, FinanceBench
snippets, synthetic regions): the share of element-level gold items with a
node among the top m elements of the env's fused element ranking, over the
whole document (``element_recall@m``) and over the entry pages' elements only
(``entry_element_recall@m``: what ``topk_elements`` can open).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

#: Depths of the reranking oracles and caps of the adaptive-stop oracle (the issue's N = 10, 15).
RERANK_DEPTHS: tuple[int, ...] = (10, 15)
ELEMENT_RECALL_AT: tuple[int, ...] = (5, 10, 20)
ACTIVATED, OPENED = 1, 2


@dataclass
class SourceFigures:
    """One episode's figures: topk_page's curve and each source's (recall, tokens, pages)."""

    episode_id: str
    split: str
    element_gold: bool  # the question has element-level gold on every gold page in the graph
    curve_recall: list[float]  # topk_page at j = 0..kmax pages
    curve_tokens: list[int]
    curve_pages: list[int]
    sources: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> {recall, tokens, pages}
    element_recall: dict[str, float] = field(default_factory=dict)  # "element_recall@m" / "entry_...@m"

    def to_row(self) -> dict[str, Any]:
        return {"episode_id": self.episode_id, "split": self.split, "element_gold": self.element_gold,
                "curve_recall": self.curve_recall, "curve_tokens": self.curve_tokens,
                "curve_pages": self.curve_pages, "sources": self.sources, "element_recall": self.element_recall}


class Renderer:
    """Recall, tokens and pages of a node-state table, by the env's render and coverage rules."""

    def __init__(self, graph: Any, gold: Any, question: str, config: Any) -> None:
        self.graph, self.gold, self.question, self.config = graph, gold, question, config

    def figures(self, pages: Sequence[int], opened: Sequence[int] = (), mode: str = "visual") -> dict[str, float]:
        from mage_gym.coverage import cover
        from mage_gym.render import render
        from mage_gym.reward import rendered_masks

        g = self.graph
        st = np.zeros(g.n_nodes, dtype=np.int8)
        st[np.asarray(list(pages), dtype=np.intp)] = ACTIVATED
        st[np.asarray(list(opened), dtype=np.intp)] = OPENED
        rendered = render(g, st, mode, self.question, self.config)
        op, whole = rendered_masks(g, rendered)
        cov = cover(self.gold, op, whole, g.node_page)
        pages_rendered = sum(1 for nid in rendered.node_ids if g.index_of[nid] < g.n_pages)
        return {"recall": float(cov.page_recall or 0.0), "tokens": int(rendered.tokens), "pages": pages_rendered}


def gold_elements(graph: Any, gold: Any, pages: Sequence[int]) -> list[int]:
    """The gold-bearing elements of ``pages``: each element-level gold item's elements, and every element of a
    page whose gold there is only page-level."""
    wanted = {int(p) for p in pages}
    out: set[int] = set()
    element_gold_pages: set[int] = set()
    for nodes, page, is_page in zip(gold.items, gold.item_pages, gold.item_is_page):
        if int(page) not in wanted:
            continue
        if is_page:
            continue
        element_gold_pages.add(int(page))
        out.update(int(n) for n in nodes if int(n) >= graph.n_pages)
    for p in sorted(wanted & {int(x) for x in gold.pages}):
        if p not in element_gold_pages:
            out.update(int(n) for n in graph.element_indices_of_page(p))
    return sorted(out)


def has_element_gold(gold: Any, n_pages: int) -> bool:
    """Every gold page inside the graph carries element-level gold (regions or snippets mapped to elements)."""
    pages = {int(p) for p in gold.pages if 0 <= int(p) < n_pages}
    el_pages = {int(p) for p, is_page in zip(gold.item_pages, gold.item_is_page) if not is_page}
    return bool(pages) and pages <= el_pages


def element_recall(graph: Any, gold: Any, node_order: np.ndarray, entry: Sequence[int], window: Any,
                   at: Sequence[int] = ELEMENT_RECALL_AT) -> dict[str, float]:
    """Element recall of the env's fused element ranking, over the document and over the entry pages only
    (empty without element-level gold)."""
    items = [set(int(n) for n in nodes) for nodes, is_page in zip(gold.items, gold.item_is_page) if not is_page]
    items = [s for s in items if s]
    if not items:
        return {}
    n_pages = graph.n_pages
    order = np.asarray(node_order)
    elements = order[order >= n_pages]
    node_page = np.asarray(graph.node_page)
    if window is not None:
        lo, hi = int(window[0]), int(window[1])
        pg = node_page[elements]
        elements = elements[(pg >= lo) & (pg <= hi)]
    on_entry = elements[np.isin(node_page[elements], np.asarray(list(entry), dtype=np.intp))]
    out: dict[str, float] = {}
    for m in at:
        for name, ranked in (("element_recall", elements), ("entry_element_recall", on_entry)):
            top = set(ranked[:m].tolist())
            out[f"{name}@{m}"] = sum(1 for s in items if s & top) / len(items)
    return out


def measure_sources(graph: Any, gold: Any, question: str, page_order: Sequence[int], node_order: np.ndarray,
                    window: Any, config: Any, k: int, kmax: int, episode_id: str = "", split: str = "all",
                    depths: Sequence[int] = RERANK_DEPTHS) -> SourceFigures | None:
    """Every source's figures for one episode (None without gold pages in the graph).

    ``page_order``: the env's page order inside the window (entry pages = its first k); ``node_order``: the
    env's fused relevance order of every node (``EpisodeRelevance.order``); ``gold``: the privileged view.
    """
    order = [int(p) for p in page_order]
    gold_pages = {int(p) for p in gold.pages if 0 <= int(p) < graph.n_pages}
    if not gold_pages:
        return None
    r = Renderer(graph, gold, question, config)
    kmax = max(kmax, k, *depths)
    curve = [r.figures(order[:j]) for j in range(kmax + 1)]
    fig = SourceFigures(episode_id=episode_id, split=split, element_gold=has_element_gold(gold, graph.n_pages),
                        curve_recall=[c["recall"] for c in curve], curve_tokens=[c["tokens"] for c in curve],
                        curve_pages=[c["pages"] for c in curve])
    fig.sources["topk_page"] = curve[k]
    for n in depths:
        top = order[:n]
        gold_first = [p for p in top if p in gold_pages]
        rest = [p for p in order if p not in set(gold_first)]
        fig.sources[f"rerank@{n}"] = r.figures((gold_first + rest)[:k])
        fig.sources[f"rerank_stop@{n}"] = r.figures(gold_first)
    entry = order[:k]
    fig.sources["granularity"] = r.figures(entry, gold_elements(graph, gold, entry), mode="elements")
    for cap in sorted({k, *depths}):
        best = fig.curve_recall[cap]
        stop = next(j for j in range(1, cap + 1) if fig.curve_recall[j] >= best - 1e-12)
        fig.sources[f"adaptive_stop@{cap}"] = dict(curve[stop])
    fig.element_recall = element_recall(graph, gold, node_order, entry, window)
    return fig


def source_names(rows: Sequence[SourceFigures]) -> list[str]:
    """Source names in the order the report lists them (first row's order, then any others)."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row.sources))
    return list(names)


def aggregate_sources(rows: Sequence[SourceFigures], extra: Mapping[str, Mapping[str, Mapping[str, float]]] | None
                      = None, n_boot: int = 1000, seed: int = 0, k: int | None = None) -> dict[str, Any]:
    """Per source: mean recall, tokens, pages, and against topk_page's curve: the delta at its operating budget
    (its tokens at ``k``, the run's entry pages), the cost ratio at equal recall, and the delta at equal tokens.

    ``extra``: sources measured elsewhere (the navigating oracle, topk_elements played through the env), as
    {name: {episode_id: {recall, tokens, pages}}}; a source is compared on the questions it has rows for.
    A source that reads topk_page's pages and stops early gets 0 at the operating budget (it finds no more
    evidence) and a cost ratio above 1 (it reads less): the two claims apart.
    """
    from mage_gym.bench.equal_cost import cost_ratio_at_equal_evidence, delta_at_equal_cost, delta_at_operating_budget

    out: dict[str, Any] = {"questions": len(rows), "curve_ks": len(rows[0].curve_recall) - 1 if rows else 0}
    if not rows:
        return out
    by_id = {r.episode_id: r for r in rows}
    table: dict[str, dict[str, dict[str, float]]] = {name: {r.episode_id: r.sources[name] for r in rows
                                                            if name in r.sources} for name in source_names(rows)}
    for name, per in (extra or {}).items():
        table[name] = {e: v for e, v in per.items() if e in by_id}
    sources: dict[str, Any] = {}
    for name, per in table.items():
        ids = [e for e in by_id if e in per]
        if not ids:
            continue
        rec = [float(per[e]["recall"]) for e in ids]
        tok = [float(per[e]["tokens"]) for e in ids]
        cm = np.array([by_id[e].curve_recall for e in ids], dtype=float).T
        cc = np.array([by_id[e].curve_tokens for e in ids], dtype=float).T
        d = delta_at_equal_cost(rec, tok, cm, cc, n_boot=n_boot, seed=seed)
        sources[name] = {"questions": len(ids), "recall": float(np.mean(rec)), "tokens": float(np.mean(tok)),
                         "pages": float(np.mean([float(per[e]["pages"]) for e in ids]))}
        if k is not None:
            sources[name]["delta_recall_at_operating_budget"] = delta_at_operating_budget(
                rec, tok, cm, cc, list(range(cm.shape[0])), k, n_boot=n_boot, seed=seed)
        sources[name]["cost_ratio_recall_at_equal_evidence"] = cost_ratio_at_equal_evidence(rec, tok, cm, cc,
                                                                                           n_boot=n_boot, seed=seed)
        sources[name]["delta_recall_at_equal_tokens"] = d
    out["sources"] = sources
    el = [r.element_recall for r in rows if r.element_recall]
    out["element_gold_questions"] = len(el)
    out["element_recall"] = ({key: float(np.mean([e[key] for e in el])) for key in el[0]} if el else None)
    return out


def report_sources(rows: Sequence[SourceFigures], extra: Mapping[str, Mapping[str, Mapping[str, float]]] | None
                   = None, n_boot: int = 1000, seed: int = 0, k: int | None = None) -> dict[str, Any]:
    """:func:`aggregate_sources` over all questions, per split, and over the questions with element-level gold
    (``k``: the run's entry pages, topk_page's operating budget)."""
    out: dict[str, Any] = {"all": aggregate_sources(rows, extra, n_boot, seed, k)}
    for split in ("train", "val", "test"):
        part = [r for r in rows if r.split == split]
        if part:
            out[split] = aggregate_sources(part, extra, n_boot, seed, k)
    el = [r for r in rows if r.element_gold]
    if el:
        out["element_gold"] = aggregate_sources(el, extra, n_boot, seed, k)
    return out


def played_figures(metrics: Mapping[str, Any]) -> dict[str, float]:
    """(recall, tokens, pages) of an episode played through the env, from its ``info["metrics"]``."""
    return {"recall": float(metrics.get("evidence_page_recall") or 0.0), "tokens": float(metrics["tokens_rendered"]),
            "pages": float(metrics.get("pages_rendered") or 0)}


def sources_for_env(env: Any, episode: Any, k: int, kmax: int, depths: Sequence[int] = RERANK_DEPTHS
                    ) -> SourceFigures | None:
    """:func:`measure_sources` for the episode ``env`` (privileged) was just reset on (its page order, node order,
    gold view, question and render config)."""
    from mage_gym.bench.headroom import page_order_in_window
    from mage_gym.env.relevance import episode_relevance

    get = env.get_wrapper_attr
    view = get("privileged_view")()
    if not view.answerable:
        return None
    graph = get("graph")
    rel = episode_relevance(graph, get("question"), get("retriever"), get("query_fn"))
    window = episode.page_window
    return measure_sources(graph, view, get("question"), page_order_in_window(rel.page_order, window), rel.order,
                           window, get("render_config"), k, kmax, episode_id=episode.episode_id,
                           split=str(episode.split or "all"), depths=depths)
