"""The controller's operations as OpenAI-style function tools (plain data, no model code).

Why plain data: every consumer of tool calls speaks this JSON-schema form -
OpenAI-compatible servers (``tools=`` of a chat completion), chat templates
(``apply_chat_template(..., tools=TOOLS)``), TRL's ``GRPOTrainer`` (it builds
the same schemas from the tool methods of :mod:`mage_gym.agent.trl_env`, a
test checks they agree) and verifiers. One definition keeps them in step.

The five tools map onto the environment's operations (:class:`~mage_gym.env.Op`):

- ``activate(candidates)``: add frontier candidates to the working subgraph, by
  the number ``n`` the observation gave them (ActivatePage / ActivateNode);
- ``open(ids)``: open activated elements, so the reader gets their full
  content (OpenNode);
- ``search(query)``: free-text retrieval; it activates the best pages not yet
  held and ends the round (SearchEvidence);
- ``prune(ids, reason)``: drop activated pages or elements (PruneNode; final);
- ``stop()``: end the episode; the reader reads what was gathered (Stop).
"""
from __future__ import annotations

from typing import Any

#: Tool names in the order a mixed message runs them when parsed from the paper's XML decision.
TOOL_NAMES = ("activate", "open", "search", "prune", "stop")


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """One tool, written exactly as ``transformers.utils.get_json_schema`` writes the TRL env's method."""
    params: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        params["required"] = required
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


TOOLS: list[dict[str, Any]] = [
    _function("activate",
              "Add candidates to the evidence by their number n; an element brings its page. Budget per round.",
              {"candidates": {"type": "array", "items": {"type": "integer"},
                              "description": "Candidate numbers n, as listed under <candidates>."}},
              ["candidates"]),
    _function("open",
              "Open activated elements by id: the reader then gets their full content (tables, charts, facts).",
              {"ids": {"type": "array", "items": {"type": "string"},
                       "description": "Ids of activated elements, e.g. doc:p3:e1."}},
              ["ids"]),
    _function("search",
              "Search the whole document; the best pages not yet held are activated. Ends the round.",
              {"query": {"type": "string", "description": "Free-text query."}},
              ["query"]),
    _function("prune",
              "Drop activated pages or elements that do not help answer the question. Pruning is final.",
              {"ids": {"type": "array", "items": {"type": "string"},
                       "description": "Ids of activated pages or elements."},
               "reason": {"type": "string", "description": "Why they are dropped, in a few words."}},
              ["ids", "reason"]),
    _function("stop",
              "End the episode: the reader answers from the evidence gathered so far.",
              {}, []),
]

TOOLS_BY_NAME: dict[str, dict[str, Any]] = {t["function"]["name"]: t for t in TOOLS}
assert tuple(TOOLS_BY_NAME) == TOOL_NAMES


def tool_parameters(name: str) -> dict[str, Any]:
    """The JSON schema of a tool's arguments (raises KeyError for an unknown tool)."""
    params = dict(TOOLS_BY_NAME[name]["function"]["parameters"])
    params.setdefault("required", [])
    return params


def tool_call_schema(max_items: int | None = 8, max_chars: int | None = 160) -> dict[str, Any]:
    """JSON schema of one tool call ``{"name": ..., "arguments": {...}}`` (any of the tools).

    For constrained decoding: a server that takes ``response_format={"type":
    "json_object", "schema": tool_call_schema()}`` (llama.cpp, vLLM's guided
    decoding) makes even a model never trained on these tools reply with a
    well-formed call, which :func:`mage_gym.agent.parse.parse_message` reads.

    Why the bounds: a grammar alone lets an untrained model fill an id list or
    a query until ``max_tokens`` cuts it (SmolLM2 at temperature 1 did so in
    16 of 20 replies at 40 tokens), and a cut reply is no call at all; an
    empty list is a call that does nothing. ``max_items`` makes every array
    hold 1 to ``max_items`` items and ``max_chars`` caps every string
    (``None`` leaves them open); the tools themselves (:data:`TOOLS`) stay
    unbounded.
    """
    return {"anyOf": [
        {"type": "object",
         "properties": {"name": {"const": t["function"]["name"]},
                        "arguments": _bounded(t["function"]["parameters"], max_items, max_chars)},
         "required": ["name", "arguments"], "additionalProperties": False}
        for t in TOOLS
    ]}


def _bounded(schema: dict[str, Any], max_items: int | None, max_chars: int | None) -> dict[str, Any]:
    """A copy of ``schema`` whose arrays hold at most ``max_items`` and strings at most ``max_chars``."""
    out = {k: v for k, v in schema.items() if k not in ("properties", "items")}
    if "properties" in schema:
        out["properties"] = {k: _bounded(v, max_items, max_chars) for k, v in schema["properties"].items()}
        out["additionalProperties"] = False
    if "items" in schema:
        out["items"] = _bounded(schema["items"], max_items, max_chars)
    if schema.get("type") == "array" and max_items is not None:
        out["minItems"], out["maxItems"] = 1, max_items
    if schema.get("type") == "string" and max_chars is not None:
        out["maxLength"] = max_chars
    return out
