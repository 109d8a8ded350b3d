"""Entry points: perf scripts (see experiments/__init__.py)."""
