"""What the chat controller reads each turn: the text view, compacted to what changed.

Why not the full text view every turn: on MMLongBench documents the view is
about 16k characters (~4k tokens) per round, so a chat that appends it each
turn overflows SmolLM2's 8k-token window by the second turn. The chat
observation is built from the same public text view
(:meth:`mage_gym.env.MageRAGEnv.text_view`, parsed here, so nothing but what
an LLM policy may read gets in) and sends:

- at the start: the question, the budget, the evidence held (summaries) and
  the top ``max_candidates`` candidates with short previews;
- after each turn: the result of every call, the budget, only the evidence
  that changed (added, opened - with its content -, dropped), and the current
  top candidates: new ones in full (id, type, page, relation, preview), those
  listed before by their number only (``<still_listed n="1 4 7"/>``: their
  line is still in the conversation).

Candidates keep one **stable number** for the whole episode (given when a
node is first shown), unlike the text view's positions, which shift as the
frontier moves. So ``activate([3])`` means the same node whether it is sent
alone, with other calls in one message, or one call at a time (TRL executes
calls one by one), and numbers a model saw several turns ago stay valid.
The token cost of this choice is measured by ``experiments/perf/perf_agent.py``.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Mapping

from mage_gym.render import esc

#: Characters XML 1.0 forbids (a PDF's text layer sometimes holds them): dropped before parsing.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass(frozen=True)
class NodeView:
    """A page or element of the working subgraph as the text view shows it."""

    node_id: str
    kind: str  # "page" or "node"
    type: str
    page: str
    state: str
    text: str  # summary, or the content of an opened element


@dataclass(frozen=True)
class CandidateView:
    """A frontier node the controller may activate."""

    node_id: str
    type: str
    page: str
    page_state: str
    relation: str
    preview: str


@dataclass(frozen=True)
class ViewSnapshot:
    """The parsed text view: question, budget attributes, evidence held, candidates in relevance order."""

    question: str
    budget: dict[str, str]
    evidence: tuple[NodeView, ...]
    candidates: tuple[CandidateView, ...]
    conversation: tuple[tuple[str, str], ...] = ()


def parse_text_view(xml: str) -> ViewSnapshot:
    """Read :meth:`MageRAGEnv.text_view`'s XML (every document string in it is escaped)."""
    root = ET.fromstring(_INVALID_XML.sub("", xml))
    question = (root.findtext("question") or "").strip()
    budget_el = root.find("budget")
    budget = dict(budget_el.attrib) if budget_el is not None else {}
    evidence: list[NodeView] = []
    for page in root.iter("page"):
        number = page.get("number", "")
        if page.get("doc"):
            number = f"{number} of {page.get('doc')}"
        evidence.append(NodeView(page.get("id", ""), "page", "page", number, page.get("state", ""),
                                 (page.findtext("summary") or "").strip()))
        for node in page.findall("node"):
            text = node.findtext("content") if node.find("content") is not None else node.findtext("summary")
            evidence.append(NodeView(node.get("id", ""), "node", node.get("type", ""), number,
                                     node.get("state", ""), (text or "").strip()))
    candidates = []
    cands = root.find("candidates")
    for c in (cands if cands is not None else []):
        if c.tag != "candidate":
            continue
        page = c.get("page", "")
        if c.get("doc"):
            page = f"{page} of {c.get('doc')}"
        candidates.append(CandidateView(c.get("id", ""), c.get("type", ""), page, c.get("page_state", ""),
                                        c.get("relation", ""), (c.findtext("preview") or "").strip()))
    conv = root.find("conversation")
    history = tuple(((t.findtext("question") or "").strip(), (t.findtext("answer") or "").strip())
                    for t in (conv if conv is not None else []))
    return ViewSnapshot(question, budget, tuple(evidence), tuple(candidates), history)


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: max(0, n - 1)] + "…"


