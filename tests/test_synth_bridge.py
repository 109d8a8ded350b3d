"""Bridge questions of the synthetic generator, its frozen version and its seed roles.

A small corpus of two 38-44-page documents with mostly bridge questions is
generated once per module; its graphs are built with the fast parser and the
default encoder (what the environment uses) into the graph cache
(``$MAGE_GYM_CACHE``: the generator is deterministic, so later runs load them).
Pages must be this many: with k=5 entry pages out of 12, a page would be found
by chance alone 40% of the time.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from mage_gym.data.episode import Episode, Region
from mage_gym.data.io import episode_from_dict, episode_to_dict
from mage_gym.data.synth import (
    BRIDGE_TYPES,
    GENERATOR_VERSION,
    REFERENCE_PATTERNS,
    SEED_RANGES,
    SeedRoleError,
    SynthConfig,
    check_seed,
    generate_corpus,
    generate_document,
    load_synth,
    preset,
    preset_role,
    read_manifest,
    require_role,
    role_of_seed,
)
from mage_gym.data.synth.bridge import PageLabels, roman
from mage_gym.data.synth.bridge_questions import content_tokens
from mage_gym.data.synth.planner import BRIDGE_ID_BASE

CFG = SynthConfig(min_pages=38, max_pages=44, questions_per_doc=2, bridge_questions_per_doc=10)
SEED = 13
K = 5


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bridge")
    generate_corpus(root, 2, seed=SEED, cfg=CFG, workers=2, progress=False)
    return root


@pytest.fixture(scope="module")
def bridges(corpus: Path) -> list[Episode]:
    return [ep for ep in load_synth(corpus) if ep.extra["question_kind"] == "bridge"]


@pytest.fixture(scope="module")
def layouts(corpus: Path) -> dict[str, dict]:
    return {d["doc_id"]: json.loads((corpus / d["layout"]).read_text()) for d in read_manifest(corpus)["docs"]}


@pytest.fixture(scope="module")
def checked(corpus: Path):  # noqa: ANN201
    """(per-question results, summary) of the bridge check on fast-parser graphs."""
    from mage_gym.bench.bridge_check import check_bridges

    return check_bridges(corpus, parser="fast", k=K)


def _by_id(layout: dict) -> dict[str, dict]:
    return {e["id"]: e for e in layout["elements"]}


# --- what the generator makes ------------------------------------------------------------------------


def test_every_bridge_type_and_most_patterns_appear(bridges: list[Episode]) -> None:
    types = Counter(ep.extra["bridge"]["type"] for ep in bridges)
    assert set(types) == set(BRIDGE_TYPES), types
    patterns = {ep.extra["bridge"]["pattern"] for ep in bridges if ep.extra["bridge"]["type"] == "reference"}
    assert patterns <= set(REFERENCE_PATTERNS) and len(patterns) >= 4, patterns
    assert len(bridges) >= 16  # 2 documents x 10 asked: most documents offer enough valid stories


def test_two_hops_with_gold_on_different_pages(bridges: list[Episode], layouts: dict[str, dict]) -> None:
    for ep in bridges:
        hop1, hop2 = ep.hops()
        assert (hop1.hop, hop2.hop) == (1, 2) and ep.n_hops == 2
        assert len(ep.evidence_hops) == len(ep.evidence_regions) == len(ep.extra["gold_element_ids"])
        assert len(hop2.pages) == 1 and hop2.pages[0] not in hop1.pages
        assert set(ep.evidence_pages) == set(hop1.pages) | set(hop2.pages) and ep.multi_page
        els = _by_id(layouts[ep.doc_id])
        b = ep.extra["bridge"]
        name = b["programme"].removeprefix("the ")
        hop1_text = " ".join(els[i]["text"] for i in b["hop1"]["element_ids"])
        assert name in ep.question and name in hop1_text
        hop2_el = els[b["hop2"]["element_ids"][0]]
        assert hop2_el["page"] == hop2.pages[0]
        assert name not in hop2_el["text"]
        if b["type"] == "semantic":
            assert b["entity"] in hop1_text and b["entity"] in hop2_el["text"]
            assert b["entity"] not in ep.question
        if b["type"] == "section":  # hop 1 is the programme's section heading and introduction
            assert [els[i]["type"] for i in b["hop1"]["element_ids"]] == ["title", "paragraph"]


def test_answer_is_stated_on_the_second_page(bridges: list[Episode], corpus: Path) -> None:
    """Text and table answers are in the PDF text of the hop-2 page; chart answers only in its pixels."""
    import pymupdf

    seen = Counter()
    for ep in bridges:
        page = ep.hops()[1].pages[0]
        with pymupdf.open(ep.source) as doc:
            text = doc[page].get_text()
        if ep.answer_format == "Float":
            shown = {f"{float(ep.answer):,.{len(ep.answer.split('.')[1])}f}"}
        elif ep.answer_format == "Int":
            shown = {ep.answer, f"{int(ep.answer):,}"}  # years plain, counts with separators
        else:
            shown = {ep.answer}
        hop2_type = ep.evidence_regions[-1].type
        if hop2_type == "chart":
            assert not any(s in text for s in shown), ep.question
        else:
            assert any(s in text for s in shown), (ep.question, ep.answer)
        seen[hop2_type] += 1
    assert "paragraph" in seen and {"table", "chart"} & set(seen), seen  # prose and a tabular/graphic target


def test_answer_page_shares_no_content_word_with_question(bridges: list[Episode], checked) -> None:  # noqa: ANN001
    """As drawn (the PDF's text layer: header, footer, every element) and as parsed (the graph's page text)."""
    import pymupdf

    for ep in bridges:
        page = ep.hops()[1].pages[0]
        with pymupdf.open(ep.source) as doc:
            drawn = content_tokens(doc[page].get_text())
        q = content_tokens(ep.question)
        assert q and not (q & drawn), (ep.question, q & drawn)
    results, _ = checked
    assert results and all(not r.lexical_overlap for r in results), [r.lexical_overlap for r in results]


def test_cross_references_resolve_to_their_labels(layouts: dict[str, dict]) -> None:
    """Every recorded mention is in its source element and names its target (exact gold for the `reference` relation)."""
    kinds: Counter[str] = Counter()
    for lay in layouts.values():
        els = _by_id(lay)
        for r in lay["references"]:
            src = els[r["source"]]
            kinds[r["kind"]] += 1
            assert r["mention"] in src["text"] or len(src["text"]) >= 200, r  # prose is stored cut at 200 chars
            if r["kind"] == "page":
                label = r["mention"].split()[-1]
                assert r["target_page"] is not None and lay["page_labels"][r["target_page"]] == label == r["target_label"]
                continue
            assert r["target"] is not None, r  # the generator never cites what it did not draw
            tgt = els[r["target"]]
            assert tgt["page"] == r["target_page"]
            label, number = r["mention"].split(" ", 1)
            if r["kind"] == "section":
                assert tgt["type"] == "title" and tgt["text"].startswith(number + " ")
            elif r["kind"] in ("table", "exhibit", "figure"):
                cap = els.get(r["target"] + ".caption")
                assert cap is not None and cap["text"].startswith(f"{label} {number}:"), (r, cap)
            elif r["kind"] == "appendix":
                assert tgt["type"] == "title" and tgt["text"].startswith(r["mention"] + ":")
            elif r["kind"] == "note":
                assert tgt["text"].startswith(r["mention"] + ".")
    assert {"table", "figure", "section", "note", "appendix", "page"} <= set(kinds), kinds


def test_printed_page_labels(corpus: Path, layouts: dict[str, dict]) -> None:
    """Labels in the layout file, the PDF's /PageLabels and the drawn footer agree; they are not PDF indices."""
    import pymupdf

    styles = set()
    for d in read_manifest(corpus)["docs"]:
        lay = layouts[d["doc_id"]]
        labels = lay["page_labels"]
        styles.add(lay["page_label_style"]["style"])
        with pymupdf.open(corpus / d["file"]) as doc:
            assert len(labels) == len(doc)
            for i, page in enumerate(doc):
                assert page.get_label() in (labels[i], "")  # "" = the PDF has no /PageLabels: 1, 2, 3...
                footer = page.get_text(clip=pymupdf.Rect(0, page.rect.height - 50, page.rect.width,
                                                         page.rect.height))
                assert labels[i] in footer.split(), (i, labels[i], footer)
        assert all(lab != str(i) for i, lab in enumerate(labels[1:], start=1))  # never the 0-based index
    assert PageLabels("roman_front", 2).label(0) == "i" and PageLabels("roman_front", 2).label(5) == "4"
    assert [roman(n) for n in (1, 4, 9, 14)] == ["i", "iv", "ix", "xiv"]
    assert PageLabels().footer_text(2, 20) == "Page 3 of 20"


