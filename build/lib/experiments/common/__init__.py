"""Shared experiment code, one job per module (no heavy imports at package import).

- :mod:`.config`: plain containers from OmegaConf, threads, the run directory, config errors.
- :mod:`.policy_options`: a policy's options from the composed ``policy.<name>`` node; checkpoint identity.
- :mod:`.episodes`: episodes of a ``dataset`` node; their graphs built or found in the cache.
- :mod:`.corpus`: the parallel, cached corpus graph build (``experiments/build_graphs.py``).
- :mod:`.envs`: ``MageRAG-v0`` and the reader from the ``env`` / ``retriever`` / ``reader`` nodes.
- :mod:`.metrics`: per-run means and per-evidence-type breakdowns of episode results.
- :mod:`.results`: the documented ``results.json`` shape, JSON/CSV/markdown writers.
- :mod:`.tracking`: Weights & Biases (offline by default) or nothing.
- :mod:`.benchmarking`: every policy x budget on the same episodes (benchmark and main job).
- :mod:`.training`: MaskablePPO with a behaviour-cloning warm start and model selection on val.
- :mod:`.plots`: the benchmark's figures and the learning curve.
"""
