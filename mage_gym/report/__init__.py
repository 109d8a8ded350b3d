"""Episode trace report: benchmark traces -> a static HTML site that opens from disk.

``report_data_from_run_dir(run_dir)`` (or ``build_report_data(traces, episodes,
graphs)`` for traces produced in-process) gives a :class:`ReportData`;
``write_report(data, out_dir)`` writes the site. ``experiments/report.py`` is
the Hydra entry point (``python experiments/report.py run_dir=...``).
"""
from __future__ import annotations

from mage_gym.report.data import ReportData, build_report_data
from mage_gym.report.records import (TraceEpisode, TraceFormatError, read_trace_file, replay_states, split_episodes,
                                     states_at)
from mage_gym.report.html import write_report
from mage_gym.report.images import ImageOptions
from mage_gym.report.run_dir import RunDirError, report_data_from_run_dir

__all__ = [
    "ImageOptions", "ReportData", "RunDirError", "TraceEpisode", "TraceFormatError", "build_report_data",
    "read_trace_file", "replay_states", "report_data_from_run_dir", "split_episodes", "states_at", "write_report",
]
