"""Parsers: PDF / page images -> :class:`~mage_gym.graph.schema.ParsedDocument`.

``get_parser(name, **cfg)`` is the one entry point. Names: ``layout`` (default;
PyMuPDF's ONNX layout model) and ``fast`` (rule-based, ~25x cheaper). Both
send pages without a text layer, and image-folder documents, through RapidOCR:
``fast`` groups OCR lines into blocks (:mod:`.ocr`); ``layout`` lets the layout
model box the OCR'd page (``image_ocr="layout"``, default) or uses the same
line grouping (``image_ocr="rapidocr"``). Heavy imports happen inside the
parsers, on first use.
"""
from __future__ import annotations

from typing import Any

from mage_gym.graph.parsers.base import Parser

PARSER_NAMES: tuple[str, ...] = ("layout", "fast")


def get_parser(name: str = "layout", **cfg: Any) -> Parser:
    """A parser by name; ``cfg`` goes to its constructor (e.g. ``ocr=False``, ``ocr_dpi=144``)."""
    if name == "layout":
        from mage_gym.graph.parsers.layout import LayoutParser

        return LayoutParser(**cfg)
    if name == "fast":
        from mage_gym.graph.parsers.fast import FastParser

        return FastParser(**cfg)
    raise ValueError(f"unknown parser {name!r}; expected one of {PARSER_NAMES}")


__all__ = ["get_parser", "Parser", "PARSER_NAMES"]
