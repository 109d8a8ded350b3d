"""docs/RESULTS.md (an index) and docs/results/<name>/README.md (a page per result) are generated from the
published results.json files with their provenance."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from mage_gym.bench.published import load_published, portable_paths, publish, result_tables, supersede
from mage_gym.bench.results_index import (
    GENERATED_MARK,
    INDEX_LIMIT_BYTES,
    PAGE_NAME,
    render_docs,
    section_of,
    stale_pages,
    write_docs,
)
from experiments.results_doc import RENDER_COMMAND, main

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results"
INDEX = REPO / "docs" / "RESULTS.md"
#: an absolute path that only exists on some machine (system roots such as /tmp mean the same everywhere)
MACHINE_PATH = re.compile(r"(^|[\s=(\[,'\"`])/(?!(tmp|dev|usr|bin|etc|proc|sys|var)(/|\b))[\w.+-]+/")


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    runs = [{"policy": "topk_page", "budget": {"k": 5, "m": 3, "M": 9, "T": 3, "B": 12}, "dataset": "synth",
             "split": "test", "metrics": {"episodes": 40, "reward": 0.4567, "evidence_page_recall": 0.61,
                                          "tokens_rendered": 5000.0, "accuracy": None}},
            {"policy": "oracle", "privileged": True, "budget": {"k": 5}, "dataset": "synth", "split": "test",
             "metrics": {"episodes": 40, "reward": 0.7, "evidence_page_recall": 0.93, "accuracy": None}}]
    (run / "results.json").write_text(json.dumps({"runs": runs}))
    (run / "budget_curve.png").write_bytes(b"\x89PNG")
    return run


def _put(root: Path, name: str, res: object, **prov: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(res))
    (folder / "provenance.json").write_text(json.dumps({"command": "c", "date": "d", "commit": "abc", **prov}))
    return folder


def _docs(root: Path) -> tuple[str, dict[str, str]]:
    """(index, {result name: page}) rendered for ``root`` with the index beside it."""
    docs = render_docs(root, root.parent / "RESULTS.md", "gen")
    pages = {p.parent.relative_to(root).as_posix(): t for p, t in docs.items() if p.name == PAGE_NAME}
    return docs[root.parent / "RESULTS.md"], pages


def test_publish_then_render_links_a_page_that_cites_command_date_commit_and_numbers(tmp_path: Path) -> None:
    root = tmp_path / "docs" / "results"
    dest = publish(_run_dir(tmp_path), "bench_synth", "python experiments/benchmark.py dataset=synth", root, REPO,
                   date="2026-12-01", title="topk_page and the oracle on synth")
    prov = json.loads((dest / "provenance.json").read_text())
    assert prov["command"].startswith("python experiments/benchmark.py") and prov["date"] == "2026-12-01"
    assert prov["commit"] and prov["commit"] != "unknown" and prov["title"] == "topk_page and the oracle on synth"
    index, pages = _docs(root)
    assert "[bench_synth](results/bench_synth/README.md)" in index and "0.610 · 5,000" in index
    page = pages["bench_synth"]
    assert page.startswith(GENERATED_MARK) and "# bench_synth" in page and "topk_page and the oracle" in page
    assert "python experiments/benchmark.py dataset=synth" in page and "2026-12-01" in page
    assert "0.457" in page and "0.610" in page and "oracle (privileged)" in page
    assert "accuracy" not in page.split("| policy")[1].split("\n")[0]  # an all-null metric is left out
    assert "![budget_curve.png](budget_curve.png)" in page and "[All results](../../RESULTS.md)" in page


def test_publish_stores_a_command_without_machine_paths(tmp_path: Path) -> None:
    dest = publish(_run_dir(tmp_path), "x", "python experiments/perf_train.py --before-tree /work/coord/s5/tree_old "
                   "--out /home/me/repo/outputs/s6/results.json", tmp_path / "r", REPO)
    command = json.loads((dest / "provenance.json").read_text())["command"]
    assert command == ("python experiments/perf_train.py --before-tree …/s5/tree_old "
                       "--out outputs/s6/results.json")


def test_portable_paths_strips_machine_roots_and_keeps_system_paths_and_urls() -> None:
    assert portable_paths("/work/coord/s4/b14/runs/testB_s0") == "…/runs/testB_s0"
    assert portable_paths("/work/main/outputs/s8/dagger_ppo_s0/checkpoint.zip") == \
        "outputs/s8/dagger_ppo_s0/checkpoint.zip"
    assert portable_paths("/work/main/.cache/mage_gym/synth/tiny_n7_s0") == "$MAGE_GYM_CACHE/synth/tiny_n7_s0"
    assert portable_paths("/work/coord/runs/job/train/checkpoint.zip") == "…/job/train/checkpoint.zip"
    assert portable_paths("hydra.run.dir=/work/coord/runs/refq") == "hydra.run.dir=…/runs/refq"
    kept = ("rm -rf /tmp/perf_before; base_url=http://127.0.0.1:18514/v1 steps/s 1/3 "
            "outputs/s8/bench/x ../shared/data/pdfs")
    assert portable_paths(kept) == kept


def test_render_refuses_results_without_provenance_or_broken_json(tmp_path: Path) -> None:
    folder = tmp_path / "results" / "hand_typed"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"x": 1}))
    with pytest.raises(ValueError, match="provenance"):
        render_docs(tmp_path / "results", tmp_path / "RESULTS.md", "gen")
    (folder / "results.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_published(tmp_path / "results")


def test_publish_rejects_missing_run_and_bad_name(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        publish(tmp_path / "nope", "x", "cmd", tmp_path / "r", REPO)
    with pytest.raises(ValueError, match="bad result name"):
        publish(_run_dir(tmp_path), "../x", "cmd", tmp_path / "r", REPO)


def test_nested_results_are_flattened_into_field_rows() -> None:
    lines = result_tables({"steps_per_s": {"median": 5123.4, "runs": [1, 2]}})
    assert "| steps_per_s.median | 5,123 |" in lines and "| steps_per_s.runs[1] | 2 |" in lines


def test_any_kind_of_result_gets_a_page_and_an_index_line(tmp_path: Path) -> None:
    """Results this renderer has never seen (new scripts publish while others merge) render generically."""
    root = tmp_path / "docs" / "results"
    _put(root, "a_list", [1, {"b": 2}])
    _put(root, "a_number", 3.5)
    _put(root, "odd/runs", {"runs": [{"name": "x", "metrics": {"m": [1, 2], "deep": {"a": {"b": {"c": {}}}}}}]})
    _put(root, "perf_new", {"setup_s": 200.0, "ratio_new_over_old": 0.5, "note": "a | b"})
    index, pages = _docs(root)
    assert set(pages) == {"a_list", "a_number", "odd/runs", "perf_new"}
    for name in pages:
        assert f"]({'results/' + name + '/README.md'})" in index
    other = index.split("## Other results")[1]
    assert "[a_list]" in other and "[a_number]" in other and "[odd/runs]" in other
    assert "| `ratio_new_over_old` | 0.500 |" in index.split("## Speed")[1]
    assert "| value | 3.500 |" in pages["a_number"] and "| [1].b | 2 |" in pages["a_list"]
    assert "a \\| b" in pages["perf_new"]  # a pipe inside a cell does not break the table
    assert "## Evidence quality" not in index and "## Superseded" not in index  # empty sections are left out


def _report_runs() -> list[dict]:
    def row(policy: str, delta: dict | None, privileged: bool = False, subset: str = "all") -> dict:
        m = {"episodes": 40, "evidence_page_recall": 0.6, "tokens_rendered": 5000.0}
        if delta is not None:
            m["delta_recall_at_equal_tokens"] = delta
        return {"policy": policy, "privileged": privileged, "budget": {"k": 5}, "dataset": "synth", "split": "test",
                "subset": subset, "render_mode": "visual", "metrics": m}

    small = {"mean": 0.05, "lo": -0.01, "hi": 0.1, "n": 7, "interpretable": False}
    return [row("topk_page", None), row("imitation", {"mean": 0.05, "lo": 0.01, "hi": 0.09, "n": 35}),
            row("oracle", {"mean": 0.2, "lo": 0.1, "hi": 0.3, "n": 35}, privileged=True),
            row("topk_page", None, subset="bridge"), row("imitation", small, subset="bridge"),
            row("oracle", {"mean": 0.4, "lo": 0.3, "hi": 0.5, "n": 7, "interpretable": False}, True, "bridge")]


def test_equal_token_reports_become_one_headline_table_with_intervals(tmp_path: Path) -> None:
    root = tmp_path / "docs" / "results"
    _put(root, "report/synth", {"runs": _report_runs()})
    index, _ = _docs(root)
    head = index.split("## Evidence quality at equal tokens")[1].split("\n## ")[0]
    table = [line for line in head.splitlines() if line.startswith("| ")]
    assert table[0] == ("| controller | [synth test](results/report/synth/README.md) | "
                        "[synth test · bridge](results/report/synth/README.md) |")
    assert table[1] == "| questions (with gold) | 40 (35) | 40 (7)* |"
    assert table[2] == "| topk_page: recall · tokens | 0.600 · 5,000 | 0.600 · 5,000 |"
    assert table[3] == "| imitation | +0.050 [+0.010, +0.090] | +0.050 [-0.010, +0.100]* |"
    assert table[4] == "| oracle (privileged) | +0.200 [+0.100, +0.300] | +0.400 [+0.300, +0.500]* |"
    assert "| imitation | 0.250 | 0.125 |" in head  # the share of the oracle's headroom closed


def test_an_elements_mode_controller_sits_beside_the_topk_page_it_is_compared_with(tmp_path: Path) -> None:
    root = tmp_path / "docs" / "results"
    runs = _report_runs()[:3]
    runs[1] = {**runs[1], "policy": "elements_student", "render_mode": "elements"}
    _put(root, "report/synth", {"runs": runs})
    index, _ = _docs(root)
    head = index.split("## Evidence quality at equal tokens")[1].split("\n## ")[0]
    table = [line for line in head.splitlines() if line.startswith("| ")]
    assert table[0] == "| controller | [synth test](results/report/synth/README.md) |"  # one column, not one per mode
    assert "| elements_student | +0.050 [+0.010, +0.090] |" in table and "visual render mode" in head


def test_a_controller_without_an_oracle_beside_it_gets_no_share_row(tmp_path: Path) -> None:
    root = tmp_path / "docs" / "results"
    _put(root, "report/synth", {"runs": _report_runs()[:3]})
    runs = [{**r, "split": "val"} for r in _report_runs()[:2]]  # val: topk_page and a candidate, no oracle
    runs[1] = {**runs[1], "policy": "val_only_candidate"}
    _put(root, "report/val", {"runs": runs})
    index, _ = _docs(root)
    head = index.split("## Evidence quality at equal tokens")[1].split("\n## ")[0]
    delta_table, share_table = head.split("Share of the oracle's headroom")
    assert "| val_only_candidate |" in delta_table and "| val_only_candidate |" not in share_table
    assert "| imitation | 0.250 |" in share_table


def test_a_superseded_result_leaves_the_tables_and_its_page_names_the_replacement(tmp_path: Path) -> None:
    root = tmp_path / "docs" / "results"
    _put(root, "old", {"runs": _report_runs()})
    _put(root, "new", {"runs": _report_runs()})
    with pytest.raises(ValueError, match="say why"):
        supersede(root, "old", "new", " ")
    with pytest.raises(ValueError, match="itself"):
        supersede(root, "old", "old", "x")
    with pytest.raises(FileNotFoundError, match="no published results.json"):
        supersede(root, "old", "missing", "x")
    supersede(root, "old", "new", "the same on more documents")
    assert section_of(next(r for r in load_published(root) if r.name == "old")) == "superseded"
    index, pages = _docs(root)
    assert "results/old/README.md" not in index.split("## Superseded runs")[0]
    assert "- [old](results/old/README.md) → `new`" in index
    assert "**Superseded** by [new](../new/README.md): the same on more documents" in pages["old"]
    shutil.rmtree(root / "new")  # a replacement that is no longer published is an error, not a dead link
    with pytest.raises(ValueError, match="superseded_by 'new'"):
        load_published(root)


def test_write_docs_keeps_notes_and_removes_stale_pages(tmp_path: Path) -> None:
    root = tmp_path / "docs" / "results"
    _put(root, "group/a", {"x": 1})
    _put(root, "gone", {"x": 1})
    (root / "group" / PAGE_NAME).write_text("# a hand-written note on the group\n")
    write_docs(root, tmp_path / "docs" / "RESULTS.md", "gen")
    assert "[note on group/](../README.md)" in (root / "group" / "a" / PAGE_NAME).read_text()
    (root / "gone" / "results.json").unlink()
    (root / "gone" / "provenance.json").unlink()
    docs = write_docs(root, tmp_path / "docs" / "RESULTS.md", "gen")
    assert not (root / "gone" / PAGE_NAME).exists() and (root / "group" / PAGE_NAME).is_file()
    assert stale_pages(root, docs) == []
    (root / "group" / "a" / PAGE_NAME).write_text("# someone's own notes\n")
    with pytest.raises(ValueError, match="not a generated page"):
        write_docs(root, tmp_path / "docs" / "RESULTS.md", "gen")


def test_cli_publishes_supersedes_and_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, out = tmp_path / "docs" / "results", tmp_path / "docs" / "RESULTS.md"
    run = _run_dir(tmp_path)
    for name in ("first", "second"):
        assert main(["publish", str(run), name, "--command", "cmd", "--results-root", str(root)]) == 0
    assert main(["supersede", "first", "--by", "second", "--because", "re-run", "--results-root", str(root)]) == 0
    assert main(["render", "--results-root", str(root), "--out", str(out)]) == 0
    assert "2 result pages" in capsys.readouterr().out
    assert "- [first](results/first/README.md) → `second`" in out.read_text()
    assert (root / "second" / PAGE_NAME).read_text().startswith(GENERATED_MARK)


def test_the_committed_docs_are_what_render_makes_now() -> None:
    """docs/RESULTS.md and every result page are exactly the generator's output (nobody edited them by hand)."""
    docs = render_docs(RESULTS, INDEX, RENDER_COMMAND)
    stale = [path for path, text in docs.items() if not path.is_file() or path.read_text(encoding="utf-8") != text]
    assert not stale, f"stale: {[str(p.relative_to(REPO)) for p in stale]}; run `{RENDER_COMMAND}`"
    assert stale_pages(RESULTS, docs) == [], f"pages of results that are gone; run `{RENDER_COMMAND}`"


