#!/usr/bin/env bash
# The README's main command: set up (or refresh) .venv, then run the main job on
# the embedded default data (a synthetic corpus the project generates itself).
# Extra arguments are Hydra overrides for experiments/main.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
export MAGE_GYM_CACHE="${MAGE_GYM_CACHE:-$PWD/.cache/mage_gym}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE="${WANDB_MODE:-offline}"
exec .venv/bin/python experiments/main.py "$@"
