"""The offline pipeline's entry points: document -> evidence graph, through the cache.

Stages, and the module doing each:

1. *parse* (:func:`mage_gym.graph.parsers.get_parser`), then *prepare* and
   *embed* (:mod:`.prepare`: normalise boxes, pair captions, choose and encode
   the text of each element) are per page; with ``workers > 1`` they run on
   page chunks in worker processes (:mod:`.workers`), or with a
   ``chunk_executor`` wherever that sends them (e.g. Ray tasks).
2. *assemble* (:mod:`.assemble`) is document-wide and runs in the calling
   process: ids, reading order, the section tree, summaries, edges, meta.
3. the result is written to the content-addressed cache (:mod:`.store`); a
   second call with the same bytes and settings loads it in milliseconds
   without importing a parser or torch.

A page the parser could not read is recorded as a
:class:`~mage_gym.graph.schema.PageFailure` in ``meta["failed_pages"]``, and
a graph with failed pages is never cached. A long build shows a progress bar
(pages/s, on a terminal); Ctrl-C stops it, workers included, with nothing
written to the cache.
"""
from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

from mage_gym.graph.assemble import assemble
from mage_gym.graph.edges import EdgeConfig
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.prepare import EmbedConfig, Encoder, embed_pages, encoder_name, prepare_page, resolve_encoder
from mage_gym.graph.schema import DocumentSource, PageFailure, ParsedDocument
from mage_gym.graph.store import GRAPH_VERSION, GraphNotBuiltError, cache_key, load_cached, save_graph
from mage_gym.graph.workers import get_pool, parse_and_embed_parallel, shutdown_pool, warm_pool

log = logging.getLogger(__name__)


def _settings_key(src: DocumentSource, parser: str, parser_cfg: Mapping[str, Any], ecfg: EdgeConfig,
                  mcfg: EmbedConfig, encoder: Encoder | None | str, doc_id: str, max_pages: int | None,
                  digest: str) -> str:
    return cache_key(digest, parser, parser_cfg, ecfg.to_dict(), encoder_name(encoder), GRAPH_VERSION,
                     extra={"doc_id": doc_id, "max_pages": max_pages, "embed_cfg": mcfg.to_dict(),
                            "source_kind": src.kind})


def _resolve(source: str | Path | DocumentSource, doc_id: str | None) -> tuple[DocumentSource, str, str]:
    from mage_gym.graph.sources import doc_id_for, file_digest

    src = _as_source(source)
    return src, doc_id or doc_id_for(src), file_digest(src)


def load_graph(source: str | Path | DocumentSource, parser: str = "layout", *, cache_dir: str | Path | None = None,
               max_pages: int | None = None, parser_cfg: Mapping[str, Any] | None = None,
               edge_cfg: Mapping[str, Any] | None = None, embed_cfg: Mapping[str, Any] | None = None,
               doc_id: str | None = None, encoder: Encoder | None | str = "default") -> EvidenceGraph:
    """The cached graph of ``source`` for these settings; never parses or embeds.

    Raises :class:`GraphNotBuiltError` (naming the command to build it) when
    there is no valid entry.
    """
    src, did, digest = _resolve(source, doc_id)
    key = _settings_key(src, parser, dict(parser_cfg or {}), EdgeConfig.from_dict(edge_cfg),
                        EmbedConfig.from_dict(embed_cfg), encoder, did, max_pages, digest)
    g = _load_complete(key, cache_dir)
    if g is None:
        raise GraphNotBuiltError(
            f"no cached graph for {src.path} (parser={parser}, max_pages={max_pages}); build it with "
            f"mage_gym.graph.build_graph(...) or `python experiments/build_graphs.py input={src.path}`")
    return _attach(g, src, key, hit=True)


def _attach(g: EvidenceGraph, src: DocumentSource, key: str, hit: bool) -> EvidenceGraph:
    """Point a (possibly cached) graph at the caller's copy of the file."""
    if g.source != src:
        g.source = src
    g.meta["cache_key"] = key
    g.meta["cache_hit"] = hit
    return g


def is_cached(source: str | Path | DocumentSource, parser: str = "layout", *, cache_dir: str | Path | None = None,
              doc_id: str | None = None) -> bool:
    """Whether :func:`build_graph` with these settings (and default edges, embeddings, encoder) would read the
    cache instead of parsing: lets a run keep to documents already built when parsing one would take minutes."""
    from mage_gym.graph.store import has_entry

    src, did, digest = _resolve(source, doc_id)
    key = _settings_key(src, parser, {}, EdgeConfig.from_dict(None), EmbedConfig.from_dict(None), "default", did,
                        None, digest)
    return has_entry(key, cache_dir)


