"""CRIU's side of a migration on one node, around Docker's tar round trip (docs/migration.md, "Pages
straight to the target").

Docker keeps owning the container (it creates, checkpoints, starts and inspects it), but the
options that send a dump's pages to a `criu page-server` on the target, keep the source stopped
instead of killing it, or restore post-copy are not options of `docker checkpoint`: CRIU reads
them from runc's configuration file, /etc/criu/runc.conf, which wins over what runc passes. That
file is per node, not per container (Docker 20.10 cannot pass the `org.criu.config` annotation),
so a migration:
- holds the node's lock (`LOCK`, created exclusively, naming the migration and its role) from
  before it writes the file until its dump or restore there has returned;
- appends its own block after the operator's lines (CRIU applies them in order, so ours win),
  between marker lines naming the migration, and strips exactly that block again on every path,
  leaving the operator's bytes as they were (`runc_conf`);
- keeps what CRIU writes under `<DockerRootDir>/peakpack-criu/<migration>/` on each node (`dump/`
  on the source: ~30 KB of metadata; `images/` on the target: the pages, then the metadata too),
  so settling finds it from the migration's id alone;
- bounds every CRIU process it starts with a deadline that holds on the node even if the
  controller dies: the page server and the lazy-pages daemon run under `timeout -s KILL`, and a
  dump still running at its deadline has its socket destroyed (`ss -K`), the one abort after
  which CRIU resumes the source itself (killing CRIU mid-dump would leave its parasite behind).

Everything here is one SSH command per step (`NODE_SCRIPT`); the pure parts are the runc.conf
block handling and the parsing of what the node answers.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from peakpack.orchestrator.domain.errors import FencedError, NodeError
from peakpack.orchestrator.remote import SshPool
from peakpack.orchestrator.remote.ssh import CommandResult

from .runc_conf import OURS, RUNC_CONF, blocks, handles_tcp, operator_options, with_block, without_block

LOCK = "/etc/criu/peakpack.lock"
#: what settling reads on each node and what the pages-to-the-target path runs there
TOOLS = ("criu", "timeout", "setsid", "ss", "nsenter", "iptables", "base64", "tar", "sha256sum", "bash", "flock")
#: the exit status of a node-side step refused because another controller's newer token holds the
#: migration's lease there, or settled it
FENCED = 7
#: the exit status of a node-side step refused because the migration holds no lease on the node
NOT_HELD = 8


def work_dir(docker_root: str, migration_id: int) -> str:
    """This migration's folder on a node: `dump/` (source), `images/` (target), daemons' logs."""
    return f"{docker_root}/peakpack-criu/{migration_id}"


# -- what the nodes answer ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcessIds:
    """A process of the container: its real, effective, saved and filesystem uids and gids."""

    pid: int
    uids: tuple[int, ...]
    gids: tuple[int, ...]

    @property
    def root(self) -> bool:
        return not any(self.uids) and not any(self.gids)


def lease_key(migration_id: int, nonce: str) -> str:
    """A migration's name on its nodes' leases: its id, and a nonce of its own, so that a migration
    of another store (ids start at 1 in each) is never taken for it."""
    return f"{migration_id}-{nonce}"


@dataclass(frozen=True)
class NodeLease:
    """A migration's lease on a node (`LOCK`): which migration holds it (`lease_key`), in which
    role, with which controller's fencing token, until when by the node's clock (`settled`: since
    when it is a tombstone, the migration settled by that token); `now` is that clock when read."""

    key: str
    role: str
    token: int
    expires: int
    now: int
    settled: bool = False

    @classmethod
    def parse(cls, text: str, now: int) -> NodeLease:
        """"KEY ROLE [TOKEN EXPIRES [settled]]" (a lock from before leases has neither: token 0, expired)."""
        words = text.split()
        try:
            return cls(words[0], words[1] if len(words) > 1 else "?",
                       int(words[2]) if len(words) > 2 else 0, int(words[3]) if len(words) > 3 else 0, now,
                       settled=words[4:5] == ["settled"])
        except (IndexError, ValueError):
            return cls("?", f"unreadable: {text[:40]!r}", 0, 0, now)

    @property
    def migration(self) -> int | None:
        head = self.key.partition("-")[0]
        return int(head) if head.isdigit() else None

    @property
    def stale(self) -> bool:
        """Nobody has renewed it in time: its controller died, or lost its way to the node."""
        return not self.settled and self.expires <= self.now

    def describe(self) -> str:
        if self.settled:
            when = f"settled {self.now - self.expires} s ago"
        elif self.stale:
            when = f"expired {self.now - self.expires} s ago"
        else:
            when = f"renewed, {self.expires - self.now} s left"
        return f"migration {self.migration if self.migration is not None else self.key} {self.role}, token " \
               f"{self.token}, {when}"


@dataclass(frozen=True)
class Preflight:
    """What preflight judges a node by, read in one SSH command (`NODE_SCRIPT preflight`)."""

    cap_sys_resource: bool     # root (and so CRIU under dockerd) has CAP_SYS_RESOURCE
    pipe_max_size: int         # fs.pipe-max-size, one value for the whole host
    lock: str                  # LOCK's content: "<migration> <role> <token> <expires>", "" when free
    conf: bytes                # runc.conf as it is
    missing: tuple[str, ...]   # TOOLS not on PATH
    processes: tuple[ProcessIds, ...] = ()  # the container's processes (asked on the source only)
    memory_mb: float = 0.0     # their resident memory
    now: int = 0               # the node's clock (a lease's expiry is the node's)
    congestions: tuple[str, ...] = ()  # the kernel's TCP congestion controls (tcp_available_congestion_control)
    criu_congestion: bool = False      # its CRIU takes --tcp-congestion (scripts/criu-patches/0004)


def parse_preflight(node: str, text: str) -> Preflight:
    fields: dict[str, str] = {}
    processes = []
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "proc":
            pid, uids, gids = value.split(";")
            processes.append(ProcessIds(int(pid), tuple(map(int, uids.split())), tuple(map(int, gids.split()))))
        else:
            fields[key] = value
    try:
        return Preflight(cap_sys_resource=(int(fields["cap_eff"], 16) >> 24) & 1 == 1,
                         pipe_max_size=int(fields["pipe_max_size"]), lock=fields.get("lock", "").strip(),
                         conf=base64.b64decode(fields.get("conf", "")),
                         missing=tuple(fields.get("missing", "").split()), processes=tuple(processes),
                         memory_mb=int(fields.get("rss_kb") or 0) / 1024, now=int(fields.get("now") or 0),
                         congestions=tuple(fields.get("congestion", "").split()),
                         criu_congestion=fields.get("criu_congestion", "").strip() == "yes")
    except (KeyError, ValueError) as exc:
        raise NodeError(node, f"its CRIU facts answered something unexpected ({exc}): {text[:80]!r}") from None


#: post-copy grows CRIU's pipes to this size; without CAP_SYS_RESOURCE root may not pass fs.pipe-max-size
PIPE_SIZE_NEEDED = 4 << 20


def why_not_ready(node: str, facts: Preflight) -> str | None:
    """What keeps a node from taking part in a migration, one line naming the fix; None if nothing."""
    if facts.missing:
        return (f"node {node}: {', '.join(facts.missing)} missing; install them (coreutils, util-linux, iproute2, "
                "iptables)")
    if not handles_tcp(facts.conf):
        return (f"node {node}: {RUNC_CONF} does not say tcp-close; add that line so open TCP connections are closed "
                "on restore instead of blocking the checkpoint")
    theirs = sorted(operator_options(facts.conf) & OURS)
    if theirs:
        return (f"node {node}: {RUNC_CONF} sets {', '.join(theirs)}, which peakpack sets per migration (and which "
                "changes every checkpoint on the node); remove that line")
    held = [f"migration {m}'s block in {RUNC_CONF}" for m in blocks(facts.conf)]
    held += [f"{LOCK} ({NodeLease.parse(facts.lock, facts.now).describe()})"] if facts.lock else []
    if held:
        return (f"node {node}: busy: {' and '.join(held)}; `peakpack reconcile` clears them once that migration is "
                "settled (left by a migration this store does not know: remove them once no checkpoint runs there)")
    return None


def why_cannot_dump(container: str, node: str, facts: Preflight) -> str | None:
    """CRIU reads every process's rlimits with prlimit(), which the kernel allows only to a caller
    with the same real, effective and saved uid and gid, or with CAP_SYS_RESOURCE: where root
    lacks that capability, a process that is not root:root fails the dump ("Can't get rlimit")."""
    other = next((p for p in facts.processes if not p.root), None)
    if other is None or facts.cap_sys_resource:
        return None
    return (f"{container}: its process {other.pid} runs as uid {other.uids[1]} gid {other.gids[1]} and root on "
            f"{node} lacks CAP_SYS_RESOURCE, so CRIU cannot read its rlimits; run it as root:root (e.g. "
            "memcached -u root) or give root CAP_SYS_RESOURCE on the node")


def why_not_post_copy(node: str, facts: Preflight) -> str | None:
    if facts.cap_sys_resource or facts.pipe_max_size >= PIPE_SIZE_NEEDED:
        return None
    return (f"node {node}: fs.pipe-max-size is {facts.pipe_max_size} and root lacks CAP_SYS_RESOURCE, so CRIU "
            f"cannot serve pages post-copy; set fs.pipe-max-size = {PIPE_SIZE_NEEDED} in /etc/sysctl.d/ on "
            "every node, or turn [migration] post_copy off")


def page_stream_congestion(name: str, nodes: Sequence[tuple[str, Preflight]]) -> tuple[list[str], str]:
    """The CRIU options (runc.conf lines) that give a migration's page streams the congestion
    control `name` ([migration] page_stream_congestion), and what the journal says of it. Where a
    node's CRIU lacks the option (another build than scripts/build-criu.sh's) the streams keep the
    nodes' own, and the journal says so."""
    if not name:
        return [], ""
    lacking = [node for node, facts in nodes if not facts.criu_congestion]
    if lacking:
        return [], (f", page streams in each node's own congestion control ({' and '.join(lacking)}: CRIU without "
                    "--tcp-congestion; scripts/build-criu.sh builds one with it)")
    return [f"tcp-congestion {name}"], f", page streams over {name}"


