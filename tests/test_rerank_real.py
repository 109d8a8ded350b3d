"""The shipped cross-encoder and hybrid_rerank on real MMLongBench pages; topk_elements on a real PDF."""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.retrieval.cross_encoder import ADAPTER_FILE, CHECKPOINT_DIR, META_FILE


def test_the_adapter_ships_with_the_repository() -> None:
    """The default reranker's weights are committed (mage_gym/retrieval/cross_encoder): never a reason to skip."""
    assert (CHECKPOINT_DIR / ADAPTER_FILE).is_file() and (CHECKPOINT_DIR / META_FILE).is_file()


def _episodes(data_root, limit: int = 2):
    from mage_gym.data.registry import load_dataset

    eps = [e for e in load_dataset("mmlongbench", root=data_root / "mmlongbench-dev", limit=12, seed=3)
           if e.answerable]
    assert len(eps) >= limit, "the dev sample holds answerable MMLongBench questions"
    return eps[:limit]


def test_the_shipped_adapter_is_small_and_names_its_training_command() -> None:
    from mage_gym.retrieval.cross_encoder import read_meta

    meta = read_meta()
    assert (CHECKPOINT_DIR / ADAPTER_FILE).stat().st_size < 2_000_000, "the repository must stay lean"
    assert "experiments/train_reranker.py" in meta.extra["command"] and meta.extra.get("val")
    assert 1 <= meta.layers <= 6 and meta.targets


@pytest.mark.real_data
@pytest.mark.slow
def test_hybrid_rerank_reorders_real_entry_pages_with_the_shipped_adapter(data_root) -> None:
    """The entry pages are the top of the adapter's RRF order (computed here by hand), which moves real pages."""
    from mage_gym.env import MageRAGEnv
    from mage_gym.retrieval import get_retriever
    from mage_gym.testing import rrf_order_by_hand

    episodes = _episodes(data_root, 2)
    rerank = get_retriever("hybrid_rerank", depth=6, cache=False)
    assert rerank.combine == "rrf"  # the shipped rule (the adapter's val choice)
    env = MageRAGEnv(episodes=episodes, parser="fast", graph_kwargs={"max_pages": 10}, K=32, retriever=rerank,
                     budget={"k": 3})
    moved = 0
    for ep in episodes:
        env.reset(seed=0, options={"episode_id": ep.episode_id})
        graph, rel = env.get_wrapper_attr("graph"), env.get_wrapper_attr("rel")
        first = rerank.first_stage.score(graph, rel.query).pages.astype(np.float64)
        top = np.lexsort((np.arange(graph.n_pages), -first))[:6].tolist()
        ce = rerank.page_scores(graph, rel.query, top).tolist()
        fused = [top[i] for i in rrf_order_by_hand(ce, rerank.rrf_k)]
        entry = set(np.flatnonzero(env.get_wrapper_attr("state").node_state[: graph.n_pages] == 1).tolist())
        assert entry == set(fused[:3]), (ep.episode_id, top, ce)
        moved += entry != set(top[:3])
        assert rel.component_names[-1] == "cross_encoder" and rerank.last_pairs > 0
        ce_col = rel.features[: graph.n_pages, 3]
        assert np.isfinite(ce_col).all() and (ce_col[top] > 0).all()
    assert moved >= 1, "on real questions the adapter moves a page into the entry pages"


@pytest.mark.real_data
@pytest.mark.slow
def test_topk_elements_sends_element_crops_never_page_images_of_a_real_pdf(data_root) -> None:
    from mage_gym.env import MageRAGEnv
    from policies import get_policy
    from mage_gym.bench.play import run_episode

    episodes = _episodes(data_root, 1)
    env = MageRAGEnv(episodes=episodes, parser="fast", graph_kwargs={"max_pages": 10}, K=32,
                     render_mode="elements", budget={"k": 3})
    r = run_episode(env, get_policy("topk_elements", n_open=6), episodes[0].episode_id, seed=0)
    rendered = env.get_wrapper_attr("last_render")
    assert r.invalid == 0 and r.metrics["opens"] >= 1
    assert not rendered.page_image_ids and all(im.kind == "crop" for im in rendered.images)
    for im in rendered.images[:1]:
        assert im.load().size[0] > 0, "crops come from the real PDF"
