"""The chat env's own cost per tool-call turn beside a 135M model's generation time per turn, and the token cost
of its observations.

Target (issue 33): the env's cost per turn (parsing the reply, running the
calls, building the next observation, the per-turn process figures) under 5%
of SmolLM2-135M's CPU generation time per turn, so the env is not what a
trainer waits for. Measured side by side in one process, turn by turn, on
the same conversations: for each turn of a scripted controller (activate the
first candidates, open an activated element, search, activate again, stop),
``env.step`` is timed, and in the first ``--gen-repeats`` passes SmolLM2
(transformers, CPU, greedy) generates ``--new-tokens`` tokens for that
turn's real prompt (the conversation so far through the chat template with
the tools). Medians over all timed turns (the env over ``--repeats`` passes:
it is cheap to repeat, generation is not); the ratio of medians is the
figure to trust on a shared machine (both sides slow down alike).

Token cost of the context choice (SmolLM2's tokenizer): per turn, the chat
observation (only what changed, stable candidate numbers) against the full
text view the round-based evaluator sends each round; and the whole
conversation after the scripted turns, against SmolLM2's 8,192-token window.

Run::

    .venv/bin/python experiments/perf/perf_agent.py --dataset mmlongbench --split test --limit 4 --out outputs/perf_agent
    .venv/bin/python experiments/perf/perf_agent.py --dataset synth --root data_out/synth/tiny_seed0 --no-model

Writes ``results.json`` into ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

SMOLLM2_WINDOW = 8192


def script(env: Any) -> list[str]:
    """A controller's turns, written from what the env showed (numbers and ids it listed)."""
    def c(name: str, **args: Any) -> str:
        return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"

    return [c("activate", candidates=[1, 2]), "open", c("search", query="total revenue by year"),
            c("activate", candidates=[3, 4, 5]), c("stop")]


def open_call(env: Any) -> str:
    _, held = env.visible_ids()
    elements = [i for i in held if ":e" in i.rsplit(":", 1)[-1] or i.count(":") >= 2]
    target = elements[0] if elements else held[0]
    return "<tool_call>" + json.dumps({"name": "open", "arguments": {"ids": [target]}}) + "</tool_call>"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="synth")
    ap.add_argument("--root", default=None)
    ap.add_argument("--split", default="all")
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--parser", default="fast")
    ap.add_argument("--repeats", type=int, default=5, help="passes over the episodes timing the env")
    ap.add_argument("--gen-repeats", type=int, default=1, help="of those passes, how many also time generation")
    ap.add_argument("--new-tokens", type=int, default=48, help="tokens generated per turn (a tool call is 20-40)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-candidates", type=int, default=16)
    ap.add_argument("--no-model", action="store_true", help="env and token figures only (no generation)")
    ap.add_argument("--out", type=Path, default=Path("outputs/perf_agent"))
    args = ap.parse_args(argv)

    import torch

    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.agent.models import load_model
    from mage_gym.agent.tools import TOOLS
    from mage_gym.data.registry import load_dataset
    from mage_gym.agent.chat_env import text_of

    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()
    episodes = load_dataset(args.dataset, root=args.root, split=args.split, limit=args.limit)
    if not episodes:
        raise SystemExit(f"no episodes in {args.dataset} ({args.split})")
    env = MageChatEnv(episodes=episodes, dataset=args.dataset, parser=args.parser, max_candidates=args.max_candidates,
                      tools_in_prompt=False)
    model, tok = load_model("smollm2")
    model.eval()

    def ntok(text: str) -> int:
        return len(tok(text, add_special_tokens=False).input_ids)

    for ep in episodes:  # warm: graphs from the cache, retriever indexes, relevance (excluded from every figure)
        env.reset(options={"task": str(env.task_id(ep.episode_id))})
    env_ms, reset_ms, gen_ms, obs_tokens, view_tokens, convo_tokens, prompt_tokens = [], [], [], [], [], [], []
    for rep in range(args.repeats):
        for ep in episodes:
            t0 = time.perf_counter()
            msgs, info = env.reset(options={"task": str(env.task_id(ep.episode_id))})
            reset_ms.append((time.perf_counter() - t0) * 1e3)
            convo = list(msgs)
            for turn in script(env):
                reply = open_call(env) if turn == "open" else turn
                if not args.no_model and rep < args.gen_repeats:
                    prompt = tok.apply_chat_template(convo, tools=TOOLS, add_generation_prompt=True, tokenize=False)
                    enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
                    t0 = time.perf_counter()
                    with torch.inference_mode():
                        model.generate(**enc, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                       do_sample=False)
                    gen_ms.append((time.perf_counter() - t0) * 1e3)
                    if rep == 0:
                        prompt_tokens.append(int(enc["input_ids"].shape[1]))
                t0 = time.perf_counter()
                obs, r, term, trunc, info = env.step(reply)
                env_ms.append((time.perf_counter() - t0) * 1e3)
                convo += [{"role": "assistant", "content": reply}, *obs]
                if rep == 0 and not (term or trunc):
                    obs_tokens.append(ntok(text_of(obs)))
                    view_tokens.append(ntok(env.inner.get_wrapper_attr("text_view")()))
                if term or trunc:
                    break
            if rep == 0:
                convo_tokens.append(ntok(tok.apply_chat_template(convo, tools=TOOLS, tokenize=False)))
    med = statistics.median
    env_med = med(env_ms)
    res: dict[str, Any] = {
        "kind": "perf_agent", "dataset": args.dataset, "split": args.split, "episodes": len(episodes),
        "parser": args.parser, "repeats": args.repeats, "gen_repeats": args.gen_repeats,
        "max_candidates": args.max_candidates,
        "turns_per_episode": len(script(env)),
        "env_ms_per_turn": {"median": env_med, "p90": sorted(env_ms)[int(0.9 * (len(env_ms) - 1))], "n": len(env_ms)},
        "reset_ms": {"median": med(reset_ms), "n": len(reset_ms)},
        "tokens": {
            "observation_per_turn_median": med(obs_tokens), "full_text_view_per_turn_median": med(view_tokens),
            "observation_over_full_view": med(obs_tokens) / med(view_tokens),
            "conversation_after_script_median": med(convo_tokens), "conversation_after_script_max": max(convo_tokens),
            "smollm2_window": SMOLLM2_WINDOW,
            "full_view_turns_that_fit_window": SMOLLM2_WINDOW // max(1, int(med(view_tokens))),
        },
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch_threads": args.threads,
                    "loadavg_start": list(load0), "loadavg_end": list(os.getloadavg())},
    }
    if gen_ms:
        gen_med = med(gen_ms)
        res["generation_ms_per_turn"] = {"median": gen_med, "n": len(gen_ms), "new_tokens": args.new_tokens,
                                         "prompt_tokens_median": med(prompt_tokens), "model": "SmolLM2-135M-Instruct",
                                         "backend": "transformers, CPU, greedy"}
        res["env_share_of_generation"] = env_med / gen_med
        res["target_share"] = 0.05
        res["target_met"] = env_med / gen_med < 0.05
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res[k] for k in ("env_ms_per_turn", "generation_ms_per_turn", "env_share_of_generation",
                                          "tokens") if k in res}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
