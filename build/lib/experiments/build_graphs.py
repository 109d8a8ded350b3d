"""Build the evidence graphs of a dataset folder, once, into the graph cache.

Run (from the repo root; ``python -m experiments.build_graphs`` works the same):

    .venv/bin/python experiments/build_graphs.py input=../shared/data/mmlongbench-dev parser=layout
    .venv/bin/python experiments/build_graphs.py input=../shared/data parser=fast max_pages=50 limit=10
    .venv/bin/python experiments/build_graphs.py 'files=[../shared/data/financebench-dev/pdfs/NIKE_2021_10K.pdf]'

Documents are PDFs and folders of page images (LongDocURL), found
recursively; cached ones are only loaded, the rest built in ``workers``
processes (:mod:`experiments.common.corpus`), or with ``executor=ray`` as one
Ray task per document (page-chunk tasks for documents longer than executor.ray.chunk_pages) on a cluster (conf/executor/ray.yaml, docs/DISTRIBUTED.md). A bad file never stops the run:
its typed error (:mod:`mage_gym.graph.errors`) is recorded. The exit status is
1 when no document has a graph at the end (nothing built or cached), or when
an option is wrong (e.g. an unknown ``parser``: one error before any file is opened).

Writes ``results.json`` in the Hydra run directory:

    {"config": {...}, "documents": [{"doc_id", "path", "pages", "elements", "elements_by_type",
      "edges_by_kind", "seconds", "cached", "error", "error_type", "warnings",
      "graph_hash" (sha256 over node ids, edge arrays and vectors; equal for local and Ray builds)}, ...],
     "totals": {"documents", "built", "cached", "failed", "pages", "elements", "edges", "build_seconds",
                "wall_seconds", "seconds_per_100_pages_built", "errors_by_type"}}
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from experiments.common.config import ConfigError, exit_on_config_error, plain, run_dir
from experiments.common.corpus import build_corpus
from experiments.common.results import write_json


@hydra.main(version_base=None, config_path="../conf", config_name="build_graphs")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    c = plain(cfg)
    c.pop("hydra", None)
    results = build_corpus(c)
    out = write_json(run_dir() / "results.json", results)
    t = results["totals"]
    print(f"{t['documents']} documents: {t['built']} built, {t['cached']} cached, {t['failed']} failed; "
          f"{t['pages']} pages, {t['elements']} elements, {t['edges']} edges; wall {t['wall_seconds']} s")
    for r in results["documents"]:
        if r["error"]:
            print(f"  FAILED {r['path']}: {r['error_type']}: {r['error']}")
    print(f"results: {out}")
    if t["built"] + t["cached"] == 0:
        where = f"input={c.get('input')}" if not c.get("files") else "files=[...]"
        raise ConfigError(f"no graph built: {t['documents']} documents found ({where}), {t['failed']} failed")


if __name__ == "__main__":
    main()
