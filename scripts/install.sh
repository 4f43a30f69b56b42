#!/usr/bin/env bash
# Installs everything peakpack and its tests need on Debian 12: system packages (docker.io,
# sshd, rsync, ipmitool, CRIU >= 4.2 ...) when run as root, then the Python venv in .venv.
# Idempotent and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
  bash scripts/install-system-deps.sh
else
  echo "install.sh: not root; skipping system packages (the lab and integration tests need them)" >&2
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
