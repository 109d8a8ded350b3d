"""The LLM evaluator's prompt: role, rules, short examples, the state, the output format.

Why versioned: the evaluator's decisions (and so every benchmark number of
``llm_evaluator``) depend on this wording; :data:`EVALUATOR_PROMPT_VERSION`
is part of every cached response's key, so changing the text without bumping
the version would silently reuse stale decisions. Our own wording, written
for this project's text view (:meth:`mage_gym.env.MageRAGEnv.text_view`).

Small local models (SmolLM2-135M) have short contexts and slow CPUs, so the
state can be compacted: only the first ``max_candidates`` candidates are
kept (numbers unchanged) and opened contents are clipped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from mage_gym.env import RoundDecision
from mage_gym.readers.prompt import ReaderPrompt
from policies.llm_decision import decision_to_xml

EVALUATOR_PROMPT_VERSION = "mage-evaluator-v3"
#: The reply starts here (see ReaderPrompt.response_prefix): a small model continues inside the
#: decision element instead of answering the question in prose.
DECISION_PREFIX = "<agent_decision>\n  <"

ROLE = (
    "You are the evidence controller of a question-answering system over one long document. "
    "A reader will answer the question from the evidence you collect. Each round you see the "
    "question, the evidence gathered so far, your recent operations and a numbered list of "
    "candidate pages and elements next to that evidence. You decide what to add, open, search "
    "for or drop, and when to stop. Collect what the answer needs and little else: every page "
    "and opened element costs reader tokens."
)

RULES = (
    "Rules:\n"
    "- selected_actions: activate candidates by their number n (at most {m} per round). Activating an "
    "element also activates its page.\n"
    "- open_requests: open activated elements by id; the reader then sees their full content. "
    "Open the elements that hold the answer (tables, charts, paragraphs with the facts).\n"
    "- search_request: one free-text query; it activates the best pages not yet active.\n"
    "- prune_requests: drop activated pages or elements that are off-topic, with a short reason. "
    "Pruning is final.\n"
    "- stop: true when the evidence is enough, or nothing useful is left.\n"
    "- Use only ids and numbers that appear in the state. Budget left is in <budget>.\n"
    "- Reply with exactly one <agent_decision> element and nothing else."
)

OUTPUT_FORMAT = (
    "Output format (every part optional):\n"
    "<agent_decision>\n"
    "  <selected_actions><action index=\"N\"/></selected_actions>\n"
    "  <open_requests><node id=\"ID\"/></open_requests>\n"
    "  <search_request><query>TEXT</query></search_request>\n"
    "  <prune_requests><page id=\"ID\"><reason>WHY</reason></page></prune_requests>\n"
    "  <stop>false</stop>\n"
    "</agent_decision>"
)

_EXAMPLES: tuple[tuple[str, RoundDecision], ...] = (
    ("The question asks for 2021 revenue; candidate 2 is a table titled 'Revenue by year' on an "
     "activated page and candidate 5 is its caption.",
     RoundDecision(activate=(2, 5))),
    ("Element rep:p12:e4 (the revenue table) is activated; page rep:p3 is about staff benefits.",
     RoundDecision(open=("rep:p12:e4",), prune=(("rep:p3", "about staff benefits, not revenue"),))),
    ("No candidate mentions the warranty period asked about.",
     RoundDecision(search="warranty period months")),
    ("The opened table rep:p12:e4 gives the 2021 revenue asked for.",
     RoundDecision(stop=True)),
)


@dataclass(frozen=True)
class PromptConfig:
    """How much of the state goes into the prompt (small models need a compact one)."""

    max_candidates: int | None = 24
    max_state_chars: int | None = 12000
    examples: bool = True
    prefill: bool = True  # start the reply with DECISION_PREFIX where the backend allows


def examples_text() -> str:
    """Short situation -> decision pairs; the prompt ends with the same cue, so a small model continues in XML."""
    parts = []
    for i, (situation, decision) in enumerate(_EXAMPLES, 1):
        parts.append(f"Example {i}.\nSituation: {situation}\nDecision:\n{decision_to_xml(decision)}")
    return "\n\n".join(parts)


_CANDIDATE = re.compile(r'^\s*<candidate n="(\d+)"')
_CONTENT = re.compile(r"(<content>)(.*?)(</content>)", re.S)


def compact_view(text_view: str, cfg: PromptConfig) -> str:
    """Drop candidates beyond ``max_candidates`` and clip opened contents to fit ``max_state_chars``.

    Candidate numbers are kept, so a decision about the shown ones stays valid.
    """
    lines = text_view.splitlines()
    if cfg.max_candidates is not None:
        kept, dropped = [], 0
        for line in lines:
            m = _CANDIDATE.match(line)
            if m and int(m.group(1)) > cfg.max_candidates:
                dropped += 1
                continue
            kept.append(line)
        if dropped:
            at = max(i for i, ln in enumerate(kept) if ln.strip() == "</candidates>")
            kept.insert(at, f"    <!-- {dropped} lower-ranked candidates not shown -->")
        lines = kept
    view = "\n".join(lines)
    limit = cfg.max_state_chars
    if limit is not None and len(view) > limit:
        contents = _CONTENT.findall(view)
        excess = len(view) - limit
        budget = max(80, sum(len(c[1]) for c in contents) - excess) // max(1, len(contents)) if contents else 0
        if contents:
            view = _CONTENT.sub(lambda m: m.group(1) + (m.group(2) if len(m.group(2)) <= budget
                                                        else m.group(2)[:budget] + "…") + m.group(3), view)
        if len(view) > limit:  # still too long: keep the head (question, budget, state) and the candidates
            head, sep, tail = view.partition("  <candidates>")
            keep_head = max(0, limit - len(sep) - len(tail))
            view = head[:keep_head] + "\n  <!-- evidence state clipped -->\n" + sep + tail
    return view


def build_evaluator_prompt(text_view: str, m: int, cfg: PromptConfig = PromptConfig()) -> ReaderPrompt:
    """The chat prompt for one round (system = role + rules; user = examples, state, format)."""
    system = ROLE + "\n\n" + RULES.format(m=m)
    user = []
    if cfg.examples:
        user.append("## Examples\n" + examples_text())
    user.append("## Current state\n" + compact_view(text_view, cfg))
    user.append("## Your decision\n" + OUTPUT_FORMAT + "\n\nSituation: the current state above.\nDecision:")
    return ReaderPrompt(system=system, parts=("\n\n".join(user) + "\n",), version=EVALUATOR_PROMPT_VERSION,
                        response_prefix=DECISION_PREFIX if cfg.prefill else "")
