#!/usr/bin/env bash
# Builds CRIU >= 4.2 for Debian 12 from Debian forky's (or sid's) source package and installs it
# as /usr/local/sbin/criu, ahead of Debian 12's /usr/sbin/criu 3.17 (fails `criu check` on
# kernels >= 6.13). 4.1.x is not enough either: on Linux >= 6.16 it cannot dump any process
# holding a TCP/UDP socket ("sockets: Can't get 1:16 opt"), although `criu check` passes; 4.2
# fixed that. So a binary is only accepted after it really dumped a process with a listening
# TCP socket. See shared/design/criu.md for why each step is as it is.
#
#   build-criu.sh               build (or reuse the cached build) and install, then verify
#   build-criu.sh --check-only  exit 0 if `criu` on PATH is >= 4.2, `criu check` passes and
#                               it can dump a process holding a listening TCP socket
#
# The upstream tarball is patched with scripts/criu-patches/*.patch (fixes to the page streams
# and the restore peakpack drives; each patch says what it fixes and what it measured) and built with the patch
# set's id as its GitID (`criu --version`: "GitID: peakpack-<sha256 of the patches>"), so a binary
# without these patches, or with another set, is not taken for this one. A node whose CRIU is
# another build still migrates; docs/migration.md says what the patches change.
#
# The build is cached in /var/cache/peakpack/criu-VERSION-PATCHID/criu, so a second run only
# re-checks (under a second). The forky/sid deb-src entry lives only in a private apt configuration under
# the cache: the system's sources, lists and package caches are not touched.
set -euo pipefail
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

CACHE=/var/cache/peakpack
APT_DIR=$CACHE/apt-debian-src
SUITES=(forky sid)  # first suite whose source package has a new enough criu wins
MIN_VERSION=4.2
BUILD_DEPS=(
  build-essential pkg-config libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler
  protobuf-compiler python3-protobuf libnl-3-dev libnet1-dev libcap-dev libbsd-dev
  libaio-dev libgnutls28-dev libdrm-dev uuid-dev
)

log() { echo "build-criu.sh: $*" >&2; }

PATCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/criu-patches
PATCH_ID=peakpack-$(cat "$PATCH_DIR"/*.patch | sha256sum | cut -c1-12)

# "GitID: peakpack-0123abcd4567" -> peakpack-0123abcd4567 (empty for a build without one)
criu_gitid() { "$1" --version 2>/dev/null | sed -n 's/^GitID: *//p' | head -1; }

# "Version: 4.2.1" -> 4.2.1
criu_version() { "$1" --version 2>/dev/null | sed -n 's/^Version: *//p' | head -1; }

version_ok() {  # $1 >= MIN_VERSION
  [ -n "$1" ] && [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$1" | sort -V | head -1)" = "$MIN_VERSION" ]
}

# Dumps a throwaway process that listens on 127.0.0.1 (port chosen by the kernel, so nothing
# can clash) with criu $1. This is what `criu check` misses: 4.1.x on Linux >= 6.16 fails here.
# A listening socket needs no --tcp-established. The listener starts its own session (setsid):
# sharing ours would need --shell-job, which fails when our session leader lives outside our pid
# namespace (as under CI's runner). CRIU kills the process after a successful dump; it also
# exits by itself after 30 s.
tcp_dump_ok() {
  local bin=$1 dir pid port="" rc=0 i
  dir=$(mktemp -d "${TMPDIR:-/tmp}/criu-tcp-check.XXXXXX")
  python3 -c '
import os, socket, sys, time
os.setsid()
for fd in [int(n) for n in os.listdir("/proc/self/fd")]:  # only the socket is under test,
    try:                                                   # not what our parents left open
        os.close(fd)
    except OSError:  # the descriptor of the listing itself, already closed
        pass
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
s.listen(1)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])  # appears only once the socket listens
time.sleep(30)
' "$dir/port" </dev/null >/dev/null 2>&1 &
  pid=$!
  disown "$pid"  # CRIU SIGKILLs it after the dump: no "Killed" job notice from bash, please
  for i in $(seq 50); do  # up to 5 s
    if [ -s "$dir/port" ]; then port=$(cat "$dir/port"); break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    log "TCP dump check: the test listener (python3) did not start"
    rc=1
  elif timeout 20 "$bin" dump -t "$pid" -D "$dir" -o dump.log >/dev/null 2>&1; then
    log "TCP dump check: $bin dumped pid $pid listening on 127.0.0.1:$port"
  else
    log "TCP dump check: $bin failed to dump pid $pid listening on 127.0.0.1:$port:"
    # (the RLIMIT_NOFILE error is harmless noise seen on every dump on these VMs)
    grep 'Error' "$dir/dump.log" 2>/dev/null | grep -v RLIMIT_NOFILE | head -3 | sed 's/^/    /' >&2 || true
    rc=1
  fi
  kill "$pid" 2>/dev/null || true
  rm -rf "$dir"
  return "$rc"
}

