"""Traffic between containers, measured: each observation reads every node's conntrack table
(`READ_SCRIPT`, one SSH command per node, beside the others), and `TrafficMeter` turns the
reads into bytes per client/server pair since the previous read.

Counters are cumulative per flow and flows vanish (TIME_WAIT 120 s after a FIN, 10 s after a
RST, UDP after 30 s): `FlowLedger` keeps each flow's counters from the previous read, so a flow
seen before counts its growth, a flow first seen counts whole, and a node's first read (or its
first after a missed one) is only a baseline. A flow that starts and vanishes between two reads
is never seen: with reads less than ~100 s apart every FIN-closed connection is seen at least
once (measured within 1% of the client's own counters, docs/traffic.md), so `serve` also reads
the tables between observations (`TrafficMeter.sample`, `cluster.sample_traffic`) and their
bytes join the next observation's rows.

A flow between two nodes is in both nodes' tables, read at slightly different instants: its
bytes are counted once, on the server's node (where the DNAT or the destination is) when that
node was read, else on the client's; the other node only names the client (every client half in
its whole table, this read or the previous one). A flow arriving from a node's address whose
client no node names is held one read (the client's record may come next), then counted as that
node's host network; from any other address as external. Never guessed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..domain.model import Inventory
from ..domain.records import Peer, PeerKind, TrafficRead, TrafficRecord
from .conntrack import Flow, Half, HalfKind, JoinKey, NodeNet, classify, is_flow_line, parse_flow

#: the most flows of one node's table a read takes (~225 B each: ~23 MB and ~1.2 s of parsing at
#: most per node and read); a larger table is not measured, never read in part (a flow missing
#: from one read would count whole at the next)
MAX_FLOWS = 100_000
#: more than any node's NICs and bridges move (800 Gb/s): a flow, or a node's flows together,
#: grown faster since the previous read do not hold counts, and are dropped (also keeps every
#: stored row far inside the store's 64-bit integers: ~3 years of reads at this rate)
MAX_BYTES_PER_S = 100e9

#: prints "time", the two sysctls that make counters exact, the bridge sysctl that makes
#: same-bridge traffic visible, the node's addresses, then the table, one flow more than
#: MAX_FLOWS at most ("noflows" when it cannot be read: conntrack not loaded, or not root)
READ_SCRIPT = rf"""
echo "time $(date +%s.%N)"
for k in acct timestamp; do echo "$k $(cat /proc/sys/net/netfilter/nf_conntrack_$k 2>/dev/null || echo -)"; done
echo "bridge $(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo -)"
ip -o addr show 2>/dev/null | awk '{{sub("/.*", "", $4); print "addr", $4}}'
if [ -r /proc/net/nf_conntrack ]; then echo flows; head -n {MAX_FLOWS + 1} /proc/net/nf_conntrack; else echo noflows; fi
"""

ACCT = "net.netfilter.nf_conntrack_acct"
TIMESTAMP = "net.netfilter.nf_conntrack_timestamp"
BRIDGE = "net.bridge.bridge-nf-call-iptables"


@dataclass(frozen=True)
class NodeRead:
    """What READ_SCRIPT printed: the node's clock, its settings ("1", "0", or None when the
    sysctl does not exist), its addresses and its flows (None: the table could not be read);
    `dropped`: lines that claimed to be flows but held values that are not counts; `truncated`:
    the table held more than MAX_FLOWS flows."""

    clock: float | None
    acct: str | None
    timestamp: str | None
    bridge: str | None
    addresses: frozenset[str]
    flows: tuple[Flow, ...] | None
    dropped: int = 0
    truncated: bool = False

    def why_not_measured(self, node: str) -> str | None:
        if self.flows is None:
            return (f"traffic not measured on {node}: /proc/net/nf_conntrack cannot be read "
                    "(load nf_conntrack and log in as root)")
        if self.acct != "1":
            return f"traffic not measured on {node}: enable {ACCT}"
        if self.truncated:
            return f"traffic not measured on {node}: its conntrack table holds more than {MAX_FLOWS:,} flows"
        return None

    def caveats(self, node: str) -> str | None:
        """What a measured node's figures may miss, in one line."""
        missing = []
        if self.timestamp != "1":
            missing.append(f"connections that reuse a port (enable {TIMESTAMP})")
        if self.bridge == "0":
            missing.append(f"traffic between containers on one bridge (enable {BRIDGE})")
        return f"traffic on {node} may miss {' and '.join(missing)}" if missing else None


