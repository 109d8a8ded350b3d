"""How well does OCR read page images? Word recall/precision against a PDF's own text layer.

Why: LongDocURL ships documents only as page PNGs, and scanned PDFs have no
text layer, so everything a policy or reader knows of those pages comes from
RapidOCR. Words glued together ("SECURITIESANDEXCHANGE") or dropped are
invisible to BM25 and the reader. There is no OCR gold in the benchmarks, but
a text-layer PDF rendered to an image *is* a page image with known words: this
script renders pages of real PDFs at ``--dpi`` (72 matches LongDocURL's
612x792-pixel PNGs), OCRs them with :func:`mage_gym.graph.parsers.ocr.image_lines`
under each ``--min-short-side`` setting (the upscaling applied to small
images), and compares word multisets with the text layer:

* word recall: share of text-layer words (lower-cased, punctuation stripped,
  length >= 2) that OCR produced;
* word precision: share of OCR words that are text-layer words (glued words
  count as errors on both sides);
* seconds per page.

Run::

    .venv/bin/python experiments/quality/ocr_quality.py --pages 12 --min-short-side 0 1000
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from mage_gym.bench.results import write_json
from mage_gym.data.io import data_root

DEFAULT_PDFS = ["financebench-dev/pdfs/NIKE_2021_10K.pdf", "mmlongbench-dev/documents/2312.09390v1.pdf",
                "financebench-dev/pdfs/PEPSICO_2022_10K.pdf"]
_WORD = re.compile(r"[a-z0-9]+(?:[.,'][a-z0-9]+)*")


def words(text: str) -> Counter:
    return Counter(w for w in _WORD.findall(text.lower()) if len(w) >= 2)


def overlap(gold: Counter, pred: Counter) -> tuple[float, float]:
    hit = sum((gold & pred).values())
    return hit / max(1, sum(gold.values())), hit / max(1, sum(pred.values()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pdfs", nargs="*", default=DEFAULT_PDFS, help="text-layer PDFs (relative to the data root)")
    ap.add_argument("--pages", type=int, default=12, help="pages in all, spread evenly over the PDFs")
    ap.add_argument("--dpi", type=int, default=72)
    ap.add_argument("--min-short-side", type=int, nargs="*", default=[0, 1000],
                    help="upscale settings to compare (0 = OCR the image as it is)")
    ap.add_argument("--out", default="outputs/ocr_quality")
    args = ap.parse_args()
    os.environ["MAGE_GYM_OCR_CACHE"] = "0"  # time the OCR itself, never the OCR cache

    import pymupdf

    from mage_gym.graph.parsers.ocr import image_lines

    root = data_root()
    pdfs = [p if Path(p).is_absolute() else root / p for p in args.pdfs]
    pdfs = [p for p in pdfs if Path(p).exists()]
    if not pdfs:
        sys.exit(f"none of the PDFs exist under {root}: set MAGE_GYM_DATA to the shared data folder")
    per_pdf = max(1, args.pages // len(pdfs))
    rows: dict[int, dict[str, list[float]]] = {m: {"recall": [], "precision": [], "seconds": []}
                                               for m in args.min_short_side}
    with tempfile.TemporaryDirectory() as tmp:
        for pdf in pdfs:
            doc = pymupdf.open(pdf)
            step = max(1, doc.page_count // (per_pdf + 1))
            for pno in list(range(step, doc.page_count, step))[:per_pdf]:
                page = doc.load_page(pno)
                gold = words(page.get_text())
                if sum(gold.values()) < 20:
                    continue
                png = Path(tmp) / f"{pdf.stem}_{pno}.png"
                page.get_pixmap(dpi=args.dpi).save(png)
                for m in args.min_short_side:
                    t = time.perf_counter()
                    lines, *_ = image_lines(str(png), min_short_side=m)
                    secs = time.perf_counter() - t
                    r, p = overlap(gold, words(" ".join(ln.text for ln in lines)))
                    rows[m]["recall"].append(r)
                    rows[m]["precision"].append(p)
                    rows[m]["seconds"].append(secs)
                    print(f"{pdf.name[:30]:30s} p{pno:<4d} min_short_side={m:<5d} recall {r:.3f} "
                          f"precision {p:.3f}  {secs:5.1f} s", flush=True)
            doc.close()
    summary = {"dpi": args.dpi, "pages": len(next(iter(rows.values()))["recall"]), "settings": {}}
    print(f"\n{summary['pages']} pages rendered at {args.dpi} dpi (medians over pages)")
    for m, r in rows.items():
        s = {k: round(statistics.median(v), 3) for k, v in r.items() if v}
        summary["settings"][str(m)] = s
        print(f"min_short_side={m:<5d} word recall {s['recall']:.3f}  precision {s['precision']:.3f}  "
              f"{s['seconds']:.2f} s/page")
    print(f"wrote {write_json(Path(args.out) / 'results.json', summary)}")


if __name__ == "__main__":
    main()
