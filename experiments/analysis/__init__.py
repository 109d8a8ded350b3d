"""Entry points: analysis scripts (see experiments/__init__.py)."""
