"""One source per setting: every YAML default in ``conf/`` equals the default of the class it configures (issue 32).

Hydra composes every option of every config group on its own (``+<group>=<option>``,
the way the entry points compose them), and each value is compared with the
default of the class or function that reads it: the env's
:class:`~mage_gym.env.config.EnvConfig` (and its Budget, RewardConfig,
RenderConfig), the retriever presets and classes, the reader backends, the
policies, the learner's network and DAgger. A YAML value that differs from
its class default fails here, so the two cannot drift apart; change the class
default (and say why in its docstring) or the YAML, never one alone.

Some options are named variants, not defaults (``budget=tight``,
``env=paper``, ``reader=smollm2``): their keys must be settings, their
values are the point of the variant. A few values are choices the class
cannot make (which model a server serves, whether the experiments cache
replies): :data:`CHOICES` lists each with its reason.
"""
from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import pytest

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
MISSING = "???"  # Hydra's "must be given": the file sets no default

#: (group/option or group, key) -> why the YAML value is a choice the class default cannot be
CHOICES: dict[tuple[str, str], str] = {
    ("reader/openai", "model"): "the paper's model; OpenAIReader's default 'default' means whatever the server "
                                "serves (llama.cpp), which a vLLM server would refuse",
    ("reader", "cache"): "the experiments keep a sqlite cache of replies; get_reader builds an uncached reader "
                         "unless asked (no file written behind a library user's back)",
}
#: options whose values are the point: only their keys are checked (group -> option -> the defaults it varies)
VARIANTS: dict[str, set[str]] = {
    "budget": {"tight", "generous", "paper_mmlongbench"},
    "env": {"paper"},
    "reader": {"smollm2"},
}
#: groups with no class default to compare against (their options are read as given)
NOT_COMPARED: dict[str, str] = {
    "executor": "options of the Ray executor, read by mage_gym.bench.distributed as given",
    "logger": "W&B settings, passed to wandb.init",
}


def compose_option(group: str, option: str) -> dict[str, Any]:
    """``conf/<group>/<option>.yaml`` composed alone, as plain containers (``???`` kept as a string)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(overrides=[f"+{group}={option}"])
    return OmegaConf.to_container(cfg, resolve=False)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def signature_defaults(*callables: Any) -> dict[str, Any]:
    """Keyword defaults of the callables (later ones win), following ``**kw`` up a class's bases."""
    out: dict[str, Any] = {}
    for fn in callables:
        chain = [c.__init__ for c in reversed(fn.__mro__) if "__init__" in vars(c)] if inspect.isclass(fn) else [fn]
        for f in chain:
            for name, p in inspect.signature(f).parameters.items():
                if p.default is not inspect.Parameter.empty:
                    out[name] = p.default
    return out


