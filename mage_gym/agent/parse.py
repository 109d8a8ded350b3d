"""Read an assistant message into tool calls: OpenAI ``tool_calls``, tool calls in text, or the paper's XML.

Why one reader for every form: the same controller is driven through an
OpenAI-compatible server that parses tool calls itself (vLLM with a tool
parser: structured ``tool_calls``), through one that returns plain text
(llama.cpp without a tool template, a small model writing ``<tool_call>``
blocks as Qwen/Hermes templates teach), through TRL (already-parsed dicts),
and by the paper's evaluator prompt (``<agent_decision>`` XML). All of them
become the same :class:`ParsedCall` list, so the environment behaves the
same whichever way a call arrived.

What is read, in this order:

1. a ``dict`` with non-empty ``tool_calls`` (an assistant message), a tool-call
   dict (``{"name", "arguments"}`` or ``{"type": "function", "function":
   {...}, "id"}``), or a list of them;
2. text: ``<tool_call>{json}</tool_call>`` blocks (a last, unclosed block too:
   generation often stops inside it);
3. text holding ``<agent_decision>``: :func:`mage_gym.agent.xml_decision.parse_decision`,
   its parts in the order the round API runs them (prune, activate, open,
   search, stop);
4. text that is, or contains, a JSON tool call or a list of them (code fences
   allowed).

Every call is checked against its JSON schema (:data:`mage_gym.agent.tools.TOOLS`).
A call that fails keeps its position with an ``error`` that says exactly what
is wrong (unknown tool, missing or unknown argument, wrong type, invalid
JSON); a message with no call at all gives one error. Small, unambiguous
repairs are made and are not errors: a lone number or id where a list is
expected, digits written as a string, arguments sent as a JSON string (the
OpenAI wire form).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from mage_gym.agent.tools import TOOLS_BY_NAME, tool_parameters

MODES = ("tool_calls", "tagged", "xml", "json", "none")
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S | re.I)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.I)
NO_CALL = ("no tool call found: reply with one or more tool calls, e.g. "
           '<tool_call>{"name": "activate", "arguments": {"candidates": [1, 2]}}</tool_call>')


@dataclass(frozen=True)
class ParsedCall:
    """One tool call as read from a message: valid when ``error`` is None.

    ``arguments`` are checked and normalised (lists where the schema says
    array); ``call_id`` is the OpenAI ``id`` when the call came structured.
    """

    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_tool_call(self, call_id: str | None = None) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` item (arguments as a dict, the form chat templates and TRL take)."""
        out: dict[str, Any] = {"type": "function", "function": {"name": self.name or "", "arguments":
                                                                dict(self.arguments)}}
        cid = call_id or self.call_id
        if cid:
            out["id"] = cid
        return out


@dataclass(frozen=True)
class ParsedMessage:
    """The calls of one assistant message, in order, and how they were found (``mode`` in :data:`MODES`)."""

    calls: tuple[ParsedCall, ...]
    mode: str
    content: str = ""

    @property
    def valid(self) -> tuple[ParsedCall, ...]:
        return tuple(c for c in self.calls if c.ok)

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(c.error for c in self.calls if c.error)

    @property
    def structured(self) -> bool:
        """True when the calls came as OpenAI ``tool_calls`` with ids (results go back as ``tool`` messages)."""
        return self.mode == "tool_calls" and all(c.call_id for c in self.calls)


def parse_message(message: Any) -> ParsedMessage:
    """Read one assistant message (str, message dict, tool-call dict or list of them) into calls."""
    if isinstance(message, Mapping):
        if message.get("tool_calls"):
            return ParsedMessage(tuple(_from_structured(tc, i) for i, tc in enumerate(message["tool_calls"])),
                                 "tool_calls", _text(message.get("content")))
        if "name" in message or "function" in message:
            return ParsedMessage((_from_structured(message, 0),), "tool_calls")
        return parse_text(_text(message.get("content")))
    if isinstance(message, (list, tuple)):
        if not message:
            return ParsedMessage((ParsedCall(None, error=NO_CALL),), "none")
        return ParsedMessage(tuple(_from_structured(tc, i) for i, tc in enumerate(message)), "tool_calls")
    if isinstance(message, str):
        return parse_text(message)
    return ParsedMessage((ParsedCall(None, error=f"an assistant message must be text, a message dict or a list of "
                                                 f"tool calls, not {type(message).__name__}"),), "none")


