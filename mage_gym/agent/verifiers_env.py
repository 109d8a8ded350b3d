"""verifiers adapter: the chat env as a verifiers (0.4, ``verifiers.v1``) taskset + environment + harness.

Why this shape: in verifiers an environment is a taskset of tasks, an
``Env.run(task, agents)`` that programs the episode, and rewards recorded on
each agent's trace; its own evaluation (``vf-eval``, or
``verifiers.v1.cli.eval.runner.run_eval``) runs ``num_rollouts`` rollouts per
task against any OpenAI-compatible server (its interception proxy forwards
every model call and records it in the trace). Here:

- :class:`MageChatTaskset` yields one task per (episode, seed) of a benchmark
  split, keyed by its :class:`~mage_gym.agent.tasks.TaskId` (no gold in a task);
- :class:`MageChatVerifiersEnv` plays the task through a fresh
  :class:`~mage_gym.agent.chat_env.MageChatEnv` (the env is the user of the
  conversation, as verifiers' turn-based game envs are): each model reply is
  one ``step``, each observation the next user turn; the env's terminal
  reward is recorded as the trace's one reward (``mage_reward``, weight 1: the
  rubric *is* the env's reward), its components and process counts as metrics,
  and the replies in ``trace.info["mage"]`` so anyone can replay them;
- :class:`MageChatHarness` makes one chat completion per segment, in-process,
  through verifiers' interception endpoint (verifiers' own ``null`` harness
  does the same from a ``uv``-installed script, which needs network access).

verifiers finds plugins by *top-level* module name; rather than adding a
top-level package to this repository, :func:`register` aliases this module as
``verifiers.v1.tasksets.mage_rag_chat`` and ``verifiers.v1.harnesses.mage_rag_chat``
(importing this module does it), so the id ``mage_rag_chat`` works in
``EvalConfig`` and on the command line::

    python -m mage_gym.agent.verifiers_env mage_rag_chat --model smollm2 \\
        --client.base-url http://127.0.0.1:8080/v1 -n 2 -r 2 --no-push --no-rich \\
        --env.taskset.dataset synth --env.taskset.split test

:func:`load_environment` builds the environment object directly (the name
verifiers environments have always exported).
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Iterator

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig

PLUGIN_ID = "mage_rag_chat"
#: What verifiers' loader reads: exactly one Taskset, one Harness and one Env subclass.
__all__ = ["MageChatTaskset", "MageChatVerifiersEnv", "MageChatHarness", "load_environment", "register"]
_PROVIDERS: dict[str, Any] = {}
_LOCK = threading.Lock()


def register() -> None:
    """Make ``mage_rag_chat`` resolvable as a verifiers taskset, environment and harness id."""
    module = sys.modules[__name__]
    for group in ("verifiers.v1.tasksets", "verifiers.v1.harnesses"):
        sys.modules.setdefault(f"{group}.{PLUGIN_ID}", module)


# --- tasks ---------------------------------------------------------------------------------------


class MageChatData(vf.TaskData):
    """One task: its :class:`~mage_gym.agent.tasks.TaskId` string and public info (no gold)."""

    task: str
    info: dict = Field(default_factory=dict)


class MageChatTask(vf.Task[MageChatData]):
    """Scored by the env (the reward is recorded on the trace in :meth:`MageChatVerifiersEnv.run`)."""

    @property
    def key(self) -> str:
        return self.data.task


class MageChatTasksetConfig(vf.TasksetConfig):
    """Which episodes, under which budget, and the chat env's settings (keywords of ``MageChatEnv``)."""

    dataset: str = "synth"
    split: str = "test"
    root: str | None = None
    limit: int | None = None
    data_seed: int = 0
    seeds: list[int] = Field(default_factory=lambda: [0])
    budget: dict[str, int | None] = Field(default_factory=dict)  # k, m, M, T, B and tokens (None: no token budget)
    parser: str = "fast"
    """Graph parser for documents not yet in the graph cache (``fast`` | ``layout``)."""
    retriever: str = "hybrid"
    chat: dict[str, Any] = Field(default_factory=dict)
    """Other MageChatEnv keywords (JSON values): K, max_candidates, reward, tools_in_prompt, ..."""


def _episodes(cfg: MageChatTasksetConfig) -> list[Any]:
    from mage_gym.data.registry import require_episodes

    return require_episodes(cfg.dataset, root=cfg.root, split=cfg.split, limit=cfg.limit, seed=cfg.data_seed)


class MageChatTaskset(vf.Taskset[MageChatTask, MageChatTasksetConfig]):
    """One task per (episode, seed) of ``dataset``/``split``."""

    def load(self) -> Iterator[MageChatTask]:
        from mage_gym.agent.tasks import task_rows

        cfg = self.config
        rows = task_rows(_episodes(cfg), cfg.dataset, budget=cfg.budget or None, seeds=cfg.seeds, split=cfg.split)
        for i, row in enumerate(rows):
            yield MageChatTask(MageChatData(idx=i, id=row["task"], name=row["task"], prompt=None,
                                            task=row["task"], info=row["info"]), self.config.task)


# --- the harness: one chat completion per segment, in-process ------------------------------------


class MageChatHarnessConfig(vf.HarnessConfig):
    pass


