"""The gold-evidence "reader": no model, no answer text.

Why it exists: training and benchmarking controllers must not wait on a
vision-language model for every episode. With this reader the environment
computes support from gold coverage (:func:`mage_gym.coverage.cover`), so a
controller is rewarded for getting the gold evidence in front of the reader
with little noise and cost. It never touches pixels: images in the rendered
input stay unloaded.
"""
from __future__ import annotations

from mage_gym.readers.base import ReaderOutput, RenderedInput


class OracleReader:
    name = "oracle"
    answers = False

    def read(self, rendered: RenderedInput) -> ReaderOutput:
        if not isinstance(rendered, RenderedInput):
            raise TypeError(f"expected RenderedInput, got {type(rendered).__name__}")
        return ReaderOutput(answer=None, raw="")