def parse_text(text: str) -> ParsedMessage:
    """Tool calls carried in text: ``<tool_call>`` blocks, else ``<agent_decision>``, else JSON."""
    blocks = _TAGGED.findall(text)
    if blocks:
        return ParsedMessage(tuple(_from_json_text(b, i, "<tool_call>") for i, b in enumerate(blocks)), "tagged",
                             text)
    if re.search(r"<agent_decision\b", text, re.I):
        return ParsedMessage(_from_xml(text), "xml", text)
    found = _json_in_text(text)
    if found is not None:
        items = found if isinstance(found, list) else found.get("tool_calls", [found]) \
            if isinstance(found, dict) else [found]
        if isinstance(items, list) and items and all(isinstance(x, Mapping) and ("name" in x or "function" in x)
                                                     for x in items):
            return ParsedMessage(tuple(_from_structured(x, i) for i, x in enumerate(items)), "json", text)
    return ParsedMessage((ParsedCall(None, error=NO_CALL),), "none", text)


# --- the forms ---------------------------------------------------------------------------------


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return str(content)


def _from_structured(item: Any, index: int) -> ParsedCall:
    """An OpenAI tool-call item, a ``{"name", "arguments"}`` dict (Llama 3 writes ``parameters``)."""
    where = f"tool call {index + 1}"
    if not isinstance(item, Mapping):
        return ParsedCall(None, error=f"{where}: expected an object with name and arguments, got "
                                      f"{type(item).__name__}")
    call_id = item.get("id")
    call_id = str(call_id) if call_id else None
    fn = item.get("function") if isinstance(item.get("function"), Mapping) else item
    name = fn.get("name")
    args = fn.get("arguments", fn.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as err:
            return ParsedCall(str(name) if name else None, call_id=call_id,
                              error=f"{where} ({name}): arguments are not valid JSON ({err.msg} at char {err.pos})")
    return check_call(name, args, call_id, where)


def _from_json_text(body: str, index: int, form: str) -> ParsedCall:
    where = f"tool call {index + 1}"
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as err:
        return ParsedCall(None, error=f"{where}: {form} holds invalid JSON ({err.msg} at char {err.pos})")
    if not isinstance(obj, Mapping):
        return ParsedCall(None, error=f"{where}: {form} must hold a JSON object with name and arguments")
    return _from_structured(obj, index)


def _json_in_text(text: str) -> Any:
    """A JSON value in ``text``: the whole (fences removed), else the outermost ``{...}`` or ``[...]`` span."""
    body = _FENCE.sub("", text.strip())
    for candidate in (body, _span(body, "{", "}"), _span(body, "[", "]")):
        if candidate:
            try:
                return json.loads(candidate)
            except json.JSONDecodeError:
                continue
    return None


def _span(text: str, open_: str, close: str) -> str | None:
    a, b = text.find(open_), text.rfind(close)
    return text[a:b + 1] if 0 <= a < b else None


def _from_xml(text: str) -> tuple[ParsedCall, ...]:
    from mage_gym.agent.xml_decision import parse_decision

    parsed = parse_decision(text)
    if parsed.decision is None:
        return (ParsedCall(None, error=f"<agent_decision> could not be read: {parsed.error}"),)
    d = parsed.decision
    calls = [ParsedCall("prune", {"ids": [p.node_id], "reason": p.reason}) for p in d.prune]
    if d.activate:
        calls.append(ParsedCall("activate", {"candidates": list(d.activate)}))
    if d.open:
        calls.append(ParsedCall("open", {"ids": list(d.open)}))
    if d.search:
        calls.append(ParsedCall("search", {"query": d.search}))
    if d.stop:
        calls.append(ParsedCall("stop", {}))
    if not calls:  # an empty decision is the paper's "do nothing this round"
        return (ParsedCall(None, error="<agent_decision> holds no operation"),)
    return tuple(calls)


# --- schema check ------------------------------------------------------------------------------


def check_call(name: Any, arguments: Any, call_id: str | None = None, where: str = "tool call") -> ParsedCall:
    """Validate ``name`` and ``arguments`` against the tool's JSON schema; normalise small deviations."""
    if not isinstance(name, str) or not name:
        return ParsedCall(None, call_id=call_id, error=f"{where}: missing tool name")
    if name not in TOOLS_BY_NAME:
        return ParsedCall(name, call_id=call_id,
                          error=f"{where}: unknown tool {name!r} (tools: {', '.join(TOOLS_BY_NAME)})")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return ParsedCall(name, call_id=call_id,
                          error=f"{where} ({name}): arguments must be an object, got {type(arguments).__name__}")
    schema = tool_parameters(name)
    props: Mapping[str, Any] = schema["properties"]
    unknown = sorted(set(arguments) - set(props))
    if unknown:
        expected = ", ".join(props) or "none"
        return ParsedCall(name, call_id=call_id, error=f"{where} ({name}): unknown argument(s) {', '.join(unknown)} "
                                                       f"(expected: {expected})")
    missing = [k for k in schema["required"] if k not in arguments]
    if missing:
        return ParsedCall(name, call_id=call_id, error=f"{where} ({name}): missing argument(s) {', '.join(missing)}")
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        ok, norm, why = _coerce(value, props[key])
        if not ok:
            return ParsedCall(name, call_id=call_id, error=f"{where} ({name}): {key} {why}")
        out[key] = norm
    for key, spec in props.items():
        if spec.get("type") == "array" and key in out and not out[key]:
            return ParsedCall(name, call_id=call_id, error=f"{where} ({name}): {key} is empty")
    return ParsedCall(name, out, call_id)


def _coerce(value: Any, spec: Mapping[str, Any]) -> tuple[bool, Any, str]:
    kind = spec.get("type")
    if kind == "integer":
        if isinstance(value, bool):
            return False, None, "must be an integer, got a boolean"
        if isinstance(value, int):
            return True, value, ""
        if isinstance(value, float) and value.is_integer():
            return True, int(value), ""
        if isinstance(value, str) and value.strip().isdigit():
            return True, int(value.strip()), ""
        return False, None, f"must be an integer, got {value!r}"
    if kind == "string":
        if isinstance(value, str):
            return True, value, ""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, str(value), ""
        return False, None, f"must be a string, got {type(value).__name__}"
    if kind == "array":
        items = value if isinstance(value, (list, tuple)) else [value]  # a lone item where a list is expected
        out = []
        for i, item in enumerate(items):
            ok, norm, why = _coerce(item, spec.get("items", {}))
            if not ok:
                return False, None, f"item {i + 1} {why}"
            out.append(norm)
        return True, out, ""
    return True, value, ""


def call_to_text(call: ParsedCall) -> str:
    """A valid call written as the ``<tool_call>`` text block small models are trained to emit."""
    return "<tool_call>\n" + json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False) + \
        "\n</tool_call>"


def calls_to_message(calls: Sequence[ParsedCall], id_prefix: str = "call") -> dict[str, Any]:
    """An OpenAI assistant message carrying ``calls`` as structured ``tool_calls`` with ids."""
    return {"role": "assistant", "content": "",
            "tool_calls": [c.as_tool_call(c.call_id or f"{id_prefix}_{i}") for i, c in enumerate(calls)]}