@dataclass
class ChatView:
    """Per-episode memory of what the controller was shown: candidate numbers, previews, evidence.

    ``max_candidates``: candidates listed per turn (top of the relevance
    order); ``preview_chars`` / ``summary_chars`` / ``content_chars``: clips
    of candidate previews, summaries and opened contents.
    """

    max_candidates: int = 16
    preview_chars: int = 120
    summary_chars: int = 200
    content_chars: int = 1200
    numbers: dict[str, int] = field(default_factory=dict)
    by_number: dict[int, str] = field(default_factory=dict)
    previewed: set[str] = field(default_factory=set)
    held: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (state, text) last shown
    listed: list[str] = field(default_factory=list)  # candidate ids of the last observation
    question: str = ""  # the question last shown (a conversation's next question is announced)

    def reset(self) -> None:
        self.numbers.clear()
        self.by_number.clear()
        self.previewed.clear()
        self.held.clear()
        self.listed.clear()
        self.question = ""

    # --- numbers ------------------------------------------------------------------------------

    def number(self, node_id: str) -> int:
        """The stable number of ``node_id`` (given now if it has none)."""
        n = self.numbers.get(node_id)
        if n is None:
            n = self.numbers[node_id] = len(self.numbers) + 1
            self.by_number[n] = node_id
        return n

    def node_of(self, n: int) -> str | None:
        """The node a shown candidate number stands for (None: never shown)."""
        return self.by_number.get(int(n))

    # --- rendering ----------------------------------------------------------------------------

    def first(self, snap: ViewSnapshot) -> str:
        """The opening observation: question, budget, evidence held, candidates with previews."""
        lines = []
        if snap.conversation:
            lines.append("<conversation>")
            lines += [f"<turn><question>{esc(q)}</question><answer>{esc(a)}</answer></turn>"
                      for q, a in snap.conversation]
            lines.append("</conversation>")
        lines.append(f"<question>{esc(snap.question)}</question>")
        self.question = snap.question
        lines.append(self._budget(snap))
        lines.append("<evidence>")
        for node in snap.evidence:
            lines.append(self._node(node))
            self.held[node.node_id] = (node.state, node.text)
        lines.append("</evidence>")
        lines += self._candidates(snap)
        return "\n".join(lines)

    def update(self, snap: ViewSnapshot) -> str:
        """Budget, the evidence that changed since the last observation, the current candidates."""
        lines = []
        if snap.question != self.question:  # a conversation moved on: the reader answered, a new question came
            answer = snap.conversation[-1][1] if snap.conversation else ""
            lines.append(f"<next_question previous_answer=\"{esc(answer)}\">{esc(snap.question)}</next_question>")
            self.question = snap.question
        lines.append(self._budget(snap))
        changes = []
        now = {n.node_id: n for n in snap.evidence}
        for node in snap.evidence:
            before = self.held.get(node.node_id)
            if before is None or before[0] != node.state:
                changes.append(self._node(node, tag=("added" if before is None else node.state)))
            self.held[node.node_id] = (node.state, node.text)
        for node_id in [i for i in self.held if i not in now]:
            changes.append(f'<dropped id="{esc(node_id)}"/>')
            del self.held[node_id]
        if changes:
            lines += ["<evidence_changes>", *changes, "</evidence_changes>"]
        lines += self._candidates(snap)
        return "\n".join(lines)

    def _budget(self, snap: ViewSnapshot) -> str:
        b = snap.budget
        keys = ("round", "rounds", "activations_left_in_round", "activations_left", "opens_left",
                "tokens_left")  # tokens_left: under a reader-token budget only
        attrs = " ".join(f'{k}="{esc(b[k])}"' for k in keys if k in b)
        if "step_cap" in b and "steps_used" in b:
            attrs += f' steps_left="{max(0, int(b["step_cap"]) - int(b["steps_used"]))}"'
        return f"<budget {attrs}/>"

    def _node(self, node: NodeView, tag: str | None = None) -> str:
        limit = self.content_chars if node.state == "opened" else self.summary_chars
        name = tag or node.kind
        where = f' page="{esc(node.page)}"' if node.kind == "node" else f' number="{esc(node.page)}"'
        kind = f' type="{esc(node.type)}"' if node.kind == "node" else ' type="page"'
        return (f'<{name} id="{esc(node.node_id)}"{kind}{where} state="{esc(node.state)}">'
                f"{esc(_clip(node.text, limit))}</{name}>")

    def _candidates(self, snap: ViewSnapshot) -> list[str]:
        shown = snap.candidates[: self.max_candidates]
        self.listed = [c.node_id for c in shown]
        lines = ["<candidates>"]
        seen = []
        for c in shown:
            n = self.number(c.node_id)
            if c.node_id in self.previewed:  # listed before with its id and preview: its number says it all
                seen.append(str(n))
                continue
            self.previewed.add(c.node_id)
            attrs = (f'n="{n}" id="{esc(c.node_id)}" type="{esc(c.type)}" page="{esc(c.page)}" '
                     f'page_state="{esc(c.page_state)}" relation="{esc(c.relation)}"')
            lines.append(f"<c {attrs}>{esc(_clip(c.preview, self.preview_chars))}</c>")
        if seen:
            lines.append(f'<still_listed n="{" ".join(seen)}"/>')
        hidden = len(snap.candidates) - len(shown)
        if hidden > 0:
            lines.append(f"<!-- {hidden} lower-ranked candidates not listed; search to reach other pages -->")
        lines.append("</candidates>")
        return lines


def budget_numbers(snap: ViewSnapshot) -> Mapping[str, int]:
    """The budget attributes as integers (no gold: the controller sees them)."""
    out = {}
    for k, v in snap.budget.items():
        try:
            out[k] = int(v)
        except ValueError:
            continue
    return out
