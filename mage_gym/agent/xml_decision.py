"""Parse an LLM controller's ``<agent_decision>`` reply (the paper's XML) into a :class:`~mage_gym.env.RoundDecision`.

Why two parsers: a strong model (Qwen3-VL-8B) writes well-formed XML, which a
strict XML parser reads exactly; small or chatty models write almost-XML
(unclosed tags, unquoted attributes, prose around it), which a lenient,
pattern-based reader still understands. Only when both find nothing usable
does the policy fall back (and logs it). The grammar::

    <agent_decision>
      <stop>true</stop>
      <selected_actions><action index="3"/>...</selected_actions>
      <open_requests><node id="doc:p4:e2"/>...</open_requests>
      <search_request><query>free text</query></search_request>
      <prune_requests><page id="doc:p7"><reason>...</reason></page>
                      <node id="doc:p4:e9"><reason>...</reason></node></prune_requests>
    </agent_decision>

Every part is optional; an empty ``<agent_decision/>`` is a valid "do nothing
this round". Candidate indices are the 1-based numbers of the text view.
"""
from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from mage_gym.env import PruneRequest, RoundDecision

MODES = ("strict", "lenient", "fallback")
_TRUE = {"true", "yes", "1", "y"}

_BLOCK = re.compile(r"<agent_decision\b[^>]*?(?:/>|>(.*?)</agent_decision\s*>)", re.S | re.I)
_OPEN_BLOCK = re.compile(r"<agent_decision\b[^>]*>(.*)", re.S | re.I)
_STOP = re.compile(r"<stop\b[^>]*>\s*([A-Za-z0-9]+)\s*(?:</stop>)?", re.I)
_STOP_EMPTY = re.compile(r"<stop\s*/>", re.I)
_ACTION = re.compile(r"<action\b[^>]*?\bindex\s*=\s*[\"']?\s*(\d+)", re.I)
_SECTION = r"<{tag}\b[^>]*>(.*?)(?:</{tag}\s*>|(?=<(?:selected_actions|open_requests|search_request|prune_requests|stop)\b)|$)"
_ID = re.compile(r"<(node|page)\b[^>]*?\bid\s*=\s*[\"']?([^\"'\s/>]+)[\"']?[^>]*?(?:/>|>(.*?)(?:</\1\s*>|(?=<(?:node|page)\b)|$))",
                 re.S | re.I)
_REASON = re.compile(r"<reason\b[^>]*>(.*?)(?:</reason\s*>|$)", re.S | re.I)
_QUERY = re.compile(r"<query\b[^>]*>(.*?)(?:</query\s*>|</search_request|$)", re.S | re.I)


class DecisionParseError(ValueError):
    """A reply holds no usable decision (neither strict nor lenient parsing found one)."""


@dataclass(frozen=True)
class ParsedDecision:
    """The decision and how it was obtained (``strict``, ``lenient``) - or why it failed."""

    decision: RoundDecision | None
    mode: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.decision is not None


def parse_decision(text: str) -> ParsedDecision:
    """Strict XML first, lenient patterns second; ``decision`` is None when both fail."""
    if not isinstance(text, str):
        return ParsedDecision(None, "fallback", f"reply is {type(text).__name__}, not text")
    try:
        return ParsedDecision(parse_strict(text), "strict")
    except DecisionParseError as strict_err:
        try:
            return ParsedDecision(parse_lenient(text), "lenient", f"strict: {strict_err}")
        except DecisionParseError as lenient_err:
            return ParsedDecision(None, "fallback", f"strict: {strict_err}; lenient: {lenient_err}")


