"""The one coverage rule (mage_gym.coverage): page recall, oracle support and all-covered agree.

Each case renders a node-state table with the real renderer, so "what the
reader gets" is what :func:`mage_gym.render.render` sends, not a mask built by hand.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mage_gym import reward as R
from mage_gym.coverage import cover, state_masks
from mage_gym.data.episode import Episode, Region
from mage_gym.data.gold import GoldEvidence, resolve_gold
from mage_gym.env import MageRAGEnv, Op, encode_action
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.render import RenderConfig, render, whole_text_pages
from mage_gym.testing import make_toy_graph

ACT, OPEN = 1, 2


@pytest.fixture(scope="module")
def graph():
    return make_toy_graph(n_pages=4, elements_per_page=4, dim=16)


def gold(graph, element_items=(), page_items=()) -> GoldEvidence:
    """Element items (tuples of element ids, all on one page) and page-level items (page numbers)."""
    items, item_pages, is_page = [], [], []
    for ids in element_items:
        items.append(tuple(graph.index_of[n] for n in ids)), item_pages.append(graph.page_of(ids[0]))
        is_page.append(False)
    for p in page_items:
        items.append((p,)), item_pages.append(p), is_page.append(True)
    nodes = np.array(sorted({n for it in items for n in it if n >= 0}), dtype=np.int32)
    return GoldEvidence(items=tuple(items), pages=tuple(sorted(set(item_pages))), item_pages=tuple(item_pages),
                        item_is_page=tuple(is_page), level="element" if element_items else "page", gold_nodes=nodes)


def reader_gets(graph, g, states: dict[str, int], mode: str):
    """(coverage, metrics) of the rendered input of a node-state table given as {node id: state}."""
    st = np.zeros(graph.n_nodes, dtype=np.int8)
    for nid, v in states.items():
        st[graph.index_of[nid]] = v
    rendered = render(graph, st, mode)
    opened, images = R.rendered_masks(graph, rendered)
    cov = cover(g, opened, images, graph.node_page)
    # the state-based masks (shaping potential, oracle) agree with the rendered ones
    s_opened, s_images = state_masks(st, graph.n_pages, mode == "visual", whole_text_pages(graph))
    assert (s_opened == opened).all() and (s_images == images).all()
    return cov, R.episode_metrics(graph, g, rendered, cov, opened)


def figures(cov, metrics):
    assert metrics["evidence_page_recall"] == cov.page_recall and metrics["evidence_all_covered"] == cov.all_covered
    return cov.support, cov.page_recall, cov.all_covered


def test_page_level_gold_text_mode_needs_full_text(graph) -> None:
    g = gold(graph, page_items=(2,))
    # an activated page in text mode is sent as its whole text: covered, as its image would be
    assert figures(*reader_gets(graph, g, {"toy:p2": ACT}, "text")) == (1.0, 1.0, True)
    # an activated element's summary on a pruned page does not cover it
    assert figures(*reader_gets(graph, g, {"toy:p2": 3, "toy:p2:e1": ACT}, "text")) == (0.0, 0.0, False)
    # any opened element of a page-level gold page gives full text from it
    assert figures(*reader_gets(graph, g, {"toy:p2": 3, "toy:p2:e1": OPEN}, "text")) == (1.0, 1.0, True)
    # an opened element of another page does not
    assert figures(*reader_gets(graph, g, {"toy:p1": ACT, "toy:p1:e1": OPEN}, "text")) == (0.0, 0.0, False)


def test_text_mode_page_cut_at_the_readers_limit_covers_nothing(graph) -> None:
    g = gold(graph, page_items=(2,))
    st = np.zeros(graph.n_nodes, dtype=np.int8)
    st[2] = ACT
    cut = RenderConfig(max_opened_chars=len(graph.pages[2].text) - 1)
    rendered = render(graph, st, "text", config=cut)
    cov = cover(g, *R.rendered_masks(graph, rendered), graph.node_page)
    assert (cov.support, cov.page_recall) == (0.0, 0.0)
    assert (state_masks(st, graph.n_pages, False, whole_text_pages(graph, cut))[1] == 0).all()
    with pytest.raises(ValueError, match="whole_text"):
        state_masks(st, graph.n_pages, False)


def test_page_level_gold_visual_mode_page_image_covers(graph) -> None:
    g = gold(graph, page_items=(2,))
    assert figures(*reader_gets(graph, g, {"toy:p2": ACT}, "visual")) == (1.0, 1.0, True)
    # a pruned page node with an opened element: no image, but full text of an element of the page
    assert figures(*reader_gets(graph, g, {"toy:p2": 3, "toy:p2:e1": OPEN}, "visual")) == (1.0, 1.0, True)
    # a pruned page node with only an element summary: nothing of the page's content
    assert figures(*reader_gets(graph, g, {"toy:p2": 3, "toy:p2:e1": ACT}, "visual")) == (0.0, 0.0, False)


def test_region_gold_only_page_image_or_opened_gold_element_covers(graph) -> None:
    g = gold(graph, element_items=(("toy:p1:e2",),))
    text = lambda states: figures(*reader_gets(graph, g, states, "text"))  # noqa: E731
    assert text({"toy:p1": 3, "toy:p1:e2": ACT}) == (0.0, 0.0, False)  # the gold element's summary
    assert text({"toy:p1": 3, "toy:p1:e1": OPEN}) == (0.0, 0.0, False)  # an opened non-gold element
    assert text({"toy:p1": 3, "toy:p1:e2": OPEN}) == (1.0, 1.0, True)  # the opened gold element
    assert text({"toy:p1": ACT}) == (1.0, 1.0, True)  # the page's whole text
    assert figures(*reader_gets(graph, g, {"toy:p1": ACT}, "visual")) == (1.0, 1.0, True)  # the page image
    assert figures(*reader_gets(graph, g, {"toy:p1": 3, "toy:p1:e1": OPEN}, "visual")) == (0.0, 0.0, False)


def test_items_page_recall_and_all_covered_on_mixed_gold(graph) -> None:
    """Two regions on page 1 and a page-level page 3: items count for support, pages for recall."""
    g = gold(graph, element_items=(("toy:p1:e1",), ("toy:p1:e2", "toy:p1:e3")), page_items=(3,))
    cov, _ = reader_gets(graph, g, {"toy:p1": 3, "toy:p1:e3": OPEN, "toy:p3": 3}, "text")
    assert cov.items.tolist() == [False, True, False]  # any node of an item covers it
    assert cov.pages == (1, 3) and cov.page_covered.tolist() == [True, False]  # one opened gold element: page 1
    assert (cov.support, cov.page_recall, cov.all_covered) == (pytest.approx(1 / 3), 0.5, False)
    cov, _ = reader_gets(graph, g, {"toy:p1": ACT, "toy:p3": ACT}, "visual")
    assert (cov.support, cov.page_recall, cov.all_covered) == (1.0, 1.0, True)


def test_unanswerable_has_no_evidence_figures(graph) -> None:
    cov, metrics = reader_gets(graph, GoldEvidence(), {"toy:p1": ACT, "toy:p1:e1": OPEN}, "visual")
    assert (cov.support, cov.page_recall, cov.all_covered) == (None, None, None) and not cov.known
    assert metrics["evidence_page_recall"] is None and metrics["evidence_all_covered"] is None
    assert metrics["element_recall"] is None and metrics["gold_known"] is False
    ep = toy_episodes()[0].episode
    assert R.oracle_support(replace(ep, answerable=False), cov) == 1.0  # the reward still needs a number
    assert R.oracle_support(ep, cov) == 0.0  # answerable, gold unknown


def test_out_of_range_gold_is_neither_covered_nor_counted(graph) -> None:
    n = graph.n_pages
    g = GoldEvidence(items=((1,), (n + 3,)), pages=(1, n + 3), item_pages=(1, n + 3), item_is_page=(True, True),
                     level="page", gold_nodes=np.array([1, n + 3], dtype=np.int32))
    cov, _ = reader_gets(graph, g, {"toy:p1": ACT}, "visual")
    assert cov.pages == (1,) and cov.item_counted.tolist() == [True, False]
    assert (cov.support, cov.page_recall, cov.all_covered) == (1.0, 1.0, True)
    only_out = GoldEvidence(items=((n,),), pages=(n,), item_pages=(n,), item_is_page=(True,), level="page",
                            gold_nodes=np.array([n], dtype=np.int32))
    cov, metrics = reader_gets(graph, only_out, {"toy:p1": ACT}, "visual")
    assert (cov.support, cov.page_recall, cov.all_covered) == (None, None, None)
    # resolution drops pages past the document's end before the rule sees them
    ep = Episode(episode_id="oor", benchmark="mmlongbench", doc_id=graph.doc_id, source="<toy>", question="q",
                 answer="a", answer_format="Str", evidence_pages=(1, n + 5),
                 evidence_regions=(Region(page=n + 5, bbox=(0.1, 0.1, 0.5, 0.5)),))
    resolved = resolve_gold(ep, graph)
    assert resolved.pages == (1,) and resolved.item_pages == (1,)


def test_rule_invariants_on_random_states(graph) -> None:
    """all_covered <=> support == 1, which implies page recall 1; text mode never beats visual mode."""
    rng = np.random.default_rng(0)
    whole = whole_text_pages(graph)
    g = gold(graph, element_items=(("toy:p0:e1",), ("toy:p2:e2", "toy:p2:e3")), page_items=(3,))
    for _ in range(300):
        st = rng.choice([0, 1, 2, 3], size=graph.n_nodes, p=[0.5, 0.3, 0.1, 0.1]).astype(np.int8)
        st[: graph.n_pages][st[: graph.n_pages] == 2] = 1  # pages are never opened
        by_mode = {}
        for mode in ("text", "visual"):
            cov = cover(g, *state_masks(st, graph.n_pages, mode == "visual", whole), graph.node_page)
            assert cov.all_covered == (cov.support == 1.0)
            if cov.all_covered:
                assert cov.page_recall == 1.0
            by_mode[mode] = cov
        assert (by_mode["text"].items <= by_mode["visual"].items).all()
        assert by_mode["text"].page_recall <= by_mode["visual"].page_recall


def test_env_end_of_episode_uses_the_rule() -> None:
    """Page-level gold on an activated page: covered by its image or its whole text, not by a cut text."""
    qf = hash_query_fn(16)
    cut = {"max_opened_chars": 5}  # shorter than every toy page's text
    for mode, config, expect in (("text", None, 1.0), ("visual", None, 1.0), ("text", cut, 0.0)):
        env = MageRAGEnv(episodes=toy_episodes(), query_fn=qf, K=48, budget={"k": 8}, render_mode=mode,
                         render_config=config)
        env.reset(options={"episode_id": "page"})  # k = every page: the gold page is active, nothing opened
        _, _, done, _, info = env.step(encode_action(Op.STOP, 0, env.K))
        assert done and info["evidence_page_recall"] == expect
        assert info["reward_components"]["support"] == expect and info["evidence_all_covered"] is bool(expect)


def test_run_summaries_report_unanswerable_apart() -> None:
    """Evidence means and their n are over questions with gold; the breakdown splits answerable / unanswerable."""
    from mage_gym.bench.metrics import breakdown, metric_counts, summarise
    from mage_gym.bench.play import run_episode
    from policies.topk_page import TopKPagePolicy

    pairs = toy_episodes()
    env = MageRAGEnv(episodes=pairs, query_fn=hash_query_fn(16), K=48, budget={"k": 8}, render_mode="visual")
    results = [run_episode(env, TopKPagePolicy(), episode_id=p.episode.episode_id) for p in pairs]
    by_id = {p.episode.episode_id: p.episode for p in pairs}
    n_answerable = sum(ep.answerable for ep in by_id.values())
    assert 0 < n_answerable < len(pairs)
    counts = metric_counts(results, answers=False)
    assert counts["evidence_page_recall"] == counts["evidence_all_covered"] == n_answerable
    assert counts["support"] == counts["reward"] == len(pairs)
    summary = summarise(results, by_id, answers=False)
    assert summary["evidence_page_recall"] == 1.0  # every page is rendered as an image: all gold is covered
    groups = breakdown(results, by_id)
    assert groups["unanswerable"]["episodes"] == len(pairs) - n_answerable
    assert groups["unanswerable"]["evidence_page_recall"] is None
    assert groups["answerable"]["episodes"] == n_answerable and groups["answerable"]["evidence_page_recall"] == 1.0


def test_share_is_the_float_mean_bit_for_bit() -> None:
    """``share`` replaces ``float(mask.mean())`` in the metrics: same value and the same (Python float) type."""
    from mage_gym.coverage import share

    rng = np.random.default_rng(3)
    for n in (1, 3, 7, 10, 49, 333):
        for _ in range(20):
            mask = rng.random(n) < rng.random()
            assert type(share(mask)) is float
            assert share(mask) == float(mask.mean()) == float(np.mean(mask.tolist()))
            assert share(mask.tolist()) == share(mask)


class _TextOnlyOracle:
    """The oracle reader's support, but a reader that takes no images (as a text-only LLM)."""

    name = "text-only"
    answers = False
    uses_images = False

    def read(self, rendered):
        from mage_gym.readers.base import ReaderOutput

        return ReaderOutput(answer=None)


def test_a_reader_that_takes_no_images_is_never_credited_with_a_page_image() -> None:
    """A visual env with a text-only reader plays in text mode: what the reader got is what counts."""
    import warnings

    qf = hash_query_fn(16)
    cut = {"max_opened_chars": 5}  # page texts cut: only an image could cover the gold page
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = MageRAGEnv(episodes=toy_episodes(), query_fn=qf, K=48, budget={"k": 8}, render_mode="visual",
                         reader=_TextOnlyOracle(), render_config=cut)
    assert env.render_mode == "text" and any("takes no images" in str(w.message) for w in caught)
    env.reset(options={"episode_id": "page"})
    _, _, done, _, info = env.step(encode_action(Op.STOP, 0, env.K))
    assert done and info["metrics"]["images_rendered"] == 0
    assert info["evidence_page_recall"] == 0.0  # the gold page's image would have covered it; it was not sent