# A criu binary of this patch set, new enough, whose kernel check passes and that can dump a TCP
# socket.
binary_ok() {
  local v g
  v=$(criu_version "$1") || true
  if ! version_ok "$v"; then
    log "$1 is criu ${v:-of unknown version}, older than $MIN_VERSION"
    return 1
  fi
  g=$(criu_gitid "$1") || true
  if [ "$g" != "$PATCH_ID" ]; then
    log "$1 (criu $v, GitID ${g:-none}) is not built with $PATCH_DIR ($PATCH_ID)"
    return 1
  fi
  if ! "$1" check 2>&1 | grep -q "Looks good"; then
    log "$1 (criu $v): 'criu check' fails"
    return 1
  fi
  tcp_dump_ok "$1"
}

if [ "${1:-}" = "--check-only" ]; then
  bin=$(command -v criu) || { log "no criu on PATH"; exit 1; }
  binary_ok "$bin"
  exit
fi

install_binary() {
  install -m 0755 "$1" /usr/local/sbin/criu
  binary_ok /usr/local/sbin/criu || { log "installed $1 but it fails the checks above"; exit 1; }
  log "installed /usr/local/sbin/criu $(criu_version /usr/local/sbin/criu): criu check and TCP dump pass"
}

# Left behind by earlier versions of this script: the 4.1 version's apt directory, and builds of
# another patch set (or none, 4.1.x included), which the checks above reject anyway.
rm -rf "$CACHE/apt-trixie-src"
for old in "$CACHE"/criu-*; do
  case $old in *-"$PATCH_ID") ;; "$CACHE/criu-*") ;; *) rm -rf "$old" ;; esac
done

# 1. A cached build from an earlier run.
for cached in $(ls -d "$CACHE"/criu-*-"$PATCH_ID"/criu 2>/dev/null | sort -V -r); do
  if binary_ok "$cached"; then
    install_binary "$cached"
    exit 0
  fi
done

# 2. The upstream tarball from Debian forky's (else sid's) source package, via a private apt
#    configuration: Debian 12 and 13 only have criu 3.17 and 4.1.1.
APT_OPTS=(
  -o "Dir::Etc::sourcelist=$APT_DIR/sources.list"
  -o "Dir::Etc::sourceparts=$APT_DIR/sources.list.d"
  -o "Dir::State::Lists=$APT_DIR/lists"
  -o "Dir::Cache=$APT_DIR/cache"
  -o "APT::Sandbox::User=root"
)
tarball="" version=""
for suite in "${SUITES[@]}"; do
  download=$APT_DIR/download-$suite
  mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" "$APT_DIR/sources.list.d" "$download"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" \
    > "$APT_DIR/sources.list"
  log "fetching CRIU's source from Debian $suite"
  apt-get "${APT_OPTS[@]}" update -qq >/dev/null 2>&1 || log "apt-get update ($suite deb-src) reported errors; trying anyway"
  # apt may exit non-zero when the .dsc or .debian.tar.xz is missing although the upstream
  # tarball arrived (seen on Debian's mirrors): judge by the tarball.
  (cd "$download" && apt-get "${APT_OPTS[@]}" source --download-only criu >/dev/null 2>&1) || true
  tarball=$(ls "$download"/criu_*.orig.tar.* 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$tarball" ]; then
    log "no criu_*.orig.tar.* from Debian $suite's source package"
    continue
  fi
  version=$(basename "$tarball" | sed -E 's/^criu_([0-9.]+)\.orig\.tar\..*$/\1/')
  version_ok "$version" && break
  log "Debian $suite ships criu $version, older than $MIN_VERSION"
  tarball=""
done
if [ -z "$tarball" ]; then
  log "no criu >= $MIN_VERSION source tarball from Debian ${SUITES[*]}; cannot build it"
  exit 1
fi

# 3. Build with Debian 12's build dependencies.
log "installing build dependencies"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${BUILD_DEPS[@]}" >/dev/null
dest=$CACHE/criu-$version-$PATCH_ID
rm -rf "$dest/src"
mkdir -p "$dest/src"
tar -C "$dest/src" --strip-components=1 -xf "$tarball"
for p in "$PATCH_DIR"/*.patch; do
  patch -d "$dest/src" -p1 --forward --quiet <"$p" || { log "$(basename "$p") does not apply to criu $version"; exit 1; }
done
log "building criu $version from $(basename "$tarball") with $PATCH_ID (make -j2 criu, about a minute)"
make -C "$dest/src" -j2 criu GITID="$PATCH_ID" >"$dest/build.log" 2>&1 || { log "build failed; see $dest/build.log"; exit 1; }
install -m 0755 "$dest/src/criu/criu" "$dest/criu"
rm -rf "$dest/src"
install_binary "$dest/criu"
