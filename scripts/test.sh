#!/usr/bin/env bash
# Installs what the suite needs, then runs all of it: unit tests and the integration tests on
# a real lab (network namespaces with their own sshd, dockerd and IPMI BMC).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/pytest -ra "$@"