def build_graph(source: str | Path | DocumentSource, parser: str = "layout", *, cache: bool = True,
                cache_dir: str | Path | None = None, max_pages: int | None = None, workers: int = 1,
                parser_cfg: Mapping[str, Any] | None = None, edge_cfg: Mapping[str, Any] | None = None,
                doc_id: str | None = None, embed_cfg: Mapping[str, Any] | None = None,
                encoder: Encoder | None | str = "default", progress: bool = True, chunk_executor: Any = None,
                chunks: int | None = None) -> EvidenceGraph:
    """Evidence graph of a PDF or page-image folder, from the cache when possible.

    ``workers > 1`` parses and embeds contiguous page chunks in a persistent
    process pool (each worker holds its own encoder; only the default encoder
    can be used there). Workers start with ``forkserver``, so a script that
    calls this with ``workers > 1`` needs the usual ``if __name__ ==
    "__main__":`` guard. Typed :mod:`mage_gym.graph.errors` are raised for bad
    input. ``meta["cache_hit"]`` says whether the graph came from the cache.
    ``progress`` shows progress bars for long builds (:mod:`mage_gym.progress`: log lines off a terminal).

    ``chunk_executor`` (anything with ``submit(fn, *args)`` returning a
    ``concurrent.futures.Future``) runs the page chunks instead of the local
    pool, so a cluster can parse and embed one long document while this
    process assembles it; ``chunks`` fixes how many near-equal page ranges
    the pages are split into (default: the pool's decreasing-size schedule).
    Chunk boundaries decide how texts are batched for the encoder, so the
    vectors' last float digits may depend on them (docs/DISTRIBUTED.md).
    """
    t0 = time.perf_counter()
    pcfg = dict(parser_cfg or {})
    ecfg = EdgeConfig.from_dict(edge_cfg)
    mcfg = EmbedConfig.from_dict(embed_cfg)
    chunked = workers > 1 or chunk_executor is not None
    if chunked and encoder != "default":
        raise ValueError("workers > 1 or a chunk_executor needs the default encoder (a custom encoder cannot be "
                         "sent to workers)")
    if chunks is not None and not chunked:
        raise ValueError("chunks needs workers > 1 or a chunk_executor (an in-process build is one chunk)")
    src, did, digest = _resolve(source, doc_id)
    key = _settings_key(src, parser, pcfg, ecfg, mcfg, encoder, did, max_pages, digest)
    if cache:
        g = _load_complete(key, cache_dir)
        if g is not None:
            return _attach(g, src, key, hit=True)

    from mage_gym.graph.sources import page_count

    if chunked:
        # counted in a worker: importing PyMuPDF here would cost the caller over a second
        runner = get_pool(workers) if chunk_executor is None else chunk_executor
        n_total = runner.submit(page_count, src).result()
    else:
        n_total = page_count(src)
    n = n_total if max_pages is None or max_pages < 0 else min(n_total, max_pages)
    doc_warnings: list[str] = []
    t1 = time.perf_counter()
    if (workers > 1 and n > 1) or (chunk_executor is not None and n > 0):
        prepared, doc_warnings, page_vecs, el_vecs, work = parse_and_embed_parallel(
            src, parser, pcfg, n, max_pages, mcfg, ecfg.caption_max_gap, workers, progress,
            chunk_executor=chunk_executor, chunks=chunks)
    else:
        from mage_gym.graph.parsers import get_parser

        c1 = time.process_time()
        with warnings.catch_warnings(), _page_bar(n, f"parse {Path(src.path).name[:30]}", progress) as bar:
            warnings.simplefilter("ignore")
            parsed = get_parser(parser, **pcfg).parse(src, max_pages=max_pages, progress=bar.update)
        doc_warnings = list(parsed.warnings)
        prepared = [prepare_page(p, mcfg, ecfg.caption_max_gap) for p in parsed.pages]
        tp, cp = time.perf_counter(), time.process_time()
        enc = resolve_encoder(encoder)
        page_vecs, el_vecs = embed_pages(prepared, enc, mcfg, progress=progress)
        work = {"parse": tp - t1, "embed": time.perf_counter() - tp, "parse_cpu": cp - c1,
                "embed_cpu": time.process_time() - cp, "embed_precision": getattr(enc, "precision", None)}
    meta = {
        "parser": parser, "parser_cfg": pcfg, "embed_model": encoder_name(encoder), "embed_cfg": mcfg.to_dict(),
        # which precision computed the vectors (not in the cache key: precisions agree to cosine >= 0.96
        # and give the same retrieval recall, see mage_gym.graph.embed)
        "embed_precision": work.get("embed_precision"),
        "graph_version": GRAPH_VERSION, "digest": digest, "max_pages": max_pages, "n_pages_total": n_total,
        "workers": workers, "warnings": doc_warnings,
    }
    t2 = time.perf_counter()
    g = assemble(prepared, page_vecs, el_vecs, source=src, doc_id=did, edge_cfg=ecfg, dtype=mcfg.dtype, meta=meta)
    t3 = time.perf_counter()
    g.meta["build_seconds"] = round(t3 - t0, 4)
    # *_busy: wall time inside the stage summed over workers; *_cpu: CPU time (all threads) summed over
    # workers, which other jobs on the machine do not inflate; the rest is wall time of the caller
    g.meta["stage_seconds"] = {"open_and_key": round(t1 - t0, 4), "parse_and_embed_wall": round(t2 - t1, 4),
                               "parse_busy": round(work["parse"], 4), "embed_busy": round(work["embed"], 4),
                               "parse_cpu": round(work["parse_cpu"], 4), "embed_cpu": round(work["embed_cpu"], 4),
                               "assemble": round(t3 - t2, 4)}
    if "peak_rss_mib" in work:
        g.meta["worker_peak_rss_mib"] = round(work["peak_rss_mib"], 1)
    g.meta["cache_key"] = key
    failed = failed_pages(g)
    if failed:
        # Not cached: the failure may be transient (out of memory, an install broken mid-run), and a
        # cached graph with empty pages would hide it from every later run.
        log.warning("%s: %d of %d pages failed (first: page %d, %s); the graph is not cached",
                    src.path, len(failed), g.n_pages, failed[0].page, failed[0].warning())
    elif cache:
        save_graph(g, key, cache_dir)
    g.meta["cache_hit"] = False
    return g


