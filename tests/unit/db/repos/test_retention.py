"""A store that lives for years (`[store]`, db/repos/retention.py), on SQLite and PostgreSQL:
raw demand and energy rows past `raw_days` are summed per hour and removed (history still reads
the hours, and no joule is lost), raw traffic past `raw_days` goes, hours past `hourly_days` go,
so do plans, migrations, power events, pinnings and closed savings rows past `history_days`, but
nothing unfinished; each round stays within its
budget; and the per-epoch queries read an index range, not the whole table."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select, update

from peakpack.db.schema import (
    ContainerDemandRow,
    DemandHourlyRow,
    EnergyHourlyRow,
    EnergyRowDb,
    MigrationRow,
    PinningRow,
    PlanRow,
    PowerEventRow,
)
from peakpack.db.store import Store
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.model import StoreConfig
from peakpack.orchestrator.domain.records import (
    DemandRecord,
    EnergyRow,
    EnergySample,
    PeerKind,
    TrafficRead,
    TrafficRecord,
)
from peakpack.orchestrator.domain.savings import SavingKind, SavingRecord
from peakpack.orchestrator.domain.states import MigrationState, PlanStatus

NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
DAYS = 20
EPOCH = timedelta(minutes=10)
KEEP = StoreConfig(raw_days=7, hourly_days=14, history_days=10, prune_rows=5000)


def fill(store: Store) -> None:
    """DAYS days of two containers' demand, energy and traffic (every epoch), and samples."""
    demand, energy, samples, reads, pairs = [], [], [], [], []
    t = NOW - timedelta(days=DAYS)
    while t < NOW:
        for i, name in enumerate(("web-1", "db-1")):
            demand.append(DemandRecord(t, name, "node-1", EPOCH.total_seconds(), 0.5 + i, 10**9, 100.0 + i, "cgroup"))
            energy.append(EnergyRow("node-1", t, t + EPOCH, 60.0, "rapl", container=name))
        energy.append(EnergyRow("node-1", t, t + EPOCH, 300.0, "rapl", idle_j=100.0, residual_j=80.0))
        samples.append(EnergySample("node-1", t, "rapl", energy_uj=int(t.timestamp() * 1e6), zone="package-0"))
        reads.append(TrafficRead(t, "node-1", EPOCH.total_seconds(), 1, 0, True))
        pairs.append(TrafficRecord(t, EPOCH.total_seconds(), "node-1", PeerKind.CONTAINER, "web-1", "node-1",
                                   PeerKind.CONTAINER, "db-1", "node-1", 1000, 5000, 1, "local"))
        t += EPOCH
    store.traffic.add(reads, pairs)
    store.demand.add(demand)
    store.energy.add(energy)
    store.energy.add_samples(samples)


def backdate(store: Store, table: type, column: object, row_id: int, when: datetime) -> None:
    with store.engine.begin() as c:
        c.execute(update(table).where(table.id == row_id).values({column: when}))  # type: ignore


def count(store: Store, table: type) -> int:
    with store.engine.connect() as c:
        return int(c.scalar(select(func.count()).select_from(table)) or 0)


def prune_all(store: Store, config: StoreConfig = KEEP) -> int:
    rounds = 0
    while store.prune(config, NOW):
        rounds += 1
        assert rounds < 1000
    return rounds


def test_raw_rows_become_hours_and_history_keeps_every_joule(store: Store) -> None:
    fill(store)
    hours_kept = NOW - timedelta(days=KEEP.hourly_days)
    before = {r.source: 0.0 for r in store.energy.history(hours_kept)}
    for r in store.energy.history(hours_kept):
        before[r.source] += r.energy_j
    prune_all(store)
    raw_cut = NOW - timedelta(days=KEEP.raw_days)
    with store.engine.connect() as c:
        assert c.scalar(select(func.min(ContainerDemandRow.at))).replace(tzinfo=UTC) >= raw_cut - timedelta(hours=1)
        assert c.scalar(select(func.min(EnergyRowDb.start))).replace(tzinfo=UTC) >= raw_cut - timedelta(hours=1)
        assert c.scalar(select(func.min(DemandHourlyRow.hour))).replace(tzinfo=UTC) >= hours_kept - timedelta(hours=1)
    assert count(store, EnergyHourlyRow) > 0
    assert store.energy.samples("node-1", "rapl")[0].at >= raw_cut
    assert store.traffic.pairs()[0].at >= raw_cut and store.traffic.reads()[0].at >= raw_cut
    assert len(store.traffic.pairs(raw_cut)) == len(store.traffic.pairs())  # the forecast's window stays
    after = store.energy.history(hours_kept)
    assert after[0].start < raw_cut  # hours, read where the raw rows are gone
    assert sum(r.energy_j for r in after) == pytest.approx(sum(before.values()), rel=1e-9, abs=1e-6)
    totals = {r.node: (r.energy_j, r.idle_j, r.residual_j) for r in store.energy.history(hours_kept, by="node")}
    assert totals["node-1"][1] / totals["node-1"][0] == pytest.approx(100 / 300)  # Kepler's split summed too
    web = [r for r in store.demand.history("web-1", since=hours_kept) if r.source == "hourly"]
    assert web and all(r.cpu == pytest.approx(0.5) and r.interval_s == pytest.approx(3600) for r in web)
    assert prune_all(store) == 0  # nothing left to do


