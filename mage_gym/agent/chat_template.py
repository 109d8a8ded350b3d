"""A ChatML chat template with tool calls, and its response template, for models that have none.

Why: TRL's ``GRPOTrainer(environment_factory=...)`` and ``SFTTrainer`` on
tool-calling transcripts need a tokenizer whose chat template renders a whole
tool-calling conversation (assistant ``tool_calls``, ``tool`` messages) and a
*response template* that parses generated text back into tool calls. TRL
ships both for the model families it knows (Qwen2.5/3, Llama 3, ...).
SmolLM2-135M-Instruct speaks ChatML (``<|im_start|>role ... <|im_end|>``)
but its own template drops ``tool_calls`` and TRL does not recognise it
(``add_response_schema`` raises "Unrecognized chat template").

What we do, by hand and said so: give such a tokenizer :data:`CHATML_TOOLS_TEMPLATE`
(our own ChatML template: the tool list in the system turn, each call written
as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` - the Hermes
form that :mod:`mage_gym.agent.parse` reads and Qwen models emit - tool results
as ``tool`` turns, ``{% generation %}`` markers around what the assistant
writes, prefix-preserving as TRL's multi-turn training requires) and
:data:`CHATML_TOOLS_RESPONSE_TEMPLATE` (transformers' ``response_template``
format: the text before the first ``<tool_call>`` is content, each block a
JSON tool call). SmolLM2 was never trained on this format: SFT on
transcripts (``experiments/train_llm.py algo=sft``) is what teaches it.
Tokenizers whose template TRL knows keep theirs (:func:`prepare_tokenizer`).
"""
from __future__ import annotations

from typing import Any

#: Every newline the template writes is an explicit ``{{ NL }}``; all tags trim, so layout never leaks in.
CHATML_TOOLS_TEMPLATE = """
{%- set NL = '\n' -%}
{%- set ns = namespace(system='') -%}
{%- if messages and messages[0]['role'] == 'system' -%}{%- set ns.system = messages[0]['content'] -%}{%- endif -%}
{%- if ns.system or tools -%}
  {{- '<|im_start|>system' + NL + ns.system -}}
  {%- if tools -%}
    {{- (NL + NL if ns.system else '') + 'Tools you can call (one <tool_call> block per call, each holding a JSON object with "name" and "arguments"):' -}}
    {%- for tool in tools -%}{{- NL + (tool | tojson) -}}{%- endfor -%}
  {%- endif -%}
  {{- '<|im_end|>' + NL -}}
{%- endif -%}
{%- for message in messages -%}
  {%- if message['role'] == 'system' -%}
    {%- if not loop.first -%}{{- '<|im_start|>system' + NL + message['content'] + '<|im_end|>' + NL -}}{%- endif -%}
  {%- elif message['role'] == 'assistant' -%}
    {{- '<|im_start|>assistant' + NL -}}
    {%- generation -%}
      {%- set text = message['content'] if message['content'] is string else '' -%}
      {{- text -}}
      {%- for call in message['tool_calls'] or [] -%}
        {%- set fn = call['function'] if call['function'] is defined else call -%}
        {%- set args = fn['arguments'] | tojson if fn['arguments'] is mapping else fn['arguments'] -%}
        {{- (NL if (text or not loop.first) else '') + '<tool_call>' + NL + '{"name": "' + fn['name'] + '", "arguments": ' + args + '}' + NL + '</tool_call>' -}}
      {%- endfor -%}
      {{- '<|im_end|>' -}}
    {%- endgeneration -%}
    {{- NL -}}
  {%- else -%}
    {{- '<|im_start|>' + message['role'] + NL -}}
    {%- if message['content'] is string -%}{{- message['content'] -}}
    {%- else -%}{%- for part in message['content'] -%}{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}{%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>' + NL -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant' + NL -}}{%- endif -%}
"""

#: transformers' ``response_template`` (version 1) for :data:`CHATML_TOOLS_TEMPLATE`'s assistant turns.
CHATML_TOOLS_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {
            "close_pattern": r"<\|im_end\|>\s*",
            "content": "text",
        },
    },
}

CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")


def knows_tool_calls(tokenizer: Any) -> bool:
    """Whether TRL recognises the tokenizer's template for tool calling (it can set the response template)."""
    import copy

    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    if not supports_tool_calling(tokenizer):
        return False
    try:
        add_response_schema(copy.copy(tokenizer))
    except ValueError:
        return False
    return True


def prepare_tokenizer(tokenizer: Any, force: bool = False) -> Any:
    """Give ``tokenizer`` the ChatML tool template and response template unless TRL knows its own.

    ``force=True`` always sets ours (transcripts and training then use one
    format whatever the model). Raises ValueError when the vocabulary lacks
    the ChatML tokens the template needs.
    """
    if not force and getattr(tokenizer, "chat_template", None) and knows_tool_calls(tokenizer):
        return tokenizer
    if tokenizer.chat_template == CHATML_TOOLS_TEMPLATE and getattr(tokenizer, "response_template", None):
        return tokenizer  # already prepared
    vocab = tokenizer.get_vocab()
    missing = [t for t in CHATML_TOKENS if t not in vocab]
    if missing:
        raise ValueError(f"the tokenizer has no {missing} tokens: it cannot use the ChatML tool template; give a "
                         "model whose chat template TRL knows for tool calling (Qwen2.5/3, Llama 3, ...)")
    tokenizer.chat_template = CHATML_TOOLS_TEMPLATE
    tokenizer.response_template = dict(CHATML_TOOLS_RESPONSE_TEMPLATE)
    if tokenizer.eos_token != "<|im_end|>":
        tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
