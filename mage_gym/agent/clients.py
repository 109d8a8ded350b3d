"""One chat reply from a reader backend for a tool-calling controller: a whole conversation in, a message out.

Why through the readers: the LLM evaluator's backends are reader backends
(an OpenAI-compatible server, a local HF model, the embedded SmolLM2), built
and checked by :func:`mage_gym.readers.get_reader`; a multi-turn controller
needs them to take a conversation instead of one prompt. For a server:
:meth:`mage_gym.readers.openai_compat.OpenAIReader.complete_chat` (``tools=``
only when the server parses tool calls itself, ``native_tools=True``; else
the tool list is in the system message and calls come back as text). For a
local model: its chat template with ``tools=TOOLS`` (the ChatML tool template
for models without one, :func:`mage_gym.agent.chat_template.prepare_tokenizer`).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from mage_gym.agent.tools import TOOLS


def chat_reply(reader: Any, messages: Sequence[Mapping[str, Any]], *, native_tools: bool = False,
               extra: Mapping[str, Any] | None = None, temperature: float = 0.0) -> Any:
    """The assistant's reply to ``messages``: a message dict (server) or text (local model)."""
    from mage_gym.agent.chat_env import to_openai_messages

    if hasattr(reader, "complete_chat"):
        body = dict(extra or {})
        if native_tools:
            body["tools"] = TOOLS
        return reader.complete_chat(to_openai_messages(messages), **body)
    if hasattr(reader, "load"):
        return _local_reply(reader, messages, temperature)
    raise TypeError(f"{type(reader).__name__} cannot hold a conversation (an openai or hf reader can)")


def _local_reply(reader: Any, messages: Sequence[Mapping[str, Any]], temperature: float) -> str:
    import torch

    from mage_gym.agent.chat_env import text_of
    from mage_gym.agent.chat_template import CHATML_TOOLS_TEMPLATE

    loaded = reader.load()
    with loaded.lock:
        tok = loaded.tokenizer
        own = getattr(tok, "chat_template", None) or ""
        # a template that renders tool calls is kept (Qwen, a model trained here); others get the ChatML tool
        # template for this call only (the reader keeps its own)
        template = own if "tool_calls" in own else CHATML_TOOLS_TEMPLATE
        flat = [{**m, "content": text_of([m])} if isinstance(m.get("content"), list) else dict(m) for m in messages]
        text = tok.apply_chat_template(flat, tools=TOOLS, add_generation_prompt=True, tokenize=False,
                                       chat_template=template)
        enc = tok(text, return_tensors="pt", add_special_tokens=False)
        enc = {k: v.to(loaded.device) for k, v in enc.items()}
        gen = reader._generation_kwargs(loaded)
        if temperature > 0:
            gen["generation_config"].do_sample = True
            gen["generation_config"].temperature = float(temperature)
        with torch.inference_mode():
            out = loaded.model.generate(**enc, **gen)
        return tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=False).split("<|im_end|>")[0]