def parse_strict(text: str) -> RoundDecision:
    """The first ``<agent_decision>`` element, parsed as XML; any malformation is an error."""
    m = _BLOCK.search(text)
    if m is None:
        raise DecisionParseError("no <agent_decision>...</agent_decision> element")
    try:
        root = ET.fromstring(m.group(0))
    except ET.ParseError as err:
        raise DecisionParseError(f"malformed XML: {err}") from None
    stop = False
    activate: list[int] = []
    opens: list[str] = []
    search: str | None = None
    prunes: list[PruneRequest] = []
    for child in root:
        tag = child.tag.lower()
        if tag == "stop":
            value = (child.text or "").strip().lower()
            if value and value not in _TRUE | {"false", "no", "0", "n"}:
                raise DecisionParseError(f"<stop> must be true or false, got {value!r}")
            stop = value in _TRUE or value == ""
        elif tag == "selected_actions":
            for a in child:
                if a.tag.lower() != "action":
                    raise DecisionParseError(f"unexpected <{a.tag}> in <selected_actions>")
                idx = (a.get("index") or "").strip()
                if not idx.isdigit():
                    raise DecisionParseError(f"<action index={idx!r}> is not a candidate number")
                activate.append(int(idx))
        elif tag == "open_requests":
            for n in child:
                node_id = (n.get("id") or "").strip()
                if n.tag.lower() != "node" or not node_id:
                    raise DecisionParseError("<open_requests> holds <node id=\"...\"/> items only")
                opens.append(node_id)
        elif tag == "search_request":
            q = child.find("query")
            query = " ".join(((q.text if q is not None else child.text) or "").split())
            if query:
                search = query
        elif tag == "prune_requests":
            for n in child:
                node_id = (n.get("id") or "").strip()
                if n.tag.lower() not in ("node", "page") or not node_id:
                    raise DecisionParseError("<prune_requests> holds <page id=...> or <node id=...> items only")
                reason = n.find("reason")
                prunes.append(PruneRequest(node_id, " ".join(((reason.text if reason is not None else n.text)
                                                               or "").split())))
        else:
            raise DecisionParseError(f"unknown element <{child.tag}> in <agent_decision>")
    return RoundDecision(activate=tuple(activate), open=tuple(opens), search=search, prune=tuple(prunes),
                         stop=stop)


def _section(body: str, tag: str) -> str:
    m = re.search(_SECTION.format(tag=tag), body, re.S | re.I)
    return m.group(1) if m else ""


def parse_lenient(text: str) -> RoundDecision:
    """Pattern-based reading of almost-XML; needs at least one recognisable part."""
    m = _BLOCK.search(text) or _OPEN_BLOCK.search(text)
    body = (m.group(1) or "") if m else text
    stop = bool(_STOP_EMPTY.search(body)) or any(s.lower() in _TRUE for s in _STOP.findall(body))
    stop_seen = bool(_STOP_EMPTY.search(body) or _STOP.search(body))
    actions_part = _section(body, "selected_actions") or body
    activate = [int(i) for i in _ACTION.findall(actions_part)]
    opens = [html.unescape(i) for _, i, _ in _ID.findall(_section(body, "open_requests"))]
    prunes = []
    for _, node_id, inner in _ID.findall(_section(body, "prune_requests")):
        r = _REASON.search(inner or "")
        prunes.append(PruneRequest(html.unescape(node_id), " ".join(html.unescape(r.group(1) if r else "").split())))
    q = _QUERY.search(_section(body, "search_request") or "")
    search = " ".join(html.unescape(re.sub(r"<[^>]*>", " ", q.group(1))).split()) if q else None
    if not (stop_seen or activate or opens or prunes or search):
        raise DecisionParseError("no <stop>, <action index>, <node id>, <page id> or <query> found")
    return RoundDecision(activate=tuple(dict.fromkeys(activate)), open=tuple(dict.fromkeys(opens)),
                         search=search or None, prune=tuple(prunes), stop=stop)


def decision_to_xml(decision: RoundDecision) -> str:
    """The canonical XML of a decision (prompt examples and round-trip tests)."""
    esc = lambda s: html.escape(str(s), quote=True)  # noqa: E731
    lines = ["<agent_decision>"]
    if decision.activate:
        lines.append("  <selected_actions>" + "".join(f'<action index="{i}"/>' for i in decision.activate)
                     + "</selected_actions>")
    if decision.open:
        lines.append("  <open_requests>" + "".join(f'<node id="{esc(n)}"/>' for n in decision.open)
                     + "</open_requests>")
    if decision.search:
        lines.append(f"  <search_request><query>{esc(decision.search)}</query></search_request>")
    if decision.prune:
        items = []
        for p in decision.prune:
            tag = "page" if re.fullmatch(r".*:p\d+", p.node_id) else "node"
            items.append(f'<{tag} id="{esc(p.node_id)}"><reason>{esc(p.reason)}</reason></{tag}>')
        lines.append("  <prune_requests>" + "".join(items) + "</prune_requests>")
    if decision.stop:
        lines.append("  <stop>true</stop>")
    lines.append("</agent_decision>")
    return "\n".join(lines)
