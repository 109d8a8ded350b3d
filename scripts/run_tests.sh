#!/usr/bin/env bash
# The README's test command: set up (or refresh) .venv, then run the whole suite.
# Extra arguments go to pytest, e.g. `bash scripts/run_tests.sh -k graph -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
# The trace report's browser tests drive Debian's Chromium (needs root/sudo once; CI runs as root). A failed
# install stops here: the browser tests are part of the suite, never skipped.
bash scripts/install_browser.sh
export MAGE_GYM_CACHE="${MAGE_GYM_CACHE:-$PWD/.cache/mage_gym}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE="${WANDB_MODE:-offline}"
exec .venv/bin/python -m pytest -q "$@"
