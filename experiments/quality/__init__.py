"""Entry points: quality scripts (see experiments/__init__.py)."""
