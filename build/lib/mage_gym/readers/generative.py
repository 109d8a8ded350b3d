"""Shared read() logic of the answering backends (hf, openai).

Why: every answering backend does the same four things around one model call
(build the versioned prompt, generate, extract the answer, time it); only
``generate`` differs. Keeping the rest here means the local and the remote
reader can never disagree on the prompt or the extraction.
"""
from __future__ import annotations

import time
from typing import Any

from mage_gym.readers.answer import extract, has_answer_block
from mage_gym.readers.base import ReaderOutput, RenderedInput
from mage_gym.readers.prompt import PROMPT_VERSION, ReaderPrompt, build_extraction_prompt, build_prompt


class GenerativeReader:
    """Base class: subclasses set ``name``, ``model_id``, ``uses_images`` and implement ``generate``.

    ``llm_extract=True`` asks the same model, in a second call, to pull the
    final answer out of a reply that has no ``<answer>`` block; that call sees
    the question and the reply only, never the gold answer.
    """

    name: str = "generative"
    answers: bool = True
    uses_images: bool = False
    model_id: str = ""
    prompt_version: str = PROMPT_VERSION
    llm_extract: bool = False

    def generate(self, prompt: ReaderPrompt) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def fit_prompt(self, rendered: RenderedInput, prompt: ReaderPrompt) -> ReaderPrompt:
        """Hook: shrink a prompt that does not fit the model (default: unchanged)."""
        return prompt

    def validate(self) -> None:
        """Check, before the first episode, what construction could not (default: nothing to check)."""

    def generation_params(self) -> dict[str, Any]:
        """Everything besides the input that changes the output (part of cache keys)."""
        return {}

    def cache_identity(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model_id, "prompt_version": self.prompt_version,
                "uses_images": self.uses_images, "llm_extract": self.llm_extract,
                **self.generation_params()}

    def read(self, rendered: RenderedInput) -> ReaderOutput:
        start = time.perf_counter()
        prompt = self.fit_prompt(rendered, build_prompt(rendered, include_images=self.uses_images))
        raw = self.generate(prompt)
        answer = extract(raw)
        if self.llm_extract and not has_answer_block(raw):
            answer = extract(self.generate(build_extraction_prompt(rendered.question, raw)))
        return ReaderOutput(answer=answer, raw=raw, seconds=time.perf_counter() - start)
