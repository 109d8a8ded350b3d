"""The message reader's rules pinned exactly: every branch, its mode, its normalised arguments, its words.

The error texts are what a model reads back when its call is refused (the
chat env sends them as tool results), so they are checked whole here;
tests/test_agent_parse.py covers the forms and a hypothesis property.
"""
from __future__ import annotations

import pytest

from mage_gym.agent.parse import NO_CALL, ParsedCall, ParsedMessage, call_to_text, calls_to_message, check_call, \
    parse_message, parse_text

TOOL_NAMES = "activate, open, search, prune, stop"


def _one(message) -> ParsedCall:
    parsed = parse_message(message)
    assert len(parsed.calls) == 1
    return parsed.calls[0]


def test_what_is_not_a_message_and_empty_messages() -> None:
    parsed = parse_message(5)
    assert parsed.mode == "none" and parsed.errors == (
        "an assistant message must be text, a message dict or a list of tool calls, not int",)
    assert parse_message([]).mode == "none" and parse_message([]).errors == (NO_CALL,)
    assert parse_text("just words").mode == "none" and parse_text("just words").errors == (NO_CALL,)
    assert parse_text("just words").content == "just words"


def test_message_dicts_tool_calls_content_parts_and_ids() -> None:
    msg = {"role": "assistant", "content": [{"type": "text", "text": "I act. "}, {"type": "image"},
                                            {"type": "text", "text": "Now."}],
           "tool_calls": [{"id": 7, "function": {"name": "stop", "arguments": "  "}},
                          {"id": "", "function": {"name": "search", "arguments": '{"query": "q"}'}}]}
    parsed = parse_message(msg)
    assert parsed.mode == "tool_calls" and parsed.content == "I act. Now."
    assert [(c.name, c.arguments, c.call_id) for c in parsed.calls] == [("stop", {}, "7"), ("search", {"query": "q"},
                                                                                           None)]
    assert parsed.errors == () and not parsed.structured
    assert parse_message({"tool_calls": [{"id": "a", "name": "stop"}]}).structured
    by_parts = parse_message({"content": [{"type": "text", "text": '<tool_call>{"name": "stop"}</tool_call>'}]})
    assert by_parts.mode == "tagged" and by_parts.valid[0].name == "stop"
    assert parse_message({"content": None}).errors == (NO_CALL,)
    assert parse_message({"name": "stop"}).mode == "tool_calls"
    assert _one({"function": {"name": "open", "arguments": {"ids": "d:p1:e2"}}}).arguments == {"ids": ["d:p1:e2"]}
    assert _one({"name": "activate", "parameters": {"candidates": [3]}}).arguments == {"candidates": [3]}
    assert _one(["not a call"]).error == "tool call 1: expected an object with name and arguments, got str"
    assert parse_message([{"name": "stop"}, 3]).errors == (
        "tool call 2: expected an object with name and arguments, got int",)


def test_bad_json_arguments_and_bad_tagged_blocks_say_where() -> None:
    bad = _one({"id": "c1", "function": {"name": "open", "arguments": "{ids"}})
    assert (bad.name, bad.call_id) == ("open", "c1")
    assert bad.error == ("tool call 1 (open): arguments are not valid JSON "
                         "(Expecting property name enclosed in double quotes at char 1)")
    assert _one({"function": {"arguments": "{"}}).name is None
    parsed = parse_text("<tool_call>not json</tool_call><tool_call>[1]</tool_call>")
    assert parsed.mode == "tagged" and parsed.errors == (
        "tool call 1: <tool_call> holds invalid JSON (Expecting value at char 0)",
        "tool call 2: <tool_call> must hold a JSON object with name and arguments")


def test_json_in_plain_text_fenced_spanned_or_listed() -> None:
    fenced = parse_text('```json\n{"name": "search", "arguments": {"query": "x"}}\n```')
    assert fenced.mode == "json" and fenced.valid[0].arguments == {"query": "x"}
    inside = parse_text('Sure: {"name": "stop", "arguments": {}} done')
    assert inside.mode == "json" and inside.valid[0].name == "stop"
    listed = parse_text('calls: [{"name": "stop"}, {"name": "search", "arguments": {"query": "y"}}] ok')
    assert [c.name for c in listed.valid] == ["stop", "search"]
    wrapped = parse_text('{"tool_calls": [{"function": {"name": "stop"}}]}')
    assert wrapped.mode == "json" and wrapped.valid[0].name == "stop"
    assert parse_text('{"answer": 3}').mode == "none" and parse_text("[1, 2]").mode == "none"
    assert parse_text('[{"name": "stop"}, {"x": 1}]').mode == "none"  # every item must look like a call
    assert parse_text("} backwards {").mode == "none" and parse_text("[]").mode == "none"


def test_the_papers_decision_becomes_calls_in_a_fixed_order() -> None:
    xml = ('<agent_decision><stop>true</stop><search_request><query>q</query></search_request>'
           '<selected_actions><action index="2"/></selected_actions><open_requests><node id="d:p1:e1"/>'
           '</open_requests><prune_requests><page id="d:p0"><reason>off topic</reason></page></prune_requests>'
           '</agent_decision>')
    parsed = parse_text(xml)
    assert parsed.mode == "xml" and parsed.content == xml
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("prune", {"ids": ["d:p0"], "reason": "off topic"}), ("activate", {"candidates": [2]}),
        ("open", {"ids": ["d:p1:e1"]}), ("search", {"query": "q"}), ("stop", {})]
    assert parse_text("<agent_decision></agent_decision>").errors == ("<agent_decision> holds no operation",)
    unreadable = parse_text("<agent_decision><selected_actions><action index='x'")
    assert unreadable.errors[0].startswith("<agent_decision> could not be read: ")


