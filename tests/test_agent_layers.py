"""Importing the agent layer pulls in no trainer and no model code (its layering is tests/test_layers.py's job)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_importing_the_agent_package_imports_no_trainer():
    code = ("import sys, mage_gym.agent, mage_gym.agent.chat_env; "
            "print(sorted(m for m in ('trl', 'verifiers', 'datasets', 'peft', 'transformers', 'torch') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "[]", out
