"""What a server process serves and under which limits; builds the per-process runtime.

Why a record: with ``--workers N`` every worker process builds its own
runtime (uvicorn starts them afresh), so the settings travel as JSON in one
environment variable (:data:`ENV_VAR`) and each worker reads the same episodes
and limits.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mage_gym.agent.service.runtime import ServiceLimits, ServiceRuntime

ENV_VAR = "MAGE_GYM_SERVICE_CONFIG"


@dataclass(frozen=True)
class ServiceConfig:
    """Episodes (``dataset`` may list several, comma-separated), chat settings, documents and limits.

    ``doc_ids`` keeps only episodes on those documents. ``chat`` holds other
    :class:`~mage_gym.agent.chat_env.MageChatEnv` keywords (JSON values).
    ``max_documents`` / ``document_idle_s``: the document cap and idle time of
    :class:`~mage_gym.agent.service.documents.SharedDocuments`; ``threads``:
    the pool running env calls. ``prebuilt_only``: serve only documents whose
    graph is in the cache (a reset on another fails at once with
    ``DOCUMENT_NOT_BUILT``).
    """

    dataset: str = "synth"
    root: str | None = None
    split: str = "test"
    limit: int | None = None
    doc_ids: tuple[str, ...] = ()
    parser: str = "fast"
    retriever: str = "hybrid"
    vision: bool = False
    chat: dict[str, Any] = field(default_factory=dict)
    max_documents: int = 16
    document_idle_s: float = 300.0
    prebuilt_only: bool = False
    threads: int = 2
    limits: ServiceLimits = field(default_factory=ServiceLimits)

    @property
    def label(self) -> str:
        """The task ids' dataset name: the dataset, or the datasets joined by ``+``."""
        return "+".join(d.strip() for d in self.dataset.split(",") if d.strip())

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "doc_ids": list(self.doc_ids)})

    @classmethod
    def from_json(cls, text: str) -> "ServiceConfig":
        raw = json.loads(text)
        limits = ServiceLimits(**raw.pop("limits", {}))
        return cls(**{**raw, "doc_ids": tuple(raw.get("doc_ids", ())), "limits": limits})

    @classmethod
    def from_environ(cls) -> "ServiceConfig":
        text = os.environ.get(ENV_VAR)
        if not text:
            raise RuntimeError(f"{ENV_VAR} is not set: start workers with `python -m mage_gym.agent.server`")
        return cls.from_json(text)

    def with_limits(self, **changes: Any) -> "ServiceConfig":
        return replace(self, limits=replace(self.limits, **changes))

    def episodes(self) -> list[Any]:
        """The episodes served (every dataset listed, then the ``doc_ids`` filter); raises when none."""
        from mage_gym.data.registry import NoEpisodesError, require_episodes

        out: list[Any] = []
        for name in self.label.split("+"):
            out += require_episodes(name, root=self.root, split=self.split, limit=self.limit)
        if self.doc_ids:
            wanted = set(self.doc_ids)
            out = [e for e in out if e.doc_id in wanted]
            if not out:
                raise NoEpisodesError(f"no episode of {self.label}/{self.split} is on documents {sorted(wanted)}")
        return out

    def runtime(self) -> ServiceRuntime:
        """This process's runtime: episodes loaded, documents shared, one chat env per session."""
        from mage_gym.agent.chat_env import MageChatEnv
        from mage_gym.agent.service.documents import SharedDocuments

        episodes = self.episodes()
        documents = SharedDocuments(episodes, parser=self.parser, max_documents=self.max_documents,
                                    idle_s=self.document_idle_s, prebuilt_only=self.prebuilt_only)
        chat = {"retriever": self.retriever, "vision": self.vision, **self.chat}
        label = self.label

        def make_env() -> MageChatEnv:
            return MageChatEnv(episodes=documents, dataset=label, **chat)

        return ServiceRuntime(make_env, self.limits, documents=documents, threads=self.threads, label=label)


__all__ = ["ENV_VAR", "ServiceConfig"]