class MageChatHarness(vf.Harness[MageChatHarnessConfig]):
    """Sends the conversation to the interception endpoint once per segment (no program, no tools server)."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: Any, tool_interception_url: str | None = None) -> ProgramResult:
        import httpx
        from verifiers.v1.dialects.chat import message_to_wire

        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt:
            messages += [message_to_wire(m) for m in prompt]
        async with httpx.AsyncClient(timeout=None) as client:
            resp = await client.post(endpoint.rstrip("/") + "/chat/completions",
                                     headers={"Authorization": f"Bearer {secret}"},
                                     json={"model": ctx.model, "messages": messages})
        if resp.status_code != 200:
            return ProgramResult(exit_code=1, stdout="", stderr=f"HTTP {resp.status_code}: {resp.text[:2000]}")
        return ProgramResult(exit_code=0, stdout="", stderr="")


# --- the environment -----------------------------------------------------------------------------

register()  # before the config class below: its default seat names the harness by id


class MageChatEnvConfig(vf.EnvConfig):
    """The one seat (``agent``): our in-process harness on the host (nothing is executed there)."""

    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": PLUGIN_ID}, runtime=SubprocessConfig())


def _make_chat_env(cfg: MageChatTasksetConfig) -> Any:
    """A fresh chat env for one episode; episodes and graphs are shared per process (one provider per split)."""
    from mage_gym.agent.chat_env import MageChatEnv, pop_provider_settings
    from mage_gym.env.episodes import as_provider

    chat = {"parser": cfg.parser, "retriever": cfg.retriever, **cfg.chat}
    settings = pop_provider_settings(chat)
    key = repr((cfg.dataset, cfg.split, cfg.root, cfg.limit, cfg.data_seed, settings["parser"],
                settings["graph_kwargs"]))
    with _LOCK:
        provider = _PROVIDERS.get(key)
        if provider is None:
            provider = _PROVIDERS[key] = as_provider(_episodes(cfg), **settings)
    return MageChatEnv(episodes=provider, dataset=cfg.dataset, budget=cfg.budget or None, **chat)


def _reply_of(segment: Any) -> dict[str, Any]:
    """The segment's last assistant message as a dict (content and any structured tool calls)."""
    from verifiers.v1.types import AssistantMessage

    for message in reversed(segment.messages):
        if isinstance(message, AssistantMessage):
            out: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
            calls = getattr(message, "tool_calls", None)
            if calls:
                out["tool_calls"] = [c.model_dump() if hasattr(c, "model_dump") else dict(c) for c in calls]
            return out
    return {"role": "assistant", "content": ""}


class MageChatVerifiersEnv(vf.Env[MageChatEnvConfig]):
    """One episode = one chat between the model (seat ``agent``) and the MageRAG chat env."""

    async def run(self, task: MageChatTask, agents: Any) -> None:
        from mage_gym.agent.chat_env import text_of

        env = _make_chat_env(self.taskset.config)
        messages, info = env.reset(options={"task": task.data.task})
        system = next(m["content"] for m in messages if m["role"] == "system")
        seat = vf.Task(vf.TaskData(idx=task.data.idx, id=task.data.task, prompt=None, system_prompt=system))
        turn: Any = text_of([m for m in messages if m["role"] != "system"])
        total, done, replies = 0.0, False, []
        last: dict[str, Any] = dict(info)
        terminated = False
        async with agents.agent.interaction(seat) as interaction:
            while not done:
                segment = await interaction.turn(turn)
                if segment.terminated:  # the seat's limits ended the run: the reader reads what was gathered
                    break
                reply = _reply_of(segment)
                replies.append(reply)
                obs, reward, terminated, truncated, last = env.step(reply)
                total += float(reward)
                done = terminated or truncated
                turn = text_of(obs) if all(m["role"] != "tool" for m in obs) else obs
            trace = interaction.trace
        if not done:  # the seat's turn limit ended the chat: the env stops (truncated), no reply is counted
            obs, reward, terminated, truncated, last = env.finish("rollout_end")
            total += float(reward)
        env.close()
        trace.record_reward("mage_reward", total)
        for key, value in (last.get("reward_components") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                trace.record_metric(key, float(value))
        trace.record_metric("format_errors", float(last.get("format_errors_total", 0)))
        trace.record_metric("invalid_calls", float(last.get("invalid_calls_total", 0)))
        trace.record_metric("stopped_by_model", float(bool(terminated)))
        trace.info["mage"] = {"task": task.data.task, "replies": replies, "reward": total,
                              "stop_reason": last.get("stop_reason")}


def load_environment(**taskset: Any) -> MageChatVerifiersEnv:
    """The verifiers environment for ``taskset`` settings (``MageChatTasksetConfig`` fields)."""
    register()
    config = MageChatEnvConfig(taskset={"id": PLUGIN_ID, **taskset})
    return MageChatVerifiersEnv(config)


def main(argv: list[str] | None = None) -> None:
    """``vf-eval`` with ``mage_rag_chat`` registered (verifiers' own evaluation CLI)."""
    from verifiers.v1.cli.eval.main import main as vf_eval

    register()
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    vf_eval()


if __name__ == "__main__":
    main()