# --- what retrieval and the graph make of them ----------------------------------------------------------------


def test_second_hop_is_not_found_by_retrieval_alone(checked) -> None:  # noqa: ANN001
    _, summary = checked
    assert summary["all"]["n"] >= 16
    assert summary["all"][f"hop2_recall@{K}"] < 0.3, summary["all"]
    assert summary["all"][f"hop1_recall@{K}"] >= 0.7, summary["all"]  # the question does lead to its first hop


@pytest.mark.parametrize("btype,kind", [("section", "section"), ("semantic", "semantic"), ("reference", "reference")])
def test_second_hop_reachable_from_first_hop(checked, btype: str, kind: str) -> None:  # noqa: ANN001
    """Within 2 edges of the intended kind from the first hop's gold nodes (the graph builds all three relations)."""
    results, summary = checked
    mine = [r for r in results if r.type == btype]
    assert mine, f"no {btype} bridge question in the sample"
    share = sum(r.reach[kind][2] for r in mine) / len(mine)
    floor = 0.8 if btype == "semantic" else 0.9  # semantic edges depend on the encoder's similarity threshold
    assert share >= floor, summary[btype]
    assert share > 2 * summary[btype]["chance_2hop"][kind]


# --- controllers on bridge questions: retrieval alone, the privileged oracle, a public rule ----------------------


