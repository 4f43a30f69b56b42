#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to peakpack doing its job: install everything, bring
# up a 3-node lab on this host (network namespaces with their own sshd, dockerd + CRIU, IPMI BMC),
# start a few containers spread thinly, and run one controller epoch on it: it live-migrates them
# together under the 70% cap and powers the emptied nodes off over IPMI. Then it prints the
# history and writes an HTML report. Without root it plans the embedded demo cluster instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PP=.venv/bin/peakpack
if [ "$(id -u)" != 0 ]; then
  echo "quickstart: not root, so no lab; planning the embedded demo cluster (dry run)" >&2
  exec "$PP" plan
fi
LAB="${PEAKPACK_LAB_DIR:-/var/lib/peakpack/lab}"
export PEAKPACK_DB="${PEAKPACK_DB:-sqlite:///$(dirname "$LAB")/quickstart.db}"
mkdir -p "$(dirname "$LAB")"
if ! out=$("$PP" lab up --nodes 3 --dir "$LAB" 2>&1); then
  grep -q "already running" <<<"$out" || { echo "$out" >&2; exit 1; }
fi
for i in 1 2 3; do
  "$PP" lab exec --dir "$LAB" "node-$i" -- sh -c "docker inspect app-$i >/dev/null 2>&1 || \
    docker run -d --name app-$i --network none --label peakpack.cpu=0.3 --label peakpack.memory_mb=64 \
    peakpack/busybox:lab sh -c 'i=0; while :; do i=\$((i+1)); echo \$i; sleep 1; done'" >/dev/null || true
done
"$PP" lab status --dir "$LAB"
"$PP" serve --inventory "$LAB/inventory.toml" --once
"$PP" lab status --dir "$LAB"
"$PP" history migrations
"$PP" history power
"$PP" report --out "$(dirname "$LAB")/report"
echo "quickstart: done. Lab in $LAB (peakpack lab down --dir $LAB removes it); report in $(dirname "$LAB")/report/index.html"
