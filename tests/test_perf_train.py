"""experiments/perf/perf_train.py: setting parsing, medians (cold and warm), the other-tree runner's failure path."""
from __future__ import annotations

import pytest

from experiments.perf.perf_train import measure_tree, median_row, parse_setting, split_setting


def test_parse_setting() -> None:
    assert parse_setting("dummy:2") == ("dummy", 2, False)
    assert parse_setting("subproc:4:legacy") == ("subproc", 4, True)
    assert parse_setting("dummy:8+train.ppo.hparams.n_steps=128") == ("dummy", 8, False)
    assert split_setting("dummy:8+a.b=1+c=2") == ("dummy:8", ["a.b=1", "c=2"])
    assert split_setting("subproc:2:legacy") == ("subproc:2:legacy", [])
    for bad in ("dummy", "thread:2", "dummy:2:old", "dummy:x", "dummy+x=1"):
        with pytest.raises(ValueError):
            parse_setting(bad)


def test_median_row_takes_the_warm_median_on_its_own() -> None:
    rows = [{"steps_per_s": s, "rollout_s": 1.0, "update_s": 1.0, "warm": {"steps_per_s": w}}
            for s, w in ((100.0, 900.0), (300.0, 100.0), (200.0, 500.0))]
    row = median_row(rows)
    assert row["steps_per_s"] == 200.0 and row["steps_per_s_all"] == [100.0, 300.0, 200.0]
    assert row["warm"]["steps_per_s"] == 500.0  # the warm median, not the warm figure of the cold median's run
    assert row["runs"] == 3
    single = median_row(rows[:1])
    assert single["warm"] == {"steps_per_s": 900.0} and "runs" not in single


def test_measure_tree_names_the_failure(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="failed"):
        measure_tree(tmp_path, tmp_path / "cache", "dummy:2", 64, 1, 0, False, [])


def test_as_legacy_keeps_the_settings_overrides() -> None:
    from experiments.perf.perf_train import as_legacy

    assert as_legacy("dummy:2") == "dummy:2:legacy"
    assert as_legacy("dummy:2+train.ppo.hparams.n_steps=512") == \
        "dummy:2:legacy+train.ppo.hparams.n_steps=512"
    assert as_legacy("subproc:2:legacy+a=1") == "subproc:2:legacy+a=1"
    assert parse_setting(as_legacy("dummy:2+a=1")) == ("dummy", 2, True)
