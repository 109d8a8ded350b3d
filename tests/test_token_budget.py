"""The reader-token budget (``Budget.tokens``): exact counts, refusals that the mask mirrors, off by default.

The property test plays random episodes under random token budgets in every
render mode (prunes, LLM rounds, the final open pass, a conversation and a
question over two documents included) and checks after every step that the
state's count is the render's, never past the budget, and that the mask
accepts exactly what the transition accepts.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mage_gym.agent.tasks import TaskId
from mage_gym.bench import results as R
from mage_gym.env import ActionLayout, Budget, MageRAGEnv, Op, RoundDecision
from mage_gym.env.actions import apply_operation
from mage_gym.env.state import ACTIVATED, UNVISITED
from mage_gym.testing import hash_query_fn, toy_conversation, toy_crossdoc, toy_episodes
from mage_gym.trace import TraceRecorder, replay

QF = hash_query_fn(16)
EPISODES = toy_episodes(n_pages=6, elements_per_page=4) + [toy_conversation(n_pages=6), toy_crossdoc()]
#: a render's reader tokens with five toy pages, roughly, per mode: token budgets are drawn around these
SCALE = {"visual": 6000, "text": 250, "elements": 150}


def env_with(mode: str = "visual", K: int = 16, final_pass: bool = False, **budget) -> MageRAGEnv:
    return MageRAGEnv(episodes=EPISODES, query_fn=QF, budget=budget, K=K, render_mode=mode,
                      final_open_pass=final_pass)


def full_tokens(mode: str, episode: str = "elem", **budget) -> int:
    """Reader tokens at reset without a token budget."""
    env = env_with(mode, **budget)
    env.reset(seed=0, options={"episode_id": episode})
    return env.render().tokens


# --- the budget record, labels, task ids ---------------------------------------------------------------------

def test_off_by_default_every_label_and_id_reads_as_before() -> None:
    assert Budget().tokens is None and Budget().to_dict() == {"k": 5, "m": 4, "M": 24, "T": 6, "B": 16}
    assert Budget.coerce({"k": 2, "tokens": None}) == Budget(k=2)
    assert R.budget_dict({"k": 2}) == {"k": 2, "m": 4, "M": 24, "T": 6, "B": 16}
    assert R.budget_label(R.budget_dict({})) == "k5 m4 M24 T6 B16"
    assert R.trace_path("r", "topk_page", R.budget_dict({})).name == "k5_m4_M24_T6_B16.jsonl"
    task = TaskId("synth", "d", "e", Budget(), 0)
    assert str(task) == "synth/d/e/k5-m4-M24-T6-B16/s0" and TaskId.parse(str(task)) == task


def test_a_token_budget_is_carried_by_labels_results_and_task_ids() -> None:
    b = R.budget_dict({"k": 5, "tokens": 5355})
    assert b == {"k": 5, "m": 4, "M": 24, "T": 6, "B": 16, "tokens": 5355}
    assert R.budget_label(b) == "k5 m4 M24 T6 B16 tok5355"
    assert R.trace_path("r", "topk_page", b).name == "k5_m4_M24_T6_B16_tok5355.jsonl"
    run = R.make_run("topk_page", b, "synth", "all", {})
    R.validate_results({"schema_version": R.SCHEMA_VERSION, "runs": [run]})
    with pytest.raises(ValueError, match="budget keys"):
        R.validate_results({"schema_version": R.SCHEMA_VERSION, "runs": [{**run, "budget": {**b, "x": 1}}]})
    task = TaskId("synth", "d", "e", Budget(tokens=5355), 3)
    assert str(task) == "synth/d/e/k5-m4-M24-T6-B16-tok5355/s3" and TaskId.parse(str(task)) == task


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "many"])
def test_a_bad_token_budget_is_a_clear_error(bad) -> None:
    with pytest.raises(ValueError, match="tokens"):
        Budget.coerce({"tokens": bad})


@pytest.mark.parametrize("text", ["s/d/e/k5-m4-M24-T6-B16-tok0/s0", "s/d/e/k5-m4-M24-T6-B16-tok/s0",
                                  "s/d/e/k5-m4-M24-T6-B16-tok5-tok6/s0"])
def test_a_bad_token_part_of_a_task_id_is_refused(text) -> None:
    with pytest.raises(ValueError, match="task id"):
        TaskId.parse(text)


# --- the rules -----------------------------------------------------------------------------------------------

def test_off_the_env_has_no_meter_and_says_nothing_of_tokens() -> None:
    env = env_with("visual")
    obs, info = env.reset(seed=0, options={"episode_id": "elem"})
    assert env.state.tokens is None and "token_budget" not in info and "tokens_left" not in env.text_view()
    _, _, _, _, info = env.step(ActionLayout(env.K).encode(Op.ACTIVATE_PAGE, len(env.state.working)))
    assert "token_budget" not in info


def test_entry_pages_are_activated_while_they_fit_and_the_rest_reported() -> None:
    per_page = full_tokens("visual", k=1) - full_tokens("visual", k=0)
    limit = full_tokens("visual", k=2) + per_page // 2  # two pages and a half
    env = env_with("visual", k=4, tokens=limit)
    _, info = env.reset(seed=0, options={"episode_id": "elem"})
    pages = env.rel.page_order[:4].tolist()
    assert [v for v in env.state.working] == pages[:2]
    assert info["token_budget"]["skipped"] == [env.gi.node_ids[p] for p in pages[2:]]
    assert info["token_budget"] == {**env.state.tokens.info(), "skipped": info["token_budget"]["skipped"]}
    assert info["token_budget"]["used"] == env.render().tokens <= limit
    assert env.state.counters.free_acts == 2


def test_a_refused_activation_names_its_tokens_and_the_budget_and_changes_nothing() -> None:
    limit = full_tokens("visual", k=2) + 5  # room for no third page
    env = env_with("visual", k=2, tokens=limit)
    env.reset(seed=0, options={"episode_id": "elem"})
    slots = env.slots.tolist()
    slot = next(i for i, v in enumerate(slots) if v >= 0 and env.state.node_state[env.gi.node_page[v]] == UNVISITED)
    action = ActionLayout(env.K).encode(Op.ACTIVATE_PAGE, slot)
    assert not env.action_masks()[action]
    before = env.state.node_state.copy()
    _, _, _, _, info = env.step(action)
    assert np.array_equal(before, env.state.node_state) and env.state.counters.invalid == 1
    err = info["last_action_error"]
    assert f"token budget of {limit}" in err and "would render" in err
    would = int(err.split("would render ")[1].split()[0])
    assert would > limit and info["token_budget"]["used"] == env.render().tokens


def test_token_refusals_name_exactly_what_only_the_budget_refuses_and_a_prune_clears_them() -> None:
    """What the oracle and graph_follower read to make token room: refused by tokens, valid without the budget."""
    free = env_with("visual", k=2)
    free.reset(seed=0, options={"episode_id": "elem"})
    assert not free.token_refusals().any()
    limit = full_tokens("visual", k=2) + 5  # both entry pages fit, a third page does not
    env = env_with("visual", k=2, tokens=limit)
    env.reset(seed=0, options={"episode_id": "elem"})
    layout = ActionLayout(env.K)
    refused, mask = env.token_refusals(), env.action_masks()
    assert not (refused & mask).any()
    assert (refused | mask).tolist() == free.action_masks().tolist()  # the same state without the budget
    slots = env.slots.tolist()
    unvisited_page = next(i for i, v in enumerate(slots)
                          if v >= 0 and env.state.node_state[env.gi.node_page[v]] == UNVISITED)
    assert refused[layout.encode(Op.ACTIVATE_PAGE, unvisited_page)]
    assert not refused[layout.encode(Op.STOP, 0)] and not layout.block(refused, Op.PRUNE).any()
    env.operate("PruneNode", int(env.state.working[1]))  # one entry page out: a page fits again
    assert not env.token_refusals()[layout.encode(Op.ACTIVATE_PAGE, env.slots.tolist().index(slots[unvisited_page]))]


def test_fits_after_prune_says_whether_a_refused_activation_would_fit_once_a_page_is_gone() -> None:
    limit = full_tokens("visual", k=2) + 5
    env = env_with("visual", k=2, tokens=limit)
    env.reset(seed=0, options={"episode_id": "elem"})
    first, second = (int(p) for p in env.state.working[:2])
    page = next(int(v) for v in env.slots.tolist()
                if 0 <= v < env.gi.n_pages and env.state.node_state[v] == UNVISITED)
    on_first = int(env.gi.page_lo[first])  # an element of an entry page: it goes with its page
    assert env.fits_after_prune(second, page) and not env.fits_after_prune(first, on_first)
    before = env.state.node_state.copy()
    assert "over the token budget" in env.operate("ActivatePage", page)[4]["last_action_error"]
    assert np.array_equal(before, env.state.node_state)  # asking changed nothing
    env.operate("PruneNode", second)
    assert env.operate("ActivatePage", page)[4]["last_action_error"] == ""
    free = env_with("visual", k=2)
    free.reset(seed=0, options={"episode_id": "elem"})
    assert free.fits_after_prune(second, page)


def test_opening_is_refused_past_the_budget_and_a_prune_frees_room() -> None:
    env = env_with("visual", k=1, tokens=10 ** 6)
    env.reset(seed=0, options={"episode_id": "elem"})
    page = env.state.working[0]
    els = list(range(int(env.gi.page_lo[page]), int(env.gi.page_hi[page])))
    meter = env.state.tokens
    el = max(els, key=lambda v: meter.costs.share(v, True)[1])  # opening it adds a crop (a visual element)
    other = next(v for v in els if v != el)
    env.operate("ActivateNode", el)
    base = env.render().tokens
    env.operate("OpenNode", el)
    opened = env.render().tokens
    assert opened > base
    tight = env_with("visual", k=1, tokens=opened - 1)
    tight.reset(seed=0, options={"episode_id": "elem"})
    tight.operate("ActivateNode", el)
    _, _, _, _, info = tight.operate("OpenNode", el)
    assert f"would render {opened} reader tokens, over the token budget of {opened - 1}" in info["last_action_error"]
    slot = tight.slot_node_ids().index(tight.gi.node_ids[el])
    assert not tight.action_masks()[ActionLayout(tight.K).encode(Op.OPEN_NODE, slot)]
    # pruning another activated element frees its tokens: the open fits once the reader would get less
    wide = env_with("visual", k=1, tokens=opened)
    wide.reset(seed=0, options={"episode_id": "elem"})
    wide.operate("ActivateNode", el)
    wide.operate("ActivateNode", other)
    assert "over the token budget" in wide.operate("OpenNode", el)[4]["last_action_error"]
    used = wide.state.tokens.used
    wide.operate("PruneNode", other)
    assert wide.state.tokens.used < used
    _, _, _, _, info = wide.operate("OpenNode", el)
    assert info["last_action_error"] == "" and wide.state.node_state[el] == 2
    assert info["token_budget"]["used"] == wide.render().tokens <= opened


def test_activating_an_element_counts_the_page_it_activates_too() -> None:
    probe = env_with("text", K=64, k=1, tokens=10 ** 6)
    probe.reset(seed=0, options={"episode_id": "elem"})
    gi, meter, st_ = probe.gi, probe.state.tokens, probe.state.node_state
    first = int(gi.page_lo[probe.state.working[0]])  # its links put an element of another page on the frontier
    probe.operate("ActivateNode", first)
    slots = probe.slots.tolist()
    slot = next(i for i, v in enumerate(slots) if v >= gi.n_pages and st_[gi.node_page[v]] == UNVISITED)
    el, page = slots[slot], int(gi.node_page[slots[slot]])
    alone, with_page = meter.after(*meter.costs.share(el)), meter.after_activate(el, page, True)
    assert alone < with_page
    for limit, ok in ((with_page - 1, False), (with_page, True)):
        env = env_with("text", K=64, k=1, tokens=limit)
        env.reset(seed=0, options={"episode_id": "elem"})
        env.operate("ActivateNode", first)
        assert env.slots.tolist() == slots
        assert bool(env.action_masks()[ActionLayout(64).encode(Op.ACTIVATE_NODE, slot)]) == ok
        _, _, _, _, info = env.operate("ActivateNode", el)
        assert (info["last_action_error"] == "") == ok
        assert (env.state.node_state[[el, page]] == ACTIVATED).all() == ok
        assert info["token_budget"]["used"] == env.render().tokens <= limit


def test_an_entry_page_that_does_not_fit_is_skipped_and_the_next_ones_still_tried() -> None:
    """Entry pages are tried in retrieval order, each on its own: a long page left out lets a shorter one in."""
    from mage_gym.env.graph_index import graph_index
    from mage_gym.env.initial import activate_entry_pages
    from mage_gym.env.state import EvidenceState
    from mage_gym.env.token_budget import TokenMeter
    from mage_gym.render import RenderConfig
    from mage_gym.testing import graph_from_texts

    g = graph_from_texts([["revenue growth " * 60], ["revenue"], ["growth " * 30]], doc_id="sizes")
    gi = graph_index(g)
    meter = TokenMeter.start(gi, 10 ** 6, "text", RenderConfig(), "what grew?")
    limit = meter.after(*meter.costs.share(1))  # the short page alone
    meter.limit = limit
    state = EvidenceState.new(gi, Budget(k=3, tokens=limit), np.arange(gi.n_nodes))
    state.tokens = meter
    assert activate_entry_pages(state, [0, 1, 2]) == [0, 2]
    assert state.working == [1] and meter.used == limit and state.counters.free_acts == 1


def test_search_activates_the_pages_that_fit_best_first_and_reports_the_others() -> None:
    per_page = full_tokens("visual", k=1) - full_tokens("visual", k=0)
    limit = full_tokens("visual", k=1) + per_page + per_page // 2  # one more page fits, not two
    env = env_with("visual", k=1, m=3, tokens=limit)
    env.reset(seed=0, options={"episode_id": "elem"})
    _, _, _, _, info = env.operate("SearchEvidence", query="revenue growth chart")
    assert info["last_action_error"] == "" and env.state.counters.round == 1  # valid; the round ended
    assert len(env.state.working) == 2 and len(info["token_budget"]["skipped"]) == 2
    assert env.state.counters.acts_used == 1 and env.state.counters.searches == 1
    # nothing fits any more: the search is still valid, activates nothing and says what it left out
    _, _, _, _, info = env.operate("SearchEvidence", query="employees risk")
    assert info["last_action_error"] == "" and len(env.state.working) == 2
    assert len(info["token_budget"]["skipped"]) == 3 and env.state.counters.round == 2
    assert info["token_budget"]["used"] == env.render().tokens <= limit


def test_the_final_open_pass_opens_only_what_fits() -> None:
    env = env_with("visual", k=1, B=8, final_pass=True)
    env.reset(seed=0, options={"episode_id": "elem"})
    page = env.state.working[0]
    for el in range(int(env.gi.page_lo[page]), int(env.gi.page_hi[page])):
        env.operate("ActivateNode", el)
    held = env.render().tokens
    env.operate("Stop")
    opened_all = env.last_render.tokens
    assert opened_all > held
    limit = (held + opened_all) // 2
    tight = env_with("visual", k=1, B=8, final_pass=True, tokens=limit)
    tight.reset(seed=0, options={"episode_id": "elem"})
    for el in range(int(env.gi.page_lo[page]), int(env.gi.page_hi[page])):
        tight.operate("ActivateNode", el)
    tight.operate("Stop")
    assert held <= tight.last_render.tokens <= limit
    assert 0 < len(tight.last_render.opened_ids) < len(env.last_render.opened_ids)
    assert tight.state.counters.invalid == 0  # left-out opens are not refused actions


def test_each_turn_of_a_conversation_keeps_its_render_within_the_budget() -> None:
    limit = full_tokens("visual", episode="conv", k=2) + 5
    env = env_with("visual", k=2, tokens=limit)
    renders = []
    env.add_observer(lambda e, event, data: renders.append(data["rendered"].tokens)
                     if event in ("turn_end", "end") else None)
    env.reset(seed=0, options={"episode_id": "conv"})
    done = False
    while not done:
        assert env.state.tokens.used == env.render().tokens <= limit
        _, _, term, trunc, info = env.operate("Stop")
        done = term or trunc
    assert len(renders) == 3 and all(t <= limit for t in renders)
    # a later turn's reader question carries the history, and the env's own render asks it the same way
    assert "Earlier in this conversation" in env.last_render.question


def test_text_view_and_the_chat_show_tokens_left_and_refuse_past_the_budget() -> None:
    from mage_gym.agent.chat_env import MageChatEnv

    limit = full_tokens("visual", k=2) + 5
    env = env_with("visual", k=2, tokens=limit)
    env.reset(seed=0, options={"episode_id": "elem"})
    assert f'tokens_left="{limit - env.render().tokens}" token_budget="{limit}"' in env.text_view()
    off = MageChatEnv(episodes=EPISODES, query_fn=QF, K=16, retriever="bm25", max_candidates=6, budget={"k": 2})
    messages, info = off.reset(seed=0, options={"episode_id": "elem"})
    assert "tokens_left" not in messages[1]["content"] and "tokens" not in info["process"]["budget_left"]
    held = off.inner.unwrapped.render().tokens
    chat = MageChatEnv(episodes=EPISODES, query_fn=QF, K=16, retriever="bm25", max_candidates=6,
                       budget={"k": 2, "tokens": held + 5})  # no room for another node
    messages, info = chat.reset(seed=0, options={"episode_id": "elem"})
    assert 'tokens_left="5"' in messages[1]["content"] and info["process"]["budget_left"]["tokens"] == 5
    assert info["task"].endswith(f"-tok{held + 5}/s0")
    reply, _, _, _, info = chat.step('<tool_call>{"name": "activate", "arguments": {"candidates": [1]}}</tool_call>')
    assert "refused: would render" in reply[-1]["content"] and info["invalid_calls"] == 1


def test_traces_record_the_tokens_left_after_each_step_only_under_a_budget() -> None:
    for budget, key in (({"k": 2}, False), ({"k": 2, "tokens": 10 ** 6}, True)):
        env, trace = env_with("text", **budget), TraceRecorder()
        env.add_observer(trace)
        env.reset(seed=0, options={"episode_id": "elem"})
        env.operate("SearchEvidence", query="revenue")
        steps = [r for r in trace.records if r.get("kind") == "step"]
        assert steps and all(("tokens" in r["budget_left"]) == key for r in steps)
        if key:
            assert steps[-1]["budget_left"]["tokens"] == 10 ** 6 - env.render().tokens


def test_the_numeric_observation_is_the_same_with_and_without_the_budget() -> None:
    on, off = env_with("visual", k=2, tokens=10 ** 6), env_with("visual", k=2)
    a, _ = on.reset(seed=0, options={"episode_id": "elem"})
    b, _ = off.reset(seed=0, options={"episode_id": "elem"})
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    assert on.observation_space == off.observation_space


# --- every step, every mode ----------------------------------------------------------------------------------

def accepted(env: MageRAGEnv, action: int) -> bool:
    """Would the transition accept ``action``? Tried on a copy of the state (the meter is copied with it)."""
    op, slot = ActionLayout(env.K).decode(action)
    if op == Op.STOP:
        return not env.state.stopped
    res = apply_operation(env.state.copy(), op, int(env.slots[slot]), search=lambda: np.zeros(env.gi.n_pages))
    return res.ok


def check_count(env: MageRAGEnv) -> None:
    meter = env.state.tokens
    assert meter.used == env.render().tokens, "the state's count is not the render's"
    assert meter.used <= max(meter.limit, meter.floor), "the render passed the token budget"


budgets = st.fixed_dictionaries({
    "k": st.integers(0, 4), "m": st.integers(1, 3), "M": st.integers(0, 6), "T": st.integers(1, 3),
    "B": st.integers(0, 3), "share": st.floats(0.0, 1.3),
})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget=budgets, K=st.sampled_from([4, 8, 16]), mode=st.sampled_from(["visual", "text", "elements"]),
       episode=st.sampled_from([e.episode.episode_id for e in EPISODES]), seed=st.integers(0, 10_000),
       p_round=st.sampled_from([0.0, 0.3]), final_pass=st.booleans())
def test_random_episodes_count_exactly_and_stay_within_the_token_budget(budget, K, mode, episode, seed, p_round,
                                                                        final_pass):
    budget = dict(budget)
    budget["tokens"] = max(1, round(budget.pop("share") * SCALE[mode]))
    env = env_with(mode, K, final_pass, **budget)
    renders: list[tuple[int, int]] = []  # (tokens rendered, the most that turn allowed)
    env.add_observer(lambda e, event, data: renders.append(
        (data["rendered"].tokens, max(e.state.tokens.limit, e.state.tokens.floor)))
        if event in ("turn_end", "end") else None)
    trace = TraceRecorder()
    env.add_observer(trace)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed, options={"episode_id": episode})
    done = False
    while not done:
        check_count(env)
        env.state.check_invariants()
        mask = env.action_masks()
        for a in range(len(mask)):
            assert bool(mask[a]) == accepted(env, a), f"mask disagrees with the transition on action {a}"
        if rng.random() < p_round:
            cands, held = env.candidates(), [env.gi.node_ids[v] for v in env.state.working]
            decision = RoundDecision(
                activate=tuple(int(i) for i in rng.integers(1, len(cands) + 2, size=rng.integers(0, 3))),
                open=tuple(held[i] for i in rng.permutation(len(held))[:2]),
                prune=tuple(held[i] for i in rng.permutation(len(held))[:int(rng.integers(0, 2))]),
                search="revenue growth" if rng.random() < 0.3 else None, stop=bool(rng.random() < 0.1))
            _, _, terminated, truncated, info = env.submit_round(decision)
        else:
            valid = np.flatnonzero(mask)
            a = int(valid[rng.integers(len(valid))])
            if a == 0 and rng.random() < 0.95 and len(valid) > 1:
                a = int(valid[1 + rng.integers(len(valid) - 1)])
            _, _, terminated, truncated, info = env.step(a)
        assert info["token_budget"]["used"] == env.state.tokens.used
        done = terminated or truncated
    check_count(env)
    env.state.check_invariants()
    assert renders and all(t <= cap for t, cap in renders)
    assert env.last_render.tokens == env.state.tokens.used
    again = env_with(mode, K, final_pass, **budget)
    replay(list(trace.records), again)  # a trace under a token budget replays to the same state
    assert np.array_equal(again.state.node_state, env.state.node_state)
    assert again.last_render.xml == env.last_render.xml


def test_every_node_share_matches_a_render_of_that_node_alone() -> None:
    """Each node's share, computed from the memoised fragments, is what rendering it adds (all modes)."""
    from mage_gym.render import render

    for mode in ("visual", "text", "elements"):
        env = env_with(mode, k=0, tokens=10 ** 6)
        env.reset(seed=0, options={"episode_id": "elem"})
        meter, gi = env.state.tokens, env.gi
        for v in range(gi.n_pages, gi.n_nodes):
            for opened in (False, True):
                st_ = np.zeros(gi.n_nodes, dtype=np.int8)
                st_[gi.node_page[v]] = ACTIVATED
                st_[v] = 2 if opened else ACTIVATED
                out = render(gi.graph, st_, mode, "", env.render_config)
                chars = meter.costs.frame + meter.costs.share(int(gi.node_page[v]))[0] + meter.costs.share(v, opened)[0]
                assert len(out.xml) == chars
                assert out.image_tokens == meter.costs.share(int(gi.node_page[v]))[1] + meter.costs.share(v, opened)[1]


