"""What a conntrack read may make the planner believe, and what it may cost: only flows both ends
spoke in count as pair traffic, one pair weighs at most MAX_PAIR_BYTES_PER_S, a node's read takes
at most MAX_FLOWS flows, and counters that are not counts are dropped and logged, never a failed
epoch (docs/traffic.md, "Bounds"). The real-lab case (a UDP stream at a port nobody answers) is
tests/integration/test_traffic_bounds.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.orchestrator.decide.traffic import MAX_PAIR_BYTES_PER_S, forecast_traffic
from peakpack.orchestrator.domain.records import PeerKind, TrafficRead, TrafficRecord
from peakpack.orchestrator.domain.settings import ForecastSettings
from peakpack.orchestrator.observe import traffic
from peakpack.orchestrator.observe.conntrack import MAX_COUNTER, parse_flow
from peakpack.orchestrator.observe.traffic import (
    MAX_BYTES_PER_S,
    MAX_FLOWS,
    READ_SCRIPT,
    NodeRead,
    TrafficMeter,
    parse_read,
)
from tests.unit.orchestrator.observe.test_traffic import DATA, INVENTORY, T0, net, parse_flows, read, whole_tables

#: cli (172.17.0.3) -> web (172.17.0.2:80) on node-1's bridge (tests/unit/data/conntrack/README.md)
TCP = ("ipv4     2 tcp      6 431999 {state} src=172.17.0.3 dst=172.17.0.2 sport={sport} dport=80 packets=10 "
       "bytes={c2s} src=172.17.0.2 dst=172.17.0.3 sport=80 dport={sport} packets=10 bytes={s2c} {marks} mark=0 "
       "zone=0 use=1")
UDP = ("ipv4     2 udp      17 29 src=172.17.0.3 dst=172.17.0.2 sport={sport} dport=5000 packets=9 bytes={c2s} "
       "{marks} src=172.17.0.2 dst=172.17.0.3 sport=5000 dport={sport} packets=1 bytes={s2c} mark=0 zone=0 use=2")


def tcp(c2s: int | str, s2c: int | str, marks: str = "[ASSURED]", state: str = "ESTABLISHED", sport: int = 40000
        ) -> str:
    return TCP.format(c2s=c2s, s2c=s2c, marks=marks, state=state, sport=sport)


def table(lines: list[str], clock: float = 30.0) -> NodeRead:
    """What READ_SCRIPT would print for a table of `lines`, read."""
    return parse_read(f"time {clock}\nacct 1\ntimestamp 1\nbridge 1\nflows\n" + "\n".join(lines) + "\n")


def counted(lines: list[str], said: list[str] | None = None) -> list[TrafficRecord]:
    """The pairs a meter counts for `lines`, all of them new since a baseline read of nothing."""
    meter = TrafficMeter(INVENTORY, (said if said is not None else []).append)
    meter.measure({"node-1": (net("node-1"), table([], 0.0))}, T0)
    return meter.measure({"node-1": (net("node-1"), table(lines))}, T0 + timedelta(seconds=30)).pairs


def test_the_kernels_marks_say_whether_both_ends_spoke() -> None:
    (udp, dns) = parse_flows((DATA / "f_udp.node-1.proc.txt").read_text())
    assert udp.unreplied and not udp.answered and dns.unreplied and not dns.answered
    assert parse_flow(tcp(761, 100875)).answered
    assert parse_flow(UDP.format(sport=5353, c2s=900, s2c=120, marks="")).answered  # a reply: both spoke
    # segments sent at a published port, picked up mid-stream and answered by a RST: no handshake
    stray = parse_flow(tcp(9_000_000, 40, marks="", state="CLOSE"))
    assert stray is not None and not stray.assured and not stray.answered


def test_only_flows_both_ends_spoke_in_count_as_pair_traffic() -> None:
    assert not whole_tables("f_udp")  # the recorded UDP the kernel marked [UNREPLIED]
    rows = counted([tcp(761, 100875),
                    UDP.format(sport=5353, c2s=9_000_000, s2c=0, marks="[UNREPLIED]"),
                    tcp(9_000_000, 40, marks="", state="CLOSE", sport=40001)])
    [row] = rows
    assert (row.client, row.server, row.c2s_bytes, row.s2c_bytes, row.flows) == ("cli", "web", 761, 100875, 1)


def test_a_flow_counts_from_the_read_after_it_was_answered() -> None:
    """Its bytes before the answer were sent at a port, not exchanged: the ledger keeps them, so
    only what came after counts."""
    meter = TrafficMeter(INVENTORY, lambda _: None)
    stream = UDP.format(sport=5353, c2s="{c2s}", s2c="{s2c}", marks="{marks}")
    meter.measure({"node-1": (net("node-1"), read(stream.format(c2s=5000, s2c=0, marks="[UNREPLIED]"), 0.0))}, T0)
    silent = meter.measure({"node-1": (net("node-1"), read(stream.format(c2s=8000, s2c=0, marks="[UNREPLIED]"),
                                                             30.0))}, T0 + timedelta(seconds=30))
    assert silent.pairs == []
    answered = meter.measure({"node-1": (net("node-1"), read(stream.format(c2s=9000, s2c=300, marks=""), 60.0))},
                             T0 + timedelta(seconds=60))
    [row] = answered.pairs
    assert (row.c2s_bytes, row.s2c_bytes) == (1000, 300)


@pytest.mark.parametrize("bad", ["-5", str(MAX_COUNTER + 1), "12x"])
def test_counters_that_are_not_counts_are_dropped_and_logged_and_the_rest_stored(tmp_path: Path, bad: str) -> None:
    said: list[str] = []
    rows = counted([tcp(761, 100875), tcp(bad, 100, sport=40001)], said)
    assert [(r.client, r.server, r.bytes) for r in rows] == [("cli", "web", 761 + 100875)]
    assert said == ["traffic on node-1: 1 conntrack lines dropped: a counter negative, beyond 2^64 or not a number"]
    got = table([tcp(bad, 100), tcp(1, 2, sport=2)])
    assert got.dropped == 1 and got.flows is not None and len(got.flows) == 1


def test_growth_faster_than_a_node_moves_is_dropped_and_what_is_stored_fits_the_store(tmp_path: Path) -> None:
    """A flow's counters jumping by 2^63 in 30 s (a node's bug, or a lie) is dropped, logged, and
    the epoch goes on; so is a read whose flows together grew faster than a node moves. What is
    left is stored (SQLite's integers are 64-bit: such a row would fail the epoch's write)."""
    said: list[str] = []
    huge = 2**63
    rows = counted([tcp(761, 100875), tcp(huge, 1, sport=40001)], said)
    assert [(r.server, r.bytes) for r in rows] == [("web", 761 + 100875)]
    assert said == [f"traffic on node-1: 1 flows dropped: each grew more than a node moves "
                    f"({MAX_BYTES_PER_S / 1e9:g} GB/s) in 30 s"]
    each = int(MAX_BYTES_PER_S * 30 * 0.6)  # each within bounds, together not
    said.clear()
    assert counted([tcp(each, 1), tcp(each, 1, sport=40001)], said) == []
    assert said == [f"traffic on node-1: this read not counted: its flows together grew more than a node moves "
                    f"({MAX_BYTES_PER_S / 1e9:g} GB/s) in 30 s"]
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        store.traffic.add([], rows)
        assert [p.bytes for p in store.traffic.pairs()] == [761 + 100875]


def test_a_table_larger_than_a_read_takes_is_not_measured_never_read_in_part(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    assert f"head -n {MAX_FLOWS + 1} /proc/net/nf_conntrack" in READ_SCRIPT  # the node sends no more
    monkeypatch.setattr(traffic, "MAX_FLOWS", 2)
    lines = [tcp(100, 100, sport=40000 + i) for i in range(3)]
    got = table(lines)
    assert got.truncated and got.why_not_measured("node-1") == (
        "traffic not measured on node-1: its conntrack table holds more than 2 flows")
    said: list[str] = []
    meter = TrafficMeter(INVENTORY, said.append)
    for k in range(2):
        measured = meter.measure({"node-1": (net("node-1"), got)}, T0 + timedelta(seconds=30 * k))
        assert measured.pairs == [] and not measured.reads[0].measured
    assert said == ["traffic not measured on node-1: its conntrack table holds more than 2 flows"]  # once
    assert not table(lines[:2]).truncated


def test_one_pairs_forecast_weighs_at_most_what_a_link_carries() -> None:
    at = datetime(2026, 11, 28, 12, tzinfo=UTC)
    rows = [TrafficRecord(at - timedelta(seconds=600 * k), 600.0, "node-1", PeerKind.CONTAINER, a, "node-1",
                          PeerKind.CONTAINER, b, "node-2", int(rate * 600), 0, 1, "joined")
            for k in range(3) for a, b, rate in (("pull", "victim", 1e15), ("web", "db", 2e6))]
    reads = [TrafficRead(at - timedelta(seconds=600 * k), "node-1", 600.0, 10, 0, True) for k in range(3)]
    got = forecast_traffic(rows, reads, ["pull", "victim", "web", "db"], at, ForecastSettings(), 600.0)
    assert got[("pull", "victim")] == MAX_PAIR_BYTES_PER_S
    assert got[("db", "web")] == pytest.approx(2e6)
