#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to peakpack doing its job: install everything, bring
# up a 3-node lab on this host (network namespaces with their own sshd, dockerd + CRIU, IPMI BMC),
# start a few containers spread thinly, and run a few controller epochs on it: the first measures,
# the second live-migrates them together under the 70% cap and powers the emptied nodes off over
# IPMI, the others find nothing to improve and keep measuring, so every plot of the report has data.
# A client on this host holds one connection to each container throughout: the containers are on
# the lab's segment network, so their addresses and open connections move with them.
# Then it prints the history and writes an HTML report. Runs as root (no sudo needed or used).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "quickstart.sh: run it as root (it installs system packages and builds a lab of network namespaces)" >&2
  exit 1
fi
bash scripts/install.sh
PP=.venv/bin/peakpack
EPOCHS="${PEAKPACK_QUICKSTART_EPOCHS:-5}"
EPOCH_PAUSE="${PEAKPACK_QUICKSTART_PAUSE:-10}"   # seconds between epochs: energy accrues meanwhile
LAB="${PEAKPACK_LAB_DIR:-/var/lib/peakpack/lab}"
export PEAKPACK_DB="${PEAKPACK_DB:-sqlite:///$(dirname "$LAB")/quickstart.db}"
mkdir -p "$(dirname "$LAB")"
if ! out=$("$PP" lab up --nodes 3 --dir "$LAB" 2>&1); then
  grep -q "already running" <<<"$out" || { echo "$out" >&2; exit 1; }
fi
# each container on the lab's segment network (labnet: macvlan over every node's eth0), with an
# echo server on port 81 beside its counter: its address and open connections move with it
for i in 1 2 3; do
  "$PP" lab exec --dir "$LAB" "node-$i" -- sh -c "docker inspect app-$i >/dev/null 2>&1 || \
    docker run -d --name app-$i --network labnet --label peakpack.cpu=0.3 --label peakpack.memory_mb=64 \
    peakpack/busybox:lab sh -c 'nc -ll -p 81 -e cat & i=0; while :; do i=\$((i+1)); echo \$i; sleep 1; done'" \
    >/dev/null || true
done
"$PP" lab status --dir "$LAB"
# a client on this host holds ONE connection to each container throughout, never reconnecting
targets=()
for i in 1 2 3; do
  for n in 1 2 3; do
    addr=$("$PP" lab exec --dir "$LAB" "node-$n" -- docker inspect -f '{{.NetworkSettings.Networks.labnet.IPAddress}}' \
      "app-$i" 2>/dev/null) && [ -n "$addr" ] && { targets+=("app-$i=$addr:81"); break; }
  done
done
CONNECTIONS="$(dirname "$LAB")/connections.txt"
.venv/bin/python scripts/hold-connections.py "${targets[@]}" > "$CONNECTIONS" &
HOLDER=$!
# Epoch 1 in review mode (--approve) only measures every node and leaves its plan RECOMMENDED,
# so the report has each node's measured power before the next epochs consolidate and act.
for epoch in $(seq "$EPOCHS"); do
  echo "quickstart: controller epoch $epoch of $EPOCHS"
  "$PP" serve --inventory "$LAB/inventory.toml" --once $([ "$epoch" = 1 ] && echo --approve)
  [ "$epoch" = "$EPOCHS" ] || sleep "$EPOCH_PAUSE"
done
kill -TERM "$HOLDER"; wait "$HOLDER" || true
echo "quickstart: the client's connections, held across the epochs and their migrations:"
cat "$CONNECTIONS"
"$PP" lab status --dir "$LAB"
"$PP" history plans
"$PP" history migrations
"$PP" history power
"$PP" report --out "$(dirname "$LAB")/report"
echo "quickstart: done. Lab in $LAB (peakpack lab down --dir $LAB removes it); report in $(dirname "$LAB")/report/index.html"
