"""``ppo``: a learned controller - sb3-contrib MaskablePPO over the slot observation.

Why MaskablePPO: the flat action space (Stop + one block of K slots per operation, see ``ActionLayout``) is
mostly invalid at any moment (empty slots, spent budgets); masking through
``env.action_masks()`` keeps exploration on valid operations. The network is
the slot-set extractor and per-slot head of :mod:`policies.slot_net`. Other
SB3 algorithms plug in by name (:data:`ALGOS`: ``ppo``, ``a2c`` train without
masks - invalid actions are no-ops with an error - and act with the mask
applied to their action probabilities).

A checkpoint is SB3's ``.zip`` plus a ``.json`` sidecar (:func:`save_checkpoint`):
the algorithm, and what the network's inputs meant when it was trained -
``NODE_FEATURES`` by name, the observation keys, K, the render mode, the
graph version and what each relevance column holds (``relevance_columns``:
``fused`` then the retriever's channels; before format v3 the last column was
empty under the default retriever, now it holds ``page_dense``). Why by name: a network reads feature columns by position, so a
checkpoint trained before a feature was added or moved would act on shifted
columns without any error. Loading (features, graph version) or the first
reset (K, render mode, the env retriever's relevance columns) refuses such a
checkpoint with a :class:`CheckpointMismatch` that names each difference (:func:`check_sidecar`);
``allow_mismatch=[field, ...]`` accepts named differences on purpose.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mage_gym.env import NODE_FEATURES
from mage_gym.render import RENDER_MODES
from mage_gym.bench.protocol import EnvInfo
from policies.base import BasePolicy

#: algorithm name -> (module, class, uses masks)
ALGOS: dict[str, tuple[str, str, bool]] = {
    "maskable_ppo": ("sb3_contrib", "MaskablePPO", True),
    "ppo": ("stable_baselines3", "PPO", False),
    "a2c": ("stable_baselines3", "A2C", False),
}
#: the slot-set network (train.ppo.net repeats these; tests/test_config_defaults.py keeps them equal); vf: the value
#: head's hidden layers; use_question=False: a net blind to the question embedding (the shipped student's)
DEFAULT_NET = {"hidden": 64, "slot_dim": 16, "global_dim": 64, "question_dim": 32, "pooling": "mean+max+attention",
               "use_question": True, "vf": [64]}


def algo_class(algo: str) -> tuple[type, bool]:
    """(SB3 algorithm class, whether it takes action masks)."""
    if algo not in ALGOS:
        raise ValueError(f"unknown algorithm {algo!r}; expected one of {sorted(ALGOS)}")
    import importlib

    module, cls, masked = ALGOS[algo]
    return getattr(importlib.import_module(module), cls), masked


def build_model(env: Any, algo: str = "maskable_ppo", seed: int = 0, net: Mapping[str, Any] | None = None,
                hparams: Mapping[str, Any] | None = None, device: str = "cpu", verbose: int = 0) -> Any:
    """A fresh SB3 model on ``env`` (a VecEnv or an env) with the slot-set network."""
    from policies.slot_net import MaskableSlotPolicy, SlotPolicy, SlotSetExtractor

    cls, masked = algo_class(algo)
    net_cfg = {**DEFAULT_NET, **dict(net or {})}
    vf = list(net_cfg.pop("vf"))
    policy_kwargs = {"features_extractor_class": SlotSetExtractor, "features_extractor_kwargs": net_cfg,
                     "net_arch": {"pi": [], "vf": vf}}
    return cls(MaskableSlotPolicy if masked else SlotPolicy, env, seed=seed, device=device, verbose=verbose,
               policy_kwargs=policy_kwargs, **dict(hparams or {}))


#: sidecar format; v2 records what the inputs meant (node features, observation keys, graph version); v3 adds
#: the relevance columns' channels
SIDECAR_FORMAT = "mage-gym-policy-v3"
#: sidecar fields a checkpoint must agree on with the code / env that loads it
SIDECAR_FIELDS: tuple[str, ...] = ("node_features", "observation_keys", "K", "render_mode", "graph_version",
                                   "relevance_columns")
#: what a sidecar without ``relevance_columns`` (v2) was trained on: the default hybrid left the last column 0
LEGACY_RELEVANCE_COLUMNS: tuple[str, ...] = ("fused", "bm25", "dense", "none")


#: loaded when no checkpoint is given: a DAgger student shipped with the package (its README says how it was made)
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "dagger_seed2.zip"


class CheckpointMismatch(ValueError):
    """A checkpoint was trained on inputs other than the ones it would now get (the message names each)."""


def current_graph_version() -> str:
    from mage_gym.graph.store import GRAPH_VERSION

    return str(GRAPH_VERSION)


def model_relevance_columns(model: Any) -> list[str]:
    """The relevance columns of the retriever of the env ``model`` was built on (the default retriever's when
    the model has no env or the env cannot say)."""
    from mage_gym.env.relevance import default_relevance_columns, relevance_columns

    env = model.get_env() if hasattr(model, "get_env") else None
    try:
        return list(relevance_columns(env.get_attr("retriever", [0])[0]))
    except Exception:  # no env, a test double without a retriever: say what the default retriever gives
        return list(default_relevance_columns())


def save_checkpoint(model: Any, path: str | Path, algo: str, K: int, extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``path`` (.zip) and its ``.json`` sidecar; returns the zip path.

    The sidecar records the feature names of this code, the model's
    observation keys, K, the render mode (``extra["render_mode"]``, else
    null), the graph version and the relevance columns' channels
    (``extra["relevance_columns"]``, else those of the model's env), so a later
    load can tell what changed.
    """
    path = Path(path)
    if path.suffix != ".zip":
        path = path.with_suffix(".zip")
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(str(path))
    extra = dict(extra or {})
    meta = {"algo": algo, "K": int(K), "format": SIDECAR_FORMAT, "node_features": list(NODE_FEATURES),
            "observation_keys": sorted(model.observation_space.spaces), "render_mode": extra.pop("render_mode", None),
            "graph_version": current_graph_version(),
            "relevance_columns": list(extra.pop("relevance_columns", None) or model_relevance_columns(model)), **extra}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1, default=str))
    return path