def why_no_congestion(name: str, nodes: Sequence[tuple[str, Preflight]]) -> str | None:
    """The first node whose kernel lacks the congestion control its page streams would be given
    (`page_stream_congestion`), one line naming the fix; None when no node is refused."""
    if not page_stream_congestion(name, nodes)[0]:
        return None
    for node, facts in nodes:
        if name not in facts.congestions:
            return (f"node {node}: its kernel has no TCP congestion control {name!r} ([migration] "
                    f"page_stream_congestion; it has {' '.join(facts.congestions) or 'none listed'}); load it "
                    f'(modprobe tcp_{name}), name one it has, or set "" for each node\'s own')
    return None


class LazyPages(StrEnum):
    """How a post-copy restore's page transfer ended, from the target's lazy-pages log."""

    NONE = "none"        # no post-copy restore of this migration here
    #: the daemon exited 0: it ends only when no process it feeds waits for a page any more (a
    #: process that exits, such as a shell's short-lived child, stops waiting: its own summary line
    #: "UFFD transferred pages: (N/TOTAL)" in the log may say less than TOTAL)
    DONE = "done"
    CUT = "cut"          # the daemon failed or was killed: a copy still running has holes in its memory


@dataclass(frozen=True)
class Facts:
    """What settling needs to know of a node beyond Docker's view (`NODE_SCRIPT facts`)."""

    now: float            # the node's clock (a copy's run time is measured on its own node)
    locked_net: bool      # CRIU's network lock (chain CRIU) is in the container's network namespace
    stopped: bool         # every process of the container is stopped (state T), as a dump leaves them
    dump: bool            # this migration's finished dump: its metadata and Docker's descriptors.json
    pages: bool           # pages a dump sent here
    complete: bool        # all a restore reads: pages, metadata, and Docker's renamed checkpoint folder
    lazy: LazyPages
    armed: bool           # the node's lock, a runc.conf block or a daemon of this migration is there
    frozen: bool = False  # the container's cgroup is frozen (a post-copy source, `NodeCriu.freeze`)


