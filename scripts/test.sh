#!/usr/bin/env bash
# Installs what the suite needs, then runs all of it: the linter, the type checker (mypy, strict on
# the pure core; pyproject.toml [tool.mypy]), the unit tests and the
# integration tests on a real lab (network namespaces with their own sshd, dockerd and IPMI BMC).
# Four workers (pytest-xdist), each test file on one of them: a worker that runs integration tests
# brings up its own lab, so no two share a node. Most of an integration test is waiting (a node
# booting, an epoch, a grace period), so four overlap their waits on two cores: the whole suite
# took 13:42 on this machine kind, against 17:53 with two (13:16 with six); arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "test.sh: run it as root (it installs system packages and the tests build a lab of network namespaces)" >&2
  exit 1
fi
bash scripts/install.sh
.venv/bin/ruff check .
.venv/bin/mypy
# Files start in collection order (integration first, each several minutes of lab work), not
# xdist's default of most tests first, which started the unit files with thousands of cases and
# left the long lab files to the end: 12:55 against 14:33 on this machine kind.
exec .venv/bin/pytest -ra -n 4 --dist loadfile --no-loadscope-reorder "$@"
