"""Quality of the ``reference`` relation: mentions found vs linked per label, and hand-checked precision.

Run (from the repo root; graphs must be in the cache):

    .venv/bin/python experiments/quality/reference_quality.py dataset=mmlongbench parser=fast
    .venv/bin/python experiments/quality/reference_quality.py dataset=financebench parser=fast
    .venv/bin/python experiments/quality/reference_quality.py dataset=synth dataset.root=data_out/synth/train_seed0 \
        synth_docs=6 parser=fast

Finds every cross-reference mention (:mod:`mage_gym.graph.references`) in the
dataset's documents and counts, per label (figure, table, section, note, page,
...), mentions found and linked. It draws ``sample_per_label`` linked
mentions per label with a fixed seed (stratified, so rare labels are checked
too) and writes them to ``sample.jsonl`` with the mention's context and the
target's text, for a person to label ``correct: true/false``. Labels already
in ``labels`` (a committed JSONL keyed by ``key``) give the precision per
label and overall. Mentions naming another document ("Note 20 of the 2020
Form 10-K") are found but never linked; ``external`` counts them.

``dataset=synth`` reads a generated corpus instead (no cache: the first
``synth_docs`` documents are parsed without embeddings) and adds the exact
evaluation against the generator's recorded references
(:mod:`mage_gym.bench.reference_eval`): per kind, drawn, found, linked,
correct, spurious, recall and precision; no sample is drawn there. Writes
``results.json``::

    {"command", "dataset", "parser", "documents", "mentions": {label: {"found", "external", "linked"}},
     "mentions_total": {...}, "sampled", "labelled", "precision": {label: {"n", "correct", "precision"}},
     "precision_overall": {...} | null, "synthetic": {...} | null}
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import hydra
from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from mage_gym.bench.config import exit_on_config_error, plain, run_dir
from mage_gym.bench.episodes import load_episodes
from mage_gym.bench.results import write_json
from mage_gym.graph import load_graph
from mage_gym.graph.references import find_references


def _context(text: str, start: int, needle: str, width: int = 90) -> str:
    """The mention with ``width`` characters either side, the mention itself in [[double brackets]]."""
    end = start + len(needle)
    return " ".join(f"{text[max(0, start - width): start]}[[{text[start:end]}]]{text[end: end + width]}".split())


def _target_text(graph: Any, node: int) -> str:
    if node < graph.n_pages:
        p = graph.pages[node]
        return f"[page {node + 1}] header={p.header_text!r} footer={p.footer_text!r} {p.summary[:120]}"
    el = graph.elements[node - graph.n_pages]
    return f"[{el.type}, page {el.page + 1}] {' '.join(el.text.split())[:160]}"


def mention_key(doc_id: str, source_id: str, mention: str) -> str:
    """Stable id of one linked mention; it names the target, so a label stops counting once the link changes."""
    return hashlib.sha1(f"{doc_id}|{source_id}|{mention}".encode()).hexdigest()[:12]


def _synth_root(ds: Mapping[str, Any]) -> Path:
    from mage_gym.data.synth.corpus import default_synth_root

    return Path(to_absolute_path(str(ds["root"]))) if ds.get("root") else default_synth_root()


def _graphs(c: Mapping[str, Any]) -> Iterator[tuple[Any, dict[str, Any] | None]]:
    """(graph, generator layout record or None): cached graphs of a benchmark, or freshly parsed synthetic ones."""
    if c["dataset"]["name"] != "synth":
        for src in sorted({str(e.source) for e in load_episodes(c["dataset"], split="all", limit=None)}):
            yield load_graph(src, parser=c["parser"]), None
        return
    from mage_gym.data.synth.corpus import read_manifest
    from mage_gym.graph.build import build_graph

    root = _synth_root(c["dataset"])
    docs = read_manifest(root)["docs"]
    n = c.get("synth_docs")
    for d in docs[: int(n) if n is not None else len(docs)]:
        layout = json.loads((root / d["layout"]).read_text(encoding="utf-8"))
        yield build_graph(str(root / d["file"]), parser=c["parser"], cache=False, encoder=None, progress=False), layout


def read_labels(path: Path) -> dict[str, dict[str, Any]]:
    """Hand labels by key (a JSONL file; absent file = none)."""
    labels: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                labels[r["key"]] = r
    return labels


def measure(graphs: Iterable[tuple[Any, dict[str, Any] | None]], labels: Mapping[str, Mapping[str, Any]],
            sample_per_label: int, seed: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Counts, hand-label precision and (synthetic) exact scores over ``graphs``; and the sample to label."""
    from mage_gym.bench.reference_eval import SynthRefEval, evaluate_graph

    found: dict[str, int] = defaultdict(int)
    external: dict[str, int] = defaultdict(int)
    linked: dict[str, int] = defaultdict(int)
    pool: dict[str, list[dict[str, Any]]] = defaultdict(list)
    synth: SynthRefEval | None = None
    n_docs = 0
    for g, layout in graphs:
        n_docs += 1
        ids = g.node_ids
        if layout is not None:
            synth = synth or SynthRefEval()
            evaluate_graph(g, layout, synth)
        for m in find_references(g.pages, g.elements):
            found[m.label] += 1
            external[m.label] += int(m.external)
            if m.target < 0:
                continue
            linked[m.label] += 1
            el = g.elements[m.source - g.n_pages]
            pool[m.label].append({"key": mention_key(g.doc_id, ids[m.source], f"{m.start}:{m.text}->{ids[m.target]}"),
                                  "doc": g.doc_id, "label": m.label, "mention": m.text, "source": ids[m.source],
                                  "context": _context(el.text, m.start, m.text), "target": ids[m.target],
                                  "target_text": _target_text(g, m.target)})
    rng = random.Random(seed)
    sample: list[dict[str, Any]] = []
    for label in sorted(pool) if synth is None else ():  # synthetic documents are scored exactly instead
        items = sorted(pool[label], key=lambda r: r["key"])
        sample += rng.sample(items, min(sample_per_label, len(items)))
    prec: dict[str, dict[str, Any]] = {}
    all_keys = {r["key"] for rs in pool.values() for r in rs}
    for key, r in labels.items():
        if key not in all_keys or "correct" not in r:
            continue  # a label of a link the rules no longer make
        p = prec.setdefault(r["label"], {"n": 0, "correct": 0})
        p["n"] += 1
        p["correct"] += int(bool(r["correct"]))
    for p in prec.values():
        p["precision"] = round(p["correct"] / p["n"], 4)
    n = sum(p["n"] for p in prec.values())
    n_ok = sum(p["correct"] for p in prec.values())
    res = {"documents": n_docs,
           "mentions": {k: {"found": found[k], "external": external[k], "linked": linked[k]} for k in sorted(found)},
           "mentions_total": {"found": sum(found.values()), "external": sum(external.values()),
                              "linked": sum(linked.values())},
           "sampled": len(sample), "labelled": n, "precision": dict(sorted(prec.items())),
           "precision_overall": {"n": n, "correct": n_ok, "precision": round(n_ok / n, 4)} if n else None,
           "synthetic": synth.to_dict() if synth is not None else None}
    return res, sample


@hydra.main(version_base=None, config_path="../../conf", config_name="reference_quality")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    c = plain(cfg)
    out = run_dir()
    labels = read_labels(Path(to_absolute_path(str(c["labels"]))))
    body, sample = measure(_graphs(c), labels, int(c["sample_per_label"]), int(c.get("seed", 0)))
    with open(out / "sample.jsonl", "w", encoding="utf-8") as f:
        for r in sample:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    res = {"command": " ".join([".venv/bin/python experiments/quality/reference_quality.py", *sys.argv[1:]]),
           "dataset": c["dataset"]["name"], "parser": c["parser"], **body}
    write_json(out / "results.json", res)
    show = ("mentions", "mentions_total", "labelled", "precision", "precision_overall")
    print(json.dumps({k: res[k] for k in show}, indent=1))
    if res["synthetic"] is not None:
        print(json.dumps({k: res["synthetic"][k] for k in ("by_kind", "overall")}, indent=1))
    print(f"sample for labelling: {out / 'sample.jsonl'}; results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