def parse_read(text: str) -> NodeRead:
    head, marker, body = text.partition("\nflows\n")
    if not marker and text.startswith("flows\n"):
        head, body = "", text[len("flows\n"):]
    values: dict[str, str] = {}
    addresses = set()
    for line in head.splitlines():
        key, _, value = line.strip().partition(" ")
        if key == "addr" and value:
            addresses.add(value.split("%")[0])
        elif key in ("time", "acct", "timestamp", "bridge"):
            values[key] = value.strip()

    def setting(key: str) -> str | None:
        return values.get(key) if values.get(key) not in (None, "", "-") else None

    try:
        clock = float(values["time"])
    except (KeyError, ValueError):
        clock = None
    if not (marker or text.startswith("flows\n")):
        return NodeRead(clock, setting("acct"), setting("timestamp"), setting("bridge"), frozenset(addresses), None)
    lines = [line for line in body.splitlines() if is_flow_line(line)]
    flows = tuple(f for f in map(parse_flow, lines[:MAX_FLOWS]) if f is not None)
    return NodeRead(clock, setting("acct"), setting("timestamp"), setting("bridge"), frozenset(addresses), flows,
                    dropped=min(len(lines), MAX_FLOWS) - len(flows), truncated=len(lines) > MAX_FLOWS)


class FlowLedger:
    """Each node's flows' counters at its previous read, and the bytes since.

    The same key can be a new flow: a client that reuses its source port while the previous
    connection's entry is in TIME_WAIT replaces that entry, often with the same counters (equal
    responses). So a flow counts whole when its counters went down, or when its age
    (`delta-time`, with nf_conntrack_timestamp=1) is shorter than the time since the previous
    read: it began after it."""

    SLACK_S = 1.0  # delta-time has a 1 s resolution

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, dict[tuple[Any, ...], tuple[int, int]]]] = {}

    def forget(self, node: str) -> None:
        self._last.pop(node, None)

    def update(self, node: str, flows: Sequence[Flow], clock: float) -> dict[tuple[Any, ...], tuple[int, int]] | None:
        """Bytes (orig, reply) per flow key since the previous read; None for a baseline."""
        now = {f.key: (f.orig_bytes or 0, f.reply_bytes or 0) for f in flows if f.accounted}
        before = self._last.get(node)
        self._last[node] = (clock, now)
        if before is None:
            return None
        then, counters = before
        since = clock - then
        grown: dict[tuple[Any, ...], tuple[int, int]] = {}
        for f in flows:
            if not f.accounted:
                continue
            cur, prev = now[f.key], counters.get(f.key)
            born = f.age_s is not None and f.age_s < since - self.SLACK_S
            if prev is None or born or cur[0] < prev[0] or cur[1] < prev[1]:
                grown[f.key] = cur
            elif cur != prev:
                grown[f.key] = (cur[0] - prev[0], cur[1] - prev[1])
        return grown


def within_bounds(node: str, grown: Mapping[tuple[Any, ...], tuple[int, int]], seconds: float, unreadable: int
                  ) -> tuple[dict[tuple[Any, ...], tuple[int, int]], list[str]]:
    """The growth of a node's flows that it could have moved in `seconds` (MAX_BYTES_PER_S), and
    one line for each thing dropped: a flow grown faster, every flow when together they did
    (counters that are not counts are the node's fault, never a failed epoch), and `unreadable`
    lines of its table."""
    limit = MAX_BYTES_PER_S * max(seconds, 1.0)
    kept = {k: v for k, v in grown.items() if v[0] + v[1] <= limit}
    lines = []
    if unreadable:
        lines.append(f"traffic on {node}: {unreadable} conntrack lines dropped: a counter negative, beyond 2^64 or "
                     "not a number")
    if len(kept) < len(grown):
        lines.append(f"traffic on {node}: {len(grown) - len(kept)} flows dropped: each grew more than a node moves "
                     f"({MAX_BYTES_PER_S / 1e9:g} GB/s) in {seconds:.0f} s")
    if sum(a + b for a, b in kept.values()) > limit:
        lines.append(f"traffic on {node}: this read not counted: its flows together grew more than a node moves "
                     f"({MAX_BYTES_PER_S / 1e9:g} GB/s) in {seconds:.0f} s")
        kept = {}
    return kept, lines