# --- configuration and a real (tiny synthetic) corpus ---------------------------------------------------------

CONF = Path(__file__).resolve().parents[1] / "conf"


def compose(name: str, *overrides: str) -> dict:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from mage_gym.bench.config import plain

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return plain(hydra_compose(config_name=name, overrides=list(overrides)))


@pytest.mark.parametrize("entry", ["benchmark", "train", "main", "headroom", "tune_heuristic", "export_transcripts",
                                   "train_llm", "paper"])
def test_every_entry_point_takes_env_budget_tokens(entry) -> None:
    from mage_gym.env import EnvConfig

    off = compose(entry)["env"]["budget"]
    assert off["tokens"] is None and R.budget_dict(off) == Budget().to_dict() | {k: off[k] for k in "kmMTB"}
    on = compose(entry, "env.budget.tokens=5355")["env"]["budget"]
    assert R.budget_dict(on)["tokens"] == 5355 and EnvConfig(budget=on).budget.tokens == 5355


def test_benchmark_budgets_carry_a_token_budget() -> None:
    from mage_gym.bench.benchmark import budgets_of

    cfg = compose("benchmark", "budgets=[{k: 2}, {k: 5, tokens: 5355}]")
    assert [R.budget_label(b) for b in budgets_of(cfg)] == ["k2 m4 M24 T6 B16", "k5 m4 M24 T6 B16 tok5355"]


