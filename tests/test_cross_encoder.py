"""The cross-encoder: LoRA training on a tiny BERT built in-process, the saved adapter, merged loading, scoring."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mage_gym._compat import ensure_torchvision  # noqa: E402 - before peft imports transformers

ensure_torchvision()
import peft  # noqa: E402,F401  (the llm-train extra: a broken install fails, never skips)

from tiny_models import build_tiny_bert  # noqa: E402

from mage_gym.bench.rerank_data import Group, positive_passage, training_groups  # noqa: E402
from mage_gym.bench.rerank_training import export_adapter, make_trainable, train_groups  # noqa: E402
from mage_gym.retrieval.cross_encoder import (  # noqa: E402
    AdapterMeta, CrossEncoderScorer, base_model, checkpoint_digest, load_cross_encoder, read_meta, save_adapter)

WORDS = ["revenue", "growth", "chart", "margin", "employees", "risk", "asia", "europe", "table", "profit"]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


def _groups(n: int = 24, seed: int = 0) -> list[Group]:
    """A learnable toy task: the positive passage repeats the question's word, negatives do not."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        w = WORDS[int(rng.integers(len(WORDS)))]
        others = [x for x in WORDS if x != w]
        negs = [" ".join(rng.choice(others, 3)) for _ in range(3)]
        out.append(Group(f"what is the {w}?", (f"page item {w} {rng.choice(others)}", *negs)))
    return out


def _scores(model, tokenizer, group: Group, joint: int = 0) -> np.ndarray:
    import torch

    from mage_gym.retrieval.cross_encoder import encode_pairs

    enc = encode_pairs(tokenizer, [group.question] * len(group.passages), list(group.passages), 64, joint)
    with torch.inference_mode():
        return model(**enc).logits[:, 0].float().numpy()


@pytest.fixture(scope="module")
def trained(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base)
    model = make_trainable(base_model(str(tiny_base), 2), r=4, alpha=8, dropout=0.0)
    before = [_scores(model.eval(), tok, g) for g in _groups(seed=1)]
    stats = train_groups(model, tok, _groups(), epochs=6, lr=5e-3, batch_groups=4, max_length=64, seed=0,
                         log=lambda m: None)
    lora, full = export_adapter(model)
    meta = AdapterMeta(r=4, alpha=8, targets=tuple(sorted(lora)), layers=2, max_length=64, extra={"note": "test"})
    folder = save_adapter(tmp_path_factory.mktemp("adapter"), lora, full, meta)
    return model, tok, folder, stats, before


def test_training_teaches_the_toy_task(trained) -> None:
    model, tok, _, stats, before = trained
    after = [_scores(model, tok, g) for g in _groups(seed=1)]  # held-out groups of the same task
    won = lambda rows: np.mean([int(np.argmax(s) == 0) for s in rows])  # noqa: E731
    assert stats["loss_last10"] < stats["loss_first10"]
    assert won(after) > won(before) and won(after) >= 0.75


def test_saved_adapter_is_small_and_loads_merged_with_the_same_scores(trained, tiny_base: Path) -> None:
    model, tok, folder, _, _ = trained
    meta = read_meta(folder)
    assert meta.layers == 2 and meta.extra["note"] == "test" and meta.targets
    assert all(t.split(".")[-1] in ("query", "key", "value", "dense") for t in meta.targets)
    assert any(t.endswith("output.dense") for t in meta.targets), "feed-forward layers are adapted too"
    merged, _, _ = load_cross_encoder(folder, base_path=str(tiny_base))
    group = _groups(seed=2)[0]
    np.testing.assert_allclose(_scores(merged, tok, group), _scores(model, tok, group), rtol=0, atol=2e-3)
    scorer = CrossEncoderScorer(folder, base_path=str(tiny_base), batch_size=2, precision="float32")
    got = scorer.score(group.question, list(group.passages))
    np.testing.assert_allclose(got, _scores(model, tok, group), atol=2e-3)
    assert scorer.score("q", []).shape == (0,)
    assert len(checkpoint_digest(folder)) == 64
    bf16 = CrossEncoderScorer(folder, base_path=str(tiny_base), precision="bfloat16")
    assert bf16.digest != scorer.digest, "the precision is part of the score cache's key"
    np.testing.assert_allclose(bf16.score(group.question, list(group.passages)), got, atol=0.1)
    with pytest.raises(ValueError, match="precision"):
        CrossEncoderScorer(folder, base_path=str(tiny_base), precision="int4")