@pytest.fixture(scope="module")
def navigation(bridges: list[Episode], checked):  # noqa: ANN001, ANN201 - graphs are in the cache after `checked`
    """Per policy: (bridge type, second hop rendered, pages rendered) for every bridge question (k=5, visual).

    One privileged env serves all three (only the oracle asks it for gold);
    the oracle is bound to it, the runner binds the rule policy.
    """
    from mage_gym.env import MageRAGEnv
    from mage_gym.graph.build import build_graph
    from policies import get_policy
    from mage_gym.bench.play import run_episode

    graphs = {ep.doc_id: build_graph(ep.source, parser="fast", progress=False) for ep in bridges}
    env = MageRAGEnv(episodes=[(ep, graphs[ep.doc_id]) for ep in bridges], privileged=True, budget={"k": K})
    policies = {"topk_page": get_policy("topk_page"), "oracle": get_policy("oracle").bind(env),
                "rule": get_policy("graph_follower")}
    out: dict[str, list[tuple[str, bool, int]]] = {name: [] for name in policies}
    for ep in bridges:
        for name, policy in policies.items():
            res = run_episode(env, policy, episode_id=ep.episode_id)
            assert res.invalid == 0, res.errors
            g = env.get_wrapper_attr("graph")
            idx = g.index_of
            pages = {int(g.node_page[idx[n]]) for n in env.get_wrapper_attr("last_render").node_ids}
            out[name].append((ep.extra["bridge"]["type"], ep.hops()[1].pages[0] in pages, len(pages)))
    return out


def _hop2_recall(rows: list[tuple[str, bool, int]], types: set[str] | None = None) -> float:
    hits = [hit for t, hit, _ in rows if types is None or t in types]
    assert hits
    return sum(hits) / len(hits)


def test_topk_pages_miss_the_second_hop(navigation) -> None:  # noqa: ANN001
    assert _hop2_recall(navigation["topk_page"]) < 0.3


def test_oracle_reaches_the_second_hop(navigation) -> None:  # noqa: ANN001
    """Greedy, privileged, over the env's own slots and budget: the second hop is reachable from the first."""
    assert _hop2_recall(navigation["oracle"]) > 0.9
    mean_pages = sum(n for *_, n in navigation["oracle"]) / len(navigation["oracle"])
    assert mean_pages <= K + 2  # it gets there by navigating, not by reading more pages


def test_public_rule_policy_reaches_the_second_hop(navigation) -> None:  # noqa: ANN001
    """The task is solvable from public signals: follow the best passage's relations for a few pages."""
    rule = navigation["rule"]
    assert _hop2_recall(rule) >= 0.6
    assert _hop2_recall(rule, {"reference"}) >= 0.6  # the sixth relation carries its own bridges
    assert max(n for *_, n in rule) <= K + 1 + 3


