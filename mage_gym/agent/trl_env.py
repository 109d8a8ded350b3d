"""TRL adapter: the chat env as a ``GRPOTrainer(environment_factory=...)`` environment.

Why this shape: TRL 1.16's ``GRPOTrainer`` runs multi-turn tool calling
itself. It builds one environment object per rollout from
``environment_factory``, calls ``reset(**row)`` with the dataset row (the
string it returns is appended to the prompt's last user message), exposes
every public method as a tool (name, type hints and Google-style docstring
become the JSON schema; a test checks they equal :data:`mage_gym.agent.tools.TOOLS`),
runs the calls the model writes, masks tool output out of the loss, and asks
``get_reward()`` once per finished rollout.

The tool methods carry no return annotation so that the schemas TRL renders
into the prompt are exactly :data:`~mage_gym.agent.tools.TOOLS` (what SFT
transcripts and evaluation render): one prompt format from warm start to
benchmark. Each tool method is one call through :class:`~mage_gym.agent.chat_env.MageChatEnv`
(TRL runs the calls of a message one by one, so here every call is a reply
in the env's count of controller calls; see docs/LLM_TRAINING.md). A rollout
that ends without ``stop`` (the model wrote no more calls, or hit
``max_completion_length``) is stopped by ``get_reward``: the reader reads
what was gathered, and the episode counts as truncated.

TRL's loop ends a rollout only when the model writes a message without a
call, so a model that called ``stop`` may go on writing calls until
``max_tool_calling_iterations``; each is refused ("the episode is over").
The training script ends a rollout at its episode's end instead
(:func:`episode_ended`: no turn is generated after the message that ended
it), and :meth:`MageToolEnv._mask_after_end` takes any turn written after
the end out of the loss (TRL's tool mask): such turns change nothing in the
episode, so the reward says nothing about them, yet they would carry the
rollout's advantage and cost a generation round each.

With ``vision=True`` a tool result (and the reset's opening state) is TRL's
multimodal content: the text, then the images of newly held pages and opened
visual elements (TRL 1.16 passes them to a vision-language model with the
tool message).

Only public methods may be tools, so everything else here is private.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from mage_gym.agent.chat_env import EPISODE_ENDED, MageChatEnv, text_of
from mage_gym.agent.prompts import user_intro


class MageToolEnv:
    """One rollout's environment for TRL; build many with :func:`environment_factory`."""

    def __init__(self, make_env: Callable[[], MageChatEnv]) -> None:
        self._env = make_env()
        self._done = True  # no episode yet: a call is refused (counted) until reset
        self._ending_result: Any = None  # what the call that ended the episode returned (its tool message)
        self._reward = 0.0
        self._info: dict[str, Any] = {}
        self._stats: dict[str, float] = self._new_stats()
        self._calls = 0
        self._called: list[str] = []  # the tools this rollout called, in order (the per-rollout log reads it)

    @staticmethod
    def _new_stats() -> dict[str, float]:
        return {"tool_calls": 0.0, "format_errors": 0.0, "invalid_calls": 0.0, "stopped": 0.0,
                "tokens_masked_after_end": 0.0}

    def reset(self, **row: Any) -> str:
        """Start the row's task (its ``task`` column); returns the opening state for the prompt."""
        task = row.get("task")
        if task is None:
            raise KeyError("the dataset row has no 'task' column (build it with mage_gym.agent.task_dataset)")
        messages, info = self._env.reset(options={"task": task})
        self._done, self._reward, self._info = False, 0.0, dict(info)
        self._ending_result = None
        self._stats = self._new_stats()
        self._calls = 0
        self._called = []
        user = [m for m in messages if m["role"] == "user"]
        text = text_of(user)
        intro = user_intro(self._env.view.question)  # the row's prompt already opens with it (task_rows)
        if text.startswith(intro):
            text = text[len(intro):].lstrip("\n")
        return _with_images("\n\n" + text, user)

    def _call(self, name: str, arguments: Mapping[str, Any]) -> str:
        self._called.append(name)
        if self._done:
            self._stats["invalid_calls"] += 1
            return f"{name}: not run: the episode is over"
        # with an id the call is structured: its result comes back as a ``tool`` message, worded as in the
        # transcripts SFT trains on (mage_gym.agent.transcripts), so warm start and RL see one format
        self._calls += 1
        call = {"id": f"call_{self._calls}", "name": name, "arguments": dict(arguments)}
        messages, reward, terminated, truncated, info = self._env.step([call])
        self._reward += reward
        self._info = dict(info)
        self._stats["tool_calls"] += 1
        self._stats["format_errors"] += info.get("format_errors", 0)
        self._stats["invalid_calls"] += info.get("invalid_calls", 0)
        result = _with_images(text_of(messages), messages)
        if terminated or truncated:
            self._done = True
            self._stats["stopped"] = float(name == "stop")
            self._ending_result = result
        return result

    def activate(self, candidates: list[int]):
        """Add candidates to the evidence by their number n; an element brings its page. Budget per round.

        Args:
            candidates: Candidate numbers n, as listed under <candidates>.
        """
        return self._call("activate", {"candidates": candidates})

    def open(self, ids: list[str]):
        """Open activated elements by id: the reader then gets their full content (tables, charts, facts).

        Args:
            ids: Ids of activated elements, e.g. doc:p3:e1.
        """
        return self._call("open", {"ids": ids})

    def search(self, query: str):
        """Search the whole document; the best pages not yet held are activated. Ends the round.

        Args:
            query: Free-text query.
        """
        return self._call("search", {"query": query})

    def prune(self, ids: list[str], reason: str):
        """Drop activated pages or elements that do not help answer the question. Pruning is final.

        Args:
            ids: Ids of activated pages or elements.
            reason: Why they are dropped, in a few words.
        """
        return self._call("prune", {"ids": ids, "reason": reason})

    def stop(self):
        """End the episode: the reader answers from the evidence gathered so far."""
        return self._call("stop", {})

    def get_reward(self) -> float:
        """The env's terminal reward; a rollout that never called stop is stopped here (truncated)."""
        if not self._done:
            messages, reward, terminated, truncated, info = self._env.finish("rollout_end")
            self._reward += reward
            self._info = dict(info)
            self._done = True
        return float(self._reward)

    # --- read by the training script's callbacks (not tools: private names) ------------------------

    def _episode_info(self) -> dict[str, Any]:
        return {**self._info, "stats": dict(self._stats), "called": list(self._called)}

    def _mask_after_end(self, tool_mask: list[int], completion: Sequence[Mapping[str, Any]]) -> list[int]:
        """TRL's tool mask of this rollout's completion (1 on generated tokens, 0 on tool results) with the
        turns written after the episode ended set to 0, counted in the stats.

        ``completion`` is the rollout's messages as TRL keeps them (assistant
        turns and tool results, in order). A rollout whose episode a tool call
        did not end (no stop, budget left) is returned unchanged.
        """
        turns = turns_while_playing(completion, self._ending_result) if self._ending_result is not None else None
        if turns is None:
            return list(tool_mask)
        masked, count = mask_turns_after(tool_mask, turns)
        self._stats["tokens_masked_after_end"] = float(count)
        return masked


