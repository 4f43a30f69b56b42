#!/usr/bin/env bash
# Installs what the suite needs, then runs all of it: the linter, the type checker (mypy, strict on
# the pure core; pyproject.toml [tool.mypy]), the unit tests and the
# integration tests on a real lab (network namespaces with their own sshd, dockerd and IPMI BMC).
# Two workers (pytest-xdist), each test file on one of them: a worker that runs integration tests
# brings up its own lab, so the two never share a node; arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "test.sh: run it as root (it installs system packages and the tests build a lab of network namespaces)" >&2
  exit 1
fi
bash scripts/install.sh
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/pytest -ra -n 2 --dist loadfile "$@"
