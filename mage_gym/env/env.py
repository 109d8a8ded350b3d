"""MageRAGEnv: one (document graph, question) episode as a Gymnasium environment.

State: the node-state table and the budget vector (:mod:`mage_gym.env.state`).
Actions: the six controller operations over ``K`` candidate slots
(:mod:`mage_gym.env.actions`, :mod:`mage_gym.env.candidates`). Reward: paid at
termination, support - lambda1 * noise - lambda2 * cost (:mod:`mage_gym.reward`).

Two interfaces, one transition:
- learned policies call :meth:`MageRAGEnv.step` with a flat action and read
  :meth:`MageRAGEnv.action_masks` (sb3-contrib MaskablePPO);
- LLM policies read :meth:`MageRAGEnv.text_view` and call
  :meth:`MageRAGEnv.submit_round` with a :class:`RoundDecision`;
- scripted policies may call :meth:`MageRAGEnv.operate` with node ids.
All three run :meth:`MageRAGEnv._single`, the only place operations happen.

No gold reaches a policy: the episode's answer, format, evidence and flags are
read only in :meth:`MageRAGEnv._finish` (reward and metrics, after the last
decision) and by the optional shaping term (reward only).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from mage_gym.env.actions import (
    OP_BY_NAME, OP_NAMES, Op, OpResult, action_mask, apply_operation, decode_action, n_actions,
)
from mage_gym.env.budget import Budget
from mage_gym.env.candidates import fill_slots
from mage_gym.env.episodes import LoadedEpisode, as_provider
from mage_gym.env.graph_index import GraphIndex, graph_index
from mage_gym.env.observation import build_observation, node_table, observation_space, question_features
from mage_gym.env.relevance import (
    EpisodeRelevance, QueryFn, cached_query, default_query_fn, episode_relevance, node_query,
    search_page_scores, shared_retriever,
)
from mage_gym.env.state import ACTIVATED, EvidenceState
from mage_gym.env.text_view import build_text_view, frontier_candidates, recent_buffer
from mage_gym.readers.base import Reader, ReaderOutput, RenderedInput
from mage_gym.render import RENDER_MODES, RenderConfig, render, rendered_summary
from mage_gym.retrieval.base import Query, Retriever
from mage_gym import reward as R
from mage_gym.trace import TraceRecorder, final_states

DEFAULT_K = 64


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


class MageRAGEnv(gym.Env):
    """Evidence-controller environment (see module docstring and README).

    Parameters (all plain values, so Hydra configs map onto them):
    ``episodes`` pairs ``(Episode, EvidenceGraph)`` / :class:`EnvEpisode`, or
    Episodes (graphs built lazily), or a provider; ``budget`` a
    :class:`Budget` or mapping with k, m, M, T, B; ``K`` slots; ``render_mode``
    ``visual`` or ``text`` (the reader input); ``reward`` a
    :class:`~mage_gym.reward.RewardConfig` or mapping; ``reader`` ``"oracle"``,
    a reader name for ``mage_gym.readers.get_reader`` or a Reader;
    ``retriever`` a name (shared per process) or a Retriever; ``query_fn``
    text -> Query (default MiniLM ``make_query``); ``final_open_pass`` opens
    up to the remaining ``B`` activated elements by relevance at stop (the
    reference's behaviour, off by default); ``trace_path`` appends JSONL
    traces; ``record_trace`` keeps the current episode's records in
    ``env.trace.records``; ``text_view_in_info`` adds ``info["text_view"]``.
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 1}

    def __init__(self, episodes: Any = None, budget: Budget | Mapping[str, int] | None = None, K: int = DEFAULT_K,
                 render_mode: str = "visual", reward: R.RewardConfig | Mapping[str, Any] | None = None,
                 reader: str | Reader = "oracle", reader_cfg: Mapping[str, Any] | None = None,
                 retriever: str | Retriever = "hybrid", retriever_cfg: Mapping[str, Any] | None = None,
                 query_fn: QueryFn | None = None, final_open_pass: bool = False,
                 trace_path: str | None = None, record_trace: bool = False, text_view_in_info: bool = False,
                 render_config: RenderConfig | Mapping[str, Any] | None = None, parser: str = "layout",
                 max_graphs: int = 4, graph_kwargs: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {RENDER_MODES}, got {render_mode!r}")
        if int(K) < 1:
            raise ValueError(f"K must be >= 1, got {K}")
        self.provider = as_provider(episodes, parser=parser, max_graphs=max_graphs, graph_kwargs=graph_kwargs)
        self.budget = Budget.coerce(budget)
        self.K = int(K)
        self.render_mode = render_mode
        self.reward_config = R.RewardConfig.coerce(reward)
        self.render_config = RenderConfig.coerce(render_config)
        self.reader = self._make_reader(reader, reader_cfg)
        self.retriever: Retriever = (shared_retriever(retriever, **dict(retriever_cfg or {}))
                                     if isinstance(retriever, str) else retriever)
        self.query_fn: QueryFn = query_fn or default_query_fn
        self.final_open_pass = bool(final_open_pass)
        self.text_view_in_info = bool(text_view_in_info)
        self.trace: TraceRecorder | None = (TraceRecorder(trace_path) if (trace_path or record_trace) else None)
        self.observation_space = observation_space(self.K)
        self.action_space = spaces.Discrete(n_actions(self.K))
        self._op_cap = self.reward_config.op_cap or self.budget.max_steps
        self._call_cap = self.reward_config.call_cap or (self.budget.T + 1)
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
        self._seed: int | None = None
        self._gold_mask_key: tuple | None = None
        self._table: np.ndarray | None = None
        self._n_slots = 0
        self._gold_mask_value: np.ndarray | None = None

    # --- construction helpers ------------------------------------------------------

    @staticmethod
    def _make_reader(reader: str | Reader, cfg: Mapping[str, Any] | None) -> Reader:
        if not isinstance(reader, str):
            return reader
        if reader == "oracle" and not cfg:
            from mage_gym.readers.oracle import OracleReader

            return OracleReader()
        from mage_gym.readers import get_reader

        return get_reader(reader, **dict(cfg or {}))

    # --- public read-only views ------------------------------------------------------

    @property
    def graph(self):
        return self._require().gi.graph

    @property
    def episode_id(self) -> str:
        return self._require_loaded().episode.episode_id

    @property
    def question(self) -> str:
        return self._require_loaded().episode.question

    @property
    def public_episode(self) -> dict[str, str]:
        """What a policy may know about the episode (id, document, question)."""
        return self._require_loaded().episode.public_view()

    @property
    def episode_ids(self) -> list[str]:
        return self.provider.ids

    @property
    def slots(self) -> np.ndarray:
        """intp [K]: node index per slot (-1 empty)."""
        return self._current_slots().copy()

    def slot_node_ids(self) -> list[str | None]:
        ids = self._require().gi.node_ids
        return [ids[v] if v >= 0 else None for v in self._current_slots().tolist()]

    def _require(self) -> EvidenceState:
        if self.state is None:
            raise gym.error.ResetNeeded("call reset() before using the environment")
        return self.state

    def _require_loaded(self) -> LoadedEpisode:
        if self._loaded is None:
            raise gym.error.ResetNeeded("call reset() before using the environment")
        return self._loaded

    # --- Gymnasium API -------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        ids = self.provider.ids
        eid = options.get("episode_id")
        if eid is None:
            eid = ids[int(self.np_random.integers(len(ids)))]
        loaded = self.provider.get(str(eid))
        gi = graph_index(loaded.graph)
        rel = episode_relevance(loaded.graph, loaded.episode.question, self.retriever, self.query_fn)
        state = EvidenceState.new(gi, self.budget, rel.rank_of)
        entry = rel.page_order
        window = loaded.episode.page_window
        if window is not None:  # pages outside the episode's window are out of play from the start
            lo, hi = max(0, int(window[0])), min(gi.n_pages - 1, int(window[1]))
            inside = np.zeros(gi.n_pages, dtype=bool)
            inside[lo: hi + 1] = True
            if inside.any():
                state.block_pages(np.flatnonzero(~inside))
                entry = entry[inside[entry]]
        for p in entry[: self.budget.k].tolist():
            state.activate(p)
            state.counters.free_acts += 1
        self._loaded, self.gi, self.rel, self.state = loaded, gi, rel, state
        self._question_vec = question_features(rel)
        self._table = node_table(state, rel)  # shared per (graph, question) in the process
        self._invalidate()
        self._recent.clear()
        self._pending_reward = 0.0
        self._terminal = None
        self._episode_counter += 1
        self._seed = seed
        self._potential = self._phi() if self.reward_config.shaping else 0.0
        if self.trace is not None:
            self.trace.start({
                "kind": "reset", "episode": self._episode_counter, "episode_id": loaded.episode.episode_id,
                "doc_id": loaded.episode.doc_id, "question": loaded.episode.question, "seed": seed,
                "budget": self.budget.to_dict(), "K": self.K, "render_mode": self.render_mode,
                "entry_pages": [gi.node_ids[p] for p in state.activation_order],
                "retriever": getattr(self.retriever, "name", type(self.retriever).__name__),
            })
        info: dict[str, Any] = {"episode_id": loaded.episode.episode_id, "doc_id": loaded.episode.doc_id,
                                "last_action_error": ""}
        if self.text_view_in_info:
            info["text_view"] = self.text_view()
        return self._observation(), info

    def step(self, action: int):
        state = self._require()
        if state.stopped:
            raise RuntimeError("the episode is over; call reset()")
        op, slot = decode_action(int(action), self.K)
        node = -1 if op == Op.STOP else int(self._current_slots()[slot])
        res = self._single(op, node, slot=slot, auto_close=True)
        return self._result(res, [res.error] if res.error else [])

    def action_masks(self) -> np.ndarray:
        """bool [1 + 5K]: valid flat actions (sb3-contrib MaskablePPO reads this)."""
        state = self._require()
        if self._mask is None:
            slots = self._current_slots()
            self._mask = action_mask(state, slots, self._n_slots)
        return self._mask.copy()

    def render(self) -> RenderedInput:
        """The reader input the current working subgraph would give (images stay lazy)."""
        return render(self.graph, self._require(), self.render_mode, self.question, self.render_config)

    def close(self) -> None:
        self.state = None

    # --- LLM and scripted interfaces -----------------------------------------------------

    def text_view(self) -> str:
        """The state as escaped XML text for LLM policies (no gold in it)."""
        state = self._require()
        return build_text_view(state, self.question, self._current_slots(), list(self._recent))

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
        if self.trace is not None:
            self.trace.add({"kind": "round", "episode": self._episode_counter, "episode_id": self.episode_id,
                            "round": state.counters.round, "decision": decision.to_dict(), "raw": raw,
                            "candidates": [gi.node_ids[v] for v in cands]})
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

    def operate(self, op: str | Op, node: str | int | None = None, query: str | None = None):
        """One operation addressed by node id (or index) instead of slot; rounds close as in ``step``.

        For scripted policies; SearchEvidence takes ``query`` (free text) or a node.
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
            res = self._single(op, v, auto_close=True)
        return self._result(res, [res.error] if res.error else [])

    # --- the one place operations happen ---------------------------------------------------

    def _single(self, op: Op, node: int, slot: int | None = None, query_text: str | None = None,
                free_text: bool = False, auto_close: bool = True, reason: str | None = None,
                phase: str = "policy") -> OpResult:
        state = self.state
        assert state is not None
        gi = state.gi
        record: dict[str, Any] | None = None
        if op == Op.STOP:
            res = OpResult(Op.STOP, -1, True)
        else:
            search: Callable[[], np.ndarray] | None = None
            query: Query | None = None
            if op == Op.SEARCH:
                if free_text:
                    query = cached_query(self.query_fn, query_text or "")
                elif 0 <= node < gi.n_nodes:
                    query = node_query(self.rel.query, gi.text(node), gi.vectors[node])
                if query is not None:
                    q = query
                    search = lambda: search_page_scores(gi.graph, self.retriever, q)  # noqa: E731
            res = apply_operation(state, op, node, search, free_text)
            self._invalidate()
        if self.trace is not None:
            record = {
                "kind": "step", "episode": self._episode_counter, "episode_id": self._loaded.episode.episode_id,
                "t": state.counters.steps, "round": state.counters.round, "phase": phase,
                "op": OP_NAMES[op], "node_id": gi.node_ids[node] if 0 <= node < gi.n_nodes else None,
                "slot": slot, "free_text": free_text, "query": query.text if op == Op.SEARCH and query else None,
                "reason": reason, "ok": res.ok, "error": res.error,
                "changed": [gi.node_ids[v] for v in res.changed], "auto_close": auto_close,
            }
            self.trace.add(record)
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
        if self.reward_config.shaping:
            phi = 0.0 if state.stopped else self._phi()
            self._pending_reward += self.reward_config.shaping_scale * (
                self.reward_config.shaping_gamma * phi - self._potential)
            self._potential = phi
        if record is not None:
            record["budget_left"] = state.budget_left()
        return res

    def _close_round(self, reason: str) -> None:
        state = self.state
        assert state is not None
        state.counters.round += 1
        state.counters.round_acts = 0
        self._invalidate()
        if self.trace is not None:
            self.trace.add({"kind": "round_end", "episode": self._episode_counter, "episode_id": self.episode_id,
                            "round": state.counters.round - 1, "reason": reason})
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
        el = el[np.lexsort((el, -self.rel.features[el, 0]))][: state.opens_left]
        for v in el.tolist():
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
        episode = loaded.episode
        rendered = render(graph, state, self.render_mode, episode.question, self.render_config)
        out: ReaderOutput = self.reader.read(rendered)
        state.counters.reader_calls += 1
        gold = loaded.gold
        opened, pages = R.rendered_masks(graph, rendered)
        covered = R.coverage(gold, opened, pages, graph.node_page)
        support = R.answer_support(episode, out.answer) if self.reader.answers else \
            R.oracle_support(episode, gold, covered)
        is_gold = self._gold_mask(loaded)
        noise = R.noise(graph, gold, rendered, is_gold)
        c = state.counters
        calls = c.reader_calls + c.evaluator_calls
        cost, parts = R.cost(rendered.tokens, c.operations, calls, self.reward_config, self._op_cap, self._call_cap)
        total = R.total_reward(support, noise, cost, self.reward_config)
        components = {
            "reward": total, "support": support, "noise": noise, "cost": cost, **parts,
            "lambda_noise": self.reward_config.lambda_noise, "lambda_cost": self.reward_config.lambda_cost,
            "gold_coverage": float(covered.mean()) if len(covered) else None,
        }
        metrics = R.episode_metrics(graph, gold, rendered, covered, opened, is_gold)
        metrics.update({
            "operations": c.operations, "reader_calls": c.reader_calls, "evaluator_calls": c.evaluator_calls,
            "stop_reason": reason, "steps": c.steps, "rounds": c.round, "activations": c.acts_used,
            "opens": c.opens_used, "searches": c.searches, "invalid_actions": c.invalid,
        })
        self._pending_reward += total
        self._terminal = {"components": components, "metrics": metrics, "rendered": rendered, "reader_output": out}
        if self.trace is not None:
            self.trace.end({
                "kind": "end", "episode": self._episode_counter, "episode_id": episode.episode_id,
                "stop_reason": reason, "final_states": final_states(graph, state.node_state),
                "rendered": rendered_summary(rendered),
                "reader_output": {"answer": out.answer, "raw": out.raw, "cached": out.cached, "error": out.error},
                "reward_components": components, "metrics": metrics,
            })

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

    def _gold_mask(self, loaded: LoadedEpisode) -> np.ndarray:
        """Per-node "not noise" mask of the current episode (reward only), computed once per episode."""
        key = (id(loaded.graph), loaded.episode.episode_id)
        if self._gold_mask_key != key:
            self._gold_mask_value = R.gold_node_mask(loaded.graph, loaded.gold)
            self._gold_mask_key = key
        return self._gold_mask_value

    def _phi(self) -> float:
        state, loaded = self.state, self._loaded
        assert state is not None and loaded is not None
        return R.potential(loaded.gold, state.node_state, state.gi.node_page, state.gi.n_pages,
                           self.render_mode == "visual", loaded.episode.answerable)

    def _invalidate(self) -> None:
        self._slots = None
        self._mask = None

    def _current_slots(self) -> np.ndarray:
        if self._slots is None:
            state = self._require()
            self._slots, self._n_slots = fill_slots(state, self.rel.order, self.K)
        return self._slots

    def _observation(self) -> dict[str, np.ndarray]:
        slots = self._current_slots()
        return build_observation(self._require(), self._table, slots, self._n_slots, self._question_vec)

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
        if self.text_view_in_info and not state.stopped:
            info["text_view"] = self.text_view()
        if state.stopped and self._terminal is not None:
            info["episode_id"] = self.episode_id
            info["reward_components"] = dict(self._terminal["components"])
            info["metrics"] = dict(self._terminal["metrics"])
            info.update(self._terminal["metrics"])
        return self._observation(), float(reward), bool(state.stopped), False, info

    @property
    def last_render(self) -> RenderedInput | None:
        """The reader input of the finished episode (None before the end)."""
        return None if self._terminal is None else self._terminal["rendered"]

    @property
    def last_reader_output(self) -> ReaderOutput | None:
        return None if self._terminal is None else self._terminal["reader_output"]
