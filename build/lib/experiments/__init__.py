"""Experiment entry points and the code they share.

Each ``experiments/<name>.py`` is a Hydra script (``python experiments/benchmark.py ...`` or
``python -m experiments.benchmark ...``; configs in ``conf/``) that reads top to bottom and calls
into :mod:`experiments.common` for the plumbing every experiment must do the same way (episodes,
graphs, envs, metrics, ``results.json``, plots, logging). Scripts never import scripts; the
``mage_gym`` and ``policies`` packages never import this one.
"""