@pytest.fixture(scope="module")
def navigation_tokens(bridges: list[Episode], checked):  # noqa: ANN001, ANN201
    """Per controller, under a reader-token budget that holds two pages but not three (k=2 entry pages, visual):
    (second hop rendered, tokens rendered, policy stats) per bridge question, and the budget.

    The entry pages fill such a budget, so the second hop is read only by
    pruning one of them first (the oracle's and graph_follower's token room).
    """
    from mage_gym.env import MageRAGEnv
    from mage_gym.graph.build import build_graph
    from policies import get_policy
    from mage_gym.bench.play import run_episode

    graphs = {ep.doc_id: build_graph(ep.source, parser="fast", progress=False) for ep in bridges}
    pairs = [(ep, graphs[ep.doc_id]) for ep in bridges]
    plain = MageRAGEnv(episodes=pairs, budget={"k": 2})
    two_pages = []
    for ep in bridges:
        plain.reset(seed=0, options={"episode_id": ep.episode_id})
        two_pages.append(plain.render().tokens)
    cap = max(two_pages) + 200  # room for the anchor passage's lines, never for a third page image
    env = MageRAGEnv(episodes=pairs, privileged=True, budget={"k": 2, "tokens": cap})
    policies = {"topk_page": get_policy("topk_page"), "oracle": get_policy("oracle", make_room="tokens").bind(env),
                "oracle_stop": get_policy("oracle", make_room="stop").bind(env),
                "rule": get_policy("graph_follower")}
    out: dict[str, list[tuple[bool, int]]] = {name: [] for name in policies}
    for ep in bridges:
        for name, policy in policies.items():
            res = run_episode(env, policy, episode_id=ep.episode_id)
            assert res.invalid == 0, res.errors
            g = env.get_wrapper_attr("graph")
            render = env.get_wrapper_attr("last_render")
            pages = {int(g.node_page[g.index_of[n]]) for n in render.node_ids}
            out[name].append((ep.hops()[1].pages[0] in pages, int(render.tokens)))
    stats = {name: dict(getattr(p, "stats", {})) for name, p in policies.items()}
    # the same teacher through MageRAG-Chat-v0 (how its transcripts are made): token room only for listed gold
    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.agent.transcripts import record_episode
    from mage_gym.bench.chat import policy_actor
    from policies import REGISTRY

    chat = MageChatEnv(episodes=pairs, privileged=True, numeric_obs_in_info=True, budget={"k": 2, "tokens": cap})
    actor, _ = policy_actor(chat, "oracle", {"make_room": "tokens"}, REGISTRY)
    out["chat_oracle"], prunes, pairs_ = [], 0, 0
    for ep in bridges:
        t = record_episode(chat, actor, task=str(chat.task_id(ep.episode_id)))
        assert t.invalid_calls == 0 and t.format_errors == 0
        calls = [c["function"]["name"] for m in t.messages if m["role"] == "assistant" for c in m["tool_calls"]]
        out["chat_oracle"].append((t.metrics["evidence_page_recall"] == 1.0, int(t.metrics["tokens_rendered"])))
        prunes += calls.count("prune")
        pairs_ += sum([c["function"]["name"] for c in m["tool_calls"]] == ["prune", "activate"]
                      for m in t.messages if m["role"] == "assistant")
    stats["chat_oracle"] = {"prune": prunes, "prune_then_activate_replies": pairs_}
    return out, stats, cap


def test_under_a_two_page_token_budget_controllers_prune_to_reach_the_second_hop(
        navigation_tokens) -> None:  # noqa: ANN001
    """Without token room no controller reads past the entry pages; with it the oracle and the public rule do."""
    out, stats, cap = navigation_tokens
    assert all(t <= cap for rows in out.values() for _, t in rows)

    def hop2(name: str) -> float:
        return sum(hit for hit, _ in out[name]) / len(out[name])

    assert hop2("topk_page") < 0.3
    assert hop2("oracle") > 0.8 and stats["oracle"].get("prunes_for_tokens", 0) > 0
    assert hop2("oracle_stop") <= hop2("topk_page") + 0.1 and "prunes_for_tokens" not in stats["oracle_stop"]
    assert hop2("rule") >= 0.5 and stats["rule"].get("prunes_for_tokens", 0) > 0
    assert hop2("chat_oracle") > 0.5 and stats["chat_oracle"]["prune"] > 0  # both hops read, a shorter list
    assert stats["chat_oracle"]["prune_then_activate_replies"] > 0  # the room made and taken in one reply


# --- presets, versions, seeds -------------------------------------------------------------------------------


def test_tiny_and_train_presets_ask_bridge_questions(tmp_path: Path) -> None:
    _, tiny = preset("tiny")
    _, train = preset("train")
    assert tiny.bridge_questions_per_doc > 0
    assert train.bridge_questions_per_doc / (train.questions_per_doc + train.bridge_questions_per_doc) >= 0.3
    res = generate_document(tmp_path, 0, 0, tiny)
    kinds = Counter(r["extra"]["question_kind"] for r in res.episodes)
    assert kinds["bridge"] >= 1 and sum(kinds.values()) - kinds["bridge"] == tiny.questions_per_doc


