"""One node's connection-tracking table read, pure: its flows with their byte counters, and what
each flow is from that node's point of view.

The table is `/proc/net/nf_conntrack` of the node's network namespace (where dockerd's bridges,
NAT and published ports live). With `net.netfilter.nf_conntrack_acct=1` every flow made after it
was set carries `packets=`/`bytes=` for both directions (IP bytes, headers included); with
`net.netfilter.nf_conntrack_timestamp=1` also `delta-time=`, its age in seconds. The `conntrack`
tool is not needed: the file is in the kernel's own format (docs/traffic.md says why).

A flow is two tuples: the original (as the client sent it) and the reply (as the answer comes
back). Docker's NAT shows in them: a DNAT to a published port makes the reply come from the
container instead of the address asked; a MASQUERADE on the client's node makes the reply go to
that node's address. `classify` reads that, with the node's containers, addresses and published
ports (`NodeNet`, from its own `docker inspect`: container IPs repeat across nodes, so every
flow is resolved on the node it was read on), into a `Half`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..domain.records import Peer, PeerKind

#: keys of a tuple (icmp has type/code/id instead of ports) and of its counters
_TUPLE_KEYS = frozenset({"src", "dst", "sport", "dport", "type", "code", "id"})
_COUNTER_KEYS = frozenset({"packets", "bytes"})
#: the kernel's counters are u64: a value outside [0, 2^64) is not a count, and its line is dropped
MAX_COUNTER = 2**64 - 1
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


@dataclass(frozen=True)
class Tuple:
    src: str
    dst: str
    sport: int | None  # None for protocols without ports (icmp)
    dport: int | None


@dataclass(frozen=True)
class Flow:
    """One line of the table. Counters are cumulative since the flow began; None when accounting
    was off when the flow was made (it never gets counters: "unaccounted", not zero). `assured`
    and `unreplied` are the kernel's `[ASSURED]` and `[UNREPLIED]` marks."""

    proto: str
    orig: Tuple
    reply: Tuple
    orig_bytes: int | None
    reply_bytes: int | None
    zone: int = 0
    age_s: int | None = None  # `delta-time=` (nf_conntrack_timestamp=1), 1 s resolution
    assured: bool = False
    unreplied: bool = False

    @property
    def accounted(self) -> bool:
        return self.orig_bytes is not None

    @property
    def answered(self) -> bool:
        """Whether both ends spoke: the reply direction carried bytes (and the kernel did not mark
        the flow [UNREPLIED]), and a TCP flow completed its handshake ([ASSURED]: a RST answering
        segments sent at a port is no connection). Bytes only one side sent (UDP at a published
        port nobody answers, stray TCP segments) are not traffic between two containers: counted,
        they would let any container pull another onto its node."""
        replied = not self.unreplied and (self.reply_bytes or 0) > 0
        return replied and (self.assured or self.proto != "tcp")

    @property
    def key(self) -> tuple[Any, ...]:
        """What names a flow across reads: its zone and original tuple. The same key can be a
        new flow (a reused source port replaces an entry in TIME_WAIT): `traffic.FlowLedger`
        tells them apart by age and counters."""
        o = self.orig
        return (self.zone, self.proto, o.src, o.dst, o.sport, o.dport)


def parse_flow(line: str) -> Flow | None:
    """One `/proc/net/nf_conntrack` line; None for anything else."""
    parts = line.split()
    if len(parts) < 6 or parts[0] not in ("ipv4", "ipv6"):
        return None
    proto = parts[2]
    tuples: list[dict[str, str]] = []
    extra: dict[str, str] = {}
    marks: set[str] = set()
    closed = False  # past both tuples: `mark=`, `zone=`, `delta-time=`, `use=`, the tool's `id=`
    for tok in parts[5:]:
        key, eq, value = tok.partition("=")
        if not eq:
            marks.add(tok)  # the TCP state, [UNREPLIED], [ASSURED]
            continue
        if key == "src" and not closed and len(tuples) < 2:
            tuples.append({})
        if not closed and tuples and (key in _TUPLE_KEYS or key in _COUNTER_KEYS):
            tuples[-1][key] = value
        else:
            closed = closed or len(tuples) == 2
            extra[key] = value
    if len(tuples) != 2:
        return None
    try:
        o, r = (Tuple(t["src"], t["dst"], _port(t, "sport"), _port(t, "dport")) for t in tuples)
        return Flow(proto, o, r, _count(tuples[0]), _count(tuples[1]), int(extra.get("zone", 0)),
                    _count(extra, "delta-time"), "[ASSURED]" in marks, "[UNREPLIED]" in marks)
    except (KeyError, ValueError):
        return None


def _port(t: Mapping[str, str], key: str) -> int | None:
    return int(t[key]) if key in t else None


def _count(t: Mapping[str, str], key: str = "bytes") -> int | None:
    """A counter (or an age): None when absent; ValueError when it is not a count (negative,
    beyond the kernel's u64, not an integer)."""
    if key not in t:
        return None
    value = int(t[key])
    if not 0 <= value <= MAX_COUNTER:
        raise ValueError(f"{key}={value} is not a count")
    return value


def is_flow_line(line: str) -> bool:
    """Whether a line of the table claims to be a flow (`parse_flow` reads it, or drops it)."""
    return line.lstrip().startswith(("ipv4 ", "ipv6 "))


@dataclass(frozen=True)
class Published:
    """A host port bound to a container port (docker-proxy or the DNAT rule answers for it)."""

    container: str
    container_ip: str | None
    container_port: int


