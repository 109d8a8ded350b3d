"""The corpora the training-speed scripts run on: train.py's config, the synthetic ``tiny`` corpus, the real mix.

Why a module: ``experiments/perf/perf_train.py`` and ``experiments/perf/perf_update.py``
both build PPO's training envs on these episodes, and scripts never import
scripts.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

CONF = Path(__file__).resolve().parents[2] / "conf"


def compose(overrides: Sequence[str]) -> dict[str, Any]:
    """The train.py config with ``overrides`` (plain containers)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from mage_gym.bench.config import plain

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return plain(hydra_compose(config_name="train", overrides=list(overrides)))


def synth_corpus(root: Path, n_docs: int, seed: int) -> Path:
    """The generator's ``tiny`` corpus at ``root`` (generated once)."""
    from mage_gym.data.synth import generate_corpus, preset, read_manifest

    default_docs, scfg = preset("tiny")
    try:
        m = read_manifest(root)
        if m.get("config") == scfg.to_dict() and m.get("n_docs") == n_docs and m.get("seed") == seed:
            return root
    except Exception:  # noqa: BLE001 - absent or unreadable: generate
        pass
    generate_corpus(root, n_docs or default_docs, seed=seed, cfg=scfg, workers=2)
    return root


def cached_only(episodes: Sequence[Any], parser: str, graph_kwargs: Mapping[str, Any] | None) -> tuple[list[Any], int]:
    """The episodes whose document graph is already in the cache (nothing is built), and how many were left out."""
    from mage_gym.graph import GraphNotBuiltError
    from mage_gym.graph.build import load_graph

    kw = dict(graph_kwargs or {})
    ok: dict[str, bool] = {}
    for src in sorted({e.source for e in episodes}):
        try:
            load_graph(src, parser=parser, cache_dir=kw.get("cache_dir"), max_pages=kw.get("max_pages"),
                       parser_cfg=kw.get("parser_cfg"), edge_cfg=kw.get("edge_cfg"), embed_cfg=kw.get("embed_cfg"))
            ok[src] = True
        except (GraphNotBuiltError, FileNotFoundError, OSError):
            ok[src] = False
    kept = [e for e in episodes if ok.get(e.source)]
    return kept, len(episodes) - len(kept)


def corpus_episodes(name: str, cfg: Mapping[str, Any], synth_root: Path, synth_docs: int = 7, synth_seed: int = 0,
                    val_episodes: int = 16) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """(train episodes, val episodes, description) of ``synth`` (the ``tiny`` corpus at ``synth_root``, generated
    when missing) or ``real_mix`` (the train splits of MMLongBench and FinanceBench whose graphs are cached;
    ``val_episodes`` of each val split)."""
    from mage_gym.bench.episodes import load_episodes, prepare_graphs

    parser = cfg["env"].get("parser", "fast")
    gk = cfg["env"].get("graph_kwargs")
    if name == "synth":
        root = synth_corpus(Path(synth_root), synth_docs, synth_seed)
        ds = {"name": "synth", "root": str(root), "seed": 0}
        train = prepare_graphs(load_episodes(ds, split="train", limit=None, usable_only=True), parser, 2, gk)
        val = prepare_graphs(load_episodes(ds, split="val", limit=val_episodes), parser, 2, gk)
        return train, val, {"root": str(root), "parser": parser}
    train, val, left_out = [], [], 0
    for ds_name in ("mmlongbench", "financebench"):
        ds = {"name": ds_name, "root": None, "seed": 0}
        kept, missing = cached_only(load_episodes(ds, split="train", limit=None, usable_only=True), parser, gk)
        train += kept
        left_out += missing
        kept, _ = cached_only(load_episodes(ds, split="val", limit=val_episodes), parser, gk)
        val += kept
    return train, val, {"datasets": ["mmlongbench", "financebench"], "parser": parser,
                        "train_episodes_without_cached_graph": left_out}


def training_setup(cfg: Mapping[str, Any], train_eps: Sequence[Any]) -> tuple[dict[str, Any], int, int]:
    """(train.py's env config with shaping per ``train.shaping``, documents, questions) of ``train_eps``: what
    :func:`~policies.training.recipe.training_env_factory` is sized and configured with."""
    from mage_gym.bench.episodes import episode_of
    from policies.training.recipe import shaping_kwargs

    env_cfg = cfg["env"]
    train_cfg = {**cfg, "env": {**env_cfg, **shaping_kwargs(cfg["train"]["shaping"])}}
    n_docs = len({episode_of(e).source for e in train_eps})
    n_questions = sum(len(getattr(episode_of(e), "turns", None) or (1,)) for e in train_eps)
    return train_cfg, n_docs, n_questions