def outcome_spread(envs: Sequence[MageToolEnv], group_size: int) -> list[bool]:
    """Per group of ``group_size`` consecutive rollouts (GRPO's groups, in batch order): whether their answer
    support (the support term of the env's terminal reward) differs. A group whose rewards differ only in cost
    and noise has the same outcome everywhere."""
    from mage_gym.agent.screening import outcome_varies

    support = [float((env._info.get("reward_components") or {}).get("support", 0.0)) for env in envs]
    return [outcome_varies(block) for block in (support[i:i + group_size] for i in range(0, len(support), group_size))]


def refused_calls(environments: Sequence[MageToolEnv] | None = None, **_: Any) -> list[float]:
    """A gold-free process term for TRL's ``reward_funcs``: minus the calls each rollout's env refused (over
    budget, a number never shown, an id not held) or that came after its episode ended; weight it with
    ``grpo.refused_call_penalty``.

    Why: measured in llm_grpo_smollm2_cpu, the rollouts that reached the
    second hop were those that kept calling ``activate`` to the round limit,
    2-5 of their calls refused for budget; the terminal reward credits the
    whole rollout, refused calls included, and the trained student read more
    on held-out tasks. The env already counts refusals; this makes them cost.
    """
    return [-float(env._stats["invalid_calls"]) for env in environments or []]


