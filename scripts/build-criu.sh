#!/usr/bin/env bash
# Builds CRIU 4.1.x for Debian 12 from Debian 13's source package and installs it as
# /usr/local/sbin/criu (ahead of Debian 12's /usr/sbin/criu 3.17, which cannot checkpoint on
# kernels >= 6.13). See shared/design/criu.md for why each step is as it is.
#
#   build-criu.sh               build (or reuse the cached build) and install, then verify
#   build-criu.sh --check-only  exit 0 if `criu` on PATH is >= 4.1 and `criu check` passes
#
# The build is cached in /var/cache/peakpack/criu-VERSION/criu, so a second run is instant.
# The trixie deb-src entry lives only in a private apt configuration under the cache: the
# system's sources, lists and package caches are not touched.
set -euo pipefail
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

CACHE=/var/cache/peakpack
APT_DIR=$CACHE/apt-trixie-src
MIN_VERSION=4.1
BUILD_DEPS=(
  build-essential pkg-config libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler
  protobuf-compiler python3-protobuf libnl-3-dev libnet1-dev libcap-dev libbsd-dev
  libaio-dev libgnutls28-dev libdrm-dev uuid-dev
)

log() { echo "build-criu.sh: $*" >&2; }

# "Version: 4.1.1" -> 4.1.1
criu_version() { "$1" --version 2>/dev/null | sed -n 's/^Version: *//p' | head -1; }

version_ok() {  # $1 >= MIN_VERSION
  [ -n "$1" ] && [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$1" | sort -V | head -1)" = "$MIN_VERSION" ]
}

binary_ok() {  # a criu binary that is new enough and whose kernel check passes
  local v
  v=$(criu_version "$1") || return 1
  version_ok "$v" && "$1" check 2>&1 | grep -q "Looks good"
}

if [ "${1:-}" = "--check-only" ]; then
  bin=$(command -v criu) || exit 1
  binary_ok "$bin"
  exit
fi

install_binary() {
  install -m 0755 "$1" /usr/local/sbin/criu
  binary_ok /usr/local/sbin/criu || { log "installed $1 but 'criu check' fails"; exit 1; }
  log "installed /usr/local/sbin/criu $(criu_version /usr/local/sbin/criu): criu check looks good"
}

# 1. A cached build from an earlier run.
for cached in $(ls -d "$CACHE"/criu-*/criu 2>/dev/null | sort -V -r); do
  if binary_ok "$cached"; then
    install_binary "$cached"
    exit 0
  fi
done

# 2. Debian 13's upstream tarball, via a private apt configuration.
mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" "$APT_DIR/sources.list.d" "$APT_DIR/download"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
  > "$APT_DIR/sources.list"
APT_OPTS=(
  -o "Dir::Etc::sourcelist=$APT_DIR/sources.list"
  -o "Dir::Etc::sourceparts=$APT_DIR/sources.list.d"
  -o "Dir::State::Lists=$APT_DIR/lists"
  -o "Dir::Cache=$APT_DIR/cache"
  -o "APT::Sandbox::User=root"
)
log "fetching CRIU's source from Debian trixie"
apt-get "${APT_OPTS[@]}" update -qq >/dev/null 2>&1 || log "apt-get update (trixie deb-src) reported errors; trying anyway"
# apt may exit non-zero when the .dsc or .debian.tar.xz is missing although the upstream
# tarball arrived (seen on Debian's mirrors): judge by the tarball.
(cd "$APT_DIR/download" && apt-get "${APT_OPTS[@]}" source --download-only criu >/dev/null 2>&1) || true
tarball=$(ls "$APT_DIR"/download/criu_*.orig.tar.* 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$tarball" ]; then
  log "no criu_*.orig.tar.* from Debian trixie's source package; cannot build CRIU >= $MIN_VERSION"
  exit 1
fi
version=$(basename "$tarball" | sed -E 's/^criu_([0-9.]+)\.orig\.tar\..*$/\1/')
version_ok "$version" || { log "trixie ships criu $version, older than $MIN_VERSION"; exit 1; }

# 3. Build with Debian 12's build dependencies.
log "installing build dependencies"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${BUILD_DEPS[@]}" >/dev/null
dest=$CACHE/criu-$version
rm -rf "$dest/src"
mkdir -p "$dest/src"
tar -C "$dest/src" --strip-components=1 -xf "$tarball"
log "building criu $version (make -j2 criu, about a minute)"
make -C "$dest/src" -j2 criu >"$dest/build.log" 2>&1 || { log "build failed; see $dest/build.log"; exit 1; }
install -m 0755 "$dest/src/criu/criu" "$dest/criu"
rm -rf "$dest/src"
install_binary "$dest/criu"