def test_history_past_its_days_goes_but_nothing_unfinished(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = make_plan(inv, snap, time_limit_s=2)
    old = NOW - timedelta(days=KEEP.history_days + 1)
    done = store.plans.save(plan, "demo", snap, status=PlanStatus.APPLIED)
    running = store.plans.save(plan, "demo", snap, status=PlanStatus.APPLYING)
    fresh = store.plans.save(plan, "demo", snap, status=PlanStatus.APPLIED)
    finished = store.migrations.begin("web-1", "node-1", "node-2", store.plans.action_ids(done)[0])
    store.migrations.finish(finished, MigrationState.SUCCEEDED)
    open_one = store.migrations.begin("db-1", "node-1", "node-2")
    settled = store.power.begin("node-3", "power_off")
    store.power.finish(settled, "SUCCEEDED")
    ongoing = store.power.begin("node-4", "power_on")
    store.pinning.record("node-1", "web-1", "0-1")
    store.approvals.request(done, False, "web:ana")
    closed = store.savings.add(SavingRecord(SavingKind.OFF, "node-3", None, old, old + timedelta(hours=1)))
    still_off = store.savings.add(SavingRecord(SavingKind.OFF, "node-4", None, old))
    for table, column, row in ((PlanRow, "created_at", done), (PlanRow, "created_at", running),
                               (MigrationRow, "started_at", finished), (MigrationRow, "started_at", open_one),
                               (PowerEventRow, "at", settled), (PowerEventRow, "at", ongoing),
                               (PinningRow, "at", 1)):
        backdate(store, table, column, row, old)
    prune_all(store)
    assert [p.plan_id for p in store.plans.history()] == [running, fresh]
    assert [m.id for m in store.migrations.history()] == [open_one]
    assert [e.id for e in store.power.events()] == [ongoing]
    assert store.pinning.history() == [] and store.approvals.pending() == []  # approvals go with their plan
    assert store.plans.actions(plan_id=done) == []
    assert [r.node for r in store.savings.history()] == ["node-4"]  # a node still off keeps its row
    assert closed != still_off


def test_a_round_stays_within_its_budget(store: Store) -> None:
    fill(store)
    small = StoreConfig(raw_days=7, hourly_days=14, history_days=10, prune_rows=100)
    raw = count(store, ContainerDemandRow)
    pruned = store.prune(small, NOW)
    assert 0 < raw - count(store, ContainerDemandRow) <= 100 + 2 * 6  # whole hours: at most one over
    assert pruned.aggregated["demand"] == raw - count(store, ContainerDemandRow)
    assert pruned.removed["energy sample"] <= 100


#: tables that grow with the cluster and with time: a per-epoch query must search them by an index
GROWING = ("container_demand", "energy", "energy_samples", "migrations", "power_events", "plans", "actions",
           "approvals", "migration_steps", "traffic", "traffic_reads", "savings", "container_pressure")


def per_epoch_queries(store: Store) -> dict[str, Callable[[], object]]:
    """What the controller asks the store every epoch (observe, forecast, energy, reconcile, rules,
    budgets, expiry, approvals), by name."""
    since = NOW - 3 * EPOCH
    return {
        "demand.latest": lambda: store.demand.latest(since=since),
        "demand.history": lambda: store.demand.history(since=since),
        "energy.samples": lambda: store.energy.samples("node-1", "rapl", since=since),
        "migrations.unfinished": store.migrations.unfinished,
        "migrations.moved_since": lambda: store.migrations.moved_since(since),
        "power.events(ONGOING)": lambda: store.power.events(state="ONGOING"),
        "power.events(switched off)": lambda: store.power.events(since=since, state="SUCCEEDED"),
        "power.woken_since": lambda: store.power.woken_since(since),
        "plans.unfinished_actions": store.plans.unfinished_actions,
        "plans.history(APPLYING)": lambda: store.plans.history(status=PlanStatus.APPLYING),
        "disruption_since": lambda: store.disruption_since(since),
        "approvals.pending": store.approvals.pending,
        "traffic.pairs": lambda: store.traffic.pairs(since),
        "traffic.reads": lambda: store.traffic.reads(since),
        "pressure.latest": lambda: store.pressure.latest(since=since),
        "pressure.history": lambda: store.pressure.history(since=since),
    }


def test_every_per_epoch_query_searches_an_index(tmp_path: Path) -> None:
    """SQLite's plan of each statement the per-epoch queries send: no full scan of a table that
    grows (`SCAN t` reads all of it; `SEARCH t USING INDEX` a range)."""
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        fill(store)
        sent: list[tuple[str, Any]] = []
        listen = lambda _c, _cur, statement, params, _ctx, _many: sent.append((statement, params))  # noqa: E731
        event.listen(store.engine, "before_cursor_execute", listen)
        scans = {}
        for name, query in per_epoch_queries(store).items():
            sent.clear()
            query()
            with store.engine.connect() as c:
                for statement, params in list(sent):
                    if not statement.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE")):
                        continue
                    plan = [str(row[-1]) for row in c.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)]
                    bad = [line for line in plan if re.match(rf"SCAN ({'|'.join(GROWING)})\b", line)]
                    if bad:
                        scans[name] = bad
        event.remove(store.engine, "before_cursor_execute", listen)
    assert scans == {}


def test_the_latest_demand_reads_only_recent_rows(store: Store) -> None:
    fill(store)
    recent = store.demand.latest(since=NOW - 3 * EPOCH)
    assert {r.container for r in recent.values()} == {"web-1", "db-1"}
    assert all(r.at >= NOW - 3 * EPOCH for r in recent.values())
