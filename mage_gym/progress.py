"""Progress bars that read well in a log: the one helper every progress bar goes through.

Why: on a terminal tqdm redraws one line in place, but when its stream is not
a terminal (CI, a log file, ``| tee``) every redraw becomes a new line, and a
job prints hundreds of near-identical lines. :func:`progress_bar` takes
tqdm's arguments and returns a tqdm bar:

- on a terminal, a plain ``tqdm`` with those arguments, unchanged;
- off a terminal, a bar that writes one plain line (description, count,
  percentage, elapsed<remaining, rate) at most every :func:`log_interval`
  seconds while the work runs, and a closing line (overall rate) if it wrote
  any and the last one did not already show the end. Work shorter than the
  interval writes nothing.

``disable=None`` (tqdm's "only on a terminal") shows the bar in both cases, as
log lines off a terminal; ``disable=True`` hides it everywhere.
``MAGE_GYM_PROGRESS_INTERVAL`` sets the interval in seconds (default 5).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Iterable

from tqdm.std import tqdm

DEFAULT_INTERVAL_S = 5.0
#: A log line's layout when the total is known (tqdm fills the fields); without a total tqdm's own
#: counter layout is used (count, elapsed, rate).
_LOG_FORMAT = "{desc}{percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


def log_interval() -> float:
    """Seconds between two log lines of one bar (``MAGE_GYM_PROGRESS_INTERVAL``, default 5)."""
    try:
        value = float(os.environ.get("MAGE_GYM_PROGRESS_INTERVAL", DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class LogLineBar(tqdm):
    """A tqdm bar for streams that are not terminals: whole lines, throttled, never redrawn.

    tqdm's own throttling (``mininterval``) decides when to show; ``delay``
    keeps a bar silent until it has run for one interval. Each display is a
    complete ``\\n``-terminated line; tqdm's clear-line writes are dropped.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        interval = kwargs.pop("interval", None) or log_interval()
        kwargs.update(mininterval=interval, delay=interval, disable=False, dynamic_ncols=False)
        self._lines_written = 0
        self._last_line_n: float | None = None
        self._last_postfix: str | None = None
        self._interval = float(interval)
        self._opened = float("-inf")
        self._last_shown: float | None = None
        self._closing = False
        super().__init__(*args, **kwargs)
        self._opened = self._time()  # tqdm's clock (tests replace it)

    def line(self) -> str:
        """The bar's state as one log line."""
        d = self.format_dict
        desc = d.get("prefix") or ""
        if d.get("total"):
            return self.format_meter(**{**d, "prefix": f"{desc}: " if desc else "", "bar_format": _LOG_FORMAT})
        return self.format_meter(**{**d, "bar_format": None})  # no total: tqdm's counter, elapsed and rate

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg is not None:  # tqdm clearing or overwriting its line: nothing to redraw in a log
            return True
        # set_postfix / set_description refresh at once on a terminal; here they wait for the interval too
        now = self._time()
        if not self._closing and now - (self._opened if self._last_shown is None else self._last_shown) < self._interval:
            return True
        self._last_shown = now
        self.fp.write(self.line() + "\n")
        self.fp.flush()
        self._lines_written += 1
        self._last_line_n = self.n
        self._last_postfix = self.postfix
        return True

    def close(self) -> None:
        if getattr(self, "disable", True):
            return
        if self._lines_written and (self.n != self._last_line_n or self.postfix != self._last_postfix):
            self._ema_dt = lambda: None  # the closing line shows the overall rate
            self._closing = True
            self.display()
        self.disable = True
        self._decr_instances(self)


def progress_bar(iterable: Iterable[Any] | None = None, *, disable: bool | None = False, file: Any = None,
                 interval: float | None = None, **kwargs: Any) -> tqdm:
    """A tqdm bar (same arguments as ``tqdm``): unchanged on a terminal, throttled log lines elsewhere.

    ``interval`` overrides :func:`log_interval` for this bar (log lines only).
    """
    stream = sys.stderr if file is None else file
    if disable:
        return tqdm(iterable, disable=True, file=stream, **kwargs)
    if _is_terminal(stream):
        return tqdm(iterable, disable=False, file=stream, **kwargs)
    return LogLineBar(iterable, file=stream, interval=interval, **kwargs)