def test_the_index_is_a_short_map_linking_every_published_result() -> None:
    index = INDEX.read_text(encoding="utf-8")
    assert len(index.encode("utf-8")) <= INDEX_LIMIT_BYTES, "docs/RESULTS.md is an index: mark or delete " \
                                                            "superseded runs"
    results = load_published(RESULTS)
    assert results
    for r in results:
        assert (r.folder / PAGE_NAME).is_file(), r.name
        assert f"(results/{r.name}/{PAGE_NAME})" in index, f"{r.name} has no line in the index"
    order = ["Evidence within topk_page's operating budget", "Evidence quality at equal tokens", "Headroom",
             "Benchmarks", "Speed", "Training"]  # a section with no result is left out
    at = [index.index(f"## {title}") for title in order if f"## {title}" in index]
    assert at == sorted(at) and at[0] == index.index("## ") and len(at) >= 5
    assert "Contents:" in index.split("## ")[0]


def test_rendering_is_deterministic_and_independent_of_where_the_repo_lies(tmp_path: Path) -> None:
    here = render_docs(RESULTS, INDEX, RENDER_COMMAND)
    assert render_docs(RESULTS, INDEX, RENDER_COMMAND) == here
    copy = tmp_path / "elsewhere" / "docs"
    shutil.copytree(RESULTS, copy / "results")
    there = render_docs(copy / "results", copy / "RESULTS.md", RENDER_COMMAND)
    assert {p.relative_to(copy): t for p, t in there.items()} == {p.relative_to(INDEX.parent): t
                                                                 for p, t in here.items()}
    for path, text in here.items():
        hits = [m.group(0) for m in MACHINE_PATH.finditer(text)]
        assert not hits, f"{path.relative_to(REPO)} carries machine paths: {hits[:3]}"


