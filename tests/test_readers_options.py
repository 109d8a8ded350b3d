"""Backend options are settled once, at construction: translated where they mean the same, else rejected."""
from __future__ import annotations

import logging

import pytest

from mage_gym.readers import ReaderConfigError, get_reader
from mage_gym.readers.hf import HFReader
from mage_gym.readers.openai_compat import OpenAIReader
from mage_gym.readers.options import accepted_options, normalise_options
from policies import get_policy
from policies.llm_evaluator import LLMEvaluatorPolicy, ReaderBackend

URL = "http://127.0.0.1:9/v1"  # nothing listens there; construction never connects


def test_max_new_tokens_becomes_max_tokens_for_openai_and_back_for_hf() -> None:
    r = get_reader("openai", base_url=URL, model="m", max_new_tokens=77)
    assert isinstance(r, OpenAIReader) and r.max_tokens == 77
    h = get_reader("hf", model="smollm2", max_tokens=33)
    assert isinstance(h, HFReader) and h.max_new_tokens == 33


def test_both_names_given_the_backends_own_name_wins_with_a_warning(caplog) -> None:
    # conf/policy/llm_evaluator.yaml's default backend carries max_new_tokens: 96; conf/paper.yaml adds
    # reader: openai and max_tokens: 512 on top: the merged mapping has both names.
    with caplog.at_level(logging.WARNING, logger="mage_gym.readers.options"):
        r = get_reader("openai", base_url=URL, model="m", max_new_tokens=96, max_tokens=512)
    assert r.max_tokens == 512
    assert "max_new_tokens=96" in caplog.text and "max_tokens=512" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mage_gym.readers.options"):
        assert get_reader("openai", base_url=URL, max_new_tokens=64, max_tokens=64).max_tokens == 64
    assert caplog.text == ""  # same value under both names: nothing dropped, nothing to say


def test_null_means_the_backends_default() -> None:
    r = get_reader("openai", base_url=URL, max_new_tokens=None, max_tokens=None, timeout=None)
    assert r.max_tokens == 256 and r.timeout == 120.0


def test_options_of_another_backend_fail_with_one_error_naming_backend_keys_and_accepted() -> None:
    with pytest.raises(ReaderConfigError) as info:
        get_reader("openai", base_url=URL, device="cpu", dtype="bfloat16", colour="red")
    msg = str(info.value)
    assert msg.startswith("openai reader backend (OpenAIReader):")
    assert "'device' is not an option of this backend (an option of the hf backend)" in msg
    assert "'dtype'" in msg and "'colour' is not an option of this backend. Accepted" in msg
    assert "Accepted options: " in msg and "max_tokens" in msg and "base_url" in msg
    with pytest.raises(ReaderConfigError, match=r"hf reader backend \(HFReader\): 'base_url' .* openai backend"):
        get_reader("hf", model="smollm2", base_url=URL)


def test_settings_a_backend_cannot_change_are_accepted_only_at_its_fixed_value() -> None:
    assert get_reader("hf", model="smollm2", temperature=0.0, prefill=True).max_new_tokens == 128
    with pytest.raises(ReaderConfigError, match="temperature=0.7 cannot be set .*greedily"):
        get_reader("hf", model="smollm2", temperature=0.7)
    with pytest.raises(ReaderConfigError, match="prefill=False cannot be set"):
        get_reader("smollm2", prefill=False)


def test_bad_values_and_unknown_backends_are_config_errors() -> None:
    with pytest.raises(ReaderConfigError, match="bad option value"):
        get_reader("openai", base_url=URL, max_tokens="many")
    with pytest.raises(ReaderConfigError, match="unknown reader 'gpt'"):
        get_reader("gpt")
    with pytest.raises(ReaderConfigError, match="'model' is not an option"):
        get_reader("oracle", model="x")
    with pytest.raises(ReaderConfigError, match="vision=true needs a vision-language model"):
        get_reader("hf", model="smollm2", vision=True)
    assert get_reader("hf", model="smollm2", vision=False).uses_images is False


def test_accepted_options_come_from_the_constructor() -> None:
    assert {"max_tokens", "base_url", "vision", "prefill"} <= set(accepted_options(OpenAIReader))
    assert {"max_new_tokens", "device", "vision"} <= set(accepted_options(HFReader))
    assert normalise_options("vllm", {"max_new_tokens": 5}) == {"max_tokens": 5}


def test_the_evaluator_builds_its_backend_in_the_constructor() -> None:
    # The exact mapping the paper config used to produce (and that failed on every round, silently).
    merged = {"reader": "openai", "model": "smollm2", "max_new_tokens": 96, "base_url": URL, "max_tokens": 512,
              "vision": False}
    policy = get_policy("llm_evaluator", backend=merged, cache=False)
    assert isinstance(policy.backend, ReaderBackend) and policy.backend.reader.max_tokens == 512
    assert policy.backend.reader.uses_images is False
    with pytest.raises(ReaderConfigError, match="openai reader backend .*'device'"):
        LLMEvaluatorPolicy(backend={"reader": "openai", "base_url": URL, "device": "cpu"}, cache=False)
    with pytest.raises(ReaderConfigError, match="oracle reader has no language model"):
        LLMEvaluatorPolicy(backend={"reader": "oracle"})
    assert set(policy.stats) >= {"evaluator_calls", "evaluator_backend_errors", "evaluator_strict",
                                 "evaluator_lenient", "evaluator_fallback"}