def test_benchmark_budgets_that_merge_into_one_are_played_once() -> None:
    """``{k: 5}`` and the full default budget are the same budget: one run, not every question twice."""
    from mage_gym.bench.benchmark import budgets_of

    cfg = compose("benchmark", "budgets=[{k: 5}, {k: 5, m: 4, M: 24, T: 6, B: 16}, {k: 2}, {k: 5}]")
    assert [R.budget_label(b) for b in budgets_of(cfg)] == ["k5 m4 M24 T6 B16", "k2 m4 M24 T6 B16"]


@pytest.fixture(scope="module")
def synth_episodes(tmp_path_factory):
    from agent_helpers import one_document_corpus
    from mage_gym.data.synth.corpus import load_synth

    return load_synth(one_document_corpus(tmp_path_factory.mktemp("synth_tokens"), pages=8, questions=4))


@pytest.mark.slow
def test_topk_page_at_k5_under_topk_page_k2s_mean_tokens_reads_no_more(synth_episodes, tmp_path) -> None:
    """The budget-on example: k=5 entry pages under k=2's mean reader tokens is capped at that mean."""
    import json

    from mage_gym.bench.benchmark import benchmark
    from policies import REGISTRY

    base = ["retriever=bm25", "logger=none", "env.parser=fast", "equal_cost.enabled=false", "traces=false",
            "policies=[topk_page]", "graph_workers=1"]
    k2 = benchmark(compose("benchmark", *base, "budgets=[{k: 2}, {k: 5}]"), tmp_path / "k2", episodes=synth_episodes,
                   registry=REGISTRY)
    runs = json.loads((tmp_path / "k2" / "results.json").read_text())["runs"]
    mean2, mean5 = (r["metrics"]["tokens_rendered"] for r in runs)
    cap = int(mean2)
    assert k2 and mean2 < mean5
    benchmark(compose("benchmark", *base, f"budgets=[{{k: 5, tokens: {cap}}}]"), tmp_path / "cap",
              episodes=synth_episodes, registry=REGISTRY)
    (run,) = json.loads((tmp_path / "cap" / "results.json").read_text())["runs"]
    assert run["budget"]["tokens"] == cap
    rows = [json.loads(x) for x in (tmp_path / "cap" / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == len(synth_episodes) and all(r["metrics"]["tokens_rendered"] <= cap for r in rows)
    assert run["metrics"]["tokens_rendered"] <= cap < mean5
    assert "tok" + str(cap) in (tmp_path / "cap" / "results.md").read_text()