def test_a_checkpoint_that_does_not_fit_its_base_is_refused(trained, tiny_base: Path, tmp_path: Path) -> None:
    _, _, folder, _, _ = trained
    meta = json.loads((folder / "adapter.json").read_text())
    with pytest.raises(FileNotFoundError, match="train_reranker"):
        read_meta(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter.safetensors").write_bytes((folder / "adapter.safetensors").read_bytes())
    (bad / "adapter.json").write_text(json.dumps({**meta, "layers": 1}))
    with pytest.raises(ValueError, match="not in the 1-layer base"):
        load_cross_encoder(bad, base_path=str(tiny_base))
    (bad / "adapter.json").write_text(json.dumps({**meta, "targets": meta["targets"][:1]}))
    with pytest.raises(ValueError, match="metadata names"):
        load_cross_encoder(bad, base_path=str(tiny_base))
    (bad / "adapter.json").write_text(json.dumps({**meta, "head": "cls_pooler"}))
    with pytest.raises(ValueError, match="head"):
        load_cross_encoder(bad, base_path=str(tiny_base))
    with pytest.raises(ValueError, match="layers"):
        base_model(str(tiny_base), 3)


def test_positive_passage_prefers_gold_text_then_the_answer_then_the_best_chunk() -> None:
    chunks = ["intro text about nothing", "the margin table: asia 12 percent", "outlook and risk in europe"]
    assert positive_passage(chunks, ["Margin   table: Asia 12 percent"], "", best=0) == chunks[1]
    assert positive_passage(chunks, [], "Europe", best=0) == chunks[2]
    assert positive_passage(chunks, ["short"], "Not answerable", best=2) == chunks[2]


def test_training_groups_take_one_group_per_gold_page_and_hard_negatives() -> None:
    from mage_gym.bench.rerank_data import RerankQuestion

    q = RerankQuestion("d", "train", "e", "doc", "q?", (1, 4), [4, 0, 2, 1, 3],
                       [["p4"], ["p0"], ["p2"], ["p1"], ["p3"]], positives={1: "gold1", 4: "gold4"})
    groups = training_groups([q], negatives=2, negative_depth=3, max_positives=2, seed=0)
    assert [g.passages[0] for g in groups] == ["gold1", "gold4"]
    assert all(set(g.passages[1:]) <= {"p0", "p2"} and len(g.passages) == 3 for g in groups)
    padded = training_groups([q], negatives=4, negative_depth=2, max_positives=1)
    assert len(padded) == 1 and padded[0].passages[1:] == ("p0",) * 4
    assert training_groups([RerankQuestion("d", "train", "e", "doc", "q?", (1,), [1], [["p1"]], {1: "g"})],
                           2, 3, 1) == [], "no negative: no group"


def test_the_segment_cosine_head_starts_as_a_cosine_and_round_trips(tiny_base: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base)
    model = base_model(str(tiny_base), 2, head="segment_cosine").eval()
    got = _scores(model, tok, _groups(seed=3)[0])
    assert np.all(np.abs(got) <= 20.0 + 1e-4), "scale 20 x a cosine at the start"
    peft_model = make_trainable(model, r=4, alpha=8, dropout=0.0)
    train_groups(peft_model, tok, _groups(n=8), epochs=1, lr=5e-3, batch_groups=4, max_length=64, log=lambda m: None)
    lora, full = export_adapter(peft_model)
    assert set(full) == {"head.weight", "head.scale", "head.bias"}
    folder = save_adapter(tmp_path / "seg", lora, full, AdapterMeta(r=4, alpha=8, targets=tuple(sorted(lora)),
                                                                    layers=2, max_length=64,
                                                                    extra={"head": "segment_cosine"}))
    merged, _, _ = load_cross_encoder(folder, base_path=str(tiny_base))
    group = _groups(seed=4)[0]
    np.testing.assert_allclose(_scores(merged, tok, group), _scores(peft_model, tok, group), atol=2e-2)
    with pytest.raises(ValueError, match="head"):
        base_model(str(tiny_base), 2, head="max_pool")


def test_a_late_joint_model_starts_from_the_bi_encoder_cosine_and_round_trips(tiny_base: Path,
                                                                                tmp_path: Path) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base)
    group = _groups(seed=5)[0]
    enc = AutoModel.from_pretrained(tiny_base, add_pooling_layer=False).eval()

    def vec(texts: list[str]) -> torch.Tensor:  # the bi-encoder: mean-pooled token states, L2-normalised
        t = tok(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            h = enc(**t).last_hidden_state
        m = t["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)

    # the model's separate path over every layer is the bi-encoder, and its head starts as 20 x the cosine
    model = base_model(str(tiny_base), 2, head="segment_cosine", joint_layers=1).eval()
    want = 20.0 * (vec([group.question]) * vec(list(group.passages))).sum(-1)
    np.testing.assert_allclose(_late_scores(model, tok, group), want.numpy(), atol=1e-4)
    assert _scores(model, tok, group, joint=1).shape == (len(group.passages),)
    peft_model = make_trainable(base_model(str(tiny_base), 2, head="segment_cosine", joint_layers=1), r=4, alpha=8,
                                dropout=0.0)
    train_groups(peft_model, tok, _groups(n=8), epochs=1, lr=5e-3, batch_groups=4, max_length=64,
                 log=lambda m: None, joint_layers=1)
    lora, full = export_adapter(peft_model)
    folder = save_adapter(tmp_path / "late", lora, full, AdapterMeta(
        r=4, alpha=8, targets=tuple(sorted(lora)), layers=2, max_length=64,
        extra={"head": "segment_cosine", "joint_layers": 1}))
    scorer = CrossEncoderScorer(folder, base_path=str(tiny_base), precision="float32")
    np.testing.assert_allclose(scorer.score(group.question, list(group.passages)),
                               _scores(peft_model.eval(), tok, group, joint=1), atol=2e-2)
    with pytest.raises(ValueError, match="segment_cosine"):
        base_model(str(tiny_base), 2, head="mean_pool_linear", joint_layers=1)


def _late_scores(model, tokenizer, group: Group) -> np.ndarray:
    """A late-joint model's head on its separate path run through every layer (no joint layer): the two texts
    encoded apart and pooled apart, i.e. the bi-encoder under the model's head."""
    import torch

    from mage_gym.retrieval.cross_encoder import encode_pairs

    enc = encode_pairs(tokenizer, [group.question] * len(group.passages), list(group.passages), 64, 1)
    layers = model.encoder.encoder.layer
    with torch.no_grad():
        hq = model._layers(layers, model.encoder.embeddings(input_ids=enc["q_input_ids"]), enc["q_attention_mask"])
        hp = model._layers(layers, model.encoder.embeddings(input_ids=enc["p_input_ids"]), enc["p_attention_mask"])
        mq, mp = enc["q_attention_mask"].unsqueeze(-1).float(), enc["p_attention_mask"].unsqueeze(-1).float()
        u, v = (hq * mq).sum(1) / mq.sum(1), (hp * mp).sum(1) / mp.sum(1)
        return model.head(u, v)[:, 0].numpy()


def test_training_only_the_joint_layers_on_precomputed_lower_states(tiny_base: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from mage_gym.bench.rerank_training import LowerStates

    tok = AutoTokenizer.from_pretrained(tiny_base)
    model = make_trainable(base_model(str(tiny_base), 2, head="segment_cosine", joint_layers=1), r=4, alpha=8,
                           dropout=0.0, only_joint=True)
    groups = _groups(n=12)
    lower = LowerStates(model, tok, groups, 64, bf16=False, log=lambda m: None)
    # the precomputed path gives the model's own scores
    g = groups[0]
    direct = _scores(model.eval(), tok, g, joint=1)
    import torch

    with torch.no_grad():
        via = model.get_base_model().joint_scores(*lower.batch([g.question] * len(g.passages), list(g.passages)))
    np.testing.assert_allclose(via[:, 0].numpy(), direct, atol=1e-4)
    stats = train_groups(model, tok, groups, epochs=4, lr=5e-3, batch_groups=4, max_length=64, log=lambda m: None,
                         joint_layers=1, lower=lower)
    lora, _ = export_adapter(model)
    assert lora and all(".layer.1." in name for name in lora), "only the joint (top) layer is adapted"
    assert stats["loss_last10"] < stats["loss_first10"]
    with pytest.raises(ValueError, match="late-joint"):
        make_trainable(base_model(str(tiny_base), 2), r=4, alpha=8, dropout=0.0, only_joint=True)