def read_meta(path: str | Path) -> dict[str, Any]:
    side = Path(path).with_suffix(".json")
    return json.loads(side.read_text()) if side.is_file() else {}


def _feature_difference(saved: list[str], now: list[str]) -> str:
    added, removed = [f for f in now if f not in saved], [f for f in saved if f not in now]
    parts = [f"{len(saved)} features in the checkpoint, {len(now)} now"]
    if added:
        parts.append(f"added {added}")
    if removed:
        parts.append(f"removed {removed}")
    if not added and not removed:
        first = next(i for i, (a, b) in enumerate(zip(saved, now)) if a != b)
        parts.append(f"same names, other order from column {first} ({saved[first]!r} vs {now[first]!r})")
    return "; ".join(parts)


def check_sidecar(meta: Mapping[str, Any], *, K: int | None = None, render_mode: str | None = None,
                  observation_keys: Any = None, relevance_columns: Any = None, allow: Any = (),
                  source: str = "checkpoint") -> None:
    """Raise :class:`CheckpointMismatch` naming every field of ``meta`` that differs from what loads it.

    Always compared: ``node_features`` (this code's :data:`NODE_FEATURES`) and
    ``graph_version``; ``K``, ``render_mode``, ``observation_keys`` and
    ``relevance_columns`` (the env retriever's, known at reset) when given. A field in ``allow`` is
    not compared. A sidecar without these fields (written before format v2)
    fails: nothing says what its inputs meant; a v2 sidecar without
    ``relevance_columns`` was trained with the last column empty
    (:data:`LEGACY_RELEVANCE_COLUMNS`), and is refused saying so unless
    ``allow_mismatch=["relevance_columns"]`` (it then reads page_dense where it
    saw zeros).
    """
    allow = set(allow or ())
    unknown = allow - set(SIDECAR_FIELDS)
    if unknown:
        raise ValueError(f"allow_mismatch: unknown fields {sorted(unknown)}; expected some of {list(SIDECAR_FIELDS)}")
    want: dict[str, Any] = {"node_features": list(NODE_FEATURES), "graph_version": current_graph_version()}
    if relevance_columns is not None:
        want["relevance_columns"] = list(relevance_columns)
    if K is not None:
        want["K"] = int(K)
    if render_mode is not None:
        want["render_mode"] = render_mode
    if observation_keys is not None:
        want["observation_keys"] = sorted(observation_keys)
    problems = []
    for field, now in want.items():
        if field in allow:
            continue
        if field == "relevance_columns" and field not in meta and "node_features" in meta:
            if list(LEGACY_RELEVANCE_COLUMNS) != now:
                problems.append(f"relevance_columns: not recorded (a {meta.get('format', 'v2')} sidecar: trained with "
                                f"{list(LEGACY_RELEVANCE_COLUMNS)}, the last column empty), now {now}")
            continue
        if field not in meta:
            problems.append(f"{field}: not recorded in the sidecar (written before {SIDECAR_FORMAT}); now {now!r}")
            continue
        saved = meta[field]
        if field == "node_features" and list(saved) != now:
            problems.append("node_features: " + _feature_difference(list(saved), now))
        elif field == "relevance_columns" and list(saved) != now:
            problems.append(f"relevance_columns: checkpoint {list(saved)} vs now {now}")
        elif field == "observation_keys" and sorted(saved) != now:
            problems.append(f"observation_keys: checkpoint {sorted(saved)} vs now {now}")
        elif field not in ("node_features", "observation_keys") and str(saved) != str(now):
            problems.append(f"{field}: {field}={saved!r} in the checkpoint, {field}={now!r} now")
    if problems:
        raise CheckpointMismatch(f"{source} does not match: " + " | ".join(problems)
                                 + " (retrain it, or accept a difference on purpose with allow_mismatch=[field])")


