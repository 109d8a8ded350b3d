"""An observed-only retrieval channel (page_dense under hybrid_elements) and what checkpoints record about it.

The channel fills the last relevance column of the observation; it must never
change the fused ranking (entry pages, topk_page, every policy reading
``rel_fused``), and a checkpoint trained before the column was filled must be
refused by name.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from mage_gym.env.relevance import (EMPTY_COLUMN, N_RELEVANCE, default_relevance_columns, percentile,
                                    relevance_columns, score_question)
from mage_gym.retrieval import Query, get_retriever
from mage_gym.testing import HashingEncoder, graph_from_texts

PAGES = [["quarterly revenue grew in the north region", "staff headcount table"],
         ["the board approved a dividend", "risk factors include currency"],
         ["revenue by segment: retail and wholesale", "footnote on leases"],
         ["glossary of terms", "contact the investor relations office"]]


def graph():
    return graph_from_texts(PAGES, dim=32, meta={"parser": "test", "embed_model": "hashing-bow-32"})


def query(text: str) -> Query:
    return Query(text, vector=HashingEncoder(32).encode([text])[0])


def test_observed_channel_fills_the_last_column_without_touching_the_fusion(tmp_path) -> None:
    g, q = graph(), query("dividend approved by the board")
    cfg = {"page_dense": {"cache_dir": str(tmp_path)}}
    with_obs = get_retriever("hybrid_elements", **cfg)
    without = get_retriever("hybrid_elements", observed=[])
    fused, comps = with_obs.score_with_components(g, q)
    base, base_comps = without.score_with_components(g, q)
    assert list(comps) == ["bm25", "dense", "page_dense"] and list(base_comps) == ["bm25", "dense"]
    np.testing.assert_array_equal(fused.pages, base.pages)
    np.testing.assert_array_equal(fused.elements, base.elements)
    np.testing.assert_array_equal(with_obs.score(g, q).pages, base.pages)
    rel, rel0 = score_question(g, with_obs, q), score_question(g, without, q)
    np.testing.assert_array_equal(rel.page_order, rel0.page_order)  # entry pages: identical
    np.testing.assert_array_equal(rel.order, rel0.order)  # the fused frontier order too
    np.testing.assert_array_equal(rel.features[:, :3], rel0.features[:, :3])
    assert not rel0.features[:, 3].any()
    np.testing.assert_array_equal(rel.features[: g.n_pages, 3], percentile(comps["page_dense"].pages))
    assert int(np.argmax(comps["page_dense"].pages)) == 1  # the channel itself finds the dividend page
    assert relevance_columns(with_obs) == ("fused", "bm25", "dense", "page_dense")
    assert relevance_columns(without) == ("fused", "bm25", "dense", EMPTY_COLUMN)


def test_observed_channel_is_skipped_for_queries_from_another_encoder(tmp_path) -> None:
    """Toy query vectors (16-d) are not in the chunks' space (32-d here): the column stays 0, nothing raises."""
    g = graph()
    r = get_retriever("hybrid_elements", page_dense={"cache_dir": str(tmp_path)})
    q = Query("dividend", vector=np.ones(16, dtype=np.float32) / 4.0)
    g16 = graph_from_texts(PAGES, dim=16, meta={"parser": "test", "embed_model": "hashing-bow-32"})
    _, comps = r.score_with_components(g16, q)
    assert "page_dense" not in comps
    assert not score_question(g16, r, q).features[:, N_RELEVANCE - 1].any()
    from mage_gym.retrieval.bm25 import BM25Retriever
    from mage_gym.retrieval.hybrid import HybridRetriever

    with pytest.raises(ValueError, match="both fused and observed"):
        HybridRetriever(components={"bm25": BM25Retriever()}, observed={"bm25": BM25Retriever()})
    fused_too = get_retriever("hybrid_elements", components=["bm25", "dense", "page_dense"])  # fused wins
    assert "page_dense" in fused_too.components and not fused_too.observed
    assert relevance_columns(r) == relevance_columns(fused_too)
    del g


def test_default_hybrid_columns_match_hybrid_pages() -> None:
    """Whichever hybrid is the default, the last column means the same channel."""
    assert default_relevance_columns() == relevance_columns(get_retriever("hybrid_pages"))


def test_checkpoints_record_relevance_columns_and_old_sidecars_fail_by_name(tmp_path) -> None:
    import gymnasium as gym

    import mage_gym.env  # noqa: F401
    from mage_gym.data.episode import Episode
    from mage_gym.env import EnvEpisode
    from mage_gym.testing import hash_query_fn
    from mage_gym.testing import make_toy_graph
    from policies import get_policy
    from policies.ppo import CheckpointMismatch, build_model, save_checkpoint
    from mage_gym.bench.play import run_episode

    g = make_toy_graph(n_pages=4, elements_per_page=2, dim=16, seed=1)
    pairs = [EnvEpisode(Episode(episode_id="q0", benchmark="synth", doc_id="toy", source="<toy>",
                                question=g.elements[0].text, answer="x", answer_format="Str", evidence_pages=(0,),
                                gold_node_ids=(g.elements[0].node_id,)), g)]
    env = gym.make("MageRAG-v0", episodes=pairs, K=8, budget={"k": 1, "m": 1, "M": 2, "T": 2, "B": 2},
                   retriever="bm25", query_fn=hash_query_fn(16), render_mode="text")
    path = save_checkpoint(build_model(env, hparams={"n_steps": 16, "batch_size": 8, "n_epochs": 1}),
                           tmp_path / "ck", "maskable_ppo", 8, extra={"render_mode": "text"})
    meta = json.loads(path.with_suffix(".json").read_text())
    bm25_cols = ["fused", "bm25", EMPTY_COLUMN, EMPTY_COLUMN]  # what this env (retriever=bm25) shows
    assert meta["relevance_columns"] == bm25_cols  # read from the model's env

    def saved(name: str, **changes) -> str:
        side = {**meta, **changes}
        for k in [k for k, v in changes.items() if v is None]:
            side.pop(k)
        out = tmp_path / f"{name}.zip"
        out.write_bytes(path.read_bytes())
        out.with_suffix(".json").write_text(json.dumps(side))
        return str(out)

    assert run_episode(env, get_policy("ppo", checkpoint=str(path)), "q0", seed=0).invalid == 0
    other = saved("other", relevance_columns=list(default_relevance_columns()))
    with pytest.raises(CheckpointMismatch, match=r"relevance_columns: checkpoint .*'page_dense'\] vs now .*'none'"):
        run_episode(env, get_policy("ppo", checkpoint=other), "q0", seed=0)  # refused at reset, by name
    legacy = saved("legacy", relevance_columns=None, format="mage-gym-policy-v2")
    default_env = gym.make("MageRAG-v0", episodes=pairs, K=8, budget={"k": 1, "m": 1, "M": 2, "T": 2, "B": 2},
                           query_fn=hash_query_fn(16), render_mode="text")  # the default hybrid: page_dense last
    with pytest.raises(CheckpointMismatch, match=r"relevance_columns: not recorded .*'none'\].*now .*'page_dense'"):
        run_episode(default_env, get_policy("ppo", checkpoint=legacy), "q0", seed=0)
    res = run_episode(default_env, get_policy("ppo", checkpoint=legacy, allow_mismatch=["relevance_columns"]),
                      "q0", seed=0)  # the explicit compatibility path
    assert res.invalid == 0
