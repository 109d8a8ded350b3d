"""Reader performance: cache-hit latency, SmolLM2 load time (first and cached), seconds per answer.

Run:  .venv/bin/python experiments/perf/perf_readers.py [--hits 2000] [--answers 3] [--out results.json]

Prints medians (never asserted in tests). Targets from the readers issue:
cache hit < 1 ms; SmolLM2 reader load < 5 s after the first run. Load times
are measured in fresh child processes (``load_s`` = model load after imports,
``process_s`` = the whole child including Python, torch and transformers
imports), the first one against an empty cache directory so it pays the GGUF
dequantisation.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mage_gym.readers.base import RenderedImage, RenderedInput, ReaderOutput
from mage_gym.readers.cache import CachedReader

CHILD_LOAD = """
import json, time
t0 = time.perf_counter()
from mage_gym.readers.hf import HFReader
reader = HFReader("smollm2")
t1 = time.perf_counter()
loaded = reader.load()
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "process_s": t2 - t0, "source": loaded.load_source}))
"""


class _EchoReader:
    """A no-cost reader: isolates the cache's own overhead."""

    name = "echo"
    answers = True
    model_id = "echo"

    def __init__(self, uses_images: bool) -> None:
        self.uses_images = uses_images

    def read(self, rendered: RenderedInput) -> ReaderOutput:
        return ReaderOutput(answer="x", raw="<answer>x</answer>")


def _text_input(n_elements: int = 200) -> RenderedInput:
    body = "".join(f'<element id="doc:p{i // 10}:e{i % 10}" type="paragraph">Paragraph {i}: revenue grew '
                   f"{i % 17} percent in region {i % 5} during the fiscal year.</element>"
                   for i in range(n_elements))
    return RenderedInput(question="What was revenue growth in region 3?", xml=f"<evidence>{body}</evidence>",
                         mode="text")


def _visual_input(side: tuple[int, int] = (1000, 1300)) -> RenderedInput:
    from PIL import Image

    pages = [Image.new("RGB", side, (255, 255, 255 - i)) for i in range(2)]
    images = tuple(RenderedImage(f"doc:p{i}", i, (0, 0, 1, 1), "page", side[0], side[1],
                                 _loader=(lambda im=im: im)) for i, im in enumerate(pages))
    xml = '<evidence><page id="doc:p0"><image ref="doc:p0"/></page><page id="doc:p1"><image ref="doc:p1"/></page>' \
          "</evidence>"
    return RenderedInput(question="What does the chart show?", xml=xml, images=images)


def measure_cache_hits(n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, reader, rendered, image_key in (
                ("text_20kB", _EchoReader(False), _text_input(), "pixels"),
                ("visual_2x1000x1300_pixels", _EchoReader(True), _visual_input(), "pixels"),
                ("visual_2x1000x1300_identity", _EchoReader(True), _visual_input(), "identity")):
            cached = CachedReader(reader, Path(tmp) / "cache.sqlite", image_key=image_key)
            cached.read(rendered)  # store
            times = []
            for _ in range(max(20, n // 20) if label.endswith("pixels") else n):
                t = time.perf_counter()
                res = cached.read(rendered)
                times.append((time.perf_counter() - t) * 1000)
                assert res.cached
            out[f"cache_hit_ms_{label}"] = statistics.median(times)
    return out


def _child_load(cache_dir: str) -> dict:
    import os

    env = dict(os.environ, MAGE_GYM_CACHE=cache_dir)
    res = subprocess.run([sys.executable, "-c", CHILD_LOAD], env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure_smollm_load(repeats: int, skip_first: bool) -> dict[str, float | str]:
    from mage_gym.readers.gguf_cache import cache_root

    out: dict[str, float | str] = {}
    if not skip_first:
        with tempfile.TemporaryDirectory() as tmp:
            first = _child_load(tmp)
            out.update(smollm_first_load_s=first["load_s"], smollm_first_process_s=first["process_s"],
                       smollm_first_source=first["source"])
    _child_load(str(cache_root()))  # make sure the user's cache is warm
    runs = [_child_load(str(cache_root())) for _ in range(repeats)]
    out.update(smollm_cached_load_s=statistics.median(r["load_s"] for r in runs),
               smollm_cached_process_s=statistics.median(r["process_s"] for r in runs),
               smollm_cached_source=runs[-1]["source"])
    return out


def measure_answers(n: int, max_new_tokens: int) -> dict[str, float]:
    from mage_gym.readers.hf import HFReader

    reader = HFReader("smollm2", max_new_tokens=max_new_tokens)
    reader.load()
    times = []
    for i in range(n):
        rendered = _text_input(n_elements=8 + i)  # distinct inputs, a small subgraph each
        t = time.perf_counter()
        out = reader.read(rendered)
        times.append(time.perf_counter() - t)
        print(f"  answer {i}: {out.answer!r} ({times[-1]:.2f} s)")
    return {"smollm_seconds_per_answer": statistics.median(times), "smollm_max_new_tokens": max_new_tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hits", type=int, default=2000, help="cache lookups to time")
    ap.add_argument("--loads", type=int, default=3, help="cached-load child processes")
    ap.add_argument("--answers", type=int, default=3, help="SmolLM2 answers to time")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--skip-first-load", action="store_true", help="skip the ~15 s dequantising load")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()

    results: dict[str, float | str] = {}
    results.update(measure_cache_hits(args.hits))
    results.update(measure_smollm_load(args.loads, args.skip_first_load))
    if args.answers:
        results.update(measure_answers(args.answers, args.max_new_tokens))
    for k, v in results.items():
        print(f"{k:36s} {v:.4f}" if isinstance(v, float) else f"{k:36s} {v}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
