"""Are bridge questions what they claim? Lexical disjointness, retrieval miss, graph reachability.

For each bridge question of a generated corpus (graphs built with a parser,
``fast`` by default):

* ``lexical_overlap``: content words the question shares with the answer
  page's *parsed* text (the generator already checked the page as drawn);
* ``hop1_recall`` / ``hop2_recall``: is the first / second hop's page among the
  top-k entry pages of the environment's default retriever (``hybrid``, the
  question as query)? A low ``hop2_recall`` means retrieval alone does not
  solve the question;
* ``reach``: from the first hop's gold nodes, is the second hop's page reached
  within 1 and 2 steps over edges of one kind (``section``, ``semantic``, and
  ``reference`` once the graph has it), beside the chance level: the share of
  the document's pages (other than hop 1's) that the same neighbourhood
  reaches.

Run ``python -m mage_gym.data.synth.bridge_check <corpus> [--k 5] [--docs N]``
for a JSON report; tests call :func:`check_bridges` on small corpora.
"""
from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from mage_gym.data.episode import Episode
    from mage_gym.graph.graph import EvidenceGraph

#: Edge kinds a bridge can follow (``reference`` counts once the graph builds it).
LINK_KINDS: tuple[str, ...] = ("section", "semantic", "reference")


@dataclass
class BridgeResult:
    """One bridge question checked against its graph."""

    episode_id: str
    type: str
    pattern: str
    n_pages: int
    hop1_pages: tuple[int, ...]
    hop2_page: int
    lexical_overlap: tuple[str, ...]
    hop1_in_topk: bool
    hop2_in_topk: bool
    reach: dict[str, dict[int, bool]] = field(default_factory=dict)  # kind -> {1: bool, 2: bool}
    chance: dict[str, dict[int, float]] = field(default_factory=dict)  # kind -> {1: share, 2: share}


def hop_nodes(episode: "Episode", graph: "EvidenceGraph", hop: int) -> list[int]:
    """Graph nodes of one hop's gold (resolved like the environment resolves gold)."""
    from mage_gym.data.gold import resolve_gold

    h = next(x for x in episode.hops() if x.hop == hop)
    sub = replace(episode, evidence_regions=h.regions, evidence_pages=h.pages, evidence_hops=(),
                  gold_node_ids=())
    return sorted(int(n) for n in resolve_gold(sub, graph).gold_nodes)


def reached_pages(graph: "EvidenceGraph", start: Iterable[int], kind: str, steps: int) -> set[int]:
    """Pages of the nodes within ``steps`` edges of ``kind`` from ``start`` (start nodes included)."""
    if kind not in graph.adjacency:
        return set()
    indptr, idx = graph.adjacency[kind]
    seen = set(int(s) for s in start)
    frontier = set(seen)
    for _ in range(steps):
        nxt: set[int] = set()
        for n in frontier:
            nxt.update(idx[indptr[n]:indptr[n + 1]].tolist())
        frontier = nxt - seen
        seen |= frontier
    return {int(graph.node_page[n]) for n in seen}


def check_question(episode: "Episode", graph: "EvidenceGraph", k: int = 5, retriever: Any = None,
                   query_fn: Any = None) -> BridgeResult:
    """Check one bridge question (see module docstring)."""
    from mage_gym.data.synth.bridge_questions import content_tokens
    from mage_gym.env.relevance import default_query_fn, episode_relevance, shared_retriever
    from mage_gym.retrieval.text import page_text

    hops = {h.hop: h for h in episode.hops()}
    p1 = tuple(hops[1].pages)
    p2 = hops[2].pages[0]
    overlap = tuple(sorted(content_tokens(episode.question) & content_tokens(page_text(graph, p2))))
    rel = episode_relevance(graph, episode.question, retriever or shared_retriever("hybrid"),
                            query_fn or default_query_fn)
    top = set(rel.entry_pages(k))
    start = hop_nodes(episode, graph, 1)
    res = BridgeResult(episode.episode_id, episode.extra["bridge"]["type"], episode.extra["bridge"]["pattern"],
                       graph.n_pages, p1, p2, overlap, bool(set(p1) & top), p2 in top)
    others = max(1, graph.n_pages - len(set(p1)))
    for kind in LINK_KINDS:
        if kind not in graph.adjacency:
            continue
        res.reach[kind], res.chance[kind] = {}, {}
        for steps in (1, 2):
            pages = reached_pages(graph, start, kind, steps) - set(p1)
            res.reach[kind][steps] = p2 in pages
            res.chance[kind][steps] = len(pages) / others
    return res


def summarize(results: Sequence[BridgeResult], k: int = 5) -> dict[str, Any]:
    """Shares per bridge type (and overall): recall@k of both hops, reach and chance per edge kind."""
    groups: dict[str, list[BridgeResult]] = defaultdict(list)
    for r in results:
        groups[r.type].append(r)
        groups["all"].append(r)
    out: dict[str, Any] = {}
    for name, rs in sorted(groups.items()):
        d: dict[str, Any] = {"n": len(rs), f"hop1_recall@{k}": _mean(r.hop1_in_topk for r in rs),
                             f"hop2_recall@{k}": _mean(r.hop2_in_topk for r in rs),
                             "lexical_overlap_share": _mean(bool(r.lexical_overlap) for r in rs),
                             "patterns": dict(sorted(_count(r.pattern for r in rs).items()))}
        kinds = sorted({kd for r in rs for kd in r.reach})
        for steps in (1, 2):
            d[f"reach_{steps}hop"] = {kd: _mean(r.reach[kd][steps] for r in rs) for kd in kinds}
            d[f"chance_{steps}hop"] = {kd: round(float(np.mean([r.chance[kd][steps] for r in rs])), 4)
                                       for kd in kinds}
        out[name] = d
    return out


def _mean(xs: Iterable[bool]) -> float:
    v = list(xs)
    return round(sum(v) / len(v), 4) if v else float("nan")


def _count(xs: Iterable[str]) -> dict[str, int]:
    c: dict[str, int] = defaultdict(int)
    for x in xs:
        c[x] += 1
    return dict(c)


def check_bridges(root: str | os.PathLike[str], parser: str = "fast", k: int = 5, n_docs: int | None = None,
                  cache_dir: str | os.PathLike[str] | None = None, progress: bool = False
                  ) -> tuple[list[BridgeResult], dict[str, Any]]:
    """Check every bridge question of a corpus's first ``n_docs`` documents (all when None)."""
    from mage_gym.data.synth.corpus import load_synth, read_manifest
    from mage_gym.graph.build import build_graph

    docs = [d["doc_id"] for d in read_manifest(root)["docs"]]
    if n_docs is not None:
        docs = docs[:n_docs]
    by_doc: dict[str, list[Episode]] = defaultdict(list)
    for ep in load_synth(root):
        if ep.extra.get("question_kind") == "bridge":
            by_doc[ep.doc_id].append(ep)
    results: list[BridgeResult] = []
    for doc in docs:
        eps = by_doc.get(doc, [])
        if not eps:
            continue
        g = build_graph(eps[0].source, parser=parser, cache_dir=cache_dir, progress=progress)
        results += [check_question(ep, g, k) for ep in eps]
    return results, summarize(results, k)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--parser", default="fast")
    ap.add_argument("--docs", type=int, default=None)
    ap.add_argument("--cache-dir", default=None)
    a = ap.parse_args(argv)
    _, summary = check_bridges(a.root, a.parser, a.k, a.docs, a.cache_dir, progress=True)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
