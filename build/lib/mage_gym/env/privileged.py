"""The privileged view: the current episode's gold, for privileged policies (oracle, teachers) and shaping only.

Why a separate, explicit door: gold must never reach an ordinary policy, yet an
upper-bound controller and a potential-based shaping term need it. An env
built with ``privileged=True`` hands out a read-only :class:`PrivilegedView`
through ``env.get_wrapper_attr("privileged_view")()``; any other env raises
:class:`PrivilegedAccessError`. Rows produced with it must say they are
privileged.
"""
from __future__ import annotations

from dataclasses import dataclass

from mage_gym.data.episode import Region
from mage_gym.env.episodes import Gold
from mage_gym.graph.graph import EvidenceGraph


class PrivilegedAccessError(RuntimeError):
    """Gold was requested from an env that was not built with ``privileged=True``."""


@dataclass(frozen=True)
class PrivilegedView:
    """Read-only gold of one episode, on the env's graph (tuples only; 0-based pages, node indices).

    ``items``: gold items, each a tuple of node indices any of which covers it;
    ``item_pages`` / ``item_is_page``: each item's page and whether it is
    page-level; ``pages``: gold pages inside the graph; ``gold_nodes`` /
    ``gold_node_ids``: the union of the items; ``regions``: the source's gold
    boxes and ``region_hops`` the hop (1-based) of each box of a multi-hop
    question (empty otherwise); ``level``: ``element``, ``page`` or ``none``. The field names match
    :class:`~mage_gym.data.gold.GoldEvidence`, so reward functions accept a view.
    """

    episode_id: str
    answerable: bool
    level: str
    pages: tuple[int, ...]
    items: tuple[tuple[int, ...], ...]
    item_pages: tuple[int, ...]
    item_is_page: tuple[bool, ...]
    gold_nodes: tuple[int, ...]
    gold_node_ids: tuple[str, ...]
    regions: tuple[Region, ...]
    region_hops: tuple[int, ...] = ()

    @property
    def gold_known(self) -> bool:
        return self.level != "none" and len(self.items) > 0

    @classmethod
    def of(cls, gold: Gold, graph: EvidenceGraph) -> "PrivilegedView":
        ev, ep = gold.evidence, gold.episode
        nodes = tuple(int(v) for v in ev.gold_nodes)
        ids = graph.node_ids
        return cls(
            episode_id=ep.episode_id, answerable=bool(ep.answerable), level=str(ev.level),
            pages=tuple(int(p) for p in ev.pages),
            items=tuple(tuple(int(v) for v in item) for item in ev.items),
            item_pages=tuple(int(p) for p in ev.item_pages), item_is_page=tuple(bool(b) for b in ev.item_is_page),
            gold_nodes=nodes, gold_node_ids=tuple(ids[v] for v in nodes if 0 <= v < len(ids)),
            regions=tuple(ep.evidence_regions), region_hops=tuple(getattr(ep, "evidence_hops", ()) or ()),
        )
