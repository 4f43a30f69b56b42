"""QoS events and container pressure in the store (SQLite and PostgreSQL), and what the
controller does with them each epoch: stopped containers started again where there is room (each
start journaled), and every event counted in the metrics."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from rich.console import Console

from peakpack.db.store import Store
from peakpack.orchestrator.act.controller import Controller, ControllerSettings
from peakpack.orchestrator.act.epoch import restart_stopped
from peakpack.orchestrator.domain.config import demo_inventory
from peakpack.orchestrator.domain.model import ClusterSnapshot, Container, NodeState
from peakpack.orchestrator.domain.ports import Observation
from peakpack.orchestrator.domain.records import DemandRecord, PressureRecord, QosEventRecord
from tests.support.fakes import fake_services

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def event(seq: int, kind: str = "cpu_suppress", node: str = "node-1", log: str = "a1b2c3",
          container: str | None = None) -> QosEventRecord:
    return QosEventRecord(node, log, seq, T0 + timedelta(seconds=seq), kind, container, f"reason {seq}",
                          {"quota_us": {"hog": 30000}} if kind == "cpu_suppress" else None)


def test_events_are_stored_once_however_often_they_are_read(store: Store) -> None:
    assert store.qos.add([event(1), event(2)]) == 2
    assert store.qos.add([event(2), event(3), event(3)]) == 1  # read again: only seq 3 is new
    assert store.qos.add([event(1, log="new-log")]) == 1  # a wiped guard folder starts a new log
    assert store.qos.add([]) == 0
    stored = store.qos.events()
    assert [(e.log, e.seq) for e in stored] == [("a1b2c3", 1), ("new-log", 1), ("a1b2c3", 2), ("a1b2c3", 3)]
    assert stored[0].detail == {"quota_us": {"hog": 30000}} and stored[0].reason == "reason 1"
    assert store.qos.last_seq() == {"node-1": ("new-log", 1)}
    assert [e.seq for e in store.qos.events(since=T0 + timedelta(seconds=2))] == [2, 3]
    assert [e.kind for e in store.qos.events(kinds=("mem_evict",))] == []


def test_controller_events_number_themselves_and_do_not_move_the_guards_log(store: Store) -> None:
    store.qos.add([event(5)])
    store.qos.record("node-1", "be_restart", "batch", "room again")
    store.qos.record("node-1", "be_restart", "batch", "room again")
    mine = [e for e in store.qos.events() if e.log == "controller"]
    assert [(e.seq, e.kind, e.container) for e in mine] == [(1, "be_restart", "batch"), (2, "be_restart", "batch")]
    assert store.qos.last_seq() == {"node-1": ("a1b2c3", 5)}
    assert store.qos.newest_id() == max(e.id or 0 for e in store.qos.events())
    assert [e.kind for e in store.qos.events(after_id=store.qos.newest_id() - 1)] == ["be_restart"]


def test_pressure_rows_round_trip_and_the_latest_is_each_containers_newest(store: Store) -> None:
    rows = [PressureRecord(T0 + timedelta(minutes=i), name, "node-1", "ls", 60.0, 0.1 * i, 0.0, 0.0, None,
                           i * 10**6, 0, 0, None) for i in range(3) for name in ("web", "db")]
    store.pressure.add(rows)
    assert store.pressure.history("web") == [r for r in rows if r.container == "web"]
    assert {k: v.cpu_some_us for k, v in store.pressure.latest().items()} == {"web": 2 * 10**6, "db": 2 * 10**6}
    assert len(store.pressure.history(since=T0 + timedelta(minutes=1))) == 4


def test_a_stopped_container_is_started_again_and_the_start_journaled(store: Store) -> None:
    inv = demo_inventory()
    snap = ClusterSnapshot(nodes=tuple(NodeState(n.name) for n in inv.nodes), taken_at=T0 + timedelta(minutes=5),
                           containers=(Container("web", "node-1", 1.0, 512),))
    services = fake_services(store, snap)
    services.ops.world.stopped.update({"batch": "node-1", "gone": "node-2"})  # type: ignore[attr-defined]
    store.demand.add([DemandRecord(T0, "batch", "node-1", 60.0, 0.5, None, 300.0, "cgroup")])
    store.qos.add([event(1, "mem_evict", container="batch"), event(2, "mem_evict", container="removed")])
    lines = restart_stopped(store, services, inv, snap)
    assert services.ops.world.running["batch"] == "node-1"  # type: ignore[attr-defined]
    assert lines[0].startswith("batch: started again on node-1: stopped by node-1's QoS guard (reason 1)")
    assert lines[1].startswith("removed: starting it on node-1 failed: node node-1: `docker start removed` failed")
    journaled = [(e.kind, e.container) for e in store.qos.events() if e.log == "controller"]
    assert journaled == [("be_restart", "batch"), ("be_restart_failed", "removed")]
    assert restart_stopped(store, services, inv, replace(snap, containers=(*snap.containers,))) == []


def test_the_controller_counts_every_qos_event_journaled_since_it_started(store: Store) -> None:
    inv = demo_inventory()
    snap = ClusterSnapshot(nodes=tuple(NodeState(n.name) for n in inv.nodes), containers=())
    store.qos.add([event(1)])  # before the controller: not counted
    services = fake_services(store, snap)
    observe = services.observe

    def observing() -> Observation:  # what the nodes' guards did since the last epoch
        store.qos.add([event(len(store.qos.events()) + 1, "mem_evict", container="batch")])
        return observe()

    settings = ControllerSettings(dry_run=False, time_limit_s=1, epoch_seconds=3600)
    controller = Controller(inv, store, settings, console=Console(file=io.StringIO()),
                            services=replace(services, observe=observing))
    try:
        controller.run_epoch()
        controller.run_epoch()
    finally:
        controller.finish()
    counted = controller.metrics.registry.get_sample_value("peakpack_qos_events_total",
                                                           {"node": "node-1", "kind": "mem_evict"})
    # each epoch observes once (the energy after executing is closed on the plan's result, not on
    # a second observation), and counts what its observation brought
    assert counted == len(store.qos.events(kinds=("mem_evict",))) == 2
    assert controller.metrics.registry.get_sample_value("peakpack_qos_events_total",
                                                        {"node": "node-1", "kind": "cpu_suppress"}) is None
