"""mage_gym.progress: progress bars are unchanged on a terminal and write few, whole lines elsewhere."""
from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import tqdm.std

from mage_gym.progress import DEFAULT_INTERVAL_S, LogLineBar, log_interval, progress_bar

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^work: +\d+% \d+/1000 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+it/s\]$")


class FakeClock:
    """tqdm's clock, advanced by the loop body: the test controls how long the work "takes"."""

    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class TtyStream(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(tqdm.std, "time", fake)  # read by each bar at construction (self._time)
    monkeypatch.setattr(tqdm.std.tqdm, "monitor_interval", 0)  # no background refresh thread
    return fake


def test_off_a_terminal_a_1000_item_loop_writes_a_line_every_interval_with_rate_and_eta(clock):
    out = io.StringIO()
    for _ in progress_bar(range(1000), desc="work", file=out, interval=5.0):
        clock.t += 0.05  # 50 s of work in all: about one line per 5 s
    text = out.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and text.endswith("\n")
    assert 5 <= len(lines) <= 12, lines
    assert all(LINE.match(line) for line in lines), lines
    assert lines[-1].startswith("work: 100% 1000/1000")
    assert len(set(lines)) == len(lines)  # no line repeated (the closing line only when it adds something)


def test_off_a_terminal_postfix_updates_wait_for_the_interval_too(clock):
    """set_postfix refreshes a terminal bar at once; as log lines it must not print one line per call."""
    out = io.StringIO()
    bar = progress_bar(range(100), desc="work", file=out, interval=5.0)
    for i in bar:
        clock.t += 0.5  # 50 s in all
        bar.set_postfix(reward=f"{i / 100:.3f}")
    lines = out.getvalue().splitlines()
    assert 5 <= len(lines) <= 12, lines
    assert all("reward=" in line for line in lines)


def test_off_a_terminal_work_shorter_than_the_interval_writes_nothing(clock):
    out = io.StringIO()
    for _ in progress_bar(range(1000), desc="work", file=out, interval=5.0):
        clock.t += 0.001  # 1 s in all
    assert out.getvalue() == ""


def test_manual_updates_and_unknown_totals_write_lines_too(clock):
    out = io.StringIO()
    bar = progress_bar(total=None, desc="docs", unit="doc", file=out, interval=2.0, leave=False)
    for _ in range(10):
        clock.t += 1.0
        bar.update(1)
    bar.set_postfix(loss="0.5")
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines and all(re.match(r"^docs: \d+doc \[\d\d:\d\d, +[\d.]+doc/s", line) for line in lines), lines
    assert lines[-1].startswith("docs: 10doc") and lines[-1].endswith("loss=0.5]")


def test_on_a_terminal_the_bar_is_plain_tqdm():
    out = TtyStream()
    bar = progress_bar(range(3), desc="work", file=out, disable=None)
    assert type(bar) is tqdm.std.tqdm
    list(bar)
    assert "\r" in out.getvalue()  # tqdm redraws its line in place, as before


def test_disable_hides_the_bar_everywhere_and_none_means_shown():
    for stream in (io.StringIO(), TtyStream()):
        bar = progress_bar(range(5), file=stream, disable=True)
        list(bar)
        assert stream.getvalue() == ""
    assert isinstance(progress_bar(range(5), file=io.StringIO(), disable=None), LogLineBar)


def test_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("MAGE_GYM_PROGRESS_INTERVAL", "12")
    assert log_interval() == 12.0
    for bad in ("abc", "0", "-3"):
        monkeypatch.setenv("MAGE_GYM_PROGRESS_INTERVAL", bad)
        assert log_interval() == DEFAULT_INTERVAL_S


def test_every_progress_bar_goes_through_the_helper():
    direct = []
    for folder in ("mage_gym", "experiments", "policies"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == ROOT / "mage_gym" / "progress.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.match(r"\s*(from tqdm\b|import tqdm\b)", line):
                    direct.append(f"{path.relative_to(ROOT)}:{n}")
    assert direct == [], f"use mage_gym.progress.progress_bar instead of tqdm: {direct}"
