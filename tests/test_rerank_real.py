"""The shipped cross-encoder and hybrid_rerank on real MMLongBench pages; topk_elements on a real PDF."""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.retrieval.cross_encoder import ADAPTER_FILE, CHECKPOINT_DIR, META_FILE

SHIPPED = (CHECKPOINT_DIR / ADAPTER_FILE).is_file() and (CHECKPOINT_DIR / META_FILE).is_file()


def _episodes(data_root, limit: int = 2):
    from mage_gym.data.registry import load_dataset

    eps = [e for e in load_dataset("mmlongbench", root=data_root / "mmlongbench-dev", limit=12, seed=3)
           if e.answerable]
    if not eps:
        pytest.skip("no answerable MMLongBench question in the sample")
    return eps[:limit]


def test_the_shipped_adapter_is_small_and_names_its_training_command() -> None:
    if not SHIPPED:
        pytest.skip("no shipped cross-encoder (train one: experiments/train_reranker.py --save "
                    "mage_gym/retrieval/cross_encoder)")
    from mage_gym.retrieval.cross_encoder import read_meta

    meta = read_meta()
    assert (CHECKPOINT_DIR / ADAPTER_FILE).stat().st_size < 2_000_000, "the repository must stay lean"
    assert "experiments/train_reranker.py" in meta.extra["command"] and meta.extra.get("val")
    assert 1 <= meta.layers <= 6 and meta.targets


@pytest.mark.real_data
@pytest.mark.slow
def test_hybrid_rerank_reorders_real_entry_pages_with_the_shipped_adapter(data_root) -> None:
    if not SHIPPED:
        pytest.skip("no shipped cross-encoder")
    from mage_gym.env import MageRAGEnv
    from mage_gym.retrieval import get_retriever

    episodes = _episodes(data_root, 1)
    rerank = get_retriever("hybrid_rerank", depth=6, cache=False)
    env = MageRAGEnv(episodes=episodes, parser="fast", graph_kwargs={"max_pages": 10}, K=32, retriever=rerank,
                     budget={"k": 3})
    env.reset(seed=0, options={"episode_id": episodes[0].episode_id})
    graph, rel = env.get_wrapper_attr("graph"), env.get_wrapper_attr("rel")
    first = rerank.first_stage.score(graph, rel.query).pages.astype(np.float64)
    first_top = set(np.lexsort((np.arange(graph.n_pages), -first))[:6].tolist())
    entry = set(np.flatnonzero(env.get_wrapper_attr("state").node_state[: graph.n_pages] == 1).tolist())
    assert len(entry) == 3 and entry <= first_top, "entry pages come from the reranked top pages"
    assert rel.component_names[-1] == "cross_encoder" and rerank.last_pairs > 0
    ce = rel.features[: graph.n_pages, 3]
    assert np.isfinite(ce).all() and (ce[sorted(first_top)] > 0).any()


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
