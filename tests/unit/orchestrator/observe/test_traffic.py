"""Flows to containers on conntrack tables recorded in a real lab (tests/unit/data/conntrack/,
README there: who had which IP and what was sent): same bridge, a published port across nodes,
docker-proxy, host-network and host-to-host flows, UDP; then deltas between reads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from peakpack.orchestrator.domain.model import ClusterConfig, Inventory
from peakpack.orchestrator.domain.records import PeerKind, TrafficRecord
from peakpack.orchestrator.observe.conntrack import Flow, NodeNet, parse_flow
from peakpack.orchestrator.observe.traffic import FlowLedger, NodeRead, TrafficMeter, parse_read
from tests.support.build import node_spec
from tests.support.paths import REPO

DATA = REPO / "tests/unit/data/conntrack"
ADDR = {"node-1": "10.201.151.11", "node-2": "10.201.151.12", "node-3": "10.201.151.13"}
INVENTORY = Inventory(ClusterConfig("lab"), tuple(node_spec(n, address=a, cpus=2, memory_mb=4096)
                                                  for n, a in ADDR.items()))
T0 = datetime(2026, 11, 24, 22, 52, tzinfo=UTC)


def parse_flows(text: str) -> list[Flow]:
    return [f for f in map(parse_flow, text.splitlines()) if f is not None]


def net(node: str) -> NodeNet:
    return NodeNet.from_inspect(node, [ADDR[node]], json.loads((DATA / f"inspect.{node}.json").read_text()))


def read(flows: str, clock: float, **settings: str) -> NodeRead:
    s = {"acct": "1", "timestamp": "1", "bridge": "1", **settings}
    return NodeRead(clock, s["acct"], s["timestamp"], s["bridge"], frozenset(), tuple(parse_flows(flows)))


def whole_tables(scenario: str, meter: TrafficMeter | None = None) -> list[TrafficRecord]:
    """The recorded tables read after an empty one: every flow in them counts whole."""
    meter = meter or TrafficMeter(INVENTORY, lambda _: None)
    nodes = [n for n in ADDR if (DATA / f"{scenario}.{n}.proc.txt").exists()]
    meter.measure({n: (net(n), read("", 0.0)) for n in nodes}, T0)
    tables = {n: (net(n), read((DATA / f"{scenario}.{n}.proc.txt").read_text(), 30.0)) for n in nodes}
    return meter.measure(tables, T0 + timedelta(seconds=30)).pairs


def pair(rows: list[TrafficRecord], client: str, server: str) -> TrafficRecord:
    (found,) = [r for r in rows if (str(r.client), r.server) == (client, server)
                or (f"{r.client_kind.value}:{r.client}" == client and r.server == server)]
    return found


def test_lines_parse_with_counters_flags_and_no_counters_before_accounting() -> None:
    flows = parse_flows((DATA / "a_same_bridge.node-1.proc.txt").read_text())
    assert len(flows) == 6 and all(f.zone == 0 and f.age_s is None for f in flows)
    web = [f for f in flows if f.orig.dport == 80]
    assert [(f.orig_bytes, f.reply_bytes) for f in web] == [(761, 100875), (709, 100875), (709, 100875)]
    (udp, _) = parse_flows((DATA / "f_udp.node-1.proc.txt").read_text())
    assert udp.proto == "udp" and (udp.orig_bytes, udp.reply_bytes) == (528, 0) and udp.reply.sport == 5000
    before = parse_flow("ipv4 2 tcp 6 114 TIME_WAIT src=10.201.151.1 dst=10.201.151.11 sport=52492 "
                        "dport=22 src=10.201.151.11 dst=10.201.151.1 sport=22 dport=52492 [ASSURED] mark=0 use=2")
    assert before is not None and not before.accounted
    aged = parse_flow("ipv4 2 tcp 6 117 TIME_WAIT src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 packets=1 bytes=60 "
                      "src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1 packets=1 bytes=60 [ASSURED] mark=0 zone=0 "
                      "delta-time=42 use=1")
    assert aged is not None and aged.age_s == 42
    icmp = parse_flow("ipv4 2 icmp 1 29 src=172.17.0.3 dst=172.17.0.2 type=8 code=0 id=7 packets=1 bytes=84 "
                      "src=172.17.0.2 dst=172.17.0.3 type=0 code=0 id=7 packets=1 bytes=84 mark=0 zone=0 use=2")
    assert icmp is not None and icmp.orig.sport is None and icmp.reply_bytes == 84
    assert parse_flow("conntrack v1.4.7 (conntrack-tools): 6 flow entries have been shown.") is None


def test_same_bridge_pair_is_local_and_exact() -> None:
    rows = whole_tables("a_same_bridge")
    cli_web = pair(rows, "cli", "web")
    assert (cli_web.c2s_bytes, cli_web.s2c_bytes, cli_web.flows, cli_web.how) == (2179, 3 * 100875, 3, "local")
    assert cli_web.client_node == cli_web.server_node == cli_web.counted_on == "node-1"
    ssh = [r for r in rows if r.server_kind is PeerKind.HOST]  # the controller's own SSH: not a container
    assert ssh and all(r.client_kind is PeerKind.EXTERNAL and r.client == "10.201.151.1" for r in ssh)


def test_published_port_joins_the_client_node_and_resolves_ips_per_node() -> None:
    """cli@node-1 -> node-2:8080 -> srv, which has 172.17.0.2 like web on node-1: counted once
    (on node-2), the client named by node-1's table, never web."""
    rows = whole_tables("b_published")
    cli_srv = pair(rows, "cli", "srv")
    assert (cli_srv.c2s_bytes, cli_srv.s2c_bytes, cli_srv.flows, cli_srv.how) == (3 * 665, 3 * 100823, 3, "joined")
    assert (cli_srv.client_node, cli_srv.server_node, cli_srv.counted_on) == ("node-1", "node-2", "node-2")
    assert not [r for r in rows if r.server == "web"]
    assert all(r.server_kind is PeerKind.EXTERNAL for r in rows if r.how == "client-only")