class PPOPolicy(BasePolicy):
    """Acts with a trained SB3 model (``checkpoint``) or one passed in (``model``, during training).

    ``deterministic``: argmax of the masked action distribution (evaluation)
    or a sample (``False``). ``render_mode`` None takes the checkpoint's
    training render mode from its sidecar when there is one.
    """

    name = "ppo"

    def __init__(self, checkpoint: str | None = None, model: Any = None, algo: str | None = None,
                 deterministic: bool = True, device: str = "cpu", render_mode: str | None = None,
                 allow_mismatch: Any = (), **kw: Any) -> None:
        super().__init__(render_mode=render_mode, **kw)
        if model is None and not checkpoint:
            checkpoint = str(SHIPPED_CHECKPOINT)  # the packaged DAgger student (policies/checkpoints/README.md)
        self.checkpoint = checkpoint
        self.meta: dict[str, Any] = {}
        self.allow_mismatch = tuple(allow_mismatch or ())
        self._keys_checked = False
        if model is None:
            path = Path(str(checkpoint)).expanduser()
            if path.suffix != ".zip" and path.with_suffix(".zip").is_file():
                path = path.with_suffix(".zip")
            if not path.is_file():
                raise FileNotFoundError(f"no checkpoint at {path}")
            self.meta = read_meta(path)
            # features, graph version and an explicitly asked render mode: before the weights are read
            check_sidecar(self.meta, render_mode=render_mode, allow=self.allow_mismatch, source=f"checkpoint {path}")
            if render_mode is None and self.meta.get("render_mode") in RENDER_MODES:
                self.render_mode = self.meta["render_mode"]
            algo = algo or self.meta.get("algo", "maskable_ppo")
            cls, _ = algo_class(algo)
            model = cls.load(str(path), device=device)
        self.algo = algo or "maskable_ppo"
        self.model = model
        self.masked = ALGOS[self.algo][2]
        self.deterministic = bool(deterministic)
        self.rng = np.random.default_rng(0)

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)
        if self.meta:  # K and the env's render mode (the checkpoint's inputs were built for both)
            check_sidecar(self.meta, K=env_info.K, render_mode=env_info.render_mode,
                          relevance_columns=getattr(env_info, "relevance_columns", None),
                          allow=(*self.allow_mismatch, "node_features", "graph_version"),
                          source=f"checkpoint {self.checkpoint}")
        if env_info.seed is not None:
            self.rng = np.random.default_rng(env_info.seed)

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> int:
        mask = np.asarray(mask, dtype=bool)
        if self.meta and not self._keys_checked:  # the env's observation keys, once (known at the first act)
            used = [k for k in obs if k in self.model.observation_space.spaces]  # extra keys (text) are ignored
            check_sidecar(self.meta, observation_keys=used,
                          allow=(*self.allow_mismatch, "node_features", "graph_version", "relevance_columns"),
                          source=f"checkpoint {self.checkpoint}")
            self._keys_checked = True
        spaces = self.model.observation_space.spaces
        if len(obs) != len(spaces):  # keys the model was not trained on (text, a conversation's turn keys)
            obs = {k: obs[k] for k in spaces if k in obs}
        if self.masked:
            action, _ = self.model.predict(dict(obs), action_masks=mask, deterministic=self.deterministic)
            return int(np.asarray(action).reshape(-1)[0])
        probs = self.action_probs(obs)
        probs = np.where(mask, probs, 0.0)
        if probs.sum() <= 0:
            return 0
        if self.deterministic:
            return int(np.argmax(probs))
        return int(self.rng.choice(len(probs), p=probs / probs.sum()))

    def action_probs(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Unmasked action probabilities of the model (plain SB3 algorithms)."""
        import torch as th

        policy = self.model.policy
        tensor, _ = policy.obs_to_tensor(dict(obs))
        with th.no_grad():
            dist = policy.get_distribution(tensor)
        return dist.distribution.probs[0].cpu().numpy().astype(np.float64)