def plain_value(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return plain_value(value.to_dict())
    if isinstance(value, Mapping):
        return {str(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    return value


def disagreements(where: str, node: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[str]:
    """``where.key: yaml X, class Y`` for every YAML key that is not a setting or differs from its default."""
    out = []
    for key, value in node.items():
        if key == "name" or value == MISSING:
            continue
        group = where.split("/")[0]
        if (where, key) in CHOICES or (group, key) in CHOICES:
            continue
        if key not in defaults:
            out.append(f"{where}.{key}: not a setting of the class (settings: {sorted(defaults)})")
            continue
        default = plain_value(defaults[key])
        if isinstance(value, Mapping) and isinstance(default, Mapping):
            out += disagreements(f"{where}.{key}", value, default)
        elif plain_value(value) != default:
            out.append(f"{where}.{key}: yaml {value!r}, class {default!r}")
    return out


def test_every_config_group_option_is_compared_or_named() -> None:
    """A new group or option must come with a comparison here (or a reason it has none)."""
    compared = {"env", "budget", "reader", "retriever", "policy", "training", "dataset"}
    groups = {p.name for p in CONF.iterdir() if p.is_dir()}
    assert groups == compared | set(NOT_COMPARED), groups ^ (compared | set(NOT_COMPARED))
    for group in groups:
        for option in options(group):
            compose_option(group, option)  # every option composes on its own


# --- the env, its budget and reward ----------------------------------------------------------------------------

def test_env_default_is_the_env_config_defaults() -> None:
    from mage_gym.env import EnvConfig

    node = compose_option("env", "default")["env"]
    assert "budget" not in node, "the budget has one place: conf/budget/default.yaml (env.budget)"
    assert not disagreements("env/default", node, EnvConfig().to_dict())
    assert EnvConfig.coerce(node) == EnvConfig()
    assert node["reward"]["lambda_cost"] == EnvConfig().reward.lambda_cost == 1.0  # the calibrated value


def test_env_variants_only_set_settings() -> None:
    from mage_gym.env import EnvConfig

    for option in VARIANTS["env"]:
        node = compose_option("env", option)["env"]
        assert set(node) <= set(EnvConfig.settings()), option
    paper = EnvConfig.coerce(compose_option("env", "paper")["env"])
    assert paper == replace(EnvConfig(), final_open_pass=True)  # the reference's final open pass, nothing else


def test_budget_default_is_the_budget_class_default_and_variants_are_budgets() -> None:
    from mage_gym.env import Budget

    for option in options("budget"):
        node = compose_option("budget", option)["env"]["budget"]
        assert set(node) == {"k", "m", "M", "T", "B", "tokens"}, option  # a variant states the whole budget
        budget = Budget(**node)
        if option == "default":
            assert budget == Budget()
        else:
            assert option in VARIANTS["budget"] and budget != Budget(), option


def test_entry_points_run_the_class_defaults() -> None:
    """The experiments' env is EnvConfig() (main: the fast parser; paper: the final open pass)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from mage_gym.env import EnvConfig

    expected = {"benchmark": EnvConfig(), "train": EnvConfig(), "main": replace(EnvConfig(), parser="fast"),
                "paper": replace(EnvConfig(), final_open_pass=True)}
    for name, want in expected.items():
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            env = OmegaConf.to_container(compose(config_name=name)["env"])
        assert EnvConfig.coerce(env) == want, name


# --- retrievers and readers ------------------------------------------------------------------------------------

def retriever_defaults(name: str) -> dict[str, Any]:
    from mage_gym.retrieval import CHANNEL_NAMES, HYBRID_PRESETS
    from mage_gym.retrieval.bm25 import BM25Retriever
    from mage_gym.retrieval.colpali import ColPaliRetriever
    from mage_gym.retrieval.dense import DenseRetriever
    from mage_gym.retrieval.hybrid import HYBRID_ADAPTIVE, DensityGatedHybrid, HybridRetriever
    from mage_gym.retrieval.learned_fusion import LearnedFusionHybrid
    from mage_gym.retrieval.page_text import PageTextDenseRetriever

    channels = {"bm25": BM25Retriever, "dense": DenseRetriever, "page_dense": PageTextDenseRetriever,
                "colpali": ColPaliRetriever}
    assert set(channels) == set(CHANNEL_NAMES)
    if name in channels:
        return signature_defaults(channels[name])
    per_channel = {n: signature_defaults(c) for n, c in channels.items()}
    if name in HYBRID_PRESETS:
        return {**signature_defaults(HybridRetriever), **HYBRID_PRESETS[name], **per_channel}
    if name == "hybrid_adaptive":
        return {**signature_defaults(DensityGatedHybrid), **HYBRID_ADAPTIVE, **per_channel}
    if name == "hybrid_learned":
        return {**signature_defaults(LearnedFusionHybrid), **per_channel}
    if name == "hybrid_rerank":  # the first stage is named in the config and built by the factory (default: hybrid)
        from mage_gym.retrieval import DEFAULT_RETRIEVER
        from mage_gym.retrieval.rerank import RerankedRetriever

        return {**signature_defaults(RerankedRetriever), "first_stage": DEFAULT_RETRIEVER}
    raise AssertionError(f"no defaults known for retriever {name!r}: add them here")


@pytest.mark.parametrize("option", options("retriever"))
def test_retriever_yaml_is_the_preset_or_class_default(option: str) -> None:
    from mage_gym.retrieval import DEFAULT_HYBRID, RETRIEVER_NAMES

    node = compose_option("retriever", option)["retriever"]
    name = node["name"]
    assert name in RETRIEVER_NAMES and name == option
    if name == "hybrid":  # the default fusion: null keeps DEFAULT_HYBRID's values (stated once, in code)
        defaults = retriever_defaults(DEFAULT_HYBRID)
        assert all(v is None for k, v in node.items() if k != "name"), node
        assert set(node) - {"name"} <= set(defaults)
        return
    assert not disagreements(f"retriever/{option}", node, retriever_defaults(name))


@pytest.mark.parametrize("option", options("reader"))
def test_reader_yaml_is_the_backend_default(option: str) -> None:
    from mage_gym.readers.openai_compat import DEFAULT_BASE_URL
    from mage_gym.readers.options import backend_class, canonical_backend

    node = compose_option("reader", option)["reader"]
    backend = canonical_backend(node["name"])
    defaults = signature_defaults(backend_class(backend))
    if backend == "openai":
        defaults["base_url"] = DEFAULT_BASE_URL  # None: $OPENAI_BASE_URL, else this
    defaults.setdefault("cache", None)  # get_reader's option: the response cache (CHOICES)
    if option in VARIANTS["reader"]:
        assert set(node) - {"name"} <= set(defaults), option
        return
    assert not disagreements(f"reader/{option}", node, defaults)


# --- policies, the learner and the dataset -----------------------------------------------------------------------

def policy_defaults(name: str) -> dict[str, Any]:
    from mage_gym.bench.policy_options import BENCHMARK_OPTIONS
    from policies import policy_class

    defaults = signature_defaults(policy_class(name))
    defaults.update({key: None if key == "limit" else False for key in BENCHMARK_OPTIONS})  # read by the benchmark
    if name in ("llm_evaluator", "llm_controller"):
        from mage_gym.readers.hf import HFReader
        from policies.llm_evaluator import CONTROLLER_CHAT
        from policies.llm_prompt import PromptConfig

        defaults["prompt"] = signature_defaults(PromptConfig)
        defaults["backend"] = {**signature_defaults(HFReader), **policy_class(name).default_backend}
        if name == "llm_controller":
            defaults["chat"] = CONTROLLER_CHAT
    return defaults


@pytest.mark.parametrize("option", options("policy"))
def test_policy_yaml_is_the_policy_class_default(option: str) -> None:
    node = compose_option("policy", option)["policy"]
    assert node["name"] == option
    assert not disagreements(f"policy/{option}", node, policy_defaults(option))


def test_training_yaml_is_the_learner_and_dagger_defaults() -> None:
    from policies.dagger import DaggerConfig
    from policies.ppo import DEFAULT_NET, build_model

    train = compose_option("training", "default")["train"]
    assert set(train["ppo"]) == {"algo", "net", "hparams"}  # hparams: SB3's own keywords, no default of ours
    assert train["ppo"]["algo"] == signature_defaults(build_model)["algo"]
    assert not disagreements("training/default.ppo.net", train["ppo"]["net"], DEFAULT_NET)
    assert not disagreements("training/default.dagger", train["dagger"], signature_defaults(DaggerConfig))


def test_dataset_yaml_is_the_loader_default() -> None:
    from mage_gym.data.registry import load_dataset

    defaults = signature_defaults(load_dataset)
    for option in options("dataset"):
        node = compose_option("dataset", option)["dataset"]
        assert node["name"] == option
        assert not disagreements(f"dataset/{option}", node, defaults)