def parse_facts(node: str, text: str) -> Facts:
    f = dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)
    try:
        return Facts(now=float(f["now"]), locked_net=f["chain"] == "yes", stopped=f.get("stopped") == "yes",
                     frozen=f.get("frozen") == "yes",
                     dump=f["dump"] == "yes",
                     pages=f["pages"] == "yes", complete=f["complete"] == "yes", lazy=LazyPages(f["lazy"]),
                     armed=f["armed"] == "yes")
    except (KeyError, ValueError) as exc:
        raise NodeError(node, f"its migration facts answered something unexpected ({exc}): {text[:80]!r}") from None


# -- the node's side ------------------------------------------------------------------------------------

#: shell functions the node-side scripts share: `alive` reads the state letter, since a daemon
#: that ended stays a zombie until reaped and `kill -0` says yes; `procs` lists a container's
#: processes (every process of the pid namespace of its init, $1)
SH_FUNCTIONS = r"""
LOCK=/etc/criu/peakpack.lock
# $LOCK: "MID ROLE TOKEN EXPIRES", the lease migration MID holds on this node with a controller's
# fencing token, or "MID ROLE TOKEN AT settled" once that controller settled it. `fence`: migration
# $PP_MID may act here only while it holds the lease, with a token no newer than ours ($PP_TOKEN);
# a newer controller's token, or the migration settled meanwhile: exit 7 (another controller leads,
# whatever this one believes); no lease of ours (none, or another migration's): exit 8
fence() {
  [ -n "${PP_MID:-}" ] || return 0
  m= r= t=0 e=0 st=
  [ -s $LOCK ] && read -r m r t e st < $LOCK
  if [ "$m" != "$PP_MID" ]; then
    echo "migration $PP_MID holds no lease on this node${m:+ (migration $m does)}"; exit 8
  fi
  if [ "$st" = settled ]; then echo "fenced: migration $m was settled here by the controller with token $t"; exit 7; fi
  if [ "${t:-0}" -gt "${PP_TOKEN:-0}" ]; then
    echo "fenced: migration $m's lease here has token $t, newer than ours (${PP_TOKEN:-0}): another controller leads"
    exit 7
  fi
}
# A container is frozen in a freezer cgroup of its own below its cgroup ($HOLD): whatever writes the
# container's own freezer (CRIU, runc, Docker) cannot thaw it. `hold_dir PID`: that folder;
# `frozen PID`: its processes are there and it is frozen; `thaw PID`: back in their cgroup, thawed.
HOLD=peakpack-hold
cgroup_of() {  # PID: the folder of its freezer cgroup (v1), or of its cgroup (v2)
  p=$(awk -F: '$2 ~ /(^|,)freezer(,|$)/ {print $3; exit}' /proc/$1/cgroup 2>/dev/null)
  if [ -n "$p" ]; then echo "/sys/fs/cgroup/freezer${p%/$HOLD}"
  else p=$(awk -F: '$1 == "0" {print $3; exit}' /proc/$1/cgroup 2>/dev/null); echo "/sys/fs/cgroup${p%/$HOLD}"; fi
}
hold_dir() { echo "$(cgroup_of $1)/$HOLD"; }
frozen() {
  d=$(hold_dir $1)
  grep -qx "$1" "$d/tasks" "$d/cgroup.procs" 2>/dev/null || return 1
  grep -qx 'FROZEN\|1' "$d/freezer.state" "$d/cgroup.freeze" 2>/dev/null
}
thaw() {
  d=$(hold_dir $1); [ -d "$d" ] || return 0
  if [ -f "$d/freezer.state" ]; then echo THAWED > "$d/freezer.state"; list=tasks
  else echo 0 > "$d/cgroup.freeze"; list=cgroup.procs; fi
  for p in $(cat "$d/$list"); do echo $p > "${d%/$HOLD}/$list" 2>/dev/null; done
  rmdir "$d" 2>/dev/null; true
}
# image_path ID: the folder a running `runc checkpoint` of container ID dumps descriptors.json into
# (containerd's work folder, /tmp/ctrd-checkpoint*, which containerd leaves behind)
image_path() {
  ps -e -ww -o args= | awk -v id="$1" '$0 ~ / checkpoint / && $NF == id {
    for (i = 1; i < NF; i++) if ($i == "--image-path") print $(i+1) }' | head -1
}
# `mark DIR` before a checkpoint or restore, `leftovers DIR` after it: the work folders dockerd and
# containerd made meanwhile in their temp folders and leave behind (ctrd-checkpoint*, with a copy
# of descriptors.json) are noted in DIR/leftovers, which `remove` takes with DIR
tmps() { echo "/tmp/ctrd-checkpoint* ${1%/peakpack-criu/*}/tmp/ctrd-checkpoint*"; }
mark() { mkdir -p "$1"; ls -d $(tmps "$1") 2>/dev/null | sort > "$1/leftovers.before"; }
leftovers() { ls -d $(tmps "$1") 2>/dev/null | sort | comm -13 "$1/leftovers.before" - >> "$1/leftovers"; }
alive() { [ -r /proc/$1/status ] && ! grep -q '^State:[[:space:]]*Z' /proc/$1/status; }
procs() {
  ns=$(readlink /proc/$1/ns/pid) || return 0
  for p in /proc/[0-9]*; do [ "$(readlink $p/ns/pid 2>/dev/null)" = "$ns" ] && echo ${p#/proc/}; done
}
"""

