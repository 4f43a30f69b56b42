"""Addresses that move with their container (docs/migration.md, "Addresses and open connections").

A container on a network that spans the nodes' shared segment (`spec.spans_segment`: macvlan,
ipvlan L2) keeps its IP and MAC addresses on the target, and its open TCP connections are
restored there (`tcp-established` in the migration's runc.conf blocks). The network must learn
the move at once, without waiting for a bridge's or a switch's table to age out (300 s), so:
- after the dump, the source's interfaces that hold those addresses go down (`down`): the dumped
  copy, stopped but still configured, must not answer ARP with the same MAC and pull the traffic
  back; their routes are saved in the migration's folder first (a link going down drops them);
- right after the restore, the target announces every moved address (`announce`: gratuitous ARP,
  and an unsolicited neighbour advertisement for IPv6), so switches and neighbours deliver to it,
  and its addresses on node-local bridges too (`announce_restored`), so the node's own neighbour
  entry for an address it gave another container before is replaced at once;
- a source resumed after a failure gets its links and routes back (`up`) and announces itself the
  same way. Its connections (`connections`) are taken out of TCP repair mode when no copy ran
  from the dump (with tasks left stopped CRIU never unlocks them, so they would stay dead); once a
  target copy ran with them (`diverged`, marked before that copy is removed), their sequence
  numbers moved on there, so they are destroyed instead: a client's next segment gets a reset and
  it reconnects at once, instead of waiting on a connection that can never agree again.

Each step is one SSH command and idempotent; what `up` needs is on the node (the saved file), so a
controller that died anywhere finds it. Announcing and unrepairing run Python on the node (the
standard library only, as the QoS guard does): python3 >= 3.9 and Linux >= 5.6 (pidfd_getfd).
"""

from __future__ import annotations

from collections.abc import Sequence

from peakpack.orchestrator.domain.errors import FencedError, NodeError
from peakpack.orchestrator.remote import SshPool

from . import spec
from .criu import FENCED, SH_FUNCTIONS, work_dir

#: what the steps here run on a node, beyond what CRIU's side needs (`criu.TOOLS`)
TOOLS = ("python3", "ip")

#: gratuitous ARP (a request and a reply) and unsolicited neighbour advertisements for the given
#: addresses, from the interface holding each, run inside the container's network namespace.
ANNOUNCE_PY = r"""
import socket, struct, subprocess, sys, time
def table(*argv):
    return subprocess.run(["ip", "-o", *argv], capture_output=True, text=True, check=True).stdout.splitlines()
macs, index = {}, {}
for line in table("link", "show"):
    words = line.split()
    name = words[1].rstrip(":").split("@")[0]
    index[name] = int(words[0].rstrip(":"))
    if "link/ether" in words:
        macs[name] = bytes.fromhex(words[words.index("link/ether") + 1].replace(":", ""))
where = {}
for line in table("addr", "show"):
    words = line.split()
    where[words[3].split("/")[0]] = words[1]
sent, missing = [], []
for rnd in range(2):
    for address in sys.argv[1:]:
        name = where.get(address)
        if name is None or name not in macs:
            if rnd == 0:
                missing.append(address)
            continue
        hw = macs[name]
        if ":" not in address:
            ip = socket.inet_aton(address)
            with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
                s.bind((name, 0))
                for op, tha in ((1, b"\0" * 6), (2, hw)):
                    arp = struct.pack("!HHHBBH", 0x0806, 1, 0x0800, 6, 4, op) + hw + ip + tha + ip
                    s.send((b"\xff" * 6 + hw + arp).ljust(60, b"\0"))
        else:
            with socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6) as s:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, index[name])
                # type 136 (neighbour advertisement), override flag, the target, its link-layer address
                na = struct.pack("!BBHI", 136, 0, 0, 0x20000000) + socket.inet_pton(socket.AF_INET6, address)
                s.sendto(na + struct.pack("!BB", 2, 1) + hw, ("ff02::1", 0, 0, index[name]))
        if rnd == 0:
            sent.append(address)
    time.sleep(0.1)
print("announced", *sent)
if missing:
    print("not held here:", *missing)
    sys.exit(3)
"""

#: every TCP socket of the given processes that is in repair mode taken out of it (TCP_REPAIR 19
#: set to 0, as CRIU's own unlock does), through a duplicate of it (pidfd_getfd, syscall 438).
UNREPAIR_PY = r"""
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
done = 0
for pid in map(int, sys.argv[1:]):
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        continue
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    continue
            except OSError:
                continue
            dup = libc.syscall(438, pidfd, int(fd), 0)
            if dup < 0:
                sys.exit(f"pidfd_getfd({pid}, {fd}): {os.strerror(ctypes.get_errno())}")
            s = socket.socket(fileno=dup)
            try:
                if (s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM
                        and s.getsockopt(socket.IPPROTO_TCP, 19) == 1):
                    s.setsockopt(socket.IPPROTO_TCP, 19, 0)
                    done += 1
            finally:
                s.close()
    finally:
        os.close(pidfd)
print("unrepaired", done)
"""

