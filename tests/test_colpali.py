"""ColPali backend on real colpali-engine code with tiny randomly initialised checkpoints.

Each checkpoint is built in-process (tiny Qwen3-VL / Qwen2.5-VL configs, a
byte-level BPE tokenizer with the Qwen special tokens, the PIL image
processor), written with ``save_pretrained`` and then loaded back by
:class:`ColPaliRetriever` through the same ``from_pretrained(local_files_only)``
path a real checkpoint takes. Pages are rendered from a small PDF made here.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import DocumentSource, Element, Page, element_id, page_id
from mage_gym.retrieval import Query, get_retriever
from mage_gym.retrieval.colpali import ColPaliModelError, ColPaliRetriever, render_page_image

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>", "<|video_pad|>"]


def test_colpali_engine_imports() -> None:
    """colpali-engine is one of the project's extras (``colpali``, in ``all``): a broken install fails here.

    Nothing in this file needs a GPU or downloaded weights (the checkpoints are built in-process), so no
    import error is a reason to skip.
    """
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    import colpali_engine.models  # noqa: F401


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    return fast, {s: fast.convert_tokens_to_ids(s) for s in SPECIALS}


def build_tiny_checkpoint(folder: Path, family: str) -> Path:
    """Save a random tiny ColQwen3 (``qwen3_vl``) or ColQwen2.5 (``qwen2_5_vl``) with its processor."""
    import torch
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    fast, ids = _tokenizer()
    tokens = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                  vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    text = dict(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|endoftext|>"])
    torch.manual_seed(0)
    if family == "qwen3_vl":
        from colpali_engine.models import ColQwen3, ColQwen3Processor
        from transformers import Qwen3VLConfig
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

        patch = 16
        cfg = Qwen3VLConfig(
            text_config=dict(text, head_dim=16, rope_parameters=dict(
                rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3], mrope_interleaved=True)),
            vision_config=dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64,
                               patch_size=patch, spatial_merge_size=2, temporal_patch_size=2,
                               num_position_embeddings=64, deepstack_visual_indexes=[1]),
            **tokens)
        model, proc_cls, video = ColQwen3(cfg), ColQwen3Processor, Qwen3VLVideoProcessor
    elif family == "qwen2_5_vl":
        from colpali_engine.models import ColQwen2_5, ColQwen2_5_Processor
        from transformers import Qwen2_5_VLConfig
        from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

        patch = 14
        cfg = Qwen2_5_VLConfig(
            text_config=dict(text, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                        mrope_section=[2, 3, 3])),
            vision_config=dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64,
                               patch_size=patch, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                               fullatt_block_indexes=[1]),
            **tokens)
        model, proc_cls, video = ColQwen2_5(cfg), ColQwen2_5_Processor, Qwen2VLVideoProcessor
    else:  # pragma: no cover
        raise ValueError(family)
    tile = patch * 2
    image_proc = Qwen2VLImageProcessorPil(patch_size=patch, temporal_patch_size=2, merge_size=2,
                                          min_pixels=4 * tile * tile, max_pixels=64 * tile * tile)
    processor = proc_cls(image_processor=image_proc, tokenizer=fast,
                         video_processor=video(patch_size=patch, temporal_patch_size=2, merge_size=2))
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(str(folder))
    processor.save_pretrained(str(folder))
    return folder


def make_pdf_graph(folder: Path) -> EvidenceGraph:
    """A 3-page PDF (different text and a coloured box per page) and a graph over it."""
    import pymupdf

    pdf = folder / "doc.pdf"
    texts = ["Annual revenue grew 12 percent", "Employees by region: Asia 4,500", "Risk factors and outlook"]
    doc = pymupdf.open()
    for i, t in enumerate(texts):
        page = doc.new_page(width=300, height=400)
        page.insert_text((30, 60), t, fontsize=14)
        page.draw_rect(pymupdf.Rect(30, 100 + 40 * i, 200, 200 + 40 * i), color=(0, 0, 0), fill=(i / 2, 0.3, 1 - i / 2))
    doc.save(str(pdf))
    doc.close()
    pages, elements = [], []
    for i, t in enumerate(texts):
        pages.append(Page(node_id=page_id("pdf", i), index=i, width=300.0, height=400.0, text=t, summary=t,
                          n_elements=2))
        for j, (etype, et) in enumerate((("title", t), ("figure", ""))):
            elements.append(Element(node_id=element_id("pdf", i, j), page=i, index=j, type=etype,
                                    bbox=(0.1, 0.1 + 0.4 * j, 0.9, 0.3 + 0.4 * j), text=et, summary=et,
                                    reading_order=len(elements)))
    rng = np.random.default_rng(0)
    vec = rng.normal(size=(len(pages) + len(elements), 8)).astype(np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    return EvidenceGraph(
        doc_id="pdfdoc", source=DocumentSource(kind="pdf", path=str(pdf)), pages=pages, elements=elements,
        edge_src=np.zeros(0, np.int32), edge_dst=np.zeros(0, np.int32), edge_kind=np.zeros(0, np.int8),
        edge_weight=np.zeros(0, np.float32), edge_label=[], page_vectors=vec[:3], element_vectors=vec[3:],
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("colpali")


@pytest.fixture(scope="module")
def graph(workdir: Path) -> EvidenceGraph:
    return make_pdf_graph(workdir)


@pytest.fixture(scope="module")
def qwen3_dir(workdir: Path) -> Path:
    return build_tiny_checkpoint(workdir / "colqwen3", "qwen3_vl")


# --- errors need no model ------------------------------------------------------------


def test_missing_or_bad_model_path_gives_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAGE_GYM_COLPALI_MODEL", raising=False)
    with pytest.raises(ColPaliModelError, match="model_path"):
        ColPaliRetriever()
    with pytest.raises(ColPaliModelError, match="does not exist"):
        get_retriever("colpali", model_path=str(tmp_path / "nope"))
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ColPaliModelError, match="not a directory"):
        ColPaliRetriever(model_path=f)
    with pytest.raises(ColPaliModelError, match="config.json"):
        ColPaliRetriever(model_path=tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ColPaliModelError, match="unsupported"):
        ColPaliRetriever(model_path=tmp_path)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"base_model_name_or_path": "vidore/colqwen2.5-base"}')
    with pytest.raises(ColPaliModelError, match="base model"):
        ColPaliRetriever(model_path=adapter)


def test_pages_render_with_and_without_graph_images_module(graph: EvidenceGraph,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    img = render_page_image(graph, 1, dpi=72)
    assert img.mode == "RGB" and img.size == (300, 400)

    def missing(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError("no images module", name="mage_gym.graph.images")

    monkeypatch.setattr(graph, "page_image", missing)
    fallback = render_page_image(graph, 1, dpi=72)
    assert fallback.size == (300, 400)
    assert np.abs(np.asarray(fallback, np.int16) - np.asarray(img, np.int16)).mean() < 2


# --- real model code ----------------------------------------------------------------


def test_colqwen3_scores_rendered_pages(graph: EvidenceGraph, qwen3_dir: Path) -> None:
    r = get_retriever("colpali", model_path=str(qwen3_dir), dpi=72, device="cpu", show_progress=False)
    assert isinstance(r, ColPaliRetriever) and r.family == "qwen3_vl"
    s = r.score(graph, Query("How many employees in Asia?"))
    assert s.pages.shape == (3,) and s.pages.dtype == np.float32 and np.isfinite(s.pages).all()
    assert s.elements.shape == (graph.n_elements,) and s.elements.dtype == np.float32
    np.testing.assert_array_equal(s.elements, s.pages[graph.node_page[graph.n_pages:]])  # inherit page score
    emb = r.index(graph)
    assert emb.n_pages == 3 and emb.vectors.shape[1] == 320 and (np.diff(emb.offsets) > 0).all()
    assert r.index(graph) is emb  # cached per graph
    again = r.score(graph, Query("How many employees in Asia?"))
    np.testing.assert_array_equal(again.pages, s.pages)
    other = r.score(graph, Query("risk outlook"))
    assert not np.array_equal(other.pages, s.pages)  # the query matters
    clone = pickle.loads(pickle.dumps(r))  # configuration travels, the model is reloaded on use
    assert clone._model is None and clone.model_path == r.model_path
    # a fresh load of the same folder is deterministic
    r2 = ColPaliRetriever(model_path=qwen3_dir, dpi=72, device="cpu", show_progress=False)
    np.testing.assert_allclose(r2.score(graph, Query("How many employees in Asia?")).pages, s.pages, rtol=1e-5)


def test_colpali_disk_cache_and_dense_elements(graph: EvidenceGraph, qwen3_dir: Path, tmp_path: Path) -> None:
    from mage_gym.retrieval.dense import DenseRetriever

    cfg = dict(model_path=qwen3_dir, dpi=72, device="cpu", show_progress=False, cache_dir=tmp_path,
               max_num_visual_tokens=16)
    r1 = ColPaliRetriever(**cfg)
    q = Query("revenue", vector=graph.page_vectors[0])
    s1 = r1.score(graph, q)
    files = list(tmp_path.glob("pdfdoc.n3.colpali-*.npz"))
    assert len(files) == 1
    r2 = ColPaliRetriever(**cfg, element_scores="dense")
    r2._compute = None  # type: ignore[assignment]  # must come from disk, not from the model
    s2 = r2.score(graph, q)
    np.testing.assert_allclose(s2.pages, s1.pages, rtol=2e-2, atol=2e-2)  # float16 on disk
    np.testing.assert_array_equal(s2.elements, DenseRetriever().score(graph, q).elements)
    full = ColPaliRetriever(model_path=qwen3_dir, dpi=72, device="cpu", show_progress=False)
    assert r1.index(graph).vectors.shape[0] < full.index(graph).vectors.shape[0]  # max_num_visual_tokens applied


def test_colqwen2_5_and_hybrid_with_colpali(graph: EvidenceGraph, workdir: Path) -> None:
    folder = build_tiny_checkpoint(workdir / "colqwen25", "qwen2_5_vl")
    h = get_retriever("hybrid", components=["bm25", "dense", "colpali"],
                      colpali={"model_path": str(folder), "dpi": 72, "device": "cpu", "show_progress": False})
    q = Query("employees Asia", vector=graph.page_vectors[1])
    fused, comps = h.score_with_components(graph, q)  # type: ignore[attr-defined]
    assert set(comps) == {"bm25", "dense", "colpali"}
    assert h.components["colpali"].family == "qwen2_5_vl"  # type: ignore[attr-defined]
    assert comps["colpali"].pages.shape == (3,) and np.isfinite(comps["colpali"].pages).all()
    assert fused.pages.shape == (3,) and np.isfinite(fused.elements).all()
    assert int(np.argmax(fused.pages)) == 1  # bm25 and dense agree on page 1; colpali cannot outvote both


def test_peft_adapter_folder_is_merged_into_local_base(graph: EvidenceGraph, qwen3_dir: Path, tmp_path: Path) -> None:
    from colpali_engine.models import ColQwen3
    from peft import LoraConfig, get_peft_model

    base = ColQwen3.from_pretrained(str(qwen3_dir), local_files_only=True)
    peft_model = get_peft_model(base, LoraConfig(r=2, target_modules=["custom_text_proj"], init_lora_weights=False))
    adapter = tmp_path / "adapter"
    peft_model.save_pretrained(str(adapter))
    assert not (adapter / "config.json").exists()
    r = ColPaliRetriever(model_path=adapter, base_model_path=qwen3_dir, dpi=72, device="cpu", show_progress=False)
    plain = ColPaliRetriever(model_path=qwen3_dir, dpi=72, device="cpu", show_progress=False)
    q = Query("revenue")
    s, s0 = r.score(graph, q), plain.score(graph, q)
    assert np.isfinite(s.pages).all() and not np.allclose(s.pages, s0.pages)  # the adapter changed the model
