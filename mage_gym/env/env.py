"""MageRAGEnv: one (document graph, question) episode as a Gymnasium environment.

State: the node-state table and the budget vector (:mod:`mage_gym.env.state`).
Actions: the six controller operations over ``K`` candidate slots
(:mod:`mage_gym.env.actions`, :mod:`mage_gym.env.candidates`). Reward: paid at
the end, support - lambda1 * noise - lambda2 * cost (:mod:`mage_gym.env.outcome`).

Three interfaces, one transition:
- learned policies call :meth:`MageRAGEnv.step` with a flat action and read
  :meth:`MageRAGEnv.action_masks` (sb3-contrib MaskablePPO);
- LLM policies read :meth:`MageRAGEnv.text_view` (or the opt-in ``text``
  observation key) and call :meth:`MageRAGEnv.submit_round`;
- scripted policies may call :meth:`MageRAGEnv.operate` with node ids.
All three run :meth:`MageRAGEnv._single`, the only place operations happen.

What is not the transition lives elsewhere: episode choice and graphs in
:mod:`mage_gym.env.episodes`, retrieval in :mod:`mage_gym.env.search`,
traces, the text view in ``info`` and reward shaping in :mod:`mage_gym.wrappers`
(traces follow the transition through :meth:`MageRAGEnv.add_observer`, so
the operations inside an LLM round reach them too).
"""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from mage_gym.env.actions import OP_BY_NAME, OP_NAMES, ActionLayout, Op, OpResult, action_mask, apply_operation
from mage_gym.env.candidates import fill_slots
from mage_gym.env.config import EnvConfig
from mage_gym.env.episodes import LoadedEpisode, SealedSpec, as_provider, choose_episode_id, provider_max_turns
from mage_gym.env.graph_index import GraphIndex, graph_index
from mage_gym.env.initial import activate_entry_pages, initial_state
from mage_gym.env.observation import (
    CONVERSATION_KEYS, NUMERIC_KEYS, PREV_QUESTION_KEY, QUESTION_DIM, TEXT_KEY, TURN_KEY, build_observation,
    check_observation_keys, node_table, observation_space, question_features, text_observation, turn_features,
)
from mage_gym.env.outcome import Outcome, score_episode
from mage_gym.env.privileged import PrivilegedAccessError, PrivilegedView
from mage_gym.env.relevance import EpisodeRelevance, QueryFn
from mage_gym.env.search import EnvRetrieval
from mage_gym.env.state import ACTIVATED, UNVISITED, EvidenceState
from mage_gym.env.text_view import build_text_view, frontier_candidates, recent_buffer
from mage_gym.env.token_budget import TokenMeter, fragment_memo
from mage_gym.env.turns import (
    Conversation, TurnRecord, aggregate_outcomes, carry_state, reader_question,
)
from mage_gym.readers.base import Reader, ReaderOutput, RenderedInput
from mage_gym.render import RENDER_MODES, render
from mage_gym.retrieval.base import Retriever

DEFAULT_K = EnvConfig.K
#: Why an episode ended; all but the step cap are terminations, the step cap truncates.
TRUNCATING_STOP_REASONS = ("step_cap",)

Observer = Callable[["MageRAGEnv", str, Mapping[str, Any]], None]


@dataclass(frozen=True)
class PruneRequest:
    node_id: str
    reason: str = ""


@dataclass(frozen=True)
class RoundDecision:
    """One LLM evaluator round.

    ``activate``: candidate numbers from the text view (1-based, at most ``m``);
    ``open``: ids of activated elements; ``search``: one free-text query;
    ``prune``: node/page ids with reasons; ``stop``: end the episode after the
    other operations. Executed as single steps in the order prune, activate,
    open, search; then the round closes (unless ``stop``).
    """

    activate: tuple[int, ...] = ()
    open: tuple[str, ...] = ()
    search: str | None = None
    prune: tuple[PruneRequest, ...] = ()
    stop: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "activate", tuple(int(i) for i in self.activate))
        object.__setattr__(self, "open", tuple(str(i) for i in self.open))
        prunes = []
        for p in self.prune:
            if isinstance(p, PruneRequest):
                prunes.append(p)
            elif isinstance(p, str):
                prunes.append(PruneRequest(p))
            elif isinstance(p, Mapping):
                prunes.append(PruneRequest(str(p["node_id"]), str(p.get("reason", ""))))
            else:
                node_id, *rest = p
                prunes.append(PruneRequest(str(node_id), str(rest[0]) if rest else ""))
        object.__setattr__(self, "prune", tuple(prunes))
        if self.search is not None and not isinstance(self.search, str):
            raise TypeError("search must be a string query or None")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_fragment_memo = fragment_memo  # the renderer's node fragments, kept on the graph index (shared with the meter)


