#!/usr/bin/env bash
# Installs what the suite needs, then runs all of it: unit tests and the integration tests on
# a real lab (network namespaces with their own sshd, dockerd and IPMI BMC).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "test.sh: run it as root (it installs system packages and the tests build a lab of network namespaces)" >&2
  exit 1
fi
bash scripts/install.sh
exec .venv/bin/pytest -ra "$@"
