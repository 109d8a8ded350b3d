"""mage_gym.agent.parse: every form an assistant message takes becomes the same checked tool calls."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mage_gym.agent.parse import NO_CALL, calls_to_message, call_to_text, check_call, parse_message
from mage_gym.agent.tools import TOOL_NAMES, TOOLS, tool_call_schema


def names(parsed):
    return [c.name for c in parsed.calls]


def test_tools_are_openai_function_schemas():
    assert [t["function"]["name"] for t in TOOLS] == list(TOOL_NAMES)
    for t in TOOLS:
        assert t["type"] == "function"
        params = t["function"]["parameters"]
        assert params["type"] == "object" and set(params.get("required", [])) <= set(params["properties"])
        assert t["function"]["description"]
    assert len(tool_call_schema()["anyOf"]) == len(TOOLS)


def test_tool_call_schema_bounds_lists_and_strings_and_can_leave_them_open():
    from jsonschema import Draft202012Validator

    bounded, open_ = Draft202012Validator(tool_call_schema(max_items=3, max_chars=10)), \
        Draft202012Validator(tool_call_schema(max_items=None, max_chars=None))
    for ok in ({"name": "activate", "arguments": {"candidates": [1, 2]}}, {"name": "stop", "arguments": {}},
               {"name": "prune", "arguments": {"ids": ["d:p1"], "reason": "off topic"}}):
        assert bounded.is_valid(ok) and open_.is_valid(ok)
    for too_much in ({"name": "activate", "arguments": {"candidates": [1, 2, 3, 4]}},
                     {"name": "open", "arguments": {"ids": []}},
                     {"name": "search", "arguments": {"query": "x" * 11}},
                     {"name": "open", "arguments": {"ids": ["d:p1:e123456"]}}):
        assert not bounded.is_valid(too_much) and open_.is_valid(too_much)
    assert not open_.is_valid({"name": "stop", "arguments": {"why": "done"}})  # no extra keys
    assert not open_.is_valid({"name": "fly", "arguments": {}})
    for t in TOOLS:  # the tools themselves stay unbounded
        assert "maxItems" not in json.dumps(t) and "maxLength" not in json.dumps(t)


def test_tagged_text_blocks_in_order_with_a_truncated_last_block():
    text = ('I will add two candidates.\n<tool_call>{"name": "activate", "arguments": {"candidates": [2, 5]}}'
            '</tool_call>\n<tool_call>{"name": "open", "arguments": {"ids": ["d:p1:e2"]}}')  # generation stopped
    p = parse_message(text)
    assert p.mode == "tagged" and names(p) == ["activate", "open"] and not p.errors
    assert p.calls[0].arguments == {"candidates": [2, 5]} and p.calls[1].arguments == {"ids": ["d:p1:e2"]}


def test_openai_tool_calls_with_ids_and_string_arguments():
    msg = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "revenue 2021"}'}},
        {"id": "c2", "type": "function", "function": {"name": "stop", "arguments": "{}"}}]}
    p = parse_message(msg)
    assert p.mode == "tool_calls" and p.structured and names(p) == ["search", "stop"]
    assert [c.call_id for c in p.calls] == ["c1", "c2"] and p.calls[0].arguments == {"query": "revenue 2021"}


def test_a_list_of_dicts_a_single_dict_and_llama_parameters():
    p = parse_message([{"name": "prune", "parameters": {"ids": "d:p3", "reason": "off-topic"}}])
    assert names(p) == ["prune"] and p.calls[0].arguments == {"ids": ["d:p3"], "reason": "off-topic"}
    assert names(parse_message({"name": "stop", "arguments": {}})) == ["stop"]


def test_json_fallback_with_code_fences_and_a_tool_calls_object():
    assert names(parse_message('```json\n{"name": "activate", "arguments": {"candidates": ["3"]}}\n```')) == ["activate"]
    assert parse_message('{"name": "activate", "arguments": {"candidates": ["3"]}}').calls[0].arguments == \
        {"candidates": [3]}
    p = parse_message('Sure: {"tool_calls": [{"name": "stop", "arguments": {}}]} done')
    assert p.mode == "json" and names(p) == ["stop"]


def test_the_papers_xml_becomes_calls_in_round_order():
    xml = ('<agent_decision><selected_actions><action index="4"/><action index="1"/></selected_actions>'
           '<open_requests><node id="d:p2:e1"/></open_requests><search_request><query>net income</query>'
           '</search_request><prune_requests><page id="d:p7"><reason>staff</reason></page></prune_requests>'
           '<stop>true</stop></agent_decision>')
    p = parse_message(xml)
    assert p.mode == "xml" and names(p) == ["prune", "activate", "open", "search", "stop"] and not p.errors
    assert p.calls[0].arguments == {"ids": ["d:p7"], "reason": "staff"}
    assert p.calls[1].arguments == {"candidates": [4, 1]}


@pytest.mark.parametrize("message, expected", [
    ("I think the answer is on page 3.", "no tool call found"),
    ('<tool_call>{"name": "activate", "arguments": {"candidates": [1,</tool_call>', "invalid JSON"),
    ('<tool_call>{"name": "fly", "arguments": {}}</tool_call>', "unknown tool 'fly'"),
    ('<tool_call>{"name": "activate", "arguments": {}}</tool_call>', "missing argument(s) candidates"),
    ('<tool_call>{"name": "activate", "arguments": {"candidates": [1], "why": 2}}</tool_call>',
     "unknown argument(s) why"),
    ('<tool_call>{"name": "activate", "arguments": {"candidates": ["one"]}}</tool_call>',
     "item 1 must be an integer, got 'one'"),
    ('<tool_call>{"name": "activate", "arguments": {"candidates": [true]}}</tool_call>', "got a boolean"),
    ('<tool_call>{"name": "open", "arguments": {"ids": []}}</tool_call>', "ids is empty"),
    ('<tool_call>["stop"]</tool_call>', "must hold a JSON object"),
    ({"tool_calls": [{"id": "x", "function": {"name": "search", "arguments": "{bad"}}]}, "arguments are not valid JSON"),
    (42, "must be text, a message dict or a list of tool calls"),
    ([], "no tool call found"),
    ("<agent_decision></agent_decision>", "holds no operation"),
])
def test_malformed_calls_say_exactly_what_is_wrong(message, expected):
    p = parse_message(message)
    assert p.errors and expected in p.errors[0], p.errors
    assert not p.valid


def test_a_bad_call_keeps_its_place_beside_good_ones():
    p = parse_message('<tool_call>{"name": "stop"}</tool_call><tool_call>{"name": "nope", "arguments": {}}</tool_call>'
                      '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>')
    assert [c.ok for c in p.calls] == [True, False, True] and names(p) == ["stop", "nope", "search"]


def test_round_trips_through_text_and_structured_forms():
    call = check_call("activate", {"candidates": [3, 4]})
    assert parse_message(call_to_text(call)).calls[0] == call
    msg = calls_to_message([call])
    again = parse_message(msg).calls[0]
    assert (again.name, again.arguments, again.call_id) == ("activate", {"candidates": [3, 4]}, "call_0")
    assert NO_CALL.startswith("no tool call found")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                              lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                                                       max_size=4), max_leaves=12)))
def test_nothing_a_model_writes_raises_and_every_message_yields_calls_or_errors(message):
    p = parse_message(message)
    assert p.calls, "a message always gives at least one call or one error"
    for c in p.calls:
        assert c.ok or (isinstance(c.error, str) and c.error)
        if c.ok:
            assert c.name in TOOL_NAMES and json.dumps(c.arguments)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(TOOL_NAMES), st.lists(st.integers(1, 60), min_size=1, max_size=4), st.text(min_size=1,
                                                                                                   max_size=30))
def test_well_formed_calls_are_read_back_exactly(name, numbers, text):
    args = {"activate": {"candidates": numbers}, "open": {"ids": [text]}, "search": {"query": text},
            "prune": {"ids": [text], "reason": text}, "stop": {}}[name]
    block = "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"
    p = parse_message(block)
    assert [(c.name, c.arguments) for c in p.calls] == [(name, args)]