def test_host_network_client_and_host_to_host_flows_are_counted_as_such() -> None:
    rows = whole_tables("c_host")
    host_srv = pair(rows, "host:node-1", "srv")
    assert (host_srv.client_kind, host_srv.bytes, host_srv.how) == (PeerKind.HOST, 665 + 100823, "joined")
    ssh = [r for r in rows if (r.client, r.server) == ("node-1", "node-3")]
    assert [(r.client_kind, r.server_kind, r.bytes) for r in ssh] == [(PeerKind.HOST, PeerKind.HOST, 4893 + 54853)]
    assert not [r for r in rows if r.client_kind is r.server_kind is PeerKind.CONTAINER]


def test_docker_proxy_counts_the_client_leg_once() -> None:
    """cli -> node-1:8081 goes through docker-proxy (two entries): cli -> web once, the proxy's
    own legs skipped; a host process -> 127.0.0.1:8081 and -> 10.201.151.11:8081 (OUTPUT DNAT)
    are node-1's host -> web."""
    rows = whole_tables("d_proxy")
    assert pair(rows, "cli", "web").bytes == 717 + 100823
    assert pair(rows, "host:node-1", "web").bytes == (557 + 100667) + (717 + 100875)
    assert not [r for r in rows if r.client == "node-1" and r.server_kind is PeerKind.CONTAINER
                and r.bytes == 769 + 100875]  # the proxy leg 172.17.0.1 -> web:80


def test_an_unnamed_client_from_a_node_address_is_held_one_read_then_that_nodes_host() -> None:
    """node-2's half of cli's flows with node-1 not read: held once (node-1's record could come
    late), then node-1's host, never a guessed container."""
    meter = TrafficMeter(INVENTORY, lambda _: None)
    meter.measure({"node-2": (net("node-2"), read("", 0.0))}, T0)
    text = (DATA / "b_published.node-2.proc.txt").read_text()
    first = meter.measure({"node-2": (net("node-2"), read(text, 30.0))}, T0 + timedelta(seconds=30))
    assert not [r for r in first.pairs if r.server == "srv"]
    second = meter.measure({"node-2": (net("node-2"), read(text, 60.0))}, T0 + timedelta(seconds=60))
    held = pair(second.pairs, "host:node-1", "srv")
    assert (held.bytes, held.how) == (3 * (665 + 100823), "server-only")


def test_deltas_count_growth_new_flows_whole_and_a_reused_tuple_by_its_age() -> None:
    line = ("ipv4     2 tcp      6 117 TIME_WAIT src=10.201.151.11 dst=10.201.151.12 sport=42806 dport=8080 "
            "packets=11 bytes=665 src=172.17.0.2 dst=10.201.151.11 sport=80 dport=42806 packets=12 "
            "bytes={reply} [ASSURED] mark=0 zone=0 delta-time={age} use=1")
    ledger = FlowLedger()
    assert ledger.update("node-2", parse_flows(line.format(reply=40000, age=50)), 100.0) is None  # a baseline
    (grown,) = ledger.update("node-2", parse_flows(line.format(reply=100823, age=80)), 130.0).values()
    assert grown == (0, 60823)
    assert ledger.update("node-2", parse_flows(line.format(reply=100823, age=110)), 160.0) == {}
    # the same tuple and counters, but 4 s old: a new connection reused the port
    (new,) = ledger.update("node-2", parse_flows(line.format(reply=100823, age=4)), 190.0).values()
    assert new == (665, 100823)