#: `sh -c NODE_SCRIPT sh SUBCOMMAND ARGS...` (functions below: one per subcommand). POSIX sh: on
#: Debian it is dash, whose kill takes a signal as `-s KILL` before `--` (`kill -KILL -- -PGID` fails).
NODE_SCRIPT = r"""
set -u
CONF=/etc/criu/runc.conf
$SH_FUNCTIONS
conf_path() { readlink -f "$CONF" 2>/dev/null || echo "$CONF"; }
# a daemon of this migration (its pidfile, checked against its command line: pids are reused)
ours() { p=$(cat "$1" 2>/dev/null) && alive "$p" && tr '\0' ' ' < /proc/$p/cmdline | grep -q -- "$2/"; }
start() {  # DIR NAME SECS VERBOSITY ARGS...: criu ARGS in a session of its own under timeout, its exit
  # status into DIR/NAME.rc; returns once it says it is ready (--status-fd), or fails with its error
  dir=$1 name=$2 secs=$3 v=$4; shift 4
  rm -f "$dir/$name.ready" "$dir/$name.rc"
  setsid timeout -s KILL "$secs" sh -c '"$@"; echo $? > "$0"' "$dir/$name.rc" \
    criu "$@" --status-fd 3 -o "$dir/$name.log" -v$v 3>"$dir/$name.ready" </dev/null >/dev/null 2>"$dir/$name.err" &
  p=$!; echo $p > "$dir/$name.pid"
  n=0; while [ ! -s "$dir/$name.ready" ] && alive $p && [ $n -lt 1000 ]; do sleep 0.01; n=$((n+1)); done
  [ -s "$dir/$name.ready" ] && exit 0
  kill -s KILL -- -$p 2>/dev/null
  cat "$dir/$name.err" "$dir/$name.log" 2>/dev/null | grep -E 'Error|rror \(' | tail -1
  grep -q 'Address already in use' "$dir/$name.err" "$dir/$name.log" 2>/dev/null && exit 5
  exit 1
}
cmd=$1; shift
case $cmd in write|page-server|lazy-pages|stop|checkpoint|receive|resume|abort|make|remove|fence|docker|freeze|\
  thaw|restore) fence;; esac
case $cmd in
preflight)  # [PID]: this node's facts, and the processes of the container whose init is PID
  echo "now $(date +%s)"
  echo "cap_eff $(awk '/^CapEff/ {print $2}' /proc/self/status)"
  echo "pipe_max_size $(cat /proc/sys/fs/pipe-max-size)"
  echo "lock $(grep -v ' settled$' $LOCK 2>/dev/null)"
  echo "conf $(base64 -w0 "$(conf_path)" 2>/dev/null)"
  m=""; for t in $TOOLS; do command -v $t >/dev/null 2>&1 || m="$m $t"; done; echo "missing$m"
  echo "congestion $(cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null)"
  criu --help 2>&1 | grep -q -- --tcp-congestion && echo "criu_congestion yes"
  rss=0
  if [ -n "${1:-}" ]; then for p in $(procs $1); do
    s=/proc/$p/status
    echo "proc $p;$(awk '/^Uid:/ {print $2, $3, $4, $5}' $s);$(awk '/^Gid:/ {print $2, $3, $4, $5}' $s)"
    k=$(awk '/^VmRSS:/ {print $2}' $s 2>/dev/null); rss=$((rss + ${k:-0}))  # a zombie has no VmRSS
  done; fi
  echo "rss_kb $rss";;
lock)  # ROLE TTL: take this migration's lease on the node (free, or another's settled), or renew it
  # for TTL s with our token (a newer one there, or settled: exit 7); another's active lease: exit 3
  mkdir -p "${LOCK%/*}"
  exec 9>"$LOCK.guard"; flock 9
  if [ -s $LOCK ]; then
    read -r m r t e st < $LOCK
    if [ "$m" = "$PP_MID" ]; then fence
    elif [ "$st" != settled ]; then echo "held by migration $(cat $LOCK)"; exit 3; fi
  fi
  echo "$PP_MID $1 ${PP_TOKEN:-0} $(( $(date +%s) + $2 ))" > "$LOCK.new" && mv -f "$LOCK.new" $LOCK;;
unlock)  # settled: the lease becomes a tombstone naming the token that settled it, so a replaced
  # controller that comes back finds it settled (another migration may take the node from here)
  exec 9>"$LOCK.guard"; flock 9
  if [ -s $LOCK ] && read -r m r t e st < $LOCK && [ "$m" = "$PP_MID" ] && [ "$st" != settled ]; then
    fence
    echo "$PP_MID $r ${PP_TOKEN:-0} $(date +%s) settled" > "$LOCK.new" && mv -f "$LOCK.new" $LOCK
  fi;;
fence)  # only the check: before a step another tool takes (the Engine API)
  ;;
abort)  # FILTER: a dump still running fails now (its sockets destroyed): CRIU resumes the source
  ss -K -Htn "$1"; ss -K -Hltn "$1"; true;;
make)  # DIR
  mkdir -p -- "$1";;
docker)  # ARGS...: the node's docker CLI, fenced like every step
  exec docker "$@";;
restore)  # DIR CHECKPOINT NAME: `docker start --checkpoint`, its work folders noted in DIR
  mark "$1"; docker start --checkpoint "$2" "$3"; rc=$?; leftovers "$1"; exit $rc;;
remove)  # DIR: this migration's folder, and the work folders its checkpoint left (noted there)
  while read -r p; do case $p in */ctd-checkpoint*|*/ctrd-checkpoint*) rm -rf -- "$p";; esac; done \
    < "$1/leftovers" 2>/dev/null
  rm -rf -- "$1";;
lease)  # this node's lease, as it is: "MID ROLE TOKEN EXPIRES NOW", or "- NOW" when there is none
  if [ -s $LOCK ]; then echo "$(cat $LOCK) $(date +%s)"; else echo "- $(date +%s)"; fi;;
read)  # runc.conf, base64 (empty when there is none)
  f=$(conf_path); [ -f "$f" ] && base64 -w0 "$f"; echo;;
write)  # SHA256: stdin (base64) replaces runc.conf, atomically, only if it still has that digest
  f=$(conf_path)
  [ "$(sha256sum < "$f" | cut -d' ' -f1)" = "$1" ] || { echo "changed meanwhile"; exit 4; }
  t="$f.peakpack.$$"
  base64 -d > "$t" && chmod --reference="$f" "$t" && chown --reference="$f" "$t" && mv -f "$t" "$f";;
page-server)  # DIR ADDRESS PORT SECS [OPTION...]: pages of a dump into DIR/images
  d=$1 a=$2 p=$3 s=$4; shift 4
  mkdir -p "$d/images" && start "$d" page-server "$s" 2 page-server -D "$d/images" --address "$a" --port "$p" "$@";;
lazy-pages)  # DIR ADDRESS PORT SECS [OPTION...]: the target's pages fetched from the source's dump at ADDRESS:PORT
  d=$1 a=$2 p=$3 s=$4; shift 4
  start "$d" lazy-pages "$s" 2 lazy-pages --page-server --address "$a" --port "$p" -D "$d/images" -W "$d/images" "$@";;
wait-lazy)  # DIR SECS: until the lazy-pages daemon has ended (it writes its status into DIR/lazy-pages.rc)
  n=0; while [ ! -f "$1/lazy-pages.rc" ] && ours "$1/lazy-pages.pid" "$1" && [ $n -lt $(($2 * 10)) ]; do
    sleep 0.1; n=$((n+1)); done;;
stop)  # DIR: kill this migration's daemons (their process groups)
  for n in page-server lazy-pages; do ours "$1/$n.pid" "$1" && kill -s KILL -- -$(cat "$1/$n.pid"); done; true;;
checkpoint)  # NAME CHECKPOINT SECS LOCKED FILTER ID DIR: dump, left stopped; at SECS, `ss -K` FILTER's
  # sockets. The work folders containerd and dockerd make for it and leave behind (ctd-checkpoint*,
  # ctrd-checkpoint* in their temp folder) are noted in DIR/leftovers: `remove` takes them with DIR
  mark "$7"
  docker checkpoint create --leave-running "$1" "$2" &
  d=$!
  ( n=0; while [ $n -lt 1200 ] && alive $d; do
      p=$(image_path "$6"); [ -n "$p" ] && { echo "$p" >> "$7/leftovers"; exit 0; }; sleep 0.05; n=$((n+1))
    done ) &
  setsid sh -c 'sleep "$1"; read -r m r t e st < '$LOCK' && [ "$m $r $st" = "$2 " ] || exit 0
                ss -K -Htn "$3"; ss -K -Hltn "$3"' watchdog "$3" "$4" "$5" </dev/null >/dev/null 2>&1 &
  w=$!
  wait $d; rc=$?
  kill -- -$w 2>/dev/null
  leftovers "$7"
  exit $rc;;
image-path)  # CONTAINER_ID: the folder runc dumps descriptors.json into while a checkpoint runs
  image_path "$1";;
send)  # DIR DESCRIPTORS: the dump's metadata and Docker's descriptors.json, synced, as a tar (base64)
  sync -- "$1"/dump/* "$2" && tar -c -C "$1" dump -C "${2%/*}" "${2##*/}" | base64 -w0;;
receive)  # DIR CHECKPOINT: stdin (send's output) into DIR/images and Docker's CHECKPOINT folder
  in="$1/incoming"; rm -rf "$in" "$2.partial"; mkdir -p "$in" "$1/images" "$2.partial" &&
  base64 -d | tar -x -C "$in" && cp -a "$in"/dump/. "$1/images/" && mv "$in"/descriptors.json "$2.partial/" &&
  rm -rf "$in" && mv -T "$2.partial" "$2";;
freeze)  # PID: the container's processes in a frozen cgroup of their own (a dumped source then runs
  # no more, whatever CRIU does with it)
  d=$(hold_dir $1); mkdir -p "$d" || exit 1
  if [ -f "$d/freezer.state" ]; then f=$d/freezer.state on=FROZEN list=tasks
  else f=$d/cgroup.freeze on=1 list=cgroup.procs; fi
  echo $on > "$f" || exit 1
  for p in $(cat "${d%/$HOLD}/$list"); do echo $p > "$d/$list" || exit 1; done
  n=0; while ! grep -qx "$on" "$f" && [ $n -lt 100 ]; do sleep 0.05; n=$((n+1)); done
  frozen $1 || { echo "its processes did not freeze ($f: $(cat "$f"))"; exit 1; };;
thaw)  # PID: the container's cgroup thawed (nothing when it is not frozen)
  thaw $1;;
resume)  # PID: undo leave-stopped: CRIU's network lock out of the container's namespace, its cgroup
  # thawed (a post-copy source), SIGCONT all
  for t in iptables ip6tables; do
    nsenter -t $1 -n sh -c "$t -D INPUT -j CRIU; $t -D OUTPUT -j CRIU; $t -F CRIU; $t -X CRIU" >/dev/null 2>&1
  done
  thaw $1
  for p in $(procs $1); do kill -CONT $p 2>/dev/null; done
  if nsenter -t $1 -n iptables -S CRIU >/dev/null 2>&1; then echo "CRIU's network lock is still there"; exit 1; fi;;
answering)  # PID ADDRESS:PORT...: those that accept a TCP connection within 3 s from the network
  # namespace of PID (the container's own: a macvlan address is unreachable from its node's)
  pid=$1; shift
  for a; do nsenter -t $pid -n timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "${a%:*}" "${a##*:}" 2>/dev/null &&
    echo "$a"; done; true;;
facts)  # MID DIR CHECKPOINT PID: what settling reads (Facts)
  mid=$1 dir=$2 ck=$3 pid=$4
  echo "now=$(date +%s.%N)"
  chain=no; [ "$pid" -gt 0 ] && nsenter -t $pid -n iptables -S CRIU >/dev/null 2>&1 && chain=yes; echo "chain=$chain"
  frozen=no; [ "$pid" -gt 0 ] && frozen $pid && frozen=yes; echo "frozen=$frozen"
  stopped=no  # every process of the container stopped (state T), as a dump leaves them
  if [ "$pid" -gt 0 ]; then
    stopped=yes
    for p in $(procs $pid); do grep -q '^State:[[:space:]]*[tT]' /proc/$p/status 2>/dev/null || stopped=no; done
  fi; echo "stopped=$stopped"
  dump=no; [ -f "$dir/dump/inventory.img" ] && [ -f "$ck/descriptors.json" ] && dump=yes; echo "dump=$dump"
  pages=no; ls "$dir"/images/pages-*.img >/dev/null 2>&1 && pages=yes; echo "pages=$pages"
  complete=no; [ -f "$dir/images/inventory.img" ] && [ -f "$ck/descriptors.json" ] && complete=yes
  echo "complete=$complete"
  lazy=none  # done: the daemon exited 0, once no process it fed was waiting for a page any more
  if [ -f "$dir/lazy-pages.log" ]; then
    lazy=cut; [ "$(cat "$dir/lazy-pages.rc" 2>/dev/null)" = 0 ] && lazy=done
  fi; echo "lazy=$lazy"
  armed=no
  grep -q "^${PP_MID:-$mid} .* [0-9][0-9]*$" $LOCK 2>/dev/null && armed=yes  # its lease, not yet settled
  grep -q "^# peakpack migration $mid begin" "$(conf_path)" 2>/dev/null && armed=yes
  for n in page-server lazy-pages; do ours "$dir/$n.pid" "$dir" && armed=yes; done
  echo "armed=$armed";;
*) echo "unknown subcommand $cmd"; exit 2;;
esac
""".replace("$TOOLS", " ".join(TOOLS)).replace("$SH_FUNCTIONS", SH_FUNCTIONS)


