"""The LLM evaluator's decision parser (strict, lenient, garbage), its prompt and its reply cache."""
from __future__ import annotations

import pytest

from mage_gym.env import PruneRequest, RoundDecision
from policies.llm_decision import decision_to_xml, parse_decision, parse_lenient, parse_strict, DecisionParseError
from policies.llm_evaluator import CallableBackend, LLMEvaluatorPolicy
from policies.llm_prompt import EVALUATOR_PROMPT_VERSION, PromptConfig, build_evaluator_prompt, compact_view

FULL = """Some thinking first.
<agent_decision>
  <selected_actions><action index="3"/><action index="7"/></selected_actions>
  <open_requests><node id="doc:p4:e2"/><node id="doc:p9:e1"/></open_requests>
  <search_request><query>warranty   period</query></search_request>
  <prune_requests>
    <page id="doc:p7"><reason>about staff &amp; benefits</reason></page>
    <node id="doc:p4:e9"><reason>footer</reason></node>
  </prune_requests>
  <stop>false</stop>
</agent_decision>
trailing words"""


def test_strict_parses_every_part() -> None:
    p = parse_decision(FULL)
    assert p.mode == "strict" and p.ok and p.error is None
    d = p.decision
    assert d.activate == (3, 7)
    assert d.open == ("doc:p4:e2", "doc:p9:e1")
    assert d.search == "warranty period"
    assert d.prune == (PruneRequest("doc:p7", "about staff & benefits"), PruneRequest("doc:p4:e9", "footer"))
    assert d.stop is False


@pytest.mark.parametrize("text,stop", [("<agent_decision><stop>true</stop></agent_decision>", True),
                                       ("<agent_decision><stop/></agent_decision>", True),
                                       ("<agent_decision><stop>no</stop></agent_decision>", False),
                                       ("<agent_decision/>", False)])
def test_strict_stop_and_empty(text: str, stop: bool) -> None:
    d = parse_strict(text)
    assert d.stop is stop and d.activate == () and d.open == ()


def test_strict_round_trip_of_canonical_xml() -> None:
    d = RoundDecision(activate=(1, 2), open=("a:p1:e3",), search="revenue 2021",
                      prune=(PruneRequest("a:p5", "off topic"),), stop=True)
    assert parse_strict(decision_to_xml(d)) == d


@pytest.mark.parametrize("bad", [
    "<agent_decision><selected_actions><action index='x'/></selected_actions></agent_decision>",
    "<agent_decision><selected_actions><action index=\"2\"></selected_actions></agent_decision>",  # unclosed
    "<agent_decision><dance/></agent_decision>",
    "no xml here",
])
def test_strict_rejects_malformed(bad: str) -> None:
    with pytest.raises(DecisionParseError):
        parse_strict(bad)


def test_lenient_reads_almost_xml() -> None:
    text = ("Sure! <agent_decision>\n<selected_actions><action index=2> <action index='5'/>\n"
            "<open_requests><node id=doc:p3:e1>\n<stop>False")
    p = parse_decision(text)
    assert p.mode == "lenient" and p.error.startswith("strict:")
    assert p.decision.activate == (2, 5)
    assert p.decision.open == ("doc:p3:e1",)
    assert p.decision.stop is False


def test_lenient_stop_and_search_without_root() -> None:
    d = parse_lenient("I think <search_request><query>net income 2020</query> then <stop>true</stop>")
    assert d.search == "net income 2020" and d.stop is True


@pytest.mark.parametrize("garbage", ["", "The answer is 42.", "<html><body>hi</body></html>", "<<<>>>"])
def test_garbage_falls_back(garbage: str) -> None:
    p = parse_decision(garbage)
    assert p.mode == "fallback" and p.decision is None and "lenient" in p.error


VIEW = """<mage_state>
  <question>What was revenue?</question>
  <budget round="1" rounds="6" activations_left_in_round="4" activations_left="24" opens_left="16" steps_used="0" step_cap="132"/>
  <evidence_state>
  <page id="d:p1" number="2" state="activated">
    <summary>Revenue</summary>
    <node id="d:p1:e2" type="table" state="activated"><summary>table</summary></node>
    <node id="d:p1:e3" type="paragraph" state="opened"><content>""" + "x" * 3000 + """</content></node>
  </page>
  </evidence_state>
  <recent_trace>
  </recent_trace>
  <candidates>
""" + "\n".join(f'    <candidate n="{i}" id="d:p1:e{i}" type="paragraph" page="2" page_state="activated" '
                f'relation="containment"><preview>p{i}</preview></candidate>' for i in range(1, 31)) + """
  </candidates>
</mage_state>"""


def test_compact_view_keeps_numbers_and_clips() -> None:
    small = compact_view(VIEW, PromptConfig(max_candidates=5, max_state_chars=2000))
    assert 'n="5"' in small and 'n="6"' not in small and "25 lower-ranked candidates not shown" in small
    assert len(small) <= 2000 + 200 and "<question>What was revenue?</question>" in small
    assert compact_view(VIEW, PromptConfig(max_candidates=None, max_state_chars=None)) == VIEW


def test_prompt_has_role_rules_examples_and_format() -> None:
    p = build_evaluator_prompt(VIEW, m=3)
    assert p.version == EVALUATOR_PROMPT_VERSION
    assert "at most 3 per round" in p.system
    user = p.user_text()
    assert "Example 1." in user and "<agent_decision>" in user and "What was revenue?" in user
    for example in user.split("Example ")[1:]:  # every example decision parses strictly
        assert parse_decision(example).mode == "strict"


def test_evaluator_caches_replies(tmp_path) -> None:
    calls = []

    def fn(system: str, user: str) -> str:
        calls.append(user)
        return '<agent_decision><selected_actions><action index="1"/></selected_actions></agent_decision>'

    def make() -> LLMEvaluatorPolicy:
        return LLMEvaluatorPolicy(backend=CallableBackend(fn), cache=str(tmp_path / "ev.sqlite"))

    a = make()
    prompt = build_evaluator_prompt(VIEW, m=4)
    assert parse_decision(a.complete(prompt)).decision.activate == (1,)
    b = make()  # a new policy (new process in practice) hits the same sqlite file
    b.complete(prompt)
    assert len(calls) == 1 and a.stats["evaluator_calls"] == 1 and b.stats["evaluator_cache_hits"] == 1
    assert b.stats["evaluator_calls"] == 0 and b.stats["evaluator_requests"] == 0
    a.close(), b.close()


def test_fallback_opens_activated_and_activates_top_candidates() -> None:
    pol = LLMEvaluatorPolicy(backend=CallableBackend(lambda s, u: "I cannot decide."), cache=False)
    d = pol._fallback(VIEW, m=4)
    assert d.activate == (1, 2, 3, 4) and d.open == ("d:p1:e2",) and not d.stop
    stop = LLMEvaluatorPolicy(backend=CallableBackend(lambda s, u: ""), cache=False, fallback="stop")
    assert stop._fallback(VIEW, m=4).stop


def test_bad_options_fail_clearly() -> None:
    with pytest.raises(ValueError):
        LLMEvaluatorPolicy(backend=CallableBackend(lambda s, u: ""), fallback="guess")
    with pytest.raises(ValueError):
        LLMEvaluatorPolicy(backend={"reader": "oracle"})
