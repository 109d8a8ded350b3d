"""Shared by the tests/test_agent_*.py modules: toy chat envs and a tiny chat model built in-process.

Why a BPE tokenizer trained here (not the byte-level one of tiny_models.py):
the chat env's prompts are a few thousand characters; byte tokens make every
GRPO rollout thousands of tokens long, a tokenizer fitted on the env's own
text keeps a CPU test short. Nothing is downloaded.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from mage_gym._compat import ensure_torchvision

ANSWER = "ZEBRA-4417-QUARTZ"  # a gold answer no message may contain


def one_document_corpus(root: Path, pages: int, questions: int) -> Path:
    """A generated synthetic corpus of one document (seed 0) under ``root``: what the entry-point tests read."""
    from mage_gym.data.synth.config import SynthConfig
    from mage_gym.data.synth.corpus import generate_corpus

    generate_corpus(root, n_docs=1, seed=0, cfg=SynthConfig(min_pages=pages, max_pages=pages,
                                                            questions_per_doc=questions), workers=1, progress=False)
    return root


def toy_chat_env(**kw: Any):
    """MageChatEnv over the four toy episodes (one graph, hashed query vectors, BM25)."""
    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.bench.synthetic import hash_query_fn
    from mage_gym.testing import toy_episodes

    base = dict(query_fn=hash_query_fn(16), K=16, retriever="bm25", max_candidates=6)
    base.update(kw)
    return MageChatEnv(episodes=toy_episodes(), **base)


def gold_marked_pairs():
    """The toy episodes with a distinctive answer string (to check nothing shows gold)."""
    from dataclasses import replace

    from mage_gym.testing import toy_episodes

    return [type(p)(replace(p.episode, answer=ANSWER), p.graph) for p in toy_episodes()]


def chat_texts() -> list[str]:
    """Text a tokenizer for the chat env should know: prompts, tool schemas, observations."""
    import json

    from mage_gym.agent.prompts import system_prompt
    from mage_gym.agent.tools import TOOLS

    env = toy_chat_env()
    texts = [system_prompt(True), json.dumps(TOOLS)]
    for eid in env.episode_ids:
        msgs, _ = env.reset(options={"task": str(env.task_id(eid))})
        texts += [m["content"] for m in msgs]
        out, *_ = env.step('<tool_call>{"name": "activate", "arguments": {"candidates": [1, 2]}}</tool_call>')
        texts += [m["content"] for m in out]
    return texts


def fitted_bpe(vocab_size: int, special: list[str]):
    """A byte-level BPE fitted on :func:`chat_texts` with ``special`` tokens (ChatML's end and pad among them)."""
    ensure_torchvision()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(chat_texts() * 3, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def bpe_chat_tokenizer(vocab_size: int = 600):
    """:func:`fitted_bpe` with the ChatML tokens and the tool template."""
    from mage_gym.agent.chat_template import prepare_tokenizer

    return prepare_tokenizer(fitted_bpe(vocab_size, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]), force=True)


def build_tiny_chat_model(out: Path, teach: str | None = None, steps: int = 80) -> Path:
    """A 2-layer Llama with :func:`bpe_chat_tokenizer`, saved in ``out``.

    ``teach``: a completion the model is fitted to write after the toy env's
    first prompt (a few dozen Adam steps), so a test can watch a trainer
    execute real tool calls instead of a random model's noise.
    """
    ensure_torchvision()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = bpe_chat_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    if teach:
        prompts = first_prompts(tok)
        opt = torch.optim.Adam(model.parameters(), lr=5e-3)
        target = tok(teach, add_special_tokens=False).input_ids
        for i in range(steps):
            p = tok(prompts[i % len(prompts)], add_special_tokens=False).input_ids
            ids = torch.tensor([p + target])
            labels = torch.tensor([[-100] * len(p) + target])
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def first_prompts(tok) -> list[str]:
    """The toy tasks' first prompts as TRL renders them (tools from the env's methods, opening state appended)."""
    from mage_gym.agent.tasks import task_rows
    from mage_gym.agent.trl_env import MageToolEnv
    from mage_gym.testing import toy_episodes

    env = MageToolEnv(lambda: toy_chat_env())
    tools = [getattr(env, n) for n in ("activate", "open", "prune", "search", "stop")]
    out = []
    for row in task_rows([p.episode for p in toy_episodes()], "mmlongbench", tools_in_prompt=False):
        opening = env.reset(**row)
        msgs = row["prompt"][:-1] + [{**row["prompt"][-1], "content": row["prompt"][-1]["content"] + opening}]
        out.append(tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True))
    return out


def train_llm_module() -> Any:
    """experiments/train_llm.py imported as a module (its helpers are tested without running Hydra)."""
    import importlib.util
    import sys

    if "train_llm_entry" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "experiments" / "train_llm.py"
        spec = importlib.util.spec_from_file_location("train_llm_entry", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["train_llm_entry"] = module
        spec.loader.exec_module(module)
    return sys.modules["train_llm_entry"]
