"""``MageRAG-Chat-v0``: the evidence controller as a chat - one assistant message in, new chat messages out.

Why a chat env beside ``MageRAG-v0``: LLM controllers are trained and served
as chat models calling tools. This env speaks that protocol over the same
transition (it drives an inner ``MageRAG-v0`` through its public API:
``operate`` by node id, ``text_view``, ``render``), so its episodes, rewards
and metrics are the benchmark's own.

## Action Space

One assistant message (:class:`~mage_gym.agent.spaces.AssistantMessage`): text
carrying tool calls (``<tool_call>{json}</tool_call>``, a JSON tool call, or
the paper's ``<agent_decision>`` XML), a message dict (OpenAI ``tool_calls``),
or a list of tool-call dicts. Tools: :data:`mage_gym.agent.tools.TOOLS`. Calls
run in order, each as one operation with the step-level round rules (a round
closes when its ``m`` activations are used or after a search), so the same
calls give the same state however they are grouped into messages. Each reply
counts as one controller call in the reward's cost.

## Observation Space

The new chat messages (:class:`~mage_gym.agent.spaces.ChatMessages`). At reset:
the system message (role, tools, rules) and the user message with the
question, budget, evidence held and numbered candidates. After each step: the
result of every call and what changed (:mod:`mage_gym.agent.view`); as one
``tool`` message per call when the calls came with OpenAI ids, else as one
``user`` message (``feedback_role`` overrides). With ``vision=True`` newly
activated pages and opened visual elements come as image parts
(``{"type": "image", "image": PIL.Image}``; :func:`to_openai_messages` turns
them into ``image_url`` data URIs). No gold is in any message.

## Rewards

The inner env's terminal reward (support - noise - cost), paid at the last
step, with ``info["reward_components"]`` and ``info["metrics"]``. Every step's
``info["process"]`` holds what needs no gold: the cost spent so far (the
terminal cost's own formula on the current state), the budget left, format
errors and invalid calls (docs/LLM_TRAINING.md says which are safe as process
rewards).

## Bad input

A malformed or invalid call is answered with a message saying exactly what
was wrong, counted in ``info`` (``format_errors``: unreadable, unknown tool,
bad arguments; ``invalid_calls``: well-formed but refused, e.g. a number
never shown, a spent budget), and costs one step against the step cap
``T * (m + B + 2)``; a message with no call at all costs one step too. At the
cap the episode is truncated: the reader reads what was gathered and the
terminal reward is paid. Nothing a model writes raises.

## Episode End

Terminated by ``stop``, by the budget's last round, or when the inner env
ends; truncated at the step cap.

## Arguments

``episodes`` (as for ``MageRAG-v0``), ``dataset`` (the task ids' dataset
name; by default the episodes' benchmark), ``budget`` (default budget; a task
id brings its own), ``max_candidates``, ``preview_chars``, ``summary_chars``,
``content_chars`` (:class:`~mage_gym.agent.view.ChatView`), ``vision``,
``max_images_per_turn``, ``max_calls_per_message``, ``feedback_role``
(``auto`` | ``tool`` | ``user``), ``tools_in_prompt``, ``numeric_obs_in_info``
(the inner numeric observation and mask in ``info``, for step-level teachers);
other keywords go to ``MageRAG-v0`` (reader, retriever, K, reward, query_fn,
render_mode, trace_path, ...).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import gymnasium as gym

from mage_gym.agent.parse import ParsedCall, ParsedMessage, parse_message
from mage_gym.agent.prompts import system_prompt, user_intro
from mage_gym.agent.spaces import AssistantMessage, ChatMessages
from mage_gym.agent.tasks import TaskId, dataset_label
from mage_gym.ids import CHAT_ENV_ID  # registered by ``import mage_gym``
from mage_gym.agent.view import ChatView, ViewSnapshot, budget_numbers, parse_text_view
from mage_gym.env.budget import Budget
from mage_gym.env.episodes import SealedSpec, as_provider, choose_episode_id

__all__ = ["CHAT_ENV_ID", "CallResult", "EPISODE_ENDED", "MageChatEnv", "episode_ended_text", "fingerprint",
           "make_chat_env", "text_of", "to_openai_messages"]
FEEDBACK_ROLES = ("auto", "tool", "user")


def pop_provider_settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the episode provider's settings (``parser``, ``max_graphs``, ``graph_kwargs``) out of ``kwargs``,
    with :func:`~mage_gym.env.episodes.as_provider`'s defaults: what every chat-env builder passes to it."""
    return {"parser": kwargs.pop("parser", "layout"), "max_graphs": kwargs.pop("max_graphs", 4),
            "graph_kwargs": kwargs.pop("graph_kwargs", None)}