def effective_render_mode(reader: Any, render_mode: str) -> str:
    """The render mode the env really plays with ``reader``: ``text`` when the reader takes no images.

    Why: a ``visual`` render sends page images, and the coverage rule counts a
    page whose image was sent; a text-only reader (``vision=false``, any
    causal LM) would drop the pixels and be credited with pages it never
    saw. In ``text`` mode it gets each activated page's text instead.
    """
    return "text" if render_mode == "visual" and getattr(reader, "uses_images", True) is False else render_mode


def reader_render_mode(reader: Any, render_mode: str) -> str:
    """:func:`effective_render_mode`, with a warning when it differs from the mode asked for."""
    mode = effective_render_mode(reader, render_mode)
    if mode != render_mode:
        warnings.warn(f"reader {getattr(reader, 'name', type(reader).__name__)!r} takes no images: the env renders "
                      "in text mode (activated pages as their text), render_mode='text'", UserWarning, stacklevel=3)
    return mode


def _name_and_options(spec: Any, what: str, default: str) -> tuple[Any, dict[str, Any]]:
    """``(name, options)`` of a reader/retriever given as a name or a mapping ``{name: ..., **options}``;
    ``(object, {})`` for an object."""
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, Mapping):
        options = {str(k): v for k, v in spec.items()}
        name = options.pop("name", None) or default
        if not isinstance(name, str):
            raise TypeError(f"{what} mapping: 'name' must be a string, got {type(name).__name__}")
        return name, options
    if spec is None:
        raise TypeError(f"{what} must be a name, a mapping {{'name': ..., **options}} or an object, not None")
    return spec, {}