@dataclass
class NodeNet:
    """One node's addresses and containers, as its own `docker inspect` says."""

    node: str
    addresses: set[str]  # the node's own addresses
    containers: dict[str, str] = field(default_factory=dict)  # container IP -> name
    gateways: set[str] = field(default_factory=set)  # bridge gateways: local addresses too
    #: (proto, host port) -> [(host IP it is bound to, what answers)]
    published: dict[tuple[str, int], list[tuple[str, Published]]] = field(default_factory=dict)

    @classmethod
    def from_inspect(cls, node: str, addresses: Iterable[str], docs: Iterable[Mapping[str, Any]]) -> NodeNet:
        """Running containers' IPs on every network, the bridges' gateways, and the ports really
        bound (`NetworkSettings.Ports`: a random `-p 80` shows its host port there only)."""
        net = cls(node, set(addresses))
        for d in docs:
            if not (d.get("State") or {}).get("Running"):
                continue
            name = str(d["Name"]).lstrip("/")
            settings = d.get("NetworkSettings") or {}
            first_ip = None
            for nw in (settings.get("Networks") or {}).values():
                for key in ("IPAddress", "GlobalIPv6Address"):
                    if nw.get(key):
                        net.containers[nw[key]] = name
                        first_ip = first_ip or nw[key]
                net.gateways.update(nw[key] for key in ("Gateway", "IPv6Gateway") if nw.get(key))
            for spec, binds in (settings.get("Ports") or {}).items():
                port, _, proto = spec.partition("/")
                for b in binds or []:  # None: exposed, not published
                    net.published.setdefault((proto or "tcp", int(b["HostPort"])), []).append(
                        (b.get("HostIp") or "0.0.0.0", Published(name, first_ip, int(port))))
        return net

    def is_local(self, ip: str) -> bool:
        if ip in self.addresses or ip in self.gateways:
            return True
        try:
            return any(ipaddress.ip_address(ip) in n for n in LOOPBACK)
        except ValueError:
            return False

    def publisher(self, proto: str, dst: str, port: int | None) -> Published | None:
        """The container that publishes `port` on address `dst` of this node."""
        for host_ip, pub in self.published.get((proto, port or -1), []):
            if host_ip in ("0.0.0.0", "::", dst):
                return pub
        return None

    def is_proxy_target(self, ip: str, port: int | None) -> bool:
        """Whether ip:port is a published container port: where docker-proxy's own leg goes."""
        return any(p.container_ip == ip and p.container_port == port
                   for binds in self.published.values() for _, p in binds)


class HalfKind(StrEnum):
    LOCAL = "local"  # both ends on this node: nothing to join
    CLIENT = "client"  # the client is here, the server elsewhere: join on the key
    SERVER = "server"  # the server is here, the client elsewhere: join on the key
    PROXY = "proxy"  # docker-proxy's leg to the container: its client leg already counts
    OTHER = "other"  # neither end is on this node (overlay or routed traffic): key = its original tuple


#: (proto, client address, client port, server address, server port) as seen between nodes:
#: the server node's original tuple = the client node's reply tuple reversed, whatever port the
#: client node's MASQUERADE picked
JoinKey = tuple[str, str, int | None, str, int | None]


@dataclass(frozen=True)
class Half:
    """One node's view of a flow (see `HalfKind`), with the bytes to count for it."""

    node: str
    kind: HalfKind
    client: Peer | None
    server: Peer | None
    key: JoinKey | None
    c2s: int
    s2c: int
    flow: tuple[Any, ...] | None = None  # `Flow.key` of the flow it is a view of


def classify(net: NodeNet, flow: Flow, c2s: int = 0, s2c: int = 0) -> Half:
    """Which end of `flow` is on this node and what it is.

    Server: DNAT happened when the reply does not come from the address and port asked; then
    the reply's source answers, else the original destination. A container IP names it; else a
    local destination is docker-proxy answering for the container that publishes that port, or
    the node's own host. Client: a container IP, else the node's host for a local address, else
    someone elsewhere. A bridge gateway talking to a container's published private port without
    DNAT is docker-proxy's own leg (its client leg names both ends). A process of the node
    talking straight to such a container port looks the same and is skipped too (rare).
    """
    o, r = flow.orig, flow.reply
    containers = net.containers
    host = Peer(PeerKind.HOST, net.node)

    def half(kind: HalfKind, client: Peer | None, server: Peer | None, key: JoinKey | None = None) -> Half:
        return Half(net.node, kind, client, server, key, c2s, s2c, flow.key)

    dnat = (r.src, r.sport) != (o.dst, o.dport)
    answerer = r.src if dnat else o.dst
    server: Peer | None = None
    if answerer in containers:
        server = Peer(PeerKind.CONTAINER, containers[answerer])
    elif net.is_local(o.dst):
        pub = None if dnat else net.publisher(flow.proto, o.dst, o.dport)
        server = Peer(PeerKind.CONTAINER, pub.container) if pub else host
    client: Peer | None = None
    if o.src in containers:
        client = Peer(PeerKind.CONTAINER, containers[o.src])
    elif net.is_local(o.src):
        client = host

    if (client == host and o.src in net.gateways and not dnat and o.dst in containers
            and net.is_proxy_target(o.dst, o.dport)):
        return half(HalfKind.PROXY, client, server)
    if client is not None and server is not None:
        return half(HalfKind.LOCAL, client, server)
    if client is not None:  # leaving: the server's node sees our post-SNAT source
        return half(HalfKind.CLIENT, client, None, (flow.proto, r.dst, r.dport, o.dst, o.dport))
    if server is not None:  # arriving: our original tuple is the client node's post-SNAT one
        return half(HalfKind.SERVER, None, server, (flow.proto, o.src, o.sport, o.dst, o.dport))
    return half(HalfKind.OTHER, None, None, (flow.proto, o.src, o.sport, o.dst, o.dport))
