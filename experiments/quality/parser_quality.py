"""Parser quality: do parsed elements line up with human evidence regions?

Run (from the repo root):

    .venv/bin/python experiments/quality/parser_quality.py parser=layout
    .venv/bin/python experiments/quality/parser_quality.py parser=fast limit_docs=5
    .venv/bin/python experiments/quality/parser_quality.py parser=layout +parser_cfg.image_ocr=layout

For every MMLongBench-Doc dev PDF with MMDocIR region boxes, parses only the
pages that carry gold boxes (pages without a text layer go through OCR, as in
a graph build) and counts a gold box as matched when the union of the page's
elements lying >= 80% inside it has IoU >= 0.5 with it
(:func:`mage_gym.graph.parsers.quality.match_gold`). Prints match rates
overall, by evidence type (text, table, chart, figure, layout; ``mixed`` for
boxes of questions citing several types; ``any:<type>`` counts a box under
every type its questions cite) and by page kind (text layer vs
image-only/OCR), and writes ``results.json`` in the Hydra run directory:

    {"parser", "parser_cfg", "documents", "pages", "overall": {boxes, matched, match_rate, mean_iou},
     "by_type": {...}, "by_type_any": {...}, "by_page_kind": {"text_layer": ..., "image_only": ...},
     "by_doc": {...}, "seconds_per_page": {"median_doc", "text_layer_median_doc", "image_only_median_doc",
     "cpu_median_doc"},
     "ocr": {"pages", "seconds", "seconds_per_page"}, "errors": [...]}
"""
from __future__ import annotations

import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from mage_gym.progress import progress_bar

from mage_gym.bench.config import check_parser, exit_on_config_error
from mage_gym.data.io import data_root as default_data_root
from mage_gym.graph.errors import DocumentError
from mage_gym.graph.parsers import get_parser
from mage_gym.graph.parsers import ocr as ocr_mod
from mage_gym.graph.parsers.quality import (CATEGORIES, TYPED_CATEGORIES, Tally, best_overlap_type,
                                            load_gold_boxes, match_gold)
from mage_gym.graph.sources import open_source, page_count

log = logging.getLogger("parser_quality")


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    root = Path(cfg.data_root) if cfg.data_root else default_data_root()
    gold = load_gold_boxes(root / cfg.gold_file)
    names = sorted(gold)
    if cfg.docs:
        names = [n for n in names if n in set(cfg.docs)]
    if cfg.limit_docs:
        names = names[: int(cfg.limit_docs)]
    parser_cfg = OmegaConf.to_container(cfg.parser_cfg, resolve=True) or {}
    parser = get_parser(check_parser(cfg.parser, option="parser"), **parser_cfg)

    overall, by_type = Tally(), {c: Tally() for c in CATEGORIES}
    by_kind = {"text_layer": Tally(), "image_only": Tally()}
    by_type_any: dict[str, Tally] = {}  # a box counts under every type its questions cite
    # gold category -> parsed type of the best-overlapping element (None = no element overlaps)
    type_confusion: dict[str, dict[str, int]] = {c: {} for c in TYPED_CATEGORIES}
    by_doc: dict[str, Any] = {}
    secs_text: list[float] = []
    secs_image: list[float] = []
    secs_all: list[float] = []
    cpu: list[float] = []  # CPU seconds/page: less sensitive to a busy shared machine than wall time
    errors: list[str] = []
    n_pages = 0
    ocr0 = dict(ocr_mod.OCR_STATS)
    for name in progress_bar(names, desc=f"parse[{cfg.parser}]"):
        path = root / cfg.documents_dir / name
        try:
            src = open_source(path)
            n_total = page_count(src)
        except (DocumentError, OSError) as exc:
            errors.append(f"{name}: {exc}")
            continue
        boxes = [b for b in gold[name] if 0 <= b.page < n_total]
        pages = sorted({b.page for b in boxes})
        if not pages:
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        parsed = parser.parse(src, pages=pages)
        dt = (time.perf_counter() - t0) / len(pages)
        cpu.append((time.process_time() - c0) / len(pages))
        n_pages += len(pages)
        by_page = {p.index: p for p in parsed.pages}
        image_only = sum(p.image_only for p in parsed.pages) > len(parsed.pages) / 2
        (secs_image if image_only else secs_text).append(dt)
        secs_all.append(dt)
        doc_tally = Tally()
        for b in boxes:
            page = by_page.get(b.page)
            if page is None or page.width <= 0:
                ok, iou = False, 0.0
            else:
                ok, iou = match_gold(b.rescaled(page.width, page.height), [e.bbox for e in page.elements],
                                     inside=cfg.inside, min_iou=cfg.min_iou)
            for t in (overall, by_type[b.category], doc_tally,
                      by_kind["image_only" if page is not None and page.image_only else "text_layer"]):
                t.add(ok, iou)
            for ty in b.types:
                by_type_any.setdefault(ty, Tally()).add(ok, iou)
            if b.category in type_confusion and page is not None and page.width > 0:
                got = best_overlap_type(b.rescaled(page.width, page.height), [(e.bbox, e.type) for e in page.elements])
                row = type_confusion[b.category]
                row[str(got)] = row.get(str(got), 0) + 1
        by_doc[name] = {**doc_tally.as_dict(), "pages": len(pages), "seconds_per_page": round(dt, 3),
                        "image_only": image_only}
    ocr_pages = ocr_mod.OCR_STATS["pages"] - ocr0["pages"]
    ocr_secs = ocr_mod.OCR_STATS["seconds"] - ocr0["seconds"]
    ocr_cached = ocr_mod.OCR_STATS["cached"] - ocr0["cached"]

    def med(xs: list[float]) -> float | None:
        return round(statistics.median(xs), 3) if xs else None

    return {
        "parser": cfg.parser,
        "parser_cfg": parser_cfg,
        "documents": len(by_doc),
        "pages": n_pages,
        "overall": overall.as_dict(),
        "by_type": {c: t.as_dict() for c, t in by_type.items() if t.n},
        "by_type_any": {c: by_type_any[c].as_dict() for c in sorted(by_type_any)},
        "by_page_kind": {k: t.as_dict() for k, t in by_kind.items()},
        "type_confusion": type_confusion,
        "type_accuracy": type_accuracy(type_confusion),
        "by_doc": by_doc,
        "seconds_per_page": {"median_doc": med(secs_all), "text_layer_median_doc": med(secs_text),
                             "image_only_median_doc": med(secs_image), "cpu_median_doc": med(cpu)},
        "ocr": {"pages": int(ocr_pages), "cached_pages": int(ocr_cached), "seconds": round(ocr_secs, 2),
                "seconds_per_page": round(ocr_secs / ocr_pages, 3) if ocr_pages else None,
                "note": "line-grouping OCR only; pymupdf4llm's own OCR (image_ocr=layout) is in seconds_per_page"},
        "errors": errors,
    }


