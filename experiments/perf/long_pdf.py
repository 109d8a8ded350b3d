"""Long documents: build a generated N-page PDF with one text line per page, and measure word coverage.

Why: a real corpus holds documents of thousands of pages, and the parsers'
page-furniture rules (a line repeated on many pages, digits aside, is a
running header) can eat a page whose only content is one such line. This
script shows whether every page's line ends up as an element, and what a
long build costs, for each parser:

* ``long``: make a PDF of ``--pages`` pages, each holding one line "Record i:
  the balance of account i is ... dollars." at a height that moves from page
  to page (top and bottom margin bands included); build its graph with each
  parser (no cache) and report pages, elements, pages whose line is an
  element, build seconds and pages/s (with ``--repeats N``: the median of N
  builds, each run's seconds in ``runs_seconds``);
* ``--word-share PDF_OR_DIR ...``: for each PDF (folders are searched for
  ``*.pdf``; ``--max-pages`` keeps the first N pages), the share of the text
  layer's words that the graph keeps as element text (and as element or page
  header/footer text), per parser. Pages without a text layer add nothing.
  A graph already in the cache (``--cache-dir``, default the project cache,
  as ``experiments/build_graphs.py`` fills it) is loaded; any other is built
  without vectors and not cached (word coverage does not depend on them).

It imports only ``mage_gym``, so the same file measures an older checkout
too: ``PYTHONPATH=/path/to/old/checkout python experiments/perf/long_pdf.py ...``.

Run (the 3,000-page build takes minutes; other jobs on the machine inflate
the times)::

    .venv/bin/python experiments/perf/long_pdf.py --out outputs/long_pdf
    .venv/bin/python experiments/perf/long_pdf.py --pages 300 --parsers fast --out outputs/long_pdf_small
    .venv/bin/python experiments/perf/long_pdf.py --pages 0 --parsers fast \\
        --word-share ../shared/data/financebench-dev/pdfs --out outputs/long_pdf_words

Writes ``results.json`` in ``--out``: ``{"config", "long": {parser: {...}},
"word_share": {parser: {"documents", "pages", "words", "element_share",
"kept_share", "per_document"}}}``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

_WORD = re.compile(r"\w+")


def line_text(i: int) -> str:
    """The one line of page ``i`` (0-based): the same for every page once digits are masked."""
    return f"Record {i + 1}: the balance of account {i + 1} is {(i * 37) % 1000} dollars."


def make_long_pdf(path: Path, n_pages: int) -> Path:
    """A PDF of ``n_pages`` US-letter pages with one line each, at a height that moves page to page."""
    import pymupdf

    doc = pymupdf.open()
    for i in range(n_pages):
        page = doc.new_page()
        page.insert_text((72, 60 + (i * 97) % 700), line_text(i), fontsize=11)
    doc.save(path, garbage=4, deflate=True)
    doc.close()
    return path


def measure_long(pdf: Path, n_pages: int, parser: str, workers: int) -> dict[str, Any]:
    """Build ``pdf`` with ``parser`` (no cache): timing and how many page lines became elements."""
    from mage_gym.graph import build_graph

    t0 = time.perf_counter()
    g = build_graph(pdf, parser, cache=False, workers=workers)
    secs = time.perf_counter() - t0
    kept = sum(1 for i in range(g.n_pages) if any(e.text == line_text(i) for e in g.elements_of_page(i)))
    return {"pages": g.n_pages, "elements": g.n_elements, "edges": g.n_edges, "pages_with_line_as_element": kept,
            "share_kept": round(kept / max(1, n_pages), 4), "build_seconds": round(secs, 2),
            "pages_per_second": round(g.n_pages / secs, 2) if secs > 0 else None,
            "stage_seconds": g.meta.get("stage_seconds"), "workers": workers,
            "graph_version": g.meta.get("graph_version")}


def _words(text: str) -> Counter:
    return Counter(w.lower() for w in _WORD.findall(text or ""))


def _overlap(have: Counter, want: Counter) -> int:
    return sum(min(c, have[w]) for w, c in want.items())


def find_pdfs(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out.extend(sorted(p.rglob("*.pdf")) if p.is_dir() else [p])
    return out


def word_share(pdfs: list[Path], parser: str, max_pages: int | None, cache_dir: str | None) -> dict[str, Any]:
    """Share of text-layer words kept as element text (and anywhere in the graph's text), per parser."""
    import pymupdf

    from mage_gym.graph import GraphNotBuiltError, build_graph, load_graph

    per_doc = []
    tot_words = tot_el = tot_any = tot_pages = 0
    for pdf in pdfs:
        try:
            g = load_graph(pdf, parser, cache_dir=cache_dir, max_pages=max_pages)
        except GraphNotBuiltError:
            g = build_graph(pdf, parser, cache=False, encoder=None, max_pages=max_pages, progress=False)
        doc = pymupdf.open(pdf)
        words = el = anywhere = 0
        for i in range(g.n_pages):
            page_words = _words(doc.load_page(i).get_text("text"))
            el_words = Counter()
            for e in g.elements_of_page(i):
                el_words.update(_words(e.text or e.table_markdown or ""))
            p = g.pages[i]
            any_words = el_words + _words(p.header_text) + _words(p.footer_text)
            words += sum(page_words.values())
            el += _overlap(el_words, page_words)
            anywhere += _overlap(any_words, page_words)
        doc.close()
        per_doc.append({"document": pdf.name, "pages": g.n_pages, "elements": g.n_elements, "words": words,
                        "from_cache": bool(g.meta.get("cache_hit")),
                        "element_share": round(el / words, 4) if words else None,
                        "kept_share": round(anywhere / words, 4) if words else None})
        tot_words, tot_el, tot_any = tot_words + words, tot_el + el, tot_any + anywhere
        tot_pages += g.n_pages
    return {"documents": len(pdfs), "pages": tot_pages, "words": tot_words,
            "elements": sum(d["elements"] for d in per_doc),
            "element_share": round(tot_el / tot_words, 4) if tot_words else None,
            "kept_share": round(tot_any / tot_words, 4) if tot_words else None, "per_document": per_doc}


def _commit(module_file: Path) -> dict[str, Any]:
    """The git commit of the measured code, and whether its tree had uncommitted changes."""
    repo = module_file.resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": head or None, "dirty": dirty if head else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=3000, help="pages of the generated PDF (0: skip the long build)")
    ap.add_argument("--parsers", nargs="+", default=["fast", "layout"])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1, help="builds per parser; the median one is reported")
    ap.add_argument("--word-share", nargs="*", default=[], metavar="PDF_OR_DIR",
                    help="PDFs or folders whose text-layer word coverage to measure")
    ap.add_argument("--max-pages", type=int, default=None, help="first N pages per document for --word-share")
    ap.add_argument("--cache-dir", default=None, help="graph cache for --word-share (default: the project cache)")
    ap.add_argument("--out", default="outputs/long_pdf")
    args = ap.parse_args()

    import mage_gym.graph as mg

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "config": {**vars(args), "command": " ".join(["python", *sys.argv]), **_commit(Path(mg.__file__)),
                   "code": str(Path(mg.__file__).resolve().parent.parent),
                   "graph_version": mg.GRAPH_VERSION, "machine": platform.machine(), "cores": os.cpu_count(),
                   "date": datetime.now(timezone.utc).isoformat(timespec="seconds")},
        "long": {}, "word_share": {},
    }
    if args.pages > 0:
        with tempfile.TemporaryDirectory() as tmp:
            pdf = make_long_pdf(Path(tmp) / f"one_line_{args.pages}.pdf", args.pages)
            for parser in args.parsers:
                runs = [measure_long(pdf, args.pages, parser, args.workers) for _ in range(args.repeats)]
                r = sorted(runs, key=lambda x: x["build_seconds"])[(len(runs) - 1) // 2]  # the median run
                r = {**r, "repeats": len(runs), "runs_seconds": [x["build_seconds"] for x in runs]}
                results["long"][parser] = r
                print(f"{parser}: {r['pages_with_line_as_element']}/{args.pages} page lines kept as elements, "
                      f"{r['build_seconds']} s ({r['pages_per_second']} pages/s)")
    if args.word_share:
        pdfs = find_pdfs(args.word_share)
        for parser in args.parsers:
            r = word_share(pdfs, parser, args.max_pages, args.cache_dir)
            results["word_share"][parser] = r
            print(f"{parser}: {r['documents']} documents, {r['pages']} pages, {r['words']} words: "
                  f"{r['element_share']} as element text, {r['kept_share']} anywhere in the graph")
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
