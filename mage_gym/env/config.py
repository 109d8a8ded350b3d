"""EnvConfig: every setting of a :class:`~mage_gym.env.MageRAGEnv`, with its default, in one frozen record.

Why one record: a setting is defined once, here (the nested records too:
:class:`~mage_gym.env.budget.Budget`, :class:`~mage_gym.reward.RewardConfig`,
:class:`~mage_gym.render.RenderConfig`). The experiments' YAML
(``conf/env/default.yaml``, ``conf/budget/default.yaml``) writes the same
defaults out so that Hydra can override them by name; ``tests/test_config_defaults.py``
composes every config group and fails when a YAML default and the field it
configures disagree. The env's constructor takes this record plus the few
objects that are not settings (episodes, reader, retriever, query function,
privileged access), so ``MageRAGEnv(episodes, K=16, budget={"k": 3})`` and
``MageRAGEnv(episodes, EnvConfig(K=16))`` build the same env.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, Sequence

from mage_gym.env.budget import Budget
from mage_gym.env.observation import check_observation_keys
from mage_gym.render import RENDER_MODES, RenderConfig
from mage_gym.reward import RewardConfig

#: ``gym.make("MageRAG-v0", ...)`` keywords that add wrappers (:mod:`mage_gym.make`); not settings of the env.
WRAPPER_KEYWORDS: tuple[str, ...] = ("trace_path", "record_trace", "text_view_in_info", "shaping")


@dataclass(frozen=True)
class EnvConfig:
    """The settings of a MageRAGEnv (the class defaults; the experiments use exactly these, ``conf/env/``).

    - ``K``: candidate slots (working set first, then frontier by relevance);
    - ``budget``: a :class:`Budget` or a mapping with k, m, M, T, B (the MAGE-RAG reference's 5/4/24/6/16) and
      ``tokens``, the reader tokens the stop-time render may reach (None, the default: no cap;
      :mod:`mage_gym.env.token_budget`; ``env.budget.tokens=5355`` on the command line);
    - ``render_mode``: ``visual`` (page images + crops, the paper's reader input) or ``text``;
    - ``reward``: a :class:`RewardConfig` or mapping. ``lambda_cost`` is 1.0: the smallest of
      {0.1, 0.25, 0.5, 1.0} at which reading every page scores below topk_page on the training documents,
      so a controller is paid for choosing (it was 0.1 in the class while the experiments used 1.0);
    - ``render_config``: a :class:`RenderConfig` or mapping (image sizes, token rule, text limits);
    - ``final_open_pass``: at stop, open up to the remaining ``B`` activated elements (the reference's pass);
    - ``observation_keys``: the observation's keys (None: the numeric ones, plus the turn keys in conversations);
    - ``conversation_cap``: paid activations over a whole conversation (None: ``2 * budget.M``);
    - ``carry_over``: a conversation's next question starts on the previous working subgraph (False: afresh);
    - ``parser``, ``max_graphs``, ``graph_kwargs``: how graphs of episodes given without one are built
      (:class:`~mage_gym.env.episodes.LazyGraphProvider`) and how many stay in memory.
    """

    K: int = 64
    budget: Budget = field(default_factory=Budget)
    render_mode: str = "visual"
    reward: RewardConfig = field(default_factory=RewardConfig)
    render_config: RenderConfig = field(default_factory=RenderConfig)
    final_open_pass: bool = False
    observation_keys: tuple[str, ...] | None = None
    conversation_cap: int | None = None
    carry_over: bool = True
    parser: str = "layout"
    max_graphs: int = 4
    graph_kwargs: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if isinstance(self.K, bool) or int(self.K) < 1:
            raise ValueError(f"K must be a positive int, got {self.K!r}")
        set_(self, "K", int(self.K))
        set_(self, "budget", Budget.coerce(self.budget))
        set_(self, "reward", RewardConfig.coerce(self.reward))
        set_(self, "render_config", RenderConfig.coerce(self.render_config))
        if self.render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {RENDER_MODES}, got {self.render_mode!r}")
        if self.observation_keys is not None:
            set_(self, "observation_keys", check_observation_keys(self.observation_keys))
        if self.conversation_cap is not None:
            set_(self, "conversation_cap", int(self.conversation_cap))
        set_(self, "final_open_pass", bool(self.final_open_pass))
        set_(self, "carry_over", bool(self.carry_over))
        set_(self, "max_graphs", int(self.max_graphs))
        if self.graph_kwargs is not None:
            set_(self, "graph_kwargs", dict(self.graph_kwargs))

    @classmethod
    def settings(cls) -> tuple[str, ...]:
        """The setting names, in field order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def coerce(cls, config: "EnvConfig | Mapping[str, Any] | None" = None, **overrides: Any) -> "EnvConfig":
        """``config`` (a record, a mapping such as a Hydra ``env`` node, or None: the defaults) with ``overrides``.

        An unknown name is a :class:`TypeError` naming the valid settings (and,
        for the wrapper keywords, where they belong).
        """
        if config is None:
            given: dict[str, Any] = {}
        elif isinstance(config, EnvConfig):
            check_names(overrides)
            return replace(config, **overrides) if overrides else config
        elif isinstance(config, Mapping) or hasattr(config, "items"):
            given = {str(k): v for k, v in config.items()}
        else:
            raise TypeError(f"config must be an EnvConfig, a mapping or None, not {type(config).__name__}")
        given.update(overrides)
        check_names(given)
        return cls(**given)

    def to_dict(self) -> dict[str, Any]:
        """Plain values (nested records as dicts), e.g. for a results file."""
        out: dict[str, Any] = {}
        for name in self.settings():
            value = getattr(self, name)
            out[name] = value.to_dict() if hasattr(value, "to_dict") else (
                list(value) if isinstance(value, tuple) else value)
        return out


def check_names(settings: Mapping[str, Any] | Sequence[str]) -> None:
    """A :class:`TypeError` for names that are not :class:`EnvConfig` settings."""
    valid = EnvConfig.settings()
    unknown = sorted(str(k) for k in settings if k not in valid)
    if not unknown:
        return
    msg = f"MageRAGEnv got unknown setting(s) {unknown}; valid settings: {', '.join(valid)}"
    wrappers = [k for k in unknown if k in WRAPPER_KEYWORDS]
    if wrappers:
        msg += (f". {', '.join(wrappers)} add wrappers, not settings: gym.make('MageRAG-v0', ..., {wrappers[0]}=...) "
                "or mage_gym.wrappers (TraceRecording, TextViewInfo, PotentialShaping on a privileged env)")
    raise TypeError(msg)