def type_accuracy(type_confusion: dict[str, dict[str, int]]) -> dict[str, float | None]:
    """Per gold category, the share of its boxes whose best-overlapping element has a compatible type.

    ``None`` (null in results.json, "n/a" in the table) for a category with no
    gold boxes: no evidence is not 0% accuracy.
    """
    out: dict[str, float | None] = {}
    for cat, row in type_confusion.items():
        total = sum(row.values())
        right = sum(n for t, n in row.items() if t in TYPED_CATEGORIES[cat])
        out[cat] = round(right / total, 4) if total else None
    return out


def format_table(res: dict[str, Any]) -> str:
    rows = ([("overall", res["overall"])] + list(res["by_type"].items())
            + [(f"any:{k}", v) for k, v in res["by_type_any"].items()] + list(res["by_page_kind"].items()))
    out = [f"parser={res['parser']} {res['parser_cfg'] or ''} docs={res['documents']} pages={res['pages']}",
           f"{'group':12s} {'boxes':>6s} {'matched':>8s} {'rate':>6s} {'meanIoU':>8s}"]
    for name, t in rows:
        out.append(f"{name:12s} {t['boxes']:6d} {t['matched']:8d} {t['match_rate']:6.3f} {t['mean_iou']:8.3f}")
    for cat, row in res.get("type_confusion", {}).items():
        acc = res["type_accuracy"][cat]
        out.append(f"type of the element best overlapping a gold {cat} box (IoU >= 0.3): "
                   f"right {'n/a (no gold boxes)' if acc is None else f'{acc:.3f}'}; "
                   f"{dict(sorted(row.items(), key=lambda kv: -kv[1]))}")
    sp = res["seconds_per_page"]
    out.append(f"parse s/page (median over docs): all={sp['median_doc']} text-layer={sp['text_layer_median_doc']} "
               f"image-only={sp['image_only_median_doc']} (CPU s/page median={sp['cpu_median_doc']}); "
               f"OCR s/page={res['ocr']['seconds_per_page']} ({res['ocr']['cached_pages']} pages from the OCR cache)")
    return "\n".join(out)


@hydra.main(config_path="../../conf", config_name="parser_quality", version_base=None)
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    res = evaluate(cfg)
    print(format_table(res))
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(res, indent=2))
    print(f"results: {out_dir / 'results.json'}")


if __name__ == "__main__":
    main()