class MageRAGEnv(gym.Env):
    """An evidence controller grows and prunes a working subgraph of a document graph under a budget.

    An episode is one (document, question) pair. At reset the retriever
    activates the ``k`` most relevant pages; the controller then adds pages
    and elements along the graph's relations, opens elements, searches and
    prunes; at the end the working subgraph is rendered for a reader and the
    reward says how well the evidence was gathered.

    ## Action Space

    ``Discrete(ActionLayout(K).n)``: action 0 is Stop, then one
    block of ``K`` slots per slot operation, in :data:`SLOT_OPS` order:
    ActivatePage, ActivateNode, OpenNode, SearchEvidence, PruneNode
    (:class:`~mage_gym.env.actions.ActionLayout` encodes and decodes).
    Slots hold the working set in activation order, then the frontier by
    question relevance. :meth:`action_masks` marks exactly the actions the
    transition accepts (reach it through wrappers with
    ``env.get_wrapper_attr("action_masks")``); an invalid action is a no-op
    with ``info["last_action_error"]``. LLM policies send a whole round with
    :meth:`submit_round` instead; scripted ones address nodes by id with
    :meth:`operate`.

    ## Observation Space

    A ``Dict`` of ``nodes`` float32 [K, F] (per slot: type, page position,
    box, relevance per retriever, state, relation to the working set by edge
    kind, ...; columns named by :data:`NODE_FEATURES`), ``slot_mask`` [K],
    ``budget`` [4], ``progress`` [2] and ``question`` [384]. With
    ``observation_keys`` including ``"text"``, also ``text``: the escaped XML
    text view (a :class:`~mage_gym.env.observation.UnicodeText`). No gold is in
    any of them. A reader-token budget (``budget.tokens``) leaves the spaces and
    values unchanged (shipped checkpoints keep loading): learned policies see it
    only through the mask, LLM policies in the text view's ``tokens_left``, and
    every step's ``info["token_budget"]`` holds ``limit``, ``used`` and ``left``
    (and ``skipped``: what a reset, turn start or search left out for it).

    ## Rewards

    Zero until the end, then ``support - lambda_noise * noise - lambda_cost *
    cost``, with the components in ``info["reward_components"]`` and the
    evidence metrics in ``info["metrics"]`` (also flattened into ``info``).
    Support is the gold coverage of the reader input (oracle reader) or the
    benchmark score of a reader's answer. Potential-based shaping is a wrapper
    (:class:`mage_gym.wrappers.PotentialShaping`), for privileged envs only.

    ## Starting State

    ``reset(seed=..., options={"episode_id": ...})`` plays the given episode,
    or one drawn with the env's seeded generator. The ``k`` entry pages
    (inside the episode's page window, if any) are activated for free.

    ## Episode End

    Terminated (``terminated=True``) by Stop, or when the ``T`` rounds are
    used up. Truncated (``terminated=False, truncated=True``) at the step cap
    ``T * (m + B + 2)`` (it depends on the budget, so there is no fixed
    ``max_episode_steps``). Either way the working subgraph is rendered, the
    reader reads it and the terminal reward is paid in that last step.

    ## Conversations and document sets

    Episodes may be :class:`~mage_gym.data.composite.CompositeEpisode`
    records: several documents (the graph is the union of their graphs, node
    ids keep each document's prefix, entry retrieval ranks pages across them)
    and/or several questions. In a conversation each Stop ends a *turn*: the
    reader answers, the turn's reward is paid, and the next question starts
    on the working subgraph carried over (:mod:`mage_gym.env.turns`); the
    episode terminates after the last turn. Such envs also observe ``turn``
    and ``prev_question``; ``info["turn"]`` (the current question), ``info["turn_end"]`` / ``info["ended_turn"]`` /
    ``info["answer"]`` mark turn ends, and the final ``info["metrics"]``
    aggregates the turns (``per_turn``). Single questions on one document
    keep exactly the spaces and info described above.

    ## Arguments

    ``MageRAGEnv(episodes, config=None, *, reader="oracle", retriever="hybrid", query_fn=None,
    privileged=False, **settings)``

    - ``episodes``: pairs ``(Episode, EvidenceGraph)`` / :class:`EnvEpisode`,
      Episodes (graphs built lazily with the ``parser``, ``max_graphs`` and
      ``graph_kwargs`` settings), or a provider;
    - ``config``: an :class:`~mage_gym.env.config.EnvConfig` or a mapping of
      its fields (e.g. a Hydra ``env`` node); None: the defaults;
    - ``settings``: :class:`EnvConfig` fields overriding ``config``: ``K``
      (slots, default 64), ``budget`` (a :class:`Budget` or mapping; default
      5/4/24/6/16, no token budget), ``render_mode`` (``visual`` or ``text``; a reader that
      takes no images always gets ``text``), ``reward`` (a
      :class:`~mage_gym.reward.RewardConfig` or mapping), ``render_config``,
      ``final_open_pass``, ``observation_keys``, ``conversation_cap``,
      ``carry_over``, ``parser``, ``max_graphs``, ``graph_kwargs``; any other
      name is a ``TypeError`` listing them. The defaults are the experiments'
      settings (``conf/env/default.yaml`` and ``conf/budget/default.yaml``
      repeat them; a test keeps them equal): in particular ``lambda_cost`` is
      1.0, chosen on training documents (it was 0.1 here before);
    - ``reader``: ``"oracle"``, a reader name, a mapping ``{"name": ...,
      **options}`` (:func:`mage_gym.readers.get_reader`) or a Reader;
    - ``retriever``: a name, a mapping ``{"name": ..., **options}`` (one
      retriever per name and options per process, so indexes are shared) or
      a Retriever; ``query_fn``: text -> Query (default MiniLM);
    - ``privileged``: allow :meth:`privileged_view` (oracle policies, shaping).

    Traces, the text view in ``info`` and shaping are wrappers
    (:mod:`mage_gym.wrappers`); ``gym.make("MageRAG-v0", ...)`` applies them
    for the keywords ``trace_path`` / ``record_trace``, ``text_view_in_info``
    and ``shaping`` (:mod:`mage_gym.make`).
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 1}

    def __init__(self, episodes: Any = None, config: EnvConfig | Mapping[str, Any] | None = None, *,
                 reader: str | Mapping[str, Any] | Reader = "oracle",
                 retriever: str | Mapping[str, Any] | Retriever = "hybrid",
                 query_fn: QueryFn | None = None, privileged: bool = False, **settings: Any) -> None:
        super().__init__()
        self.config = cfg = EnvConfig.coerce(config, **settings)
        self.layout = ActionLayout(cfg.K)
        self.K = self.layout.K
        self._decoded = [self.layout.decode(a) for a in range(self.layout.n)]  # step's decode, as a table
        self._provider = as_provider(episodes, parser=cfg.parser, max_graphs=cfg.max_graphs,
                                     graph_kwargs=cfg.graph_kwargs)
        self.budget = cfg.budget
        self.reward_config = cfg.reward
        self.render_config = cfg.render_config
        self.reader = self._make_reader(reader)
        self.render_mode = reader_render_mode(self.reader, cfg.render_mode)
        retriever_name, retriever_options = _name_and_options(retriever, "retriever", "hybrid")
        self.retrieval = EnvRetrieval(retriever_name, retriever_options, query_fn)
        self.final_open_pass = cfg.final_open_pass
        self.privileged = bool(privileged)
        self.max_turns = provider_max_turns(self._provider)
        self.conversation_cap = cfg.conversation_cap
        self.carry_over = cfg.carry_over
        observation_keys = cfg.observation_keys
        if observation_keys is None and self.max_turns > 1:
            observation_keys = NUMERIC_KEYS + CONVERSATION_KEYS
        self.observation_keys = check_observation_keys(observation_keys)
        self.observation_space = observation_space(self.K, self.observation_keys)
        self.action_space = spaces.Discrete(self.layout.n)
        self._op_cap = self.reward_config.op_cap or self.budget.max_steps
        self._call_cap = self.reward_config.call_cap or (self.budget.T + 1)
        self._observers: list[Observer] = []
        self._episode_counter = -1
        self._loaded: LoadedEpisode | None = None
        self.state: EvidenceState | None = None
        self.gi: GraphIndex | None = None
        self.rel: EpisodeRelevance | None = None
        self._slots: np.ndarray | None = None
        self._mask: np.ndarray | None = None
        self._recent = recent_buffer()
        self._pending_reward = 0.0
        self._terminal: dict[str, Any] | None = None
        self._table: np.ndarray | None = None
        self._n_slots = 0
        self._conv: Conversation | None = None
        self._turn_info: dict[str, Any] = {}  # set when a turn ended in the current step, read by _result
        self._turn_skipped: list[int] = []  # nodes a new turn left out for the token budget, read by _result
        self._question = ""
        self._prev_question_vec = np.zeros(QUESTION_DIM, dtype=np.float32)

    # --- construction helpers ------------------------------------------------------

    @staticmethod
    def _make_reader(reader: str | Mapping[str, Any] | Reader) -> Reader:
        name, options = _name_and_options(reader, "reader", "oracle")
        if not isinstance(name, str):
            return name
        if name == "oracle" and not options:
            from mage_gym.readers.oracle import OracleReader

            return OracleReader()
        from mage_gym.readers import get_reader

        return get_reader(name, **options)

    # --- public read-only views (no gold) --------------------------------------------

    spec = SealedSpec()  # gym.make's keywords, the episodes sealed

    @property
    def retriever(self) -> Retriever:
        return self.retrieval.retriever

    @property
    def query_fn(self) -> QueryFn:
        return self.retrieval.query_fn

    @property
    def graph(self):
        return self._require().gi.graph

    @property
    def episode_id(self) -> str:
        return self._require_loaded().public.episode_id

    @property
    def question(self) -> str:
        """The current question (in a conversation, the current turn's)."""
        self._require_loaded()
        return self._question

    @property
    def public_episode(self) -> dict[str, str]:
        """What a policy may know about the episode (id, document, current question)."""
        out = self._require_loaded().public.as_dict()
        out["question"] = self._question
        return out

    @property
    def turn(self) -> int:
        """0-based index of the current question (0 unless the episode is a conversation)."""
        return 0 if self._conv is None else self._conv.turn

    @property
    def n_turns(self) -> int:
        return self._require_loaded().n_turns

    @property
    def conversation_history(self) -> list[tuple[str, str | None]]:
        """Earlier questions of the conversation and the reader's answers to them (no gold)."""
        return [] if self._conv is None else self._conv.history()

    @property
    def episode_ids(self) -> list[str]:
        return self._provider.ids

    @property
    def episode_count(self) -> int:
        """Resets so far minus one (the ``episode`` counter of trace records)."""
        return self._episode_counter

    @property
    def slots(self) -> np.ndarray:
        """intp [K]: node index per slot (-1 empty)."""
        return self._current_slots().copy()

    def slot_node_ids(self) -> list[str | None]:
        ids = self._require().gi.node_ids
        return [ids[v] if v >= 0 else None for v in self._current_slots().tolist()]

    def privileged_view(self) -> PrivilegedView:
        """The current episode's gold, read-only; only for an env built with ``privileged=True``."""
        if not self.privileged:
            raise PrivilegedAccessError(
                "gold is sealed: build the env with privileged=True to read it (privileged policies and "
                "reward shaping only; their results must be marked privileged)")
        loaded = self._require_loaded()
        return PrivilegedView.of(loaded.turn(self.turn)[1]._open(), loaded.graph)

    def _require(self) -> EvidenceState:
        if self.state is None:
            raise gym.error.ResetNeeded("call reset() before using the environment")
        return self.state

    def _require_loaded(self) -> LoadedEpisode:
        if self._loaded is None:
            raise gym.error.ResetNeeded("call reset() before using the environment")
        return self._loaded

    # --- observers (e.g. trace recording) --------------------------------------------------

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer(env, event, data)`` on every transition event.

        Events: ``reset`` (episode, seed), ``operation`` (op, node, slot, query,
        free_text, reason, result, auto_close, phase), ``operation_done``,
        ``round`` (decision, raw, candidates), ``round_end`` (round, reason),
        ``end`` (reason, outcome, rendered, reader_output); in conversations also
        ``turn_end`` (turn, reason, outcome, rendered, reader_output) before each
        later question and ``turn_start`` (turn, question). Observers read the
        env's public state; nothing in the events is gold before ``end`` /
        ``turn_end``.
        """
        if observer not in self._observers:
            self._observers.append(observer)

    def remove_observer(self, observer: Observer) -> None:
        if observer in self._observers:
            self._observers.remove(observer)

    def _notify(self, event: str, **data: Any) -> None:
        for observer in self._observers:
            observer(self, event, data)

    # --- Gymnasium API -------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        loaded = self._provider.get(choose_episode_id(self._provider.ids, self.np_random, options))
        public = loaded.public
        gi = graph_index(loaded.graph)
        rel = self.retrieval.relevance(loaded.graph, public.question)
        self._conv = Conversation.start(loaded.n_turns, self.budget, self.conversation_cap)
        budget = self._conv.turn_budget(self.budget) if self._conv.is_conversation else self.budget
        # window blocked, entry pages activated: a copy of a per-(graph, question, budget) template
        state = initial_state(gi, budget, rel, public.page_window, self.budget.k, self._meter(gi, public.question))
        self._loaded, self.gi, self.rel, self.state = loaded, gi, rel, state
        self._question = public.question
        self._question_vec = question_features(rel)
        self._prev_question_vec = np.zeros_like(self._question_vec)
        self._table = node_table(state, rel)  # shared per (graph, question) in the process
        self._invalidate()
        self._recent.clear()
        self._pending_reward = 0.0
        self._terminal = None
        self._turn_info = {}
        self._turn_skipped = []
        self._episode_counter += 1
        if self._observers:
            self._notify("reset", episode=self._episode_counter, seed=seed)
        info: dict[str, Any] = {"episode_id": public.episode_id, "doc_id": public.doc_id, "last_action_error": ""}
        if self._conv.is_conversation:
            info.update(turn=0, n_turns=loaded.n_turns)
        if state.tokens is not None:
            info["token_budget"] = self._token_info(state.tokens.skipped)
        return self._observation(), info

    def step(self, action: int):
        state = self._require()
        if state.stopped:
            raise RuntimeError("the episode is over; call reset()")
        a = int(action)
        op, slot = self._decoded[a] if 0 <= a < len(self._decoded) else self.layout.decode(a)  # (decode raises)
        node = -1 if op == Op.STOP else int(self._current_slots()[slot])
        res = self._single(op, node, slot=slot, auto_close=True)
        return self._result(res, [res.error] if res.error else [])

    def action_masks(self) -> np.ndarray:
        """bool [ActionLayout(K).n]: valid flat actions (sb3-contrib MaskablePPO reads this)."""
        state = self._require()
        if self._mask is None:
            slots = self._current_slots()
            self._mask = action_mask(state, slots, self._n_slots)
        return self._mask.copy()

    def token_refusals(self) -> np.ndarray:
        """bool [ActionLayout(K).n]: the actions only the reader-token budget refuses now (all False without one).

        Why: a controller that wants a page the budget refuses can prune a page
        it needs less to make room (the oracle and graph_follower do), but the
        mask alone does not say why an activation is refused. Public: the
        refusal's error says the same to any controller that tries.
        """
        state = self._require()
        mask = self.action_masks()
        if state.tokens is None:
            return np.zeros_like(mask)
        return action_mask(state, self._current_slots(), self._n_slots, tokens=False) & ~mask

    def fits_after_prune(self, prune: int, activate: int) -> bool:
        """Whether activating node ``activate`` would fit the reader-token budget once node ``prune`` is pruned.

        Why: a chat teacher that makes token room writes the prune and the
        activation it makes room for in one reply, and must know the second
        will not be refused (True without a budget; nothing changes here).
        """
        state = self._require()
        if state.tokens is None:
            return True
        gi, st = state.gi, state.node_state
        page = int(gi.node_page[activate])
        if page == int(gi.node_page[prune]) and prune < gi.n_pages:
            return False  # its page goes with the prune
        gone = state.prune_targets(prune)
        meter = state.tokens.copy()
        meter.pruned(gone.tolist(), st[gone].tolist())
        return meter.after_activate(int(activate), page, bool(st[page] == UNVISITED)) <= meter.limit

    def render(self) -> RenderedInput:
        """The reader input the current working subgraph would give (images stay lazy): the question as the reader
        is asked it (in a conversation's later turns, with the earlier turns: :func:`reader_question`)."""
        state = self._require()
        return render(state.gi.graph, state, self.render_mode, self._asked(), self.render_config,
                      _fragment_memo(state.gi))

    def _asked(self) -> str:
        """The current question as the reader gets it (the render at stop asks exactly this; after the last turn,
        still that turn's question with the turns before it)."""
        return reader_question(self.conversation_history[: self.turn], self.question)

    def _meter(self, gi: GraphIndex, asked: str) -> TokenMeter | None:
        """A reader-token meter for a new state on ``gi`` whose reader is asked ``asked`` (None: no token budget)."""
        if self.budget.tokens is None:
            return None
        return TokenMeter.start(gi, self.budget.tokens, self.render_mode, self.render_config, asked)

    def _token_info(self, skipped: Sequence[int] = ()) -> dict[str, Any]:
        """``info["token_budget"]``: limit, used, left; ``skipped``: ids of the pages (or carried nodes) the last
        reset, turn start or search would have activated but left out because they did not fit."""
        state = self._require()
        assert state.tokens is not None
        out: dict[str, Any] = state.tokens.info()
        if skipped:
            out["skipped"] = [state.gi.node_ids[v] for v in skipped]
        return out

    def close(self) -> None:
        self.state = None

    # --- LLM and scripted interfaces -----------------------------------------------------

    def text_view(self) -> str:
        """The state as escaped XML text for LLM policies (no gold in it)."""
        state = self._require()
        return build_text_view(state, self.question, self._current_slots(), list(self._recent),
                                self.conversation_history)

    def candidates(self) -> list[str]:
        """Node ids of the text view's numbered candidates (candidate ``n`` is item ``n - 1``)."""
        ids = self._require().gi.node_ids
        return [ids[v] for v in frontier_candidates(self._require(), self._current_slots())]

    def submit_round(self, decision: RoundDecision | Mapping[str, Any], raw: str | None = None):
        """Run an LLM round (prune, activate, open, search as single steps), then close the round.

        Returns the usual ``(obs, reward, terminated, truncated, info)``;
        ``info["errors"]`` lists refused parts of the decision.
        """
        state = self._require()
        if state.stopped:
            raise RuntimeError("the episode is over; call reset()")
        if not isinstance(decision, RoundDecision):
            decision = RoundDecision(**dict(decision))
        state.counters.evaluator_calls += 1
        gi = state.gi
        cands = frontier_candidates(state, self._current_slots())
        if self._observers:
            self._notify("round", decision=decision, raw=raw, candidates=cands)
        errors: list[str] = []
        reward = 0.0
        last: OpResult | None = None

        def refuse(op: str, target: str, why: str) -> None:
            """A part of the decision that names no valid target: reported, shown in the recent trace."""
            errors.append(f"{op}({target}): {why}")
            self._recent.append((op, target, False, why))

        def run(op: Op, node: int, **kw: Any) -> None:
            nonlocal reward, last
            if state.stopped:
                return
            last = self._single(op, node, auto_close=False, **kw)
            reward += self._take_reward()
            if last.error:
                target = gi.node_ids[node] if 0 <= node < gi.n_nodes else (kw.get("query_text") or "")
                errors.append(f"{OP_NAMES[op]}({target}): {last.error}")

        for p in decision.prune:
            v = gi.graph.index_of.get(p.node_id)
            if v is None:
                refuse("PruneNode", p.node_id, "unknown node id")
            else:
                run(Op.PRUNE, v, reason=p.reason)
        acts = list(decision.activate)
        if len(acts) > self.budget.m:
            refuse("Activate", ",".join(map(str, acts[self.budget.m:])),
                   f"at most m={self.budget.m} activations per round; ignored")
            acts = acts[: self.budget.m]
        for n in acts:
            if not 1 <= n <= len(cands):
                refuse("Activate", str(n), f"no candidate numbered {n}")
                continue
            v = cands[n - 1]
            run(Op.ACTIVATE_PAGE if gi.is_page[v] else Op.ACTIVATE_NODE, v)
        for nid in decision.open:
            v = gi.graph.index_of.get(nid)
            if v is None:
                refuse("OpenNode", nid, "unknown node id")
            else:
                run(Op.OPEN_NODE, v)
        if decision.search is not None and decision.search.strip():
            run(Op.SEARCH, -1, query_text=decision.search.strip(), free_text=True)
        if not state.stopped:
            if decision.stop:
                run(Op.STOP, -1)
            else:
                self._close_round("submitted")
                reward += self._take_reward()
        res = last or OpResult(Op.STOP, -1, True)
        self._pending_reward = reward
        return self._result(res, errors, operation="SubmitRound")

    def operate(self, op: str | Op, node: str | int | None = None, query: str | None = None,
                reason: str | None = None):
        """One operation addressed by node id (or index) instead of slot; rounds close as in ``step``.

        For scripted policies and tool-calling LLMs (:mod:`mage_gym.agent`); SearchEvidence takes
        ``query`` (free text) or a node; ``reason`` (a prune's) goes to the trace.
        """
        state = self._require()
        if state.stopped:
            raise RuntimeError("the episode is over; call reset()")
        op = OP_BY_NAME[op] if isinstance(op, str) else Op(op)
        v = -1
        if node is not None:
            v = state.gi.graph.index_of.get(node, -1) if isinstance(node, str) else int(node)
        if op == Op.SEARCH and query is not None:
            res = self._single(op, -1, query_text=query, free_text=True, auto_close=True)
        else:
            res = self._single(op, v, auto_close=True, reason=reason)
        return self._result(res, [res.error] if res.error else [])

    def cost_so_far(self, operations: int, calls: int) -> tuple[int, float, dict[str, float]]:
        """``(tokens, cost, parts)``: the terminal cost's formula on what the reader would get now, with this
        env's own caps, for ``operations`` and ``calls`` counted by the caller (a chat env counts a whole
        conversation). Needs no gold: safe as a per-turn process figure."""
        from mage_gym import reward as R

        tokens = int(self.render().tokens)
        cost, parts = R.cost(tokens, operations, calls, self.reward_config, self._op_cap, self._call_cap)
        return tokens, cost, parts

    def count_controller_call(self, raw: str | None = None) -> None:
        """Count one reply of an LLM controller that acts through single operations (tool calls).

        Why: the reward's cost counts evaluator calls, and :meth:`submit_round`
        counts one per round; a controller that sends its operations as tool
        calls through :meth:`operate` (:mod:`mage_gym.agent`) must pay for each
        model reply the same way. Traces record it as a ``round`` with an empty
        decision, which :func:`mage_gym.trace.replay` counts again.
        """
        state = self._require()
        if state.stopped:
            raise RuntimeError("the episode is over; call reset()")
        state.counters.evaluator_calls += 1
        if self._observers:
            self._notify("round", decision=RoundDecision(), raw=raw, candidates=[])

    # --- the one place operations happen ---------------------------------------------------

    def _single(self, op: Op, node: int, slot: int | None = None, query_text: str | None = None,
                free_text: bool = False, auto_close: bool = True, reason: str | None = None,
                phase: str = "policy") -> OpResult:
        state = self.state
        assert state is not None and self.rel is not None
        gi = state.gi
        query = None
        if op == Op.STOP:
            res = OpResult(Op.STOP, -1, True)
        else:
            search = None
            if op == Op.SEARCH:
                query, search = self.retrieval.search(gi, self.rel, node, query_text, free_text)
            res = apply_operation(state, op, node, search, free_text)
            self._invalidate()
        if self._observers:
            self._notify("operation", op=op, node=node, slot=slot, query=query, free_text=free_text,
                         reason=reason, result=res, auto_close=auto_close, phase=phase)
        if op != Op.STOP:
            target = gi.node_ids[node] if 0 <= node < gi.n_nodes else (query_text or "")
            self._recent.append((OP_NAMES[op], target, res.ok, res.error))
        if phase == "final_pass":
            return res
        if op == Op.STOP:
            state.counters.steps += 1
            self._finish("stop")
        else:
            if res.ok and res.ends_round and auto_close:
                self._close_round("search" if op == Op.SEARCH else "activations")
            state.counters.steps += 1
            if not state.stopped and state.counters.steps >= self.budget.max_steps:
                self._finish("step_cap")
        if self._observers:
            self._notify("operation_done")
        return res

    def _close_round(self, reason: str) -> None:
        state = self.state
        assert state is not None
        state.counters.round += 1
        state.counters.round_acts = 0
        self._invalidate()
        if self._observers:
            self._notify("round_end", round=state.counters.round - 1, reason=reason)
        if state.counters.round >= self.budget.T:
            self._finish("max_rounds")

    def _final_pass(self) -> None:
        """Open up to the remaining B activated elements, most relevant first (reference behaviour)."""
        state = self.state
        assert state is not None and self.rel is not None
        gi = state.gi
        el = np.flatnonzero(state.node_state[gi.n_pages:] == ACTIVATED) + gi.n_pages
        if not len(el) or state.opens_left <= 0:
            return
        meter = state.tokens
        if meter is None:
            el = el[np.lexsort((el, -self.rel.features[el, 0]))][: state.opens_left]
            for v in el.tolist():
                self._single(Op.OPEN_NODE, v, phase="final_pass")
            return
        # under a token budget: the most relevant elements that still fit, until B is used
        for v in el[np.lexsort((el, -self.rel.features[el, 0]))].tolist():
            if state.opens_left <= 0:
                break
            if meter.after_open(v) <= meter.limit:
                self._single(Op.OPEN_NODE, v, phase="final_pass")

    def _finish(self, reason: str) -> None:
        state = self.state
        loaded = self._loaded
        assert state is not None and loaded is not None
        if self.final_open_pass:
            self._final_pass()
        state.stopped = True
        state.stop_reason = reason
        self._invalidate()
        graph = state.gi.graph
        conv = self._conv
        assert conv is not None
        question, gold = loaded.turn(conv.turn)
        asked = reader_question(conv.history(), question)  # a follow-up comes with the earlier turns
        rendered = render(graph, state, self.render_mode, asked, self.render_config, _fragment_memo(state.gi))
        out: ReaderOutput = self.reader.read(rendered)
        state.counters.reader_calls += 1
        outcome = score_episode(graph, gold, rendered, out, bool(self.reader.answers), state.counters,
                                self.reward_config, self._op_cap, self._call_cap, reason)
        self._pending_reward += outcome.reward
        if conv.is_conversation:
            conv.finished.append(TurnRecord(question, out.answer, outcome, reason))
            conv.acts_used += state.counters.acts_used
            if not conv.last_turn:
                self._turn_info = {"turn_end": True, "ended_turn": conv.turn, "answer": out.answer}
                if self._observers:
                    self._notify("turn_end", turn=conv.turn, reason=reason, outcome=outcome, rendered=rendered,
                                 reader_output=out)
                self._start_turn(conv.turn + 1)
                return
            outcome = aggregate_outcomes(conv.finished)
        self._terminal = {"outcome": outcome, "rendered": rendered, "reader_output": out}
        if self._observers:
            self._notify("end", reason=reason, outcome=outcome, rendered=rendered, reader_output=out)

    def _start_turn(self, turn: int) -> None:
        """The next question of a conversation: its relevance, the carried working subgraph, its free entry pages."""
        conv, loaded, old = self._conv, self._loaded, self.state
        assert conv is not None and loaded is not None and old is not None
        conv.turn = turn
        question, _ = loaded.turn(turn)
        rel = self.retrieval.relevance(loaded.graph, question)
        budget = conv.turn_budget(self.budget)
        meter = self._meter(old.gi, reader_question(conv.history(), question))
        if self.carry_over:
            state = carry_state(old, budget, rel.rank_of, meter)
        else:
            state = EvidenceState.new(old.gi, budget, rel.rank_of)
            state.tokens = meter
        # the new question's entry pages are free; pages already held cost nothing
        skipped = activate_entry_pages(state, [p for p in rel.page_order[: self.budget.k].tolist()
                                                if state.node_state[p] == UNVISITED])
        if meter is not None:
            meter.skipped = meter.skipped + tuple(skipped)
            self._turn_skipped = list(meter.skipped)
        self._prev_question_vec = self._question_vec
        self.rel, self.state, self._question = rel, state, question
        self._question_vec = question_features(rel)
        self._table = node_table(state, rel)
        self._invalidate()
        self._recent.clear()
        if self._observers:
            self._notify("turn_start", turn=turn, question=question)

    # --- replay hooks (mage_gym.trace.replay) ----------------------------------------------

    def replay_step(self, record: Mapping[str, Any]) -> OpResult:
        state = self._require()
        op = OP_BY_NAME[record["op"]]
        nid = record.get("node_id")
        node = state.gi.graph.index_of[nid] if nid else -1
        free = bool(record.get("free_text"))
        res = self._single(op, node, slot=record.get("slot"), query_text=record.get("query") if free else None,
                           free_text=free, auto_close=bool(record.get("auto_close", True)),
                           reason=record.get("reason"))
        self._pending_reward = 0.0
        return res

    def replay_round(self, record: Mapping[str, Any]) -> None:
        self._require().counters.evaluator_calls += 1

    def replay_round_end(self, record: Mapping[str, Any]) -> None:
        if not self._require().stopped:
            self._close_round(str(record.get("reason", "submitted")))

    def replay_end(self, record: Mapping[str, Any]) -> None:
        if not self._require().stopped:
            self._finish(str(record.get("stop_reason", "stop")))

    # --- internals -------------------------------------------------------------------------

    def _invalidate(self) -> None:
        self._slots = None
        self._mask = None

    def _current_slots(self) -> np.ndarray:
        if self._slots is None:
            state = self._require()
            self._slots, self._n_slots = fill_slots(state, self.rel.order, self.K)
        return self._slots

    def _observation(self) -> dict[str, Any]:
        slots = self._current_slots()
        obs: dict[str, Any] = build_observation(self._require(), self._table, slots, self._n_slots,
                                                self._question_vec)
        if TURN_KEY in self.observation_keys:
            obs[TURN_KEY] = turn_features(self.turn, self._require_loaded().n_turns)
        if PREV_QUESTION_KEY in self.observation_keys:
            obs[PREV_QUESTION_KEY] = self._prev_question_vec.copy()
        if TEXT_KEY in self.observation_keys:
            obs[TEXT_KEY] = text_observation(self.text_view())
        if len(obs) != len(self.observation_keys):
            obs = {k: obs[k] for k in self.observation_keys}
        return obs

    def _take_reward(self) -> float:
        r, self._pending_reward = self._pending_reward, 0.0
        return r

    def _result(self, res: OpResult, errors: Sequence[str], operation: str | None = None):
        state = self._require()
        reward = self._take_reward()
        gi = state.gi
        info: dict[str, Any] = {
            "last_action_error": "; ".join(e for e in errors if e),
            "operation": operation or OP_NAMES[res.op],
            "node_id": gi.node_ids[res.node] if 0 <= res.node < gi.n_nodes else None,
            "round": state.counters.round,
            "steps": state.counters.steps,
        }
        if len(errors) > 1 or (errors and res.error is None):
            info["errors"] = list(errors)
        if self._conv is not None and self._conv.is_conversation:
            info["turn"] = self._conv.turn
            if self._turn_info:
                info.update(self._turn_info)
                self._turn_info = {}
        if state.tokens is not None:
            info["token_budget"] = self._token_info(res.skipped + self._turn_skipped)
            self._turn_skipped = []
        truncated = state.stopped and state.stop_reason in TRUNCATING_STOP_REASONS
        if state.stopped and self._terminal is not None:
            outcome: Outcome = self._terminal["outcome"]
            info["episode_id"] = self.episode_id
            info["reward_components"] = dict(outcome.components)
            info["metrics"] = dict(outcome.metrics)
            info.update(outcome.metrics)
        return self._observation(), float(reward), bool(state.stopped and not truncated), bool(truncated), info

    @property
    def last_outcome(self) -> Outcome | None:
        """Reward components and metrics of the finished episode (None before the end)."""
        return None if self._terminal is None else self._terminal["outcome"]

    @property
    def last_render(self) -> RenderedInput | None:
        """The reader input of the finished episode (None before the end)."""
        return None if self._terminal is None else self._terminal["rendered"]

    @property
    def last_reader_output(self) -> ReaderOutput | None:
        return None if self._terminal is None else self._terminal["reader_output"]

