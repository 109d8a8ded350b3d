"""Speed of page/element retrieval on a synthetic 500-page document.

Why: the environment scores the question at every reset (target: reset <= 20 ms
for a 500-page document, retrieval included) and scores a query at every
SearchEvidence, so both per-call costs matter, while index building happens
once per document and question encoding once per episode.

Measures (medians over ``--repeats`` calls, milliseconds):

* index build for bm25 and dense (fresh retrievers, first call on the graph);
* ``score()`` for bm25 / dense / hybrid with a question query (vector given);
* the same for SearchEvidence-style queries (question + a node's text);
* ``hybrid.score_with_components`` (what the env calls at reset);
* MiniLM load time and question encoding (``make_query``), unless ``--no-encoder``.

The graph has random unit vectors and random-word texts (no PDF, no model).

Run::

    .venv/bin/python experiments/perf_retrieval.py            # writes outputs/perf_retrieval/results.json
    .venv/bin/python experiments/perf_retrieval.py --pages 100 --no-encoder
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import DocumentSource, Element, Page, element_id, page_id
from mage_gym.retrieval import Query, get_retriever, make_query


def synthetic_graph(n_pages: int, elements_per_page: int, dim: int, seed: int) -> tuple[EvidenceGraph, list[str]]:
    """A graph with Zipf-distributed random words; about 5 % empty elements and 10 % tables."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = sorted({"".join(rng.choice(letters, size=int(rng.integers(3, 10)))) for _ in range(4000)})
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    zipf /= zipf.sum()

    def words(n: int) -> str:
        return " ".join(vocab[i] for i in rng.choice(len(vocab), size=n, p=zipf))

    pages: list[Page] = []
    elements: list[Element] = []
    for p in range(n_pages):
        n_el = max(1, int(rng.poisson(elements_per_page)))
        texts = []
        for j in range(n_el):
            r = rng.random()
            etype, text, md = "paragraph", words(int(rng.integers(15, 60))), None
            if r < 0.05:
                etype, text = "figure", ""
            elif r < 0.15:
                cells = [words(1) for _ in range(12)]
                etype, text = "table", " ".join(cells)
                md = "| " + " | ".join(cells[:3]) + " |\n|---|---|---|\n" + "\n".join(
                    "| " + " | ".join(cells[k:k + 3]) + " |" for k in range(3, 12, 3))
            elements.append(Element(node_id=element_id("synth", p, j), page=p, index=j, type=etype,
                                    bbox=(0.1, j / n_el, 0.9, (j + 0.9) / n_el), text=text, summary=text[:80],
                                    reading_order=len(elements), table_markdown=md))
            texts.append(text)
        pages.append(Page(node_id=page_id("synth", p), index=p, width=612.0, height=792.0,
                          text="\n".join(t for t in texts if t), summary=texts[0][:80], n_elements=n_el))

    def unit(n: int) -> np.ndarray:
        v = rng.normal(size=(n, dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    graph = EvidenceGraph(
        doc_id="synth", source=DocumentSource(kind="pdf", path="<synthetic>"), pages=pages, elements=elements,
        edge_src=np.zeros(0, np.int32), edge_dst=np.zeros(0, np.int32), edge_kind=np.zeros(0, np.int8),
        edge_weight=np.zeros(0, np.float32), edge_label=[], page_vectors=unit(len(pages)),
        element_vectors=unit(len(elements)), meta={"parser": "synthetic"},
    )
    questions = [f"what is the {words(6)} in {words(2)}?" for _ in range(32)]
    return graph, questions


def timed_ms(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def median_ms(fn: Callable[[int], object], repeats: int) -> float:
    fn(0)  # warm-up (first-call effects are measured separately as index build)
    return statistics.median(timed_ms(lambda i=i: fn(i)) for i in range(1, repeats + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=500)
    ap.add_argument("--elements-per-page", type=int, default=10)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-encoder", action="store_true", help="skip MiniLM load/encoding timings")
    ap.add_argument("--out", default="outputs/perf_retrieval", help="folder for results.json")
    args = ap.parse_args()

    t0 = time.perf_counter()
    graph, questions = synthetic_graph(args.pages, args.elements_per_page, args.dim, args.seed)
    print(f"synthetic graph: {graph.n_pages} pages, {graph.n_elements} elements, {args.dim}-d "
          f"({time.perf_counter() - t0:.2f} s to make)")
    rng = np.random.default_rng(args.seed + 1)
    q_vecs = rng.normal(size=(len(questions), args.dim)).astype(np.float32)
    q_vecs /= np.linalg.norm(q_vecs, axis=1, keepdims=True)
    qs = [Query(t, v) for t, v in zip(questions, q_vecs)]
    node_texts = [graph.elements[int(j)].text for j in rng.integers(0, graph.n_elements, size=len(qs))]
    searches = [Query(f"{q.text}\n{t}", q.vector) for q, t in zip(qs, node_texts)]

    results: dict[str, object] = {
        "n_pages": graph.n_pages, "n_elements": graph.n_elements, "dim": args.dim, "repeats": args.repeats,
        "machine": platform.platform(), "python": platform.python_version(),
    }
    build: dict[str, float] = {}
    for name in ("bm25", "dense"):
        r = get_retriever(name)
        build[name] = timed_ms(lambda r=r: r.index(graph))  # type: ignore[attr-defined]
    results["index_build_ms"] = build

    retrievers = {name: get_retriever(name) for name in ("bm25", "dense", "hybrid")}
    for r in retrievers.values():
        r.score(graph, qs[0])  # build indexes
    n = len(qs)
    per_call: dict[str, dict[str, float]] = {}
    for name, r in retrievers.items():
        per_call[name] = {
            "question": median_ms(lambda i, r=r: r.score(graph, qs[i % n]), args.repeats),
            "search": median_ms(lambda i, r=r: r.score(graph, searches[i % n]), args.repeats),
        }
    hybrid = retrievers["hybrid"]
    per_call["hybrid"]["question_with_components"] = median_ms(
        lambda i: hybrid.score_with_components(graph, qs[i % n]), args.repeats)  # type: ignore[attr-defined]
    results["score_ms_median"] = per_call

    if not args.no_encoder:
        from mage_gym.graph.embed import get_encoder

        load_s = timed_ms(get_encoder) / 1000.0
        enc = get_encoder()
        results["encoder_load_s"] = round(load_s, 3)
        results["encode_question_ms_median"] = median_ms(lambda i: make_query(questions[i % n], enc),
                                                         min(args.repeats, 30))
        results["encode_search_query_ms_median"] = median_ms(lambda i: make_query(searches[i % n].text, enc),
                                                             min(args.repeats, 30))

    print(f"index build (ms): bm25 {build['bm25']:.1f}, dense {build['dense']:.1f}")
    print(f"{'retriever':<10} {'question ms':>12} {'search ms':>10}")
    for name, row in per_call.items():
        print(f"{name:<10} {row['question']:>12.3f} {row['search']:>10.3f}")
    print(f"hybrid.score_with_components (question): {per_call['hybrid']['question_with_components']:.3f} ms")
    if "encode_question_ms_median" in results:
        print(f"MiniLM load {results['encoder_load_s']:.2f} s; encode question "
              f"{results['encode_question_ms_median']:.2f} ms; encode question+node text "
              f"{results['encode_search_query_ms_median']:.2f} ms (median)")
    from experiments.common.results import write_json

    print(f"wrote {write_json(Path(args.out) / 'results.json', results)}")


if __name__ == "__main__":
    main()