def test_a_node_without_accounting_is_listed_once_and_not_measured() -> None:
    said: list[str] = []
    meter = TrafficMeter(INVENTORY, said.append)
    text = (DATA / "b_published.node-2.proc.txt").read_text()
    for k in range(3):
        got = meter.measure({"node-2": (net("node-2"), read(text, 30.0 * k, acct="0")),
                             "node-3": (net("node-3"), read("", 30.0 * k, timestamp="0"))},
                            T0 + timedelta(seconds=30 * k))
        assert not got.pairs
        off = next(r for r in got.reads if r.node == "node-2")
        assert not off.measured and off.interval_s is None
    assert said == ["traffic not measured on node-2: enable net.netfilter.nf_conntrack_acct",
                    "traffic on node-3 may miss connections that reuse a port "
                    "(enable net.netfilter.nf_conntrack_timestamp)"]


def test_read_script_output_parses() -> None:
    got = parse_read("time 1795561528.242018409\nacct 1\ntimestamp -\nbridge 1\naddr 127.0.0.1\n"
                     "addr 10.201.151.11\nflows\n" + (DATA / "f_udp.node-1.proc.txt").read_text())
    assert got.clock == 1795561528.242018409 and (got.acct, got.timestamp, got.bridge) == ("1", None, "1")
    assert got.addresses == {"127.0.0.1", "10.201.151.11"} and got.flows is not None and len(got.flows) == 2
    assert parse_read("time 1\nacct -\ntimestamp -\nbridge -\nnoflows\n").flows is None


def test_reads_between_observations_add_to_the_next_one_and_catch_flows_that_left_the_table() -> None:
    """A connection per request, each gone from the table before the next observation: the
    observations alone see none of its bytes; a read between them (`sample`) does, and the next
    observation stores them over the whole interval, once."""
    text = (DATA / "a_same_bridge.node-1.proc.txt").read_text()
    only_reads = TrafficMeter(INVENTORY, lambda _: None)
    with_samples = TrafficMeter(INVENTORY, lambda _: None)
    for meter in (only_reads, with_samples):
        meter.measure({"node-1": (net("node-1"), read("", 0.0))}, T0)
    with_samples.sample({"node-1": (net("node-1"), read(text, 30.0))}, T0 + timedelta(seconds=30))
    assert with_samples.measuring == ["node-1"]
    ends = {"node-1": (net("node-1"), read("", 60.0))}  # the flows have left the table by now
    seen, missed = (m.measure(ends, T0 + timedelta(seconds=60)) for m in (with_samples, only_reads))
    assert not missed.pairs
    whole = {(r.client, r.server): r for r in whole_tables("a_same_bridge")}
    assert {(r.client, r.server): (r.bytes, r.flows) for r in seen.pairs} == {
        k: (r.bytes, r.flows) for k, r in whole.items()}
    assert {r.interval_s for r in seen.pairs} == {60.0}
    [line] = seen.reads
    assert (line.node, line.at, line.interval_s, line.measured) == ("node-1", T0 + timedelta(seconds=60), 60.0, True)
    assert not with_samples.measure(ends, T0 + timedelta(seconds=90)).pairs  # counted once


def test_a_flow_seen_by_several_reads_counts_its_growth_and_once_as_a_flow() -> None:
    line = ("ipv4     2 tcp      6 431999 ESTABLISHED src=172.17.0.3 dst=172.17.0.2 sport=40000 dport=80 "
            "packets=10 bytes={c2s} src=172.17.0.2 dst=172.17.0.3 sport=80 dport=40000 packets=10 "
            "bytes={s2c} [ASSURED] mark=0 zone=0 delta-time={age} use=1")
    meter = TrafficMeter(INVENTORY, lambda _: None)
    meter.measure({"node-1": (net("node-1"), read(line.format(c2s=100, s2c=1000, age=5), 0.0))}, T0)
    meter.sample({"node-1": (net("node-1"), read(line.format(c2s=300, s2c=5000, age=35), 30.0))},
                 T0 + timedelta(seconds=30))
    got = meter.measure({"node-1": (net("node-1"), read(line.format(c2s=600, s2c=9000, age=65), 60.0))},
                        T0 + timedelta(seconds=60))
    [row] = got.pairs
    assert (row.c2s_bytes, row.s2c_bytes, row.flows, row.interval_s, row.how) == (500, 8000, 1, 60.0, "local")
