#!/usr/bin/env bash
# System packages for the lab and the integration tests, on Debian 12, as root:
# docker.io, docker-compose, openssh-server, rsync, ipmitool, iproute2, iptables, procps, busybox-static and
# CRIU >= 4.2.
#
# Idempotent and non-interactive; when everything is already there it only checks (~1 s).
# It never starts a system-wide dockerd, containerd or sshd: the lab starts its own per node,
# so package maintainer scripts are kept from starting services (policy-rc.d).
# Debian 12's CRIU 3.17 fails `criu check` on kernels >= 6.13 ([vvar_vclock]), and 4.1.x cannot
# dump TCP/UDP sockets on kernels >= 6.16; scripts/build-criu.sh builds 4.2.x from Debian
# forky's source package into /usr/local/sbin when the criu on PATH fails its checks.
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" != 0 ]; then
  echo "install-system-deps.sh: must run as root (apt-get, /usr/local/sbin)" >&2
  exit 1
fi

PACKAGES=(
  python3          # peakpack itself
  python3-venv     # scripts/install.sh makes .venv (a fresh Debian 12 lacks ensurepip)
  docker.io        # dockerd, docker CLI, containerd, runc
  openssh-server   # one sshd per lab node
  openssh-client   # ssh, ssh-keygen, ssh-keyscan
  rsync            # checkpoint transfer node -> node
  ipmitool         # talks to the lab's IPMI BMCs (and real ones)
  iproute2         # ip netns, bridge, veth
  iptables         # the lab's dockerd sets up its bridge NAT and filter rules with it
  util-linux       # nsenter
  procps           # sysctl: the lab switches on conntrack byte counters in each node (traffic between
                   # containers is read from /proc/net/nf_conntrack, so the `conntrack` tool is not needed)
  busybox-static   # the lab image's only binary
  gcc              # builds tests/support/memhold.c, the memory-integrity workload (static, so
  libc6-dev        # it runs in the lab's busybox image)
  criu             # runtime libraries; replaced by 4.2.x below when its checks fail
  xz-utils         # unpacks CRIU's source tarball
  time             # /usr/bin/time: the CRIU build's test reads its page server's peak memory
  postgresql       # the store is also tested against a real PostgreSQL server
  chromium         # headless, the web page's browser test (tests/integration/test_web_page.py)
  docker-compose   # compose 1.29: `peakpack compose up` runs it on the nodes (tests/integration/test_owners.py)
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$pkg")
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-system-deps.sh: installing ${missing[*]}"
  # Keep maintainer scripts from starting docker/containerd/ssh services (exit 101 = "not
  # allowed"); only remove the policy file again if we created it.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}" >/dev/null
fi

# runc and the lab find criu on PATH: /usr/local/sbin comes before /usr/sbin.
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
if ! bash ./build-criu.sh --check-only >/dev/null 2>&1; then
  bash ./build-criu.sh
fi

for cmd in dockerd docker docker-compose containerd runc sshd ssh ssh-keygen rsync ipmitool ip nsenter criu; do
  command -v "$cmd" >/dev/null || { echo "install-system-deps.sh: $cmd is still missing" >&2; exit 1; }
done
[ -x /bin/busybox ] || { echo "install-system-deps.sh: /bin/busybox is missing" >&2; exit 1; }
echo "install-system-deps.sh: system dependencies ready (criu $(criu --version | sed -n "s/^Version: //p"), $(dockerd --version))"