def test_schema_checks_name_every_problem() -> None:
    assert check_call("", {}).error == "tool call: missing tool name"
    assert check_call(None, {}, where="tool call 3").error == "tool call 3: missing tool name"
    assert check_call("fly", {}).error == f"tool call: unknown tool 'fly' (tools: {TOOL_NAMES})"
    assert check_call("stop", None) == ParsedCall("stop", {})
    assert check_call("stop", [1]).error == "tool call (stop): arguments must be an object, got list"
    assert check_call("stop", {"x": 1}).error == "tool call (stop): unknown argument(s) x (expected: none)"
    assert check_call("prune", {"ids": ["a"], "b": 1, "a": 2}).error == (
        "tool call (prune): unknown argument(s) a, b (expected: ids, reason)")
    assert check_call("prune", {"ids": ["a"]}).error == "tool call (prune): missing argument(s) reason"
    assert check_call("prune", {}).error == "tool call (prune): missing argument(s) ids, reason"
    assert check_call("open", {"ids": []}, "c9").error == "tool call (open): ids is empty"
    assert check_call("open", {"ids": []}, "c9").call_id == "c9"


@pytest.mark.parametrize("value, want", [
    (3, [3]), ([2.0, " 4 "], [2, 4]), ("5", [5]),
])
def test_integers_are_normalised(value, want) -> None:
    assert check_call("activate", {"candidates": value}).arguments == {"candidates": want}


@pytest.mark.parametrize("value, why", [
    ([True], "candidates item 1 must be an integer, got a boolean"),
    ([1, 2.5], "candidates item 2 must be an integer, got 2.5"),
    (["-3"], "candidates item 1 must be an integer, got '-3'"),
    ([None], "candidates item 1 must be an integer, got None"),
])
def test_integers_that_are_not(value, why) -> None:
    assert check_call("activate", {"candidates": value}).error == f"tool call (activate): {why}"


def test_strings_take_numbers_but_not_other_things() -> None:
    assert check_call("search", {"query": 12}).arguments == {"query": "12"}
    assert check_call("search", {"query": 1.5}).arguments == {"query": "1.5"}
    assert check_call("search", {"query": True}).error == "tool call (search): query must be a string, got bool"
    assert check_call("search", {"query": ["a"]}).error == "tool call (search): query must be a string, got list"
    assert check_call("open", {"ids": ("a", 3)}).arguments == {"ids": ["a", "3"]}


def test_calls_written_back_as_text_and_as_a_message() -> None:
    call = ParsedCall("search", {"query": "ré"})
    assert call_to_text(call) == '<tool_call>\n{"name": "search", "arguments": {"query": "ré"}}\n</tool_call>'
    msg = calls_to_message([call, ParsedCall("stop", {}, call_id="mine")], id_prefix="t")
    assert msg == {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": {"query": "ré"}}, "id": "t_0"},
        {"type": "function", "function": {"name": "stop", "arguments": {}}, "id": "mine"}]}
    assert calls_to_message([call])["tool_calls"][0]["id"] == "call_0"
    assert ParsedCall(None, error="x").as_tool_call() == {"type": "function", "function": {"name": "", "arguments": {}}}
    both = ParsedMessage((ParsedCall("stop"), ParsedCall(None, error="bad")), "tagged")
    assert both.valid == (ParsedCall("stop"),) and both.errors == ("bad",) and not both.structured


def test_refused_calls_keep_their_name_and_id() -> None:
    cases = [("", {}, None), ("fly", {}, "fly"), ("stop", [1], "stop"), ("stop", {"x": 1}, "stop"),
             ("prune", {"ids": ["a"]}, "prune"), ("activate", {"candidates": [True]}, "activate"),
             ("open", {"ids": []}, "open")]
    for name, args, kept in cases:
        call = check_call(name, args, "c7")
        assert call.error and (call.name, call.call_id) == (kept, "c7"), (name, args)
    item = _one({"id": "c8", "function": {"name": "stop", "arguments": {"x": 1}}})
    assert item.call_id == "c8" and item.error.startswith("tool call 1 (stop)")


def test_what_each_form_keeps_of_the_text() -> None:
    tagged = '<tool_call>{"name": "stop"}</tool_call> and words'
    assert parse_text(tagged).content == tagged and parse_text('{"name": "stop"}').content == '{"name": "stop"}'
    assert parse_message([{"name": "stop"}]).mode == "tool_calls"
    upper = parse_text("<AGENT_DECISION><stop>true</stop></AGENT_DECISION>")
    assert upper.mode == "xml" and upper.valid == (ParsedCall("stop", {}),)
    assert parse_message({"content": None}).content == "" and parse_message({"content": 5}).content == "5"
    parts = parse_message({"content": ["loose", {"type": "text"}, {"type": "text", "text": "kept"}, 3]})
    assert parts.content == "kept" and parts.mode == "none"
    assert parse_text('{"name": "stop"} done').mode == "json"  # a span starting at the first character
    assert parse_text('{"name": "stop"}x').valid == (ParsedCall("stop", {}),)  # the span ends at its brace
    assert parse_text('```\n{"name": "stop"}\n```').valid == (ParsedCall("stop", {}),)
    assert call_to_text(ParsedCall("search", {"query": "é"})).count("é") == 1