def test_zero_bridge_questions_leaves_out_bridge_material(tmp_path: Path) -> None:
    cfg = SynthConfig(min_pages=10, max_pages=10, questions_per_doc=5, bridge_questions_per_doc=0)
    res = generate_document(tmp_path, 0, 3, cfg)
    lay = json.loads((tmp_path / res.layout_file).read_text())
    assert all(int(e["id"][1:].split(".")[0]) < BRIDGE_ID_BASE for e in lay["elements"])
    assert lay["page_labels"] == [str(i + 1) for i in range(res.n_pages)]
    assert all(r["extra"]["question_kind"] != "bridge" for r in res.episodes)


def test_seed_ranges_are_disjoint_and_enforced(tmp_path: Path) -> None:
    spans = sorted(SEED_RANGES.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])) and all(lo < hi for lo, hi in spans)
    assert role_of_seed(0) == "train" and role_of_seed(SEED_RANGES["test"][0]) == "test"
    assert preset_role("test") == "test" and preset_role("train") == "train"
    assert check_seed(SEED_RANGES["test"][0], "test") == "test"
    with pytest.raises(SeedRoleError, match="test corpus needs a seed"):
        generate_corpus(tmp_path / "t", 1, seed=0, role="test", progress=False)
    with pytest.raises(SeedRoleError):
        check_seed(SEED_RANGES["test"][0], "train")
    assert not (tmp_path / "t").exists()  # refused before writing anything


def test_corpus_records_version_seed_and_role(corpus: Path) -> None:
    man = read_manifest(corpus)
    assert man["generator_version"] == GENERATOR_VERSION and man["seed"] == SEED and man["role"] == "train"
    assert man["config"]["bridge_questions_per_doc"] == CFG.bridge_questions_per_doc
    assert man["totals"]["question_kinds"]["bridge"] == sum(man["totals"]["bridge_types"].values())
    require_role(man, "train")
    with pytest.raises(SeedRoleError):
        require_role(man, "test")
    lay = json.loads((corpus / man["docs"][0]["layout"]).read_text())
    assert lay["generator_version"] == GENERATOR_VERSION


#: sha256 of one small document's episodes and layout, per generator version. A change of generated
#: output must come with a new GENERATOR_VERSION (and a new entry here): corpora are frozen data.
FINGERPRINTS = {"2": "6c249ff3269249495541a88d322cf6232d46c033389172982dd32ed0ca91e844"}


def test_generator_output_is_frozen_for_its_version(tmp_path: Path) -> None:
    cfg = SynthConfig(min_pages=10, max_pages=10, questions_per_doc=4, bridge_questions_per_doc=3)
    res = generate_document(tmp_path, 0, 7, cfg)
    h = hashlib.sha256()
    h.update(json.dumps(list(res.episodes), sort_keys=True).encode())
    h.update((tmp_path / res.layout_file).read_bytes())
    assert GENERATOR_VERSION in FINGERPRINTS, "new generator version: record its fingerprint"
    assert h.hexdigest() == FINGERPRINTS[GENERATOR_VERSION], (
        "generated output changed without a GENERATOR_VERSION bump (mage_gym/data/synth/provenance.py); "
        f"bump it and record {h.hexdigest()}")


# --- Episode hops ----------------------------------------------------------------------------------------------


def test_episode_hops_round_trip_and_validation() -> None:
    r1, r2 = Region(1, (0.1, 0.1, 0.5, 0.2), "paragraph"), Region(7, (0.1, 0.3, 0.9, 0.6), "table")
    ep = Episode(episode_id="e", benchmark="synth", doc_id="d", source="/x.pdf", question="q?", answer="1",
                 answer_format="Int", evidence_pages=(1, 7), evidence_regions=(r1, r2), evidence_hops=(1, 2))
    back = episode_from_dict(json.loads(json.dumps(episode_to_dict(ep))))
    assert back == ep and back.evidence_hops == (1, 2) and isinstance(back.evidence_hops, tuple)
    assert [(h.hop, h.pages, h.regions) for h in back.hops()] == [(1, (1,), (r1,)), (2, (7,), (r2,))]
    plain = Episode(episode_id="p", benchmark="mmlongbench", doc_id="d", source="/x.pdf", question="q?",
                    answer="a", answer_format="Str", evidence_pages=(3, 1))
    assert plain.n_hops == 1 and [(h.hop, h.pages) for h in plain.hops()] == [(1, (1, 3))]
    with pytest.raises(ValueError):
        Episode(episode_id="e", benchmark="synth", doc_id="d", source="/x", question="q", answer="1",
                answer_format="Int", evidence_regions=(r1,), evidence_hops=(1, 2))
