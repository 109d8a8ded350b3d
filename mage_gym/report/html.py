"""Report data -> a self-contained static site (one folder, opens from disk via file://).

Layout of the folder::

    index.html                 episode index: filters, sortable columns, per-policy summary
    episodes/<slug>.html       one page per episode: every policy's run, timeline, pages, reader input;
                               side-by-side view of two policies via ``#compare=a,b``
    assets/report.css|index.js|episode.js
    img/<doc_key>/page-0003.jpg, thumb-0003.jpg, reader-<node>.jpg
    report.json                the index rows and warnings (machine-readable)

Why data inline and classic scripts: Chromium refuses ``fetch`` and ES
modules on file:// URLs, so each page embeds its own JSON in a
``<script type="application/json">`` block (``<`` escaped, so document
text cannot close the tag) and loads plain scripts. Only the pages an
episode touched get element boxes; the rest of a long document appears as
lazily built, lazily loaded thumbnails, so a 300-page document costs what
its touched pages cost.
"""
from __future__ import annotations

import html
import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from mage_gym.report.data import NUMERIC_COLUMNS, EpisodeView, ReportData, outcome_counts
from mage_gym.report.images import ImageOptions, ImageWriter

ASSETS = ("report.css", "index.js", "episode.js")


def _json_script(obj: Any, element_id: str = "report-data") -> str:
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def _page(title: str, body: str, data: Any, script: str, prefix: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<link rel="stylesheet" href="{prefix}assets/report.css">
</head>
<body>
{body}
{_json_script(data)}
<script src="{prefix}assets/{script}"></script>
</body>
</html>
"""


def copy_assets(out: Path) -> None:
    dest = out / "assets"
    dest.mkdir(parents=True, exist_ok=True)
    pkg = resources.files("mage_gym.report") / "assets"
    for name in ASSETS:
        with resources.as_file(pkg / name) as src:
            shutil.copyfile(src, dest / name)


def _episode_payload(data: ReportData, ep: EpisodeView, images: ImageWriter) -> dict[str, Any]:
    doc = data.docs[ep.doc_key]
    touched = set(ep.touched_pages)
    pages = []
    for p in range(doc.n_pages):
        w, h = doc.page_sizes[p] if p < len(doc.page_sizes) else (612.0, 792.0)
        src = images.page(doc, p) if p in touched else None
        thumb = images.page(doc, p, thumb=True) if images.options.other_pages else None
        page = {"id": doc.page_node_id(p), "w": round(w, 1), "h": round(h, 1), "src": src and "../" + src,
                "thumb": thumb and "../" + thumb}
        if doc.spans:  # a union of documents: the page's own document and number
            member, local = doc.locate(p)
            page.update(doc=member, local=local, label=doc.page_label(p))
        pages.append(page)

    def with_images(ri: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if not ri:
            return None
        ri = dict(ri)
        ri["images"] = [dict(im, src=(s and "../" + s)) for im in ri.get("images", [])
                        for s in [images.reader_image(doc, im)]]
        return ri

    runs = {}
    for pol, run in ep.runs.items():
        d = run.to_dict()
        d["reader_input"] = with_images(d.get("reader_input"))
        d["turns"] = [dict(t, reader_input=with_images(t.get("reader_input"))) for t in d.get("turns", [])]
        runs[pol] = d
    return {
        "title": data.title, "meta": ep.meta(), "runs": runs,
        "doc": {"doc_id": doc.doc_id, "n_pages": doc.n_pages, "has_pixels": doc.has_pixels, "pages": pages,
                "elements": {str(p): els for p, els in doc.elements_on(touched).items()},
                "documents": [sp.to_dict() for sp in doc.spans]},
    }


def write_report(data: ReportData, out_dir: str | Path, image_options: ImageOptions | Mapping[str, Any] | None = None,
                 progress: bool = True) -> Path:
    """Write the site into ``out_dir`` (created); returns the path of ``index.html``."""
    from mage_gym.progress import progress_bar

    out = Path(out_dir)
    (out / "episodes").mkdir(parents=True, exist_ok=True)
    copy_assets(out)
    images = ImageWriter(out, ImageOptions.coerce(image_options))
    for ep in progress_bar(data.episodes, desc="report", unit="episode", disable=not progress):
        payload = _episode_payload(data, ep, images)
        body = (f'<header class="top"><a href="../index.html">&larr; all episodes</a>'
                f'<h1>{html.escape(ep.episode_id)}</h1></header><main id="app"></main>')
        (out / "episodes" / f"{ep.slug}.html").write_text(
            _page(f"{ep.episode_id} - {data.title}", body, payload, "episode.js", "../"), encoding="utf-8")
    rows = data.index_rows()
    warnings = list(data.warnings) + images.failures
    index_data = {"title": data.title, "rows": rows, "numeric": list(NUMERIC_COLUMNS), "policies": data.policies,
                  "run_info": data.run_info, "warnings": warnings,
                  "episodes_with_runs": {ep.slug: list(ep.runs) for ep in data.episodes}}
    body = f'<header class="top"><h1>{html.escape(data.title)}</h1></header><main id="app"></main>'
    (out / "index.html").write_text(_page(data.title, body, index_data, "index.js", ""), encoding="utf-8")
    summary = {"title": data.title, "episodes": len(data.episodes), "runs": len(rows), "policies": data.policies,
               "outcomes": outcome_counts(rows), "images_written": images.written, "images_reused": images.reused,
               "warnings": warnings, "rows": rows, "run_info": data.run_info}
    (out / "report.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    return out / "index.html"