def script(*args: str | int | float) -> list[str]:
    """The argv that runs one NODE_SCRIPT subcommand on a node."""
    return ["sh", "-c", NODE_SCRIPT, "sh", *map(str, args)]


class NodeCriu:
    """One node's side of one migration: its lock and runc.conf block, the CRIU daemons it starts
    there, and the facts settling reads. Every method is one or two SSH commands and idempotent."""

    def __init__(self, ssh: SshPool, node: str, docker_root: str, migration_id: int, token: int = 0,
                 key: str = "") -> None:
        """`token`: the fencing token of the store's lease this process holds (0: none); `key`: the
        migration's own name on the node's lease (`lease_key`), unique across stores."""
        self.ssh, self.node, self.mid, self.token = ssh, node, migration_id, token
        self.key = key or str(migration_id)
        self.dir = work_dir(docker_root, migration_id)

    async def _exec(self, *args: str | int | float, timeout: float = 60.0, input: str | None = None) -> CommandResult:
        """One NODE_SCRIPT subcommand as this migration, under this process's token: refused on the
        node (FencedError) once another controller's newer token holds the migration's lease."""
        argv = ["env", f"PP_MID={self.key}", f"PP_TOKEN={self.token}", *script(*args)]
        res = await self.ssh.run(self.node, argv, timeout=timeout, check=False, input=input)
        if res.exit_status == FENCED:
            raise FencedError(f"node {self.node}: {res.stdout.strip()[:300]}")
        return res

    async def run(self, *args: str | int | float, timeout: float = 60.0, check: bool = True,
                  input: str | None = None) -> str:
        res = await self._exec(*args, timeout=timeout, input=input)
        if check and not res.ok:
            said = (res.stdout.strip() or res.stderr.strip()).splitlines()[-1:] or [f"exit {res.exit_status}"]
            raise NodeError(self.node, f"{args[0]}: {said[0][:300]}")
        return res.stdout

    async def lock(self, role: str, ttl: float) -> None:
        """Take this migration's lease on the node, or renew it for `ttl` seconds with our token:
        the lease keeps other migrations off the node, and a node that holds a newer controller's
        token for it refuses this one (FencedError)."""
        await self.run("lock", role, round(ttl))

    async def unlock(self) -> None:
        """The migration is settled: its lease on the node becomes a tombstone naming our token (a
        replaced controller that comes back is refused; another migration may take the node)."""
        await self.run("unlock")

    async def fence(self) -> None:
        """Before a step another tool takes on this node (the Engine API): FencedError once a newer
        controller holds the migration's lease here."""
        await self.run("fence")

    async def lease(self) -> NodeLease | None:
        """This node's lease, whichever migration holds it (None: free)."""
        words = (await self.run("lease")).split()
        if not words or words[0] == "-":
            return None
        return NodeLease.parse(" ".join(words[:-1]), int(words[-1]))

    async def arm(self, role: str, lines: Sequence[str]) -> None:
        """Append this migration's block to runc.conf (under its lease on the node)."""
        await self._edit(lambda conf: with_block(conf, self.mid, lines))

    async def strip(self) -> None:
        """This migration's block out of runc.conf: the node's other checkpoints are as before."""
        await self._edit(lambda conf: without_block(conf, self.mid))

    async def disarm(self) -> None:
        """Every path's end on this node: this migration's daemons killed and its block stripped
        (its lease stays until the migration is settled)."""
        await self.run("stop", self.dir)
        await self.strip()

    async def _edit(self, change: Callable[[bytes], bytes]) -> None:
        """Read runc.conf, change it, write it back only if nobody changed it meanwhile (the lock
        keeps migrations apart; an operator's edit between the two makes it read again)."""
        for _ in range(3):
            text = (await self.run("read")).strip()
            if not text:
                return  # no file: nothing of ours can be in it, and preflight refuses a node without one
            old = base64.b64decode(text)
            new = change(old)
            if new == old:
                return
            res = await self._exec("write", hashlib.sha256(old).hexdigest(), input=base64.b64encode(new).decode())
            if res.ok:
                return
            if res.exit_status != 4:
                said = (res.stdout + res.stderr).strip()[:300]
                raise NodeError(self.node, f"{RUNC_CONF} could not be written: {said}")
        raise NodeError(self.node, f"{RUNC_CONF} kept changing while peakpack edited it; try again")

    async def page_server(self, address: str, first_port: int, ports: int, seconds: float,
                          options: Sequence[str] = ()) -> int:
        """A page server for this migration's dump, bound to `address`, on the first free port from
        the migration's own place in the range (`options`: CRIU's, TLS); returns the port."""
        for i in range(min(ports, 20)):
            port = first_port + (self.mid + i) % ports
            res = await self._exec("page-server", self.dir, address, port, round(seconds), *options)
            if res.ok:
                return port
            if res.exit_status != 5:
                raise NodeError(self.node, f"criu page-server: {res.stdout.strip()[:300] or res.exit_status}")
        raise NodeError(self.node, f"no free port for a page server among {ports} from {first_port}")

    async def lazy_pages(self, source_address: str, port: int, seconds: float, options: Sequence[str] = ()) -> None:
        await self.run("lazy-pages", self.dir, source_address, port, round(seconds), *options)

    async def lazy_pages_ended(self, seconds: float = 30.0) -> LazyPages:
        """How the lazy-pages daemon's transfer ended, once it has (waiting up to `seconds`)."""
        await self.run("wait-lazy", self.dir, round(seconds), timeout=seconds + 30)
        return (await self.facts("", 0)).lazy

    async def checkpoint(self, container: str, container_id: str, checkpoint: str, seconds: float,
                         socket_filter: str) -> None:
        """`docker checkpoint create --leave-running` (runc.conf's leave-stopped keeps it stopped),
        aborted on the node at `seconds` by destroying `socket_filter`'s sockets if still running;
        the work folders containerd and dockerd leave for it are noted in this migration's folder,
        and `remove` takes them with it."""
        await self.run("checkpoint", container, checkpoint, round(seconds), f"{self.key} source", socket_filter,
                       container_id, self.dir, timeout=seconds + 60)

    async def listening(self, port: int) -> bool:
        """Whether something listens on `port` here (a lazy dump waiting for its pages' fetcher)."""
        return bool((await self.ssh.run(self.node, ["ss", "-Hltn", f"sport = :{port}"], timeout=30)).stdout.strip())

    async def abort(self, socket_filter: str) -> None:
        """Make a dump of this node fail now, as its deadline would: CRIU then resumes the source."""
        await self.run("abort", socket_filter, timeout=30, check=False)

    async def image_path(self, container_id: str) -> str:
        return (await self.run("image-path", container_id)).strip()

    async def send(self, descriptors: str) -> str:
        return (await self.run("send", self.dir, descriptors)).strip()

    async def receive(self, payload: str, checkpoint_dir: str) -> None:
        await self.run("receive", self.dir, checkpoint_dir, input=payload)

    async def resume(self, pid: int) -> None:
        await self.run("resume", pid)

    async def freeze(self, pid: int) -> None:
        """The container's cgroup frozen: a post-copy source whose page transfer fails is resumed by
        CRIU itself (it switches the tasks back to alive), and must not run while the target may."""
        await self.run("freeze", pid)

    async def thaw(self, pid: int) -> None:
        await self.run("thaw", pid)

    async def docker(self, *args: str, timeout: float) -> None:
        """The node's docker CLI, under this migration's fence."""
        await self._docker(["docker", *args], "docker", *args, timeout=timeout)

    async def restore(self, checkpoint: str, container: str, timeout: float) -> None:
        """`docker start --checkpoint` (the SDK has no checkpoint verbs), under this migration's fence;
        the work folders it leaves are noted for `remove`."""
        await self._docker(["docker", "start", "--checkpoint", checkpoint, container], "restore", self.dir,
                           checkpoint, container, timeout=timeout)

    async def _docker(self, shown: list[str], *args: str, timeout: float) -> None:
        res = await self._exec(*args, timeout=timeout)
        if not res.ok:
            said = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or [f"exit {res.exit_status}"]
            raise NodeError(self.node, f"`{' '.join(shown)}` failed: {said[0][:300]}")

    async def answering(self, pid: int, addresses: Sequence[str]) -> set[str]:
        """Which of `addresses` ('ADDRESS:PORT') accept a TCP connection from the network namespace
        of `pid` (the container's)."""
        if not addresses:
            return set()
        return set((await self.run("answering", pid, *addresses, timeout=30 + 3 * len(addresses))).split())

    async def facts(self, checkpoint_dir: str, pid: int) -> Facts:
        return parse_facts(self.node, await self.run("facts", self.mid, self.dir, checkpoint_dir, pid, timeout=30))

    async def make(self, sub: str) -> None:
        """This migration's folder `sub` (CRIU writes images only into a folder that exists)."""
        await self.run("make", f"{self.dir}/{sub}")

    async def remove(self) -> None:
        await self.run("remove", self.dir)