def test_the_share_of_the_oracles_headroom_is_derived_per_dataset_split_and_budget() -> None:
    from mage_gym.bench.published import HEADROOM_CLOSED, with_headroom_closed

    def run(policy: str, dataset: str, delta: float | None, privileged: bool = False) -> dict:
        return {"policy": policy, "privileged": privileged, "budget": {"k": 5}, "dataset": dataset, "split": "test",
                "metrics": {"delta_recall_at_equal_tokens": delta}}

    runs = [run("topk_page", "a", None), run("ppo", "a", 0.05), run("oracle", "a", 0.2, privileged=True),
            run("ppo", "b", 0.05), run("oracle", "b", 0.0, privileged=True), run("ppo", "c", 0.05),
            run("heuristic", "d", 0.1), run("oracle", "d", 0.4)]  # d: no privileged mark, so no oracle in d
    got = [r["metrics"].get(HEADROOM_CLOSED) for r in with_headroom_closed(runs)]
    # a: 0.05 / 0.2; the oracle itself, topk_page (no delta), b (no headroom), c and d (no marked oracle) get none;
    # the benchmark marks every privileged row, and every published file has the mark
    assert got == [None, pytest.approx(0.25), None, None, None, None, None, None]
    assert runs[1]["metrics"] == {"delta_recall_at_equal_tokens": 0.05}  # the input is left as it was


