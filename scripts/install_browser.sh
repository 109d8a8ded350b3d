#!/usr/bin/env bash
# Install Debian's chromium and chromium-driver (for tests/test_report_browser.py) when missing.
#
# Why Debian's packages: the browser test must run offline in CI and no tool
# (Selenium Manager, Playwright) may download its own browser, so the test
# drives /usr/bin/chromium through /usr/bin/chromedriver from the same
# distribution release (their versions match by construction).
# CI runs as root; elsewhere the script uses sudo when it is available.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  echo "[install_browser] $(chromium --version 2>/dev/null | head -n1); $(chromedriver --version | head -n1)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "[install_browser] need root (or sudo) to apt-get install chromium chromium-driver" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver fonts-dejavu-core
echo "[install_browser] $(chromium --version 2>/dev/null | head -n1); $(chromedriver --version | head -n1)"