@dataclass(frozen=True)
class CallResult:
    """What one call did: the line the model reads, and whether it was malformed or refused."""

    call: ParsedCall
    text: str
    format_error: bool = False
    invalid: bool = False


#: How the message that ends an episode opens: every ending (stop, the step cap, a trainer's finish) says it, and
#: no other message does. A trainer reads it to end a rollout at its episode's end (experiments/train_llm.py).
EPISODE_ENDED = "The episode ended ("


def episode_ended_text(reason: str) -> str:
    """The state line of the message that ends an episode."""
    return f"{EPISODE_ENDED}{reason}); the reader reads the evidence."


class MageChatEnv(gym.Env):
    """See the module docstring (Gymnasium-style sections)."""

    metadata = {"render_modes": []}

    def __init__(self, episodes: Any = None, *, dataset: str | None = None,
                 budget: Budget | Mapping[str, int] | None = None, max_candidates: int = 16,
                 preview_chars: int = 120, summary_chars: int = 200, content_chars: int = 1200,
                 vision: bool = False, max_images_per_turn: int = 4, max_calls_per_message: int = 8,
                 feedback_role: str = "auto", tools_in_prompt: bool = True, numeric_obs_in_info: bool = False,
                 inner: gym.Env | None = None, **env_kwargs: Any) -> None:
        super().__init__()
        if feedback_role not in FEEDBACK_ROLES:
            raise ValueError(f"feedback_role must be one of {FEEDBACK_ROLES}, got {feedback_role!r}")
        if int(max_candidates) < 1 or int(max_calls_per_message) < 1:
            raise ValueError("max_candidates and max_calls_per_message must be >= 1")
        items = list(episodes) if isinstance(episodes, (list, tuple)) else None
        self.dataset = str(dataset) if dataset else (dataset_label(items) if items else "custom")
        self._inners: dict[Budget, gym.Env] = {}
        self._owns_inners = inner is None
        if inner is not None:  # drive an env someone else built (the benchmark's, with its wrappers)
            if episodes is not None or env_kwargs:
                raise TypeError("MageChatEnv(inner=env) takes no episodes or env keywords: the env has them")
            self._provider = None
            self.budget = inner.get_wrapper_attr("budget")
            self._inners[self.budget] = inner
        else:
            self._provider = as_provider(episodes, **pop_provider_settings(env_kwargs))
            self.budget = Budget.coerce(budget)
        self._env_kwargs = env_kwargs
        self.view = ChatView(int(max_candidates), int(preview_chars), int(summary_chars), int(content_chars))
        self.vision = bool(vision)
        self.max_images_per_turn = int(max_images_per_turn)
        self.max_calls_per_message = int(max_calls_per_message)
        self.feedback_role = feedback_role
        self.tools_in_prompt = bool(tools_in_prompt)
        self.numeric_obs_in_info = bool(numeric_obs_in_info)
        self.observation_space = ChatMessages()
        self.action_space = AssistantMessage()
        self._inner: gym.Env | None = None
        self._task: TaskId | None = None
        self._done = True
        self._totals: dict[str, int] = {}
        self._refused = 0
        self._inner_steps = 0
        self._operations = 0
        self._images_shown: set[str] = set()
        self._last_numeric: Any = None
        self._last_info: Mapping[str, Any] = {}
        self.inner_env(self.budget)  # build now: configuration errors surface at construction

    @classmethod
    def wrap(cls, env: gym.Env, **chat: Any) -> "MageChatEnv":
        """A chat env driving ``env`` (a built ``MageRAG-v0``, wrappers and all) with chat settings ``chat``."""
        return cls(inner=env, **chat)

    # --- spec and inner envs -------------------------------------------------------------------

    spec = SealedSpec()  # gym.make's keywords, the episodes sealed

    def inner_env(self, budget: Budget | None = None) -> gym.Env:
        """The ``MageRAG-v0`` stack playing ``budget`` (one per budget, all sharing the episodes)."""
        from mage_gym.make import make_mage_rag

        b = Budget.coerce(budget) if budget is not None else self.budget
        env = self._inners.get(b)
        if env is None:
            if not self._owns_inners:
                raise ValueError(f"this chat env drives one env, with budget {self.budget}; the task asks for {b}")
            env = self._inners[b] = make_mage_rag(episodes=self._provider, budget=b, **self._env_kwargs)
        return env

    @property
    def inner(self) -> gym.Env:
        """The ``MageRAG-v0`` env of the current episode (its public API: masks, text view, slots...)."""
        if self._inner is None:
            raise gym.error.ResetNeeded("call reset() before using the environment")
        return self._inner

    @property
    def task(self) -> TaskId:
        if self._task is None:
            raise gym.error.ResetNeeded("call reset() before using the environment")
        return self._task

    @property
    def episode_ids(self) -> list[str]:
        if self._provider is None:
            return list(self.inner_env().get_wrapper_attr("episode_ids"))
        return list(self._provider.ids)

    def task_id(self, episode_id: str, seed: int = 0, budget: Budget | Mapping[str, int] | None = None) -> TaskId:
        """The task id of one of this env's episodes (its document read from the episode, no gold)."""
        if self._provider is None:
            raise ValueError("a chat env driving another env knows its task ids only after reset")
        loaded = self._provider.get(episode_id)
        return TaskId(self.dataset, loaded.public.doc_id, loaded.public.episode_id,
                      Budget.coerce(budget) if budget is not None else self.budget, int(seed))

    def visible_ids(self) -> tuple[list[str], list[str]]:
        """(candidate ids listed in the last observation, evidence ids held): what the controller can name."""
        return list(self.view.listed), list(self.view.held)

    # --- Gymnasium API ---------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        asked: TaskId | None = None
        if options.get("task") is not None:
            asked = TaskId.parse(options["task"])
            if asked.dataset != self.dataset:
                raise ValueError(f"task {asked} is from dataset {asked.dataset!r}; this env plays {self.dataset!r}")
            if asked.episode_id not in set(self.episode_ids):
                raise KeyError(f"task {asked}: unknown episode {asked.episode_id!r} in dataset {self.dataset!r}")
            episode_id, budget, task_seed = asked.episode_id, asked.budget, asked.seed
        else:
            episode_id = choose_episode_id(self.episode_ids, self.np_random, options)
            budget = self.budget
            task_seed = int(self.np_random.integers(2**31 - 1)) if seed is None else int(seed)
        inner = self.inner_env(budget)
        obs, info = inner.reset(seed=task_seed, options={"episode_id": episode_id})
        public = inner.get_wrapper_attr("public_episode")
        if asked is not None and public["doc_id"] != asked.doc_id:
            raise ValueError(f"task {asked} names document {asked.doc_id!r}, but episode {episode_id!r} is on "
                             f"{public['doc_id']!r}")
        task = TaskId(self.dataset, public["doc_id"], episode_id, budget, task_seed)
        self._inner, self._task, self._done = inner, task, False
        self._totals = {"format_errors": 0, "invalid_calls": 0, "tool_calls": 0, "replies": 0}
        self._refused = self._inner_steps = self._operations = 0
        self._images_shown = set()
        self._last_numeric = obs
        self.view.reset()
        snap = self._snapshot()
        text = user_intro(snap.question) + "\n\n" + self.view.first(snap)
        messages = [{"role": "system", "content": system_prompt(self.tools_in_prompt)},
                    {"role": "user", "content": self._with_images(text, snap, first=True)}]
        out = {"task": str(task), "episode_id": task.episode_id, "doc_id": task.doc_id, **self._process(snap)}
        if self.numeric_obs_in_info:
            out.update(numeric_observation=obs, action_mask=inner.get_wrapper_attr("action_masks")())
        return messages, out

    def step(self, action: Any):
        if self._done or self._inner is None:
            raise RuntimeError("the episode is over; call reset()")
        parsed = parse_message(action)
        raw = action if isinstance(action, str) else json.dumps(action, default=str)  # the trace keeps the reply
        self._totals["replies"] += 1
        self._inner.get_wrapper_attr("count_controller_call")(raw)
        reward = 0.0
        results: list[CallResult] = []
        ended: dict[str, Any] | None = None
        calls = parsed.calls
        for i, call in enumerate(calls):
            if ended is not None:  # costs nothing: there is no episode left to charge
                res = CallResult(call, self._line(call, "not run: the episode had already ended"), invalid=True)
            elif i >= self.max_calls_per_message:
                res = CallResult(call, self._line(call, f"not run: at most {self.max_calls_per_message} tool calls "
                                                        "per message"), invalid=True)
                self._refused += 1
            elif not call.ok:
                res = CallResult(call, f"error: {call.error}", format_error=True)
                self._refused += 1
            else:
                res, r, ended = self._execute(call)
                reward += r
            results.append(res)
            if ended is None and self._steps_used() >= self._step_cap():
                r, ended = self._force_stop("step_cap")
                reward += r
        n_format = sum(r.format_error for r in results)
        n_invalid = sum(r.invalid for r in results)
        self._totals["format_errors"] += n_format
        self._totals["invalid_calls"] += n_invalid
        self._totals["tool_calls"] += sum(1 for c in calls if c.name)
        snap = None if ended is not None else self._snapshot()
        messages = self._feedback(parsed, results, snap, ended)
        info: dict[str, Any] = {
            "task": str(self.task), "parse_mode": parsed.mode, "tool_calls": len(calls),
            "format_errors": n_format, "invalid_calls": n_invalid,
            "errors": [r.text for r in results if r.format_error or r.invalid],
        }
        info.update(self._process(snap))
        terminated = truncated = False
        if ended is not None:
            self._done = True
            truncated = bool(ended.get("_truncated"))
            terminated = not truncated
            info.update({k: v for k, v in ended.items() if not k.startswith("_")})
        elif self.numeric_obs_in_info:
            info.update(numeric_observation=self._last_numeric, action_mask=self._inner.get_wrapper_attr(
                "action_masks")())
        return messages, float(reward), terminated, truncated, info

    def finish(self, reason: str = "rollout_end"):
        """End an unfinished episode without a model reply (a trainer's rollout ran out of turns or tokens).

        The reader reads what was gathered and the terminal reward is paid, as
        at the step cap; the episode counts as truncated with ``stop_reason =
        reason``. Returns the usual ``(messages, reward, terminated, truncated, info)``.
        """
        if self._done or self._inner is None:
            raise RuntimeError("the episode is over; call reset()")
        reward, ended = self._force_stop(reason)
        self._done = True
        info: dict[str, Any] = {"task": str(self.task), "parse_mode": "none", "tool_calls": 0, "format_errors": 0,
                                "invalid_calls": 0, "errors": []}
        info.update(self._process(None))
        info.update({k: v for k, v in ended.items() if not k.startswith("_")})
        return [{"role": "user", "content": episode_ended_text(reason)}], float(reward), False, True, info

    def close(self) -> None:
        if self._owns_inners:
            for env in self._inners.values():
                env.close()
            self._inners.clear()

    # --- one call --------------------------------------------------------------------------------

    def _execute(self, call: ParsedCall) -> tuple[CallResult, float, dict[str, Any] | None]:
        """Run a valid call as one operation per target; stop at the first that ends the episode."""
        args = call.arguments
        graph = self._inner.get_wrapper_attr("graph")
        index = graph.index_of
        lines: list[str] = []
        refused = 0
        reward = 0.0
        ended: dict[str, Any] | None = None
        ran = 0

        def op(name: str, node: str | None = None, query: str | None = None, reason: str | None = None) -> str | None:
            nonlocal reward, ended, ran
            obs, r, term, trunc, info = self._inner.get_wrapper_attr("operate")(name, node, query=query,
                                                                             reason=reason)
            self._inner_steps = int(info.get("steps", self._inner_steps + 1))
            self._last_numeric = obs
            self._last_info = info
            ran += 1
            reward += float(r)
            error = info.get("last_action_error") or None
            if not error and name != "Stop":
                self._operations += 1
            if term or trunc:
                ended = self._end_info(info, truncated=bool(trunc))
            return error

        if call.name == "activate":
            for n in args["candidates"]:
                if ended is not None:
                    lines.append(f"candidate {n}: not run, the episode ended")
                    continue
                node = self.view.node_of(n)
                if node is None:  # never reaches the env: costs a step here, as a refused action does there
                    lines.append(f"candidate {n}: no candidate was shown with this number")
                    refused += 1
                    self._refused += 1
                    continue
                name = "ActivatePage" if graph.is_page(node) else "ActivateNode"
                err = op(name, node)
                lines.append(f"candidate {n} ({node}): " + (f"refused: {err}" if err else "activated"))
                refused += bool(err)
        elif call.name in ("open", "prune"):
            verb = "opened" if call.name == "open" else "pruned"
            for node in args["ids"]:
                if ended is not None:
                    lines.append(f"{node}: not run, the episode ended")
                    continue
                if node not in index:
                    lines.append(f"{node}: unknown id (use ids shown in the evidence)")
                    refused += 1
                    self._refused += 1
                    continue
                err = op("OpenNode" if call.name == "open" else "PruneNode", node,
                         reason=args.get("reason") if call.name == "prune" else None)
                lines.append(f"{node}: " + (f"refused: {err}" if err else verb))
                refused += bool(err)
        elif call.name == "search":
            query = " ".join(str(args["query"]).split())
            if not query:
                lines.append("refused: the query is empty")
                refused += 1
                self._refused += 1
            else:
                err = op("SearchEvidence", query=query)
                lines.append(f"refused: {err}" if err else f"searched {query!r}" + self._search_note())
                refused += bool(err)
        elif call.name == "stop":
            op("Stop")
            lines.append("stopped: the reader reads the evidence")
        result = CallResult(call, self._line(call, "; ".join(lines) or "done"), invalid=refused > 0)
        return result, reward, ended

    def _search_note(self) -> str:
        """What the token budget left out of the last search (empty without a budget or when nothing was)."""
        info = self._last_info.get("token_budget") or {}
        skipped = info.get("skipped") or []
        if not skipped:
            return ""
        return (f"; {len(skipped)} page(s) left out, over the token budget ({info.get('left', 0)} tokens left): "
                + ", ".join(skipped))

    def _force_stop(self, reason: str) -> tuple[float, dict[str, Any]]:
        """End the episode with ``reason`` (step cap, rollout end): the reader reads, the reward is paid (truncated).

        Through the env's own end-of-episode hook (the one trace replay uses),
        so its metrics and trace say why it ended; a conversation's remaining
        questions end the same way.
        """
        end = self._inner.get_wrapper_attr("replay_end")
        for _ in range(int(self._inner.get_wrapper_attr("n_turns"))):
            end({"stop_reason": reason})
            if self._inner.get_wrapper_attr("last_outcome") is not None:
                break
        outcome = self._inner.get_wrapper_attr("last_outcome")
        info = {"reward_components": dict(outcome.components), "metrics": dict(outcome.metrics),
                "episode_id": self.task.episode_id}
        return float(outcome.reward), self._end_info(info, truncated=True)

    def _end_info(self, info: Mapping[str, Any], truncated: bool) -> dict[str, Any]:
        out = {k: info[k] for k in ("reward_components", "metrics", "episode_id") if k in info}
        out["stop_reason"] = (info.get("metrics") or {}).get("stop_reason", "stop")
        out["_truncated"] = truncated
        return out

    # --- messages ---------------------------------------------------------------------------------

    @staticmethod
    def _line(call: ParsedCall, text: str) -> str:
        return f"{call.name or 'call'}: {text}"

    def _feedback(self, parsed: ParsedMessage, results: Sequence[CallResult], snap: ViewSnapshot | None,
                  ended: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        if ended is not None:
            state = episode_ended_text(str(ended.get("stop_reason", "stop")))
        else:
            assert snap is not None
            state = self.view.update(snap)
        role = self.feedback_role
        if role == "auto":
            role = "tool" if parsed.structured else "user"
        if role == "tool" and parsed.structured:
            msgs = [{"role": "tool", "tool_call_id": r.call.call_id, "name": r.call.name or "", "content": r.text}
                    for r in results]
            msgs[-1]["content"] = msgs[-1]["content"] + "\n\n" + state
        else:
            body = "\n".join(["<results>", *[r.text for r in results], "</results>", state])
            msgs = [{"role": role, "content": body}]
        if snap is not None and self.vision:
            msgs[-1]["content"] = self._with_images(msgs[-1]["content"], snap, first=False)
        return msgs

    def _with_images(self, text: str, snap: ViewSnapshot, first: bool) -> Any:
        """``text`` plus image parts for pages newly held and visual elements newly opened (vision only)."""
        if not self.vision:
            return text
        graph = self._inner.get_wrapper_attr("graph")
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
        for node in snap.evidence:
            if len(parts) > self.max_images_per_turn:
                break
            wanted = (node.kind == "page" and node.state == "activated") or \
                (node.state == "opened" and node.type in ("table", "chart", "figure", "formula"))
            key = f"{node.node_id}:{node.state}"
            if not wanted or key in self._images_shown:
                continue
            self._images_shown.add(key)
            try:
                image = graph.crop(node.node_id)
            except Exception as err:  # a document whose pixels cannot be rendered: say so, go on
                parts[0]["text"] += f"\n(no image for {node.node_id}: {type(err).__name__})"
                continue
            parts.append({"type": "image", "image": image, "node_id": node.node_id})
        return parts if len(parts) > 1 else text

    # --- state readers ----------------------------------------------------------------------------

    def _snapshot(self) -> ViewSnapshot:
        return parse_text_view(self._inner.get_wrapper_attr("text_view")())

    def _step_cap(self) -> int:
        return self.task.budget.max_steps

    def _steps_used(self) -> int:
        return self._inner_steps + self._refused

    def _process(self, snap: ViewSnapshot | None) -> dict[str, Any]:
        """Per-turn quantities that need no gold: cost spent so far, budget left, error counts."""
        inner = self._inner
        assert inner is not None
        b = self.task.budget
        out: dict[str, Any] = {"steps_used": self._steps_used(), "step_cap": self._step_cap(),
                               "format_errors_total": self._totals["format_errors"],
                               "invalid_calls_total": self._totals["invalid_calls"],
                               "replies": self._totals["replies"]}
        if snap is None:  # the episode ended: the terminal components say it all
            return out
        tokens, cost, parts = inner.unwrapped.cost_so_far(self._operations, self._totals["replies"])
        nums = budget_numbers(snap)
        out["process"] = {
            "cost": cost, **parts, "tokens_held": tokens, "operations": self._operations,
            "budget_left": {"rounds": max(0, nums.get("rounds", b.T) - nums.get("round", 1) + 1),
                            "activations": nums.get("activations_left", 0),
                            "activations_in_round": nums.get("activations_left_in_round", 0),
                            "opens": nums.get("opens_left", 0),
                            "steps": max(0, self._step_cap() - self._steps_used())},
        }
        if "tokens_left" in nums:  # a reader-token budget
            out["process"]["budget_left"]["tokens"] = nums["tokens_left"]
        return out


def to_openai_messages(messages: Sequence[Mapping[str, Any]], image_format: str = "png") -> list[dict[str, Any]]:
    """The same messages with image parts as OpenAI ``image_url`` data URIs (what a vision server takes)."""
    from mage_gym.readers.base import image_data_uri

    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for p in content:
                if p.get("type") == "image" and p.get("image") is not None:
                    parts.append({"type": "image_url", "image_url": {"url": image_data_uri(p["image"], image_format)}})
                else:
                    parts.append({k: v for k, v in p.items() if k in ("type", "text")})
            content = parts
        out.append({**{k: v for k, v in m.items() if k != "content"}, "content": content})
    return out


def text_of(messages: Sequence[Mapping[str, Any]]) -> str:
    """All text of ``messages`` joined (image parts left out): what a text-only consumer reads."""
    chunks = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            chunks.append("".join(str(p.get("text", "")) for p in c if p.get("type") == "text"))
        elif c:
            chunks.append(str(c))
    return "\n\n".join(chunks)


def make_chat_env(**kwargs: Any) -> MageChatEnv:
    """The ``MageRAG-Chat-v0`` entry point; with ``dataset=`` and no ``episodes=`` it loads the benchmark.

    ``dataset`` + ``split``/``root``/``limit``/``data_seed`` load episodes with
    :func:`mage_gym.data.registry.load_dataset` (graphs built or read from the
    cache on first use).
    """
    if kwargs.get("episodes") is None and kwargs.get("dataset"):
        from mage_gym.data.registry import require_episodes

        kwargs["episodes"] = require_episodes(kwargs["dataset"], root=kwargs.pop("root", None),
                                              split=kwargs.pop("split", "all"), limit=kwargs.pop("limit", None),
                                              seed=kwargs.pop("data_seed", 0))
    return MageChatEnv(**kwargs)


def fingerprint(messages: Sequence[Mapping[str, Any]]) -> str:
    """A short hash of a conversation's text (tests compare replays with it)."""
    return hashlib.sha256(text_of(messages).encode()).hexdigest()[:16]
