"""Raster charts and figures for the synthetic reports.

Why rasters: a chart's values must live only in pixels (the caption names the
chart, never the value), so a controller has to open the chart node and a
reader has to see the image. Why one reused matplotlib Figure per process:
creating figures dominates chart cost; clearing and redrawing one canvas is
several times faster and keeps memory flat over thousands of charts.

Determinism: charts are rendered by the Agg backend with its bundled DejaVu
font and encoded by PIL (no metadata, no timestamps); photo-like figures are
JPEGs of a seeded numpy field; so the same spec gives the same bytes on the
same library versions.
"""
from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np

from mage_gym.data.synth.blocks import ChartSpec, FigureSpec

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

#: Chart canvas in inches (placed at 72 pt per inch, so 1 in = 72 pt on the page).
CHART_SIZE_IN = (5.2, 2.9)
PHOTO_SIZE_PX = (420, 250)
DIAGRAM_SIZE_IN = (5.6, 1.6)

_PALETTES = (
    ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3"),
    ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d"),
    ("#377eb8", "#e41a1c", "#4daf4a", "#984ea3", "#ff7f00", "#a65628", "#f781bf"),
)


class RasterFactory:
    """Turns chart and figure specs into image bytes; one instance per process."""

    def __init__(self, dpi: int = 100) -> None:
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.dpi = dpi
        self._fig: Figure = Figure(figsize=CHART_SIZE_IN, dpi=dpi)
        self._canvas = FigureCanvasAgg(self._fig)

    # --- charts -------------------------------------------------------------------

    def chart_png(self, spec: ChartSpec) -> bytes:
        fig = self._fig
        fig.clear()
        fig.set_size_inches(*CHART_SIZE_IN)
        palette = _PALETTES[spec.style % len(_PALETTES)]
        ax = fig.add_subplot(111)
        if spec.kind == "bar":
            colors = [palette[spec.style % len(palette)]] * len(spec.values)
            bars = ax.bar(range(len(spec.values)), spec.values, color=colors, width=0.6)
            ax.bar_label(bars, labels=list(spec.value_texts), padding=2, fontsize=8)
            ax.set_xticks(range(len(spec.labels)), labels=list(spec.labels), fontsize=8)
            ax.set_ylim(0, max(spec.values) * 1.18)
            _value_axis_off(ax, spec.axis_label)
        elif spec.kind == "line":
            xs = np.arange(len(spec.values))
            ax.plot(xs, spec.values, marker="o", color=palette[spec.style % len(palette)], linewidth=1.6)
            lo, hi = min(spec.values), max(spec.values)
            span = (hi - lo) or max(abs(hi), 1.0)
            for x, v, t in zip(xs, spec.values, spec.value_texts):
                ax.annotate(t, (x, v), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
            ax.set_ylim(lo - 0.25 * span, hi + 0.35 * span)
            ax.set_xticks(xs, labels=list(spec.labels), fontsize=8)
            ax.set_xlim(-0.5, len(xs) - 0.5)
            _value_axis_off(ax, spec.axis_label)
        elif spec.kind == "pie":
            texts = iter(spec.value_texts)
            ax.pie(spec.values, labels=list(spec.labels), colors=palette[: len(spec.values)],
                   autopct=lambda _p: next(texts), startangle=90, counterclock=False,
                   textprops={"fontsize": 8}, wedgeprops={"linewidth": 0.8, "edgecolor": "white"})
            ax.set_aspect("equal")
        else:
            raise ValueError(f"unknown chart kind {spec.kind!r}")
        if spec.kind == "pie":
            fig.subplots_adjust(left=0.02, right=0.98, top=0.97, bottom=0.03)
        else:  # fixed margins: tight_layout would cost an extra full draw per chart
            fig.subplots_adjust(left=0.06, right=0.98, top=0.95, bottom=0.11)
        return self._png(fig)

    # --- non-chart figures -------------------------------------------------------------

    def figure_bytes(self, spec: FigureSpec) -> tuple[bytes, tuple[float, float]]:
        """Image bytes and its size in points (width, height)."""
        if spec.kind == "photo":
            return photo_jpeg(spec.seed), (PHOTO_SIZE_PX[0] * 0.75, PHOTO_SIZE_PX[1] * 0.75)
        if spec.kind == "diagram":
            return self._diagram_png(spec), (DIAGRAM_SIZE_IN[0] * 72, DIAGRAM_SIZE_IN[1] * 72)
        raise ValueError(f"unknown figure kind {spec.kind!r}")

    def _diagram_png(self, spec: FigureSpec) -> bytes:
        """A process diagram (boxes and arrows) drawn with PIL: ten times cheaper than matplotlib."""
        from PIL import Image, ImageDraw

        w, h = int(DIAGRAM_SIZE_IN[0] * self.dpi), int(DIAGRAM_SIZE_IN[1] * self.dpi)
        img = Image.new("RGB", (w, h), "white")
        draw = ImageDraw.Draw(img)
        font = _pil_font(max(10, self.dpi // 8))
        rng = np.random.default_rng(spec.seed)
        color = _PALETTES[int(rng.integers(len(_PALETTES)))][int(rng.integers(4))]
        rgb = tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))
        fill = tuple(int(255 - 0.25 * (255 - c)) for c in rgb)
        n = len(spec.labels)
        cell = w / n
        bw, bh = 0.7 * cell, 0.42 * h
        top = (h - bh) / 2
        for i, lab in enumerate(spec.labels):
            x = i * cell + 0.15 * cell
            draw.rounded_rectangle((x, top, x + bw, top + bh), radius=6, fill=fill, outline=rgb, width=2)
            tw = draw.textlength(lab, font=font)
            draw.text((x + (bw - tw) / 2, top + bh / 2), lab, fill=(30, 30, 30), font=font, anchor="lm")
            if i < n - 1:
                ax0, ax1, ay = x + bw + 4, (i + 1) * cell + 0.15 * cell - 4, top + bh / 2
                draw.line((ax0, ay, ax1, ay), fill=(50, 50, 50), width=2)
                draw.polygon(((ax1, ay), (ax1 - 7, ay - 4), (ax1 - 7, ay + 4)), fill=(50, 50, 50))
        buf = io.BytesIO()
        img.save(buf, format="PNG", optimize=False)
        return buf.getvalue()

    def _png(self, fig: "Figure") -> bytes:
        """Render and store as a palette PNG (64 colours): a third of the RGBA size, still crisp text."""
        from PIL import Image

        self._canvas.draw()
        rgba = np.asarray(self._canvas.buffer_rgba())
        img = Image.fromarray(rgba[..., :3].copy(), "RGB").quantize(colors=64, method=Image.Quantize.FASTOCTREE)
        buf = io.BytesIO()
        img.save(buf, format="PNG", optimize=False)
        return buf.getvalue()


def _value_axis_off(ax, unit: str) -> None:  # noqa: ANN001 - a matplotlib Axes
    """Values are printed on the marks, so the value axis shows only its unit (as in report graphics).

    Dropping the tick labels also halves the drawing time: text dominates Agg rendering.
    """
    ax.set_yticks([])
    ax.spines[["top", "right", "left"]].set_visible(False)
    ax.set_ylabel(unit, fontsize=8)


_FONT_CACHE: dict[int, object] = {}


def _pil_font(size: int):  # noqa: ANN202 - PIL font object
    """DejaVu Sans from matplotlib's own data folder: present wherever matplotlib is."""
    if size not in _FONT_CACHE:
        import matplotlib
        from PIL import ImageFont

        path = f"{matplotlib.get_data_path()}/fonts/ttf/DejaVuSans.ttf"
        _FONT_CACHE[size] = ImageFont.truetype(path, size)
    return _FONT_CACHE[size]


def photo_jpeg(seed: int) -> bytes:
    """A photo-like landscape (sky, hills, texture) as JPEG: no text, no values."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    w, h = PHOTO_SIZE_PX
    y = np.linspace(0.0, 1.0, h)[:, None]
    x = np.linspace(0.0, 1.0, w)[None, :]
    sky_top, sky_low = rng.uniform(0.35, 0.7, 3), rng.uniform(0.7, 1.0, 3)
    img = sky_top[None, None, :] * (1 - y[..., None]) + sky_low[None, None, :] * y[..., None]
    img = np.broadcast_to(img, (h, w, 3)).copy()
    for layer in range(3):
        base = 0.45 + 0.15 * layer
        ridge = base + sum(rng.uniform(0.02, 0.08) * np.sin(2 * np.pi * (rng.uniform(0.5, 3.0) * x + rng.uniform()))
                           for _ in range(3))
        mask = (y > ridge)
        col = rng.uniform(0.1, 0.6, 3) * np.array([0.7, 1.0, 0.6])
        shade = 0.85 + 0.15 * np.sin(40 * x + 25 * y + layer)
        img = np.where(mask[..., None], col[None, None, :] * shade[..., None], img)
    # a building-like block in the foreground
    bx, bw, bh = rng.uniform(0.1, 0.6), rng.uniform(0.15, 0.3), rng.uniform(0.15, 0.3)
    bm = (x > bx) & (x < bx + bw) & (y > 0.85 - bh) & (y < 0.85)
    img = np.where(bm[..., None], rng.uniform(0.4, 0.8, 3)[None, None, :], img)
    noise = rng.normal(0.0, 0.02, (h, w, 1))
    arr = np.clip((img + noise) * 255.0, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr, "RGB").save(buf, format="JPEG", quality=60, optimize=False)
    return buf.getvalue()
