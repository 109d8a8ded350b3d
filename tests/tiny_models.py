"""Tiny randomly initialised models built in-process, saved as a user's checkpoint folder would be.

Why: loading code for Qwen3-VL and causal LMs must be tested through the real
``from_pretrained`` path, and nothing may be downloaded. Tests import these
builders (``from tiny_models import ...``) and wrap them in their own fixtures.
"""
from __future__ import annotations

from pathlib import Path

from mage_gym._compat import ensure_torchvision

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
           "<|video_pad|>"]
# A minimal Qwen-style chat template: image items become the vision placeholder tokens.
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokenizer():
    """Byte-level BPE (256 symbols, no merges) with the Qwen special tokens."""
    ensure_torchvision()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(SPECIAL)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = TEMPLATE
    return tok


def build_tiny_qwen3vl(out: Path, tokenizer=None, chat_template: str = TEMPLATE) -> Path:
    """A 0.44 M-parameter Qwen3-VL (vision + text) with its processor, saved in ``out``.

    ``tokenizer``: one with :data:`SPECIAL` among its tokens (default: the byte
    tokenizer); ``chat_template``: the processor's and the tokenizer's (default:
    the minimal one above; tests of tool calling pass Qwen3-VL's real one).
    """
    import torch

    ensure_torchvision()
    from transformers import (Qwen2VLImageProcessorPil, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                              Qwen3VLProcessor, Qwen3VLVideoProcessor)

    tok = tokenizer if tokenizer is not None else byte_tokenizer()
    tok.chat_template = chat_template
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL}
    image_proc = Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2,
                                          min_pixels=32 * 32, max_pixels=192 * 192)
    video_proc = Qwen3VLVideoProcessor(patch_size=16, temporal_patch_size=2, merge_size=2)
    processor = Qwen3VLProcessor(image_processor=image_proc, tokenizer=tok, video_processor=video_proc,
                                 chat_template=chat_template)
    cfg = Qwen3VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=8192,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [2, 3, 3], "mrope_interleaved": True},
                         bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"]),
        vision_config=dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64,
                           patch_size=16, temporal_patch_size=2, spatial_merge_size=2,
                           deepstack_visual_indexes=[1], num_position_embeddings=256),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(cfg)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_tiny_causal(out: Path) -> Path:
    """A tiny Llama causal LM with the byte tokenizer, saved in ``out``."""
    import torch

    ensure_torchvision()
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = byte_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def build_tiny_bert(out: Path, layers: int = 2) -> Path:
    """A tiny BERT encoder (hidden 32, ``layers`` layers) with a WordPiece tokenizer, saved as a base model
    folder is (what the cross-encoder fine-tunes: mage_gym.retrieval.cross_encoder)."""
    ensure_torchvision()
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    words = ["revenue", "growth", "chart", "margin", "employees", "risk", "asia", "europe", "table", "profit",
             "page", "item", "what", "is", "the", "which", "how", "many", "in", "of"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *[f"##{c}" for c in letters], *words, ".", ",",
             "?"]
    ids = {w: i for i, w in enumerate(vocab)}
    tk = Tokenizer(models.WordPiece(vocab=ids, unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                  sep_token="[SEP]", mask_token="[MASK]", model_max_length=128,
                                  model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    tok.save_pretrained(out)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    BertModel(cfg).save_pretrained(out)
    return out
