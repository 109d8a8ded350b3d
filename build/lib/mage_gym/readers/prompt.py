"""The reader prompt: one versioned template shared by every answering backend.

Why one module: the reader's answers (and therefore rewards and benchmark
scores) depend on the exact wording, so the wording lives in one place, carries
a version (:data:`PROMPT_VERSION`, part of every response-cache key) and is the
same for a local transformers model and an OpenAI-compatible server.

Sections follow the MAGE-RAG reader input: a role, the question, the rendered
evidence (structured XML with page images and element crops interleaved where
the XML references them), an answer policy that makes "Not answerable" the
answer when the evidence does not support one, and an ``<answer>`` output
block that answer extraction looks for. The gold answer is never part of it.

Bump :data:`PROMPT_VERSION` whenever any text below changes.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Union

from mage_gym.readers.base import RenderedImage, RenderedInput

PROMPT_VERSION = "mage-reader-v1"
NOT_ANSWERABLE = "Not answerable"

ROLE = (
    "You are a careful reader of long documents. You answer a question using only the "
    "evidence you are given from one document: pages and page elements (headings, "
    "paragraphs, tables, figures, captions) in a structured XML form, together with page "
    "images and element crops where they are available. Elements shown only as a short "
    "summary were not opened; their full content is not part of the evidence."
)

ANSWER_POLICY = (
    "- Use only the evidence above (its text and its images); do not use outside knowledge.\n"
    f"- If the evidence does not contain enough information to answer, the answer is exactly: "
    f"{NOT_ANSWERABLE}\n"
    "- Keep the answer short: a number, a date, a name, a short phrase, yes/no, or a list.\n"
    "- Copy numbers as the document writes them, with their unit or percent sign.\n"
    '- Give several items as a list in square brackets, e.g. ["first", "second"].'
)

OUTPUT_FORMAT = (
    "You may reason briefly first. End your reply with exactly one answer block:\n"
    "<answer>your final answer</answer>"
)

#: A prompt part is either text or an image (kept lazy: pixels load on use).
Part = Union[str, RenderedImage]

# An XML start or empty tag carrying ref="..." (or ref='...').
_REF_TAG = re.compile(
    r"<(?P<name>[A-Za-z_][\w.\-]*)\b[^<>]*?\bref\s*=\s*(?P<q>[\"'])(?P<ref>.*?)(?P=q)[^<>]*>"
)
_IMAGE_TAG_NAMES = ("image", "img")


@dataclass(frozen=True)
class ReaderPrompt:
    """A built prompt: a system text and a user message of interleaved parts."""

    system: str
    parts: tuple[Part, ...]
    version: str = PROMPT_VERSION
    #: Text the reply must begin with ("prefill"). Backends that can continue an
    #: assistant turn put it in the model's mouth and return it as part of the
    #: reply: small models then keep to a format (e.g. ``<agent_decision>``)
    #: that they drift from when only asked. Others ignore it.
    response_prefix: str = ""

    @property
    def images(self) -> tuple[RenderedImage, ...]:
        return tuple(p for p in self.parts if isinstance(p, RenderedImage))

    def user_text(self) -> str:
        """The user message without images (what a text-only model sees)."""
        return "".join(p for p in self.parts if isinstance(p, str))


def interleave(xml: str, images: tuple[RenderedImage, ...] | list[RenderedImage]) -> list[Part]:
    """Split ``xml`` so each image follows the tag that references it.

    Images keep their order in ``RenderedInput.images`` for placement ties. An
    image is placed right after the first unused tag whose ``ref`` equals its
    ``node_id`` (``<image ref=.../>`` tags win over other tags naming the same
    node); images the XML never references are appended after it, each
    introduced by an ``<image .../>`` line so the model can still tell them
    apart.
    """
    matches = [(m.group("name").lower(), html.unescape(m.group("ref")), m.end())
               for m in _REF_TAG.finditer(xml)]
    used: set[int] = set()
    placed: list[tuple[int, int, RenderedImage]] = []
    unplaced: list[RenderedImage] = []
    for order, img in enumerate(images):
        candidates = [i for i, (_, ref, _) in enumerate(matches) if ref == img.node_id and i not in used]
        preferred = [i for i in candidates if matches[i][0] in _IMAGE_TAG_NAMES]
        pick = (preferred or candidates or [None])[0]
        if pick is None:
            unplaced.append(img)
            continue
        used.add(pick)
        placed.append((matches[pick][2], order, img))
    placed.sort(key=lambda t: (t[0], t[1]))
    parts: list[Part] = []
    cursor = 0
    for pos, _, img in placed:
        parts.append(xml[cursor:pos])
        parts.append(img)
        cursor = pos
    parts.append(xml[cursor:])
    for img in unplaced:
        ref = html.escape(img.node_id, quote=True)
        parts.append(f'\n<image ref="{ref}" page="{img.page + 1}" kind="{html.escape(img.kind)}"/>\n')
        parts.append(img)
    return _merge_text(parts)


def build_prompt(rendered: RenderedInput, *, include_images: bool = True) -> ReaderPrompt:
    """Build the reader prompt for one rendered input.

    ``include_images=False`` gives the text-only prompt (the XML as is, image
    placeholders and all) for readers that cannot see pixels.
    """
    if not isinstance(rendered, RenderedInput):
        raise TypeError(f"expected RenderedInput, got {type(rendered).__name__}")
    question = rendered.question.strip()
    if not question:
        raise ValueError("RenderedInput.question is empty")
    evidence: list[Part]
    if include_images and rendered.images:
        evidence = interleave(rendered.xml, rendered.images)
    else:
        evidence = [rendered.xml]
    parts: list[Part] = [f"## Question\n{question}\n\n## Evidence\n"]
    parts.extend(evidence)
    parts.append(f"\n\n## Answer policy\n{ANSWER_POLICY}\n\n## Output\n{OUTPUT_FORMAT}\n"
                 f"Question (repeated): {question}")
    return ReaderPrompt(system=ROLE, parts=tuple(_merge_text(parts)))


EXTRACTION_INSTRUCTIONS = (
    "Below are a question and a reply written by a document reader. Copy the final answer the "
    "reply gives to the question, shortened to the answer itself, inside <answer></answer>. If "
    f"the reply gives no answer or says the evidence is insufficient, write <answer>{NOT_ANSWERABLE}"
    "</answer>. Do not answer the question yourself."
)


def build_extraction_prompt(question: str, reply: str) -> ReaderPrompt:
    """Prompt for optional LLM answer extraction (never shown the gold answer)."""
    text = f"{EXTRACTION_INSTRUCTIONS}\n\n## Question\n{question.strip()}\n\n## Reply\n{reply.strip()}\n"
    return ReaderPrompt(system="You extract final answers from replies.", parts=(text,))


def _merge_text(parts: list[Part]) -> list[Part]:
    out: list[Part] = []
    for p in parts:
        if isinstance(p, str):
            if not p:
                continue
            if out and isinstance(out[-1], str):
                out[-1] = out[-1] + p
                continue
        out.append(p)
    return out
