"""The paper's ``<agent_decision>`` parser now lives in :mod:`mage_gym.agent.xml_decision`.

Why a re-export: there is one parser of LLM controller replies (tool calls and
the paper's XML, :mod:`mage_gym.agent.parse`); the LLM evaluator and older
imports keep working through this name.
"""
from mage_gym.agent.xml_decision import (  # noqa: F401
    MODES, DecisionParseError, ParsedDecision, decision_to_xml, parse_decision, parse_lenient, parse_strict,
)

__all__ = ["MODES", "DecisionParseError", "ParsedDecision", "decision_to_xml", "parse_decision", "parse_lenient",
           "parse_strict"]