#: `sh -c SCRIPT sh SUBCOMMAND PID DIR ARGS...`: PID is the container's init (its namespaces), DIR
#: this migration's folder on the node (where `down` saves what `up` restores).
SCRIPT = r"""
set -u
$SH_FUNCTIONS
cmd=$1 pid=$2 dir=$3; shift 3
in_ns() { nsenter -t "$pid" -n "$@"; }
fence
case $cmd in
down)  # ADDRESS...: the interfaces holding them down, after saving their names and the routes
  [ -f "$dir/links" ] && exit 0  # already down: the first save holds the routes
  ifs=$(for a; do in_ns ip -o addr show | awk -v a="$a" '{split($4, p, "/"); if (p[1] == a) print $2}'; done | sort -u)
  [ -n "$ifs" ] || { echo "no interface of $pid holds $*"; exit 1; }
  mkdir -p "$dir"
  { for i in $ifs; do echo "link $i"; done
    in_ns ip -4 route show table main | sed 's/^/route4 /'
    in_ns ip -6 route show table main 2>/dev/null | sed 's/^/route6 /'
  } > "$dir/links.new" && mv "$dir/links.new" "$dir/links" || exit 1
  for i in $ifs; do  # IPv6 addresses are flushed on link down unless told otherwise
    in_ns sh -c 'echo 1 > "/proc/sys/net/ipv6/conf/$1/keep_addr_on_down"' sh "$i" 2>/dev/null
    in_ns ip link set dev "$i" down || exit 1
  done;;
up)  # the links `down` took down up again, with their routes; nothing to do without its file
  [ -f "$dir/links" ] || exit 0
  for i in $(awk '$1 == "link" {print $2}' "$dir/links"); do in_ns ip link set dev "$i" up || exit 1; done
  awk '$1 == "route4"' "$dir/links" | while read -r _ r; do in_ns ip -4 route replace $r 2>/dev/null; done
  awk '$1 == "route6"' "$dir/links" | while read -r _ r; do in_ns ip -6 route replace $r 2>/dev/null; done
  rm -f "$dir/links";;
announce)  # ADDRESS...
  in_ns python3 -c "$ANNOUNCE_PY" "$@";;
diverged)  # a copy ran from the dump elsewhere: the connections here fell behind it
  mkdir -p "$dir" && touch "$dir/diverged";;
connections)  # before a resume: out of repair mode, or destroyed once they diverged
  if [ -f "$dir/diverged" ]; then
    in_ns ss -K -Htn state established >/dev/null && echo "reset"
  else
    python3 -c "$UNREPAIR_PY" $(procs "$pid")
  fi;;
*) echo "unknown subcommand $cmd"; exit 2;;
esac
""".replace("$SH_FUNCTIONS", SH_FUNCTIONS)


class NodeSegment:
    """One node's side of one migration's moving addresses. Every method is one SSH command."""

    def __init__(self, ssh: SshPool, node: str, docker_root: str, migration_id: int, token: int = 0,
                 key: str = "") -> None:
        """`token` and `key`: as for `criu.NodeCriu` (the node checks this migration's lease)."""
        self.ssh, self.node, self.mid, self.token = ssh, node, migration_id, token
        self.key = key or str(migration_id)
        self.dir = work_dir(docker_root, migration_id)

    async def _run(self, sub: str, pid: int, *args: str) -> str:
        argv = ["env", f"PP_MID={self.key}", f"PP_TOKEN={self.token}", f"ANNOUNCE_PY={ANNOUNCE_PY}",
                f"UNREPAIR_PY={UNREPAIR_PY}", "sh", "-c", SCRIPT, "sh", sub, str(pid), self.dir, *args]
        res = await self.ssh.run(self.node, argv, timeout=60, check=False)
        if res.exit_status == FENCED:
            raise FencedError(f"node {self.node}: {res.stdout.strip()[:300]}")
        if not res.ok:
            said = f"{res.stdout} {res.stderr}".strip().splitlines()[-1:] or [f"exit {res.exit_status}"]
            raise NodeError(self.node, f"{sub}: {said[0][:300]}")
        return res.stdout.strip()

    async def down(self, pid: int, addresses: Sequence[str]) -> None:
        await self._run("down", pid, *addresses)

    async def up(self, pid: int) -> None:
        await self._run("up", pid)

    async def announce(self, pid: int, addresses: Sequence[str]) -> str:
        return await self._run("announce", pid, *addresses)

    async def announce_restored(self, pid: int, copy: spec.Inspect, moving: Sequence[str]) -> str | None:
        """Right after a restore here (`pid`: the running copy `copy`'s), every address it holds
        announced. The moving ones must reach the segment: a failure is raised. The others sit on
        this node's own bridge, where the node's neighbour entry for the address may be left from
        its last holder or from a probe sent while the restore ran: the node then holds the first
        packets until its next ARP try, a second later (a 2 s client gap after a 0.9 s freeze,
        seen with tcpdump). Those are best effort: the node learns the address by itself soon
        after, so a failure is only said (what the journal records)."""
        local = [a for e in spec.endpoints(copy) for a in e.addresses if a not in moving]
        if moving:
            await self.announce(pid, [*moving, *local])
            return None
        if not local:
            return None
        try:
            await self.announce(pid, local)
        except NodeError as exc:
            return f"{', '.join(local)} not announced on {self.node}'s bridge ({exc})"
        return None

    async def diverged(self) -> None:
        """Mark this node's dumped copy's connections as left behind by a copy that ran elsewhere."""
        await self._run("diverged", 0)

    async def connections(self, pid: int) -> str:
        """Before resuming the dumped copy: its connections taken out of repair mode ("unrepaired
        N"), or reset when they diverged ("reset")."""
        return await self._run("connections", pid)
