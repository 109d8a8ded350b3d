"""Experiment entry points: thin scripts, each readable top to bottom.

The core experiments sit at the top (``main``, ``make_synth``, ``build_graphs``,
``train``, ``benchmark``, ``headroom``, ``report``, ``results_doc``); the rest by
purpose: ``perf/`` (speed and memory), ``quality/`` (parsers, references,
retrieval, datasets), ``analysis/`` (reports over earlier runs, tuning). Run
them as ``python experiments/benchmark.py ...`` or
``python -m experiments.perf.perf_env ...``; Hydra configs are in ``conf/``.

What they share is a library: the harness :mod:`mage_gym.bench` (episodes,
benchmark runs, equal-cost deltas, results files) and :mod:`policies` (the
controllers and their training). Scripts never import scripts, and
``mage_gym`` and ``policies`` never import this package.
"""