def turns_while_playing(completion: Sequence[Mapping[str, Any]], ending_result: Any) -> int | None:
    """How many assistant turns of ``completion`` came before the tool result ``ending_result`` (the one whose
    call ended the episode, that turn included); None when no tool message carries it."""
    turns = 0
    for message in completion:
        if message.get("role") == "assistant":
            turns += 1
        elif message.get("role") == "tool" and message.get("content") == ending_result:
            return turns
    return None


def episode_ended(tokenizer: Any, ids: Sequence[int], tail: int = 128) -> bool:
    """Whether the token ids of a rollout so far end after the message that ended its episode (its last
    ``tail`` tokens hold :data:`~mage_gym.agent.chat_env.EPISODE_ENDED`, which only an ending says)."""
    return EPISODE_ENDED in tokenizer.decode(list(ids[-tail:]), skip_special_tokens=True)


def mask_turns_after(tool_mask: Sequence[int], turns: int) -> tuple[list[int], int]:
    """``tool_mask`` with every generated run (a stretch of 1s: one assistant turn) after the first ``turns``
    set to 0, and how many tokens that masked. TRL builds the mask as the first turn's tokens, then per tool
    round ``[0] * result + [1] * next turn``, so the n-th run of 1s is the n-th assistant turn."""
    out, run, count, previous = [], 0, 0, 0
    for value in tool_mask:
        if value and not previous:
            run += 1
        if value and run > turns:
            out.append(0)
            count += 1
        else:
            out.append(int(value))
        previous = value
    return out, count


def _with_images(text: str, messages: Any) -> str | list[dict[str, Any]]:
    """``text``, or with vision TRL's multimodal content: the text, then the page images and crops of
    ``messages`` as ``{"type": "image", "image": PIL.Image}`` blocks (TRL 1.16 feeds those to a VLM, from a
    reset's return value and from a tool's)."""
    images = [p["image"] for m in messages if isinstance(m.get("content"), list) for p in m["content"]
              if p.get("type") == "image" and p.get("image") is not None]
    if not images:
        return text
    return [{"type": "text", "text": text}, *({"type": "image", "image": image} for image in images)]


def environment_factory(**chat_env_kwargs: Any) -> Callable[[], MageToolEnv]:
    """A factory TRL calls once per rollout slot; each builds a :class:`MageChatEnv` with these keywords.

    The episodes (and their graphs) are shared between the instances through
    one provider, so a pool of environments does not load a document twice.
    """
    from mage_gym.agent.chat_env import pop_provider_settings
    from mage_gym.env.episodes import as_provider

    kwargs = dict(chat_env_kwargs)
    episodes = kwargs.pop("episodes")
    provider = as_provider(episodes, **pop_provider_settings(kwargs))
    if "dataset" not in kwargs and isinstance(episodes, (list, tuple)):
        from mage_gym.agent.tasks import dataset_label

        kwargs["dataset"] = dataset_label(episodes)

    def make() -> MageToolEnv:
        return MageToolEnv(lambda: MageChatEnv(episodes=provider, **kwargs))

    return make
