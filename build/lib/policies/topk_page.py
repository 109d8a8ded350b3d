"""``topk_page``: the k entry pages, then Stop - the page-level visual RAG baseline.

Why: this is what M3DocRAG / VisRAG-style pipelines do (retrieve k pages, show
them whole to a vision-language reader), and what MAGE-RAG claims to beat. The
environment activates the k entry pages at reset (free), so the policy only
stops. It is defined in ``visual`` mode: whole page images go to the reader.
Its page retriever is the environment's (text ``hybrid`` by default, or
``retriever=colpali`` with a local ColPali model path).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from policies.base import BasePolicy


class TopKPagePolicy(BasePolicy):
    name = "topk_page"

    def __init__(self, render_mode: str | None = "visual", **kw: Any) -> None:
        super().__init__(render_mode=render_mode, **kw)

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> int:
        return 0