@dataclass(frozen=True)
class Measured:
    """One observation's traffic: bytes per pair, and one line per node read."""

    pairs: list[TrafficRecord]
    reads: list[TrafficRead]


#: a node's view and its conntrack read, or None when it was not read (off, unreachable)
NodeTraffic = tuple[NodeNet, NodeRead]


#: (client, its node, server, its node, how, the node that counted): what one record sums
PairKey = tuple[Peer, str | None, Peer, str | None, str, str]


class TrafficMeter:
    """Turns every observation's conntrack reads into `TrafficRecord`s (see the module
    docstring); lives as long as the controller, so that each read has a previous one. Each
    note about a node (not measured, or what it may miss) is logged once.

    Between observations the controller may read the tables more often (`sample`: a flow closed
    with a FIN stays ~120 s in a table, so reads further apart miss connection-per-request
    traffic): those reads only add to what the next `measure` stores, over the whole interval,
    so the store holds one set of rows per observation however often the tables are read."""

    def __init__(self, inventory: Inventory, log: Callable[[str], None]) -> None:
        self.inventory_addresses = {n.address: n.name for n in inventory.nodes}
        self.log = log
        self.ledger = FlowLedger()
        self.last_at: dict[str, datetime] = {}
        self.prev_names: dict[JoinKey, tuple[Peer, str]] = {}
        self.held: list[Half] = []
        self.noted: set[str] = set()
        #: since the last `measure`: bytes and flows per pair, measured seconds and last read per node
        self._bytes: dict[PairKey, list[int]] = defaultdict(lambda: [0, 0])
        self._flows: dict[PairKey, set[tuple[Any, ...]]] = defaultdict(set)
        self._seconds: dict[str, float] = {}
        self._lines: dict[str, TrafficRead] = {}

    def node_addresses(self, reads: Mapping[str, NodeTraffic | None]) -> dict[str, str]:
        """Address -> node: the inventory's, and each node's own addresses that no other node
        has (bridge gateways and loopback repeat on every node)."""
        seen: dict[str, set[str]] = defaultdict(set)
        for node, got in reads.items():
            if got is not None:
                for a in got[1].addresses:
                    seen[a].add(node)
        unique = {a: next(iter(nodes)) for a, nodes in seen.items() if len(nodes) == 1}
        gateways = {g for got in reads.values() if got is not None for g in got[0].gateways}
        return {**{a: n for a, n in unique.items() if a not in gateways and not a.startswith("127.")
                   and a != "::1"}, **self.inventory_addresses}

    def _note(self, line: str | None) -> None:
        if line is not None and line not in self.noted:
            self.noted.add(line)
            self.log(line)

    @property
    def measuring(self) -> list[str]:
        """The nodes whose last read was measured: what a `sample` reads."""
        return sorted(self.last_at)

    def measure(self, reads: Mapping[str, NodeTraffic | None], at: datetime) -> Measured:
        """`reads`: node -> its view and read, or None for a node not read now; `at`: when. The
        records of everything read since the previous `measure`, this read included."""
        self.sample(reads, at)
        pairs = [TrafficRecord(at=at, interval_s=self._seconds.get(on, 0.0), counted_on=on, client_kind=c.kind,
                               client=c.name, client_node=cn, server_kind=s.kind, server=s.name, server_node=sn,
                               c2s_bytes=v[0], s2c_bytes=v[1], flows=len(self._flows[k]), how=how)
                 for k, v in self._bytes.items() for (c, cn, s, sn, how, on) in [k]]
        lines = [replace(line, at=at, interval_s=self._seconds[node], measured=True) if node in self._seconds
                 else replace(line, at=at) for node, line in self._lines.items()]  # measured earlier in the interval
        self._bytes.clear()
        self._flows.clear()
        self._seconds.clear()
        self._lines.clear()
        return Measured(pairs, lines)

    def sample(self, reads: Mapping[str, NodeTraffic | None], at: datetime) -> None:
        """Read the tables now, adding their bytes to what the next `measure` stores."""
        addresses = self.node_addresses(reads)
        names: dict[JoinKey, tuple[Peer, str]] = {}
        counted: list[Half] = []
        intervals: dict[str, float] = {}  # nodes whose bytes count now: seconds since their last read
        for node, got in reads.items():
            why = None if got is None else got[1].why_not_measured(node)
            if got is None or why is not None:
                self.ledger.forget(node)
                self.last_at.pop(node, None)
                if got is not None:
                    self._note(why)
                    flows = got[1].flows or ()
                    self._lines[node] = TrafficRead(at, node, None, len(flows), len(flows), False, why)
                continue
            net, read = got
            flows = read.flows or ()
            caveat = read.caveats(node)
            self._note(caveat)
            grown = self.ledger.update(node, flows, read.clock if read.clock is not None else at.timestamp())
            interval = None
            if grown is not None and node in self.last_at:
                interval = intervals[node] = (at - self.last_at[node]).total_seconds()
                self._seconds[node] = self._seconds.get(node, 0.0) + interval
            self.last_at[node] = at
            grown, dropped = within_bounds(node, grown or {}, interval or 0.0, read.dropped)
            for line in dropped:
                self.log(line)
            for f in flows:
                if not f.accounted:
                    continue
                c2s, s2c = grown.get(f.key, (0, 0))
                half = classify(net, f, c2s, s2c)
                if half.kind is HalfKind.CLIENT and half.key is not None and half.client is not None:
                    names[half.key] = (half.client, node)
                if (c2s or s2c) and f.answered:
                    counted.append(half)
            self._lines[node] = TrafficRead(at, node, interval, len(flows), sum(not f.accounted for f in flows),
                                            True, "; ".join(n for n in (caveat, *dropped) if n) or None)
        known = {**self.prev_names, **names}
        self.prev_names = names
        self._add(counted, known, intervals, addresses)

    def _add(self, counted: Iterable[Half], known: Mapping[JoinKey, tuple[Peer, str]],
             intervals: Mapping[str, float], addresses: Mapping[str, str]) -> None:
        """The bytes of `counted`, by (client, server, how, node that counted)."""

        def who(address: str) -> tuple[Peer, str | None]:
            node = addresses.get(address)
            return (Peer(PeerKind.HOST, node), node) if node else (Peer(PeerKind.EXTERNAL, address), None)

        def add(client: Peer, client_node: str | None, server: Peer, server_node: str | None, how: str,
                h: Half) -> None:
            key = (client, client_node, server, server_node, how, h.node)
            a = self._bytes[key]
            a[0] += h.c2s
            a[1] += h.s2c
            self._flows[key].add((h.node, h.flow if h.flow is not None else id(h)))

        held, self.held = self.held, []
        for h, was_held in [*((h, True) for h in held), *((h, False) for h in counted)]:
            if h.kind is HalfKind.LOCAL and h.client and h.server:
                add(h.client, h.node, h.server, h.node, "local", h)
            elif h.kind is HalfKind.SERVER and h.key and h.server:
                named = known.get(h.key)
                if named is None and h.key[1] in addresses and not was_held:
                    self.held.append(h)  # once: its client's node may name it at the next read
                    continue
                client, client_node = named if named else who(h.key[1])
                add(client, client_node, h.server, h.node, "joined" if named else "server-only", h)
            elif h.kind is HalfKind.CLIENT and h.key and h.client:
                if addresses.get(h.key[3]) in intervals:
                    continue  # the server's node counts this flow
                add(h.client, h.node, *who(h.key[3]), "client-only", h)
            elif h.kind is HalfKind.OTHER and h.key:
                add(*who(h.key[1]), *who(h.key[3]), "server-only", h)
            # HalfKind.PROXY: docker-proxy's leg; its client's leg counts the same bytes
