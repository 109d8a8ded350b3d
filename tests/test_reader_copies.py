"""Envs built with reader objects survive ``gym.make``, deep copies, pickles and subprocess vector envs.

``gym.make`` deep-copies an env's keywords into ``env.spec``; when that copy
failed (a response cache holds a sqlite connection and locks), Gymnasium only
warned, left the spec unset and then failed ``assert env.spec is not None``:
no benchmark with an answering reader could start. Every reader backend is
checked here, loaded and not, with and without the response cache.
"""
from __future__ import annotations

import copy
import pickle
import warnings
from pathlib import Path

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest

import mage_gym  # noqa: F401 - registers MageRAG-v0
from mage_gym.env import Op, encode_action
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.readers import get_reader
from mage_gym.readers.cache import CachedReader
from tiny_models import build_tiny_causal

K = 16


@pytest.fixture(scope="module")
def tiny_causal(tmp_path_factory) -> Path:
    return build_tiny_causal(tmp_path_factory.mktemp("tiny_causal"))


def _reader(kind: str, tiny: Path, cache_dir: Path):
    cache = str(cache_dir / f"{kind}.sqlite")
    if kind == "oracle":
        return get_reader("oracle")
    if kind in ("openai", "openai+cache"):  # built only: no request is sent in these tests
        return get_reader("openai", base_url="http://127.0.0.1:9/v1", model="m", vision=False,
                          cache=cache if kind.endswith("cache") else None)
    if kind in ("hf", "hf+cache", "hf-loaded+cache"):
        reader = get_reader("hf", model=str(tiny), max_new_tokens=3, cache=cache if "cache" in kind else None)
        if "loaded" in kind:
            (reader.reader if isinstance(reader, CachedReader) else reader).load()
        return reader
    if kind == "smollm2+cache":  # the README's embedded reader (built, not loaded: loading takes ~16 s)
        return get_reader("smollm2", cache=cache)
    raise ValueError(kind)


BACKENDS = ["oracle", "openai", "openai+cache", "hf", "hf+cache", "hf-loaded+cache", "smollm2+cache"]


def _make(reader):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a failed spec copy is only a Gymnasium warning
        warnings.filterwarnings("ignore", message=".*takes no images.*")
        return gym.make("MageRAG-v0", episodes=toy_episodes(), reader=reader, query_fn=hash_query_fn(16), K=K)


def _config(reader) -> tuple:
    inner = reader.reader if isinstance(reader, CachedReader) else reader
    ident = inner.cache_identity() if hasattr(inner, "cache_identity") else {}
    return type(reader).__name__, type(inner).__name__, tuple(sorted((k, str(v)) for k, v in ident.items()))


@pytest.mark.parametrize("kind", BACKENDS)
def test_spec_copies_and_rebuilds_the_same_env(kind, tiny_causal, tmp_path) -> None:
    reader = _reader(kind, tiny_causal, tmp_path)
    env = _make(reader)
    assert env.spec is not None and env.spec.kwargs["reader"] is not None
    spec = copy.deepcopy(env.spec)
    again = gym.make(spec)
    assert _config(again.unwrapped.reader) == _config(reader)
    assert again.unwrapped.render_mode == env.unwrapped.render_mode
    assert _config(pickle.loads(pickle.dumps(reader))) == _config(reader)
    clone = cloudpickle.loads(cloudpickle.dumps(env))  # what Ray and subprocess vector envs send
    assert _config(clone.unwrapped.reader) == _config(reader)


def _play(env, episode_id: str) -> tuple[float, str | None]:
    env.reset(options={"episode_id": episode_id})
    _, reward, terminated, truncated, info = env.step(encode_action(Op.STOP, 0, K))
    assert terminated or truncated
    return float(reward), info.get("answer")


def test_a_rebuilt_env_reads_with_the_same_model_and_cache(tiny_causal, tmp_path) -> None:
    """gym.make(env.spec) with a loaded, cached HF reader: same answers; the copy reuses the process's model."""
    reader = _reader("hf-loaded+cache", tiny_causal, tmp_path)
    env = _make(reader)
    first = _play(env, "page")
    assert reader.misses == 1
    again = gym.make(env.spec)
    copy_reader = again.unwrapped.reader
    assert copy_reader is not reader and copy_reader.cache.path == reader.cache.path
    assert _play(again, "page") == first
    assert copy_reader.hits == 1  # answered from the same sqlite file, reopened by the copy
    assert copy_reader.reader.load().model is reader.reader.load().model  # one load per process


def test_subprocess_vector_env_plays_with_a_cached_answering_reader(tiny_causal, tmp_path) -> None:
    """Each worker process gets a pickled env (spawn: nothing inherited) and reads with its own model load."""
    reader = _reader("hf+cache", tiny_causal, tmp_path)
    env = _make(reader)
    expected = _play(env, "page")[0]
    spec = env.spec
    venv = gym.vector.AsyncVectorEnv([lambda: gym.make(spec)] * 2, context="spawn", shared_memory=False,
                                     autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    try:
        venv.reset(seed=0, options={"episode_id": "page"})
        _, rewards, terminated, truncated, _ = venv.step(np.full(2, encode_action(Op.STOP, 0, K)))
        assert (terminated | truncated).all()
        assert np.allclose(rewards, expected)
    finally:
        venv.close()