def test_the_headroom_column_is_rendered_after_the_capped_metric_columns(tmp_path: Path) -> None:
    from mage_gym.bench.published import MAX_COLUMNS, _runs_table

    metrics = {f"m{i}": float(i) for i in range(MAX_COLUMNS + 2)}
    runs = [{"policy": "ppo", "dataset": "a", "split": "test", "metrics": {**metrics, "delta_recall_at_equal_tokens": 0.1}},
            {"policy": "oracle", "privileged": True, "dataset": "a", "split": "test",
             "metrics": {**metrics, "delta_recall_at_equal_tokens": 0.4}}]
    head = _runs_table(runs)[0]
    assert head.rstrip(" |").endswith("headroom_closed_at_equal_tokens") and "0.250" in _runs_table(runs)[2]


def test_small_settings_keep_their_digits_and_float_noise_stays_zero() -> None:
    from mage_gym.bench.published import format_cell

    assert format_cell(5e-4) == "0.0005" and format_cell(0.00012345) == "0.000123"
    assert format_cell(1.1e-16) == "0.000" and format_cell(0.25) == "0.250" and format_cell(12345.6) == "12,346"


def test_long_titles_are_cut_at_a_word_in_the_index_only() -> None:
    from mage_gym.bench.results_index import INDEX_TITLE_CHARS, _short

    title = "word " * 40
    cut = _short(title)
    assert cut.endswith(" …") and len(cut) <= INDEX_TITLE_CHARS + 2 and title.startswith(cut[:-2])
    assert _short("short title") == "short title" and _short(None) is None
