#!/usr/bin/env bash
# A fresh machine to a first result: install, then plan the embedded demo cluster (dry run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/peakpack plan