def _page_bar(n: int, desc: str, progress: bool) -> Any:
    """A progress bar over the pages being parsed (pages/s on stderr), for 20+ pages."""
    from mage_gym.progress import progress_bar

    return progress_bar(total=n, desc=desc, unit="page", leave=False, disable=None if progress and n >= 20 else True)


def _load_complete(key: str, cache_dir: str | Path | None) -> EvidenceGraph | None:
    """The cached graph, unless it has failed pages (entries written before such graphs were refused)."""
    g = load_cached(key, cache_dir)
    if g is not None and g.meta.get("failed_pages"):
        log.warning("cached graph %s has failed pages; rebuilding", key[:12])
        return None
    return g


def failed_pages(g: EvidenceGraph) -> list[PageFailure]:
    """The pages of ``g`` whose content is missing because something failed, in page order."""
    return [PageFailure.from_dict(d) for d in g.meta.get("failed_pages", ())]


def build_from_parsed(parsed: ParsedDocument, source: DocumentSource | str | Path, doc_id: str, *,
                      encoder: Encoder | None | str = "default", edge_cfg: Mapping[str, Any] | None = None,
                      embed_cfg: Mapping[str, Any] | None = None, meta: Mapping[str, Any] | None = None,
                      ) -> EvidenceGraph:
    """Graph of a :class:`ParsedDocument` made by hand, by a parser or by the synthetic generator.

    ``encoder="default"`` uses the process-wide MiniLM; pass any object with
    ``name``, ``dim`` and ``encode(texts)`` (tests use a hashing encoder), or
    ``None`` for a graph with empty vectors and no semantic edges.
    No cache is involved.
    """
    t0 = time.perf_counter()
    ecfg = EdgeConfig.from_dict(edge_cfg)
    mcfg = EmbedConfig.from_dict(embed_cfg)
    src = _as_source(source)
    enc = resolve_encoder(encoder)
    prepared = [prepare_page(p, mcfg, ecfg.caption_max_gap) for p in parsed.pages]
    page_vecs, el_vecs = embed_pages(prepared, enc, mcfg)
    m = {"parser": parsed.parser, "embed_model": getattr(enc, "name", None),
         "embed_precision": getattr(enc, "precision", None), "embed_cfg": mcfg.to_dict(),
         "warnings": list(parsed.warnings), "graph_version": GRAPH_VERSION}
    m.update(meta or {})
    g = assemble(prepared, page_vecs, el_vecs, source=src, doc_id=doc_id, edge_cfg=ecfg, dtype=mcfg.dtype, meta=m)
    g.meta.setdefault("build_seconds", round(time.perf_counter() - t0, 4))
    return g


def _as_source(source: DocumentSource | str | Path) -> DocumentSource:
    """Classify the path without opening the PDF.

    Opening is left to the parser (which raises the typed errors): importing
    PyMuPDF costs over a second here (it pulls in its ONNX layout model), and
    the cache-hit path must not pay that.
    """
    if isinstance(source, DocumentSource):
        return source
    from mage_gym.graph.sources import open_source

    return open_source(source, validate=False)


__all__ = ["build_graph", "load_graph", "build_from_parsed", "failed_pages", "EmbedConfig", "Encoder",
           "prepare_page", "embed_pages", "get_pool", "warm_pool", "shutdown_pool"]
