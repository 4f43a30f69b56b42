"""The store on a real SQLite file and a real PostgreSQL server: round trips, journal states,
crash leftovers, the controller lease and the fencing of every write."""

from __future__ import annotations

import ast
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import peakpack.db.repos
from peakpack.db.connect import _head_revision
from peakpack.db.schema import PinningRow
from peakpack.db.store import Store
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.errors import FencedError, PeakpackError, StoreError
from peakpack.orchestrator.domain.inputs import parse_duration
from peakpack.orchestrator.domain.model import StoreConfig
from peakpack.orchestrator.domain.records import (
    ApprovalState,
    DemandRecord,
    EnergyRow,
    EnergySample,
    FrozenSample,
    PeerKind,
    PressureRecord,
    QosEventRecord,
    TrafficRead,
    TrafficRecord,
)
from peakpack.orchestrator.domain.savings import SavingKind, SavingRecord
from peakpack.orchestrator.domain.states import ActionState, MigrationState, PlanStatus
from tests.support.paths import REPO
from tests.support.postgres import drop_schema


def test_sqlite_is_wal_with_foreign_keys_and_schema_at_head(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    Store.open(url).close()
    Store.open(url).close()  # a second open finds the schema at head and changes nothing
    con = sqlite3.connect(tmp_path / "pp.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [(_head_revision(),)]
    with Store.open(url) as s, s.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10000


def test_plan_round_trip_journals_every_action_pending(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = make_plan(inv, snap, policy="peakpack", time_limit_s=5)
    assert plan.actions
    plan_id = store.plans.save(plan, inventory="demo", snapshot=snap)
    [rec] = store.plans.history()
    assert rec.plan_id == plan_id and rec.policy == "peakpack" and rec.dry_run
    assert rec.before == plan.before.to_json() and rec.after == plan.after.to_json()
    assert rec.actions == len(plan.actions) and rec.migrations == len(plan.migrations)
    actions = store.plans.actions(plan_id=plan_id)
    assert [a.kind for a in actions] == [a.kind.value for a in plan.actions]
    assert {a.state for a in actions} == {ActionState.PENDING}
    assert store.plans.snapshot(plan_id)["version"] == snap.version
    assert rec.settings == {**inv.planner.by_key(), "time_limit_s": 5}  # what it was made with


def test_action_states_and_crash_leftovers(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan_id = store.plans.save(make_plan(inv, snap, time_limit_s=5), inventory="demo", snapshot=snap)
    first, second, *_ = store.plans.action_ids(plan_id)
    store.plans.set_action_state(first, ActionState.ONGOING)
    store.plans.set_action_state(first, ActionState.SUCCEEDED)
    store.plans.set_action_state(second, ActionState.ONGOING)  # the controller dies here
    [left] = store.plans.unfinished_actions()
    assert left.id == second and left.started_at is not None and left.finished_at is None
    done = next(a for a in store.plans.actions() if a.id == first)
    assert done.state is ActionState.SUCCEEDED and done.finished_at >= done.started_at
    with pytest.raises(StoreError):
        store.plans.set_action_state(10_000, ActionState.FAILED)


def test_migration_journal_steps_and_terminal_states(store: Store) -> None:
    mid = store.migrations.begin("web-1", "node-1", "node-2")
    step = store.migrations.step_started(mid, "checkpointing")
    [m] = store.migrations.unfinished()
    assert m.state is MigrationState.CHECKPOINTING
    store.migrations.step_finished(step, ok=False, detail="criu dump failed")
    store.migrations.finish(mid, MigrationState.ROLLED_BACK, "restore on node-2 failed",
                           checkpoint_ms=900.0, frozen_ms=2100.0, bytes=4096)
    assert store.migrations.unfinished() == []
    [rec] = store.migrations.history()
    j = rec.to_json()
    assert j["state"] == "ROLLED_BACK" and j["reason"] == "restore on node-2 failed"
    assert j["frozen_ms"] == 2100.0 and j["finished_at"] is not None
    [s] = store.migrations.steps(mid)
    assert (s.step, s.state, s.detail) == ("checkpointing", "FAILED", "criu dump failed")
    with pytest.raises(ValueError):
        store.migrations.finish(mid, MigrationState.RESTORING)


def test_frozen_history_gives_each_succeeded_planned_move_its_pair_and_planned_memory(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = make_plan(inv, snap, policy="peakpack", time_limit_s=5)
    plan_id = store.plans.save(plan, inventory="demo", snapshot=snap)
    moves = [a for a in store.plans.actions(plan_id=plan_id) if a.kind == "migrate"]
    assert len(moves) >= 2
    memory = {c.name: c.memory_mb for c in snap.containers}
    for i, a in enumerate(moves[:2]):
        mid = store.migrations.begin(a.container, a.source, a.target, action_id=a.id)
        state = MigrationState.SUCCEEDED if i == 0 else MigrationState.ROLLED_BACK
        store.migrations.finish(mid, state, None, frozen_ms=1234.0 + i)
    store.migrations.finish(store.migrations.begin("by-hand", "node-1", "node-2"), MigrationState.SUCCEEDED, None,
                            frozen_ms=99.0)  # a manual move: no plan, so no memory the plan saw
    first = moves[0]
    assert store.migrations.frozen_history() == [
        FrozenSample(first.source, first.target, memory[first.container], 1234.0)]


def test_power_events_quarantine_and_idle(store: Store) -> None:
    ev = store.power.begin("node-3", "power_off", reason="empty for 10 min")
    store.power.finish(ev, "SUCCEEDED")
    [p] = store.power.events()
    assert p.to_json()["action"] == "power_off" and p.state == "SUCCEEDED"
    store.power.quarantine("node-4", "did not wake within 300 s")
    assert store.power.quarantined() == {"node-4": "did not wake within 300 s"}
    store.power.clear_quarantine("node-4")
    assert store.power.quarantined() == {}
    t = datetime(2026, 1, 1, tzinfo=UTC)
    store.power.set_idle_since("node-3", t)
    assert store.power.idle_since("node-3") == t and store.power.idle_since("node-9") is None
    with pytest.raises(ValueError):
        store.power.begin("node-3", "reboot")


def test_energy_samples_and_grouping(store: Store) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    store.energy.add_samples([EnergySample("node-1", t0 + timedelta(seconds=i), "rapl", energy_uj=i * 10**6)
                              for i in (2, 0, 1)])
    assert [s.energy_uj for s in store.energy.samples("node-1", "rapl")] == [0, 10**6, 2 * 10**6]
    rows = [
        EnergyRow("node-1", t0, t0 + timedelta(seconds=60), 600.0, "rapl"),
        EnergyRow("node-1", t0 + timedelta(seconds=60), t0 + timedelta(seconds=120), 300.0, "rapl"),
        EnergyRow("node-2", t0, t0 + timedelta(seconds=60), 50.0, "model"),
        EnergyRow("node-1", t0, t0 + timedelta(seconds=60), 400.0, "rapl", container="web-1"),
    ]
    store.energy.add(rows)
    assert len(store.energy.history()) == 3
    by_node = {r.node: r.to_json() for r in store.energy.history(by="node")}
    assert by_node["node-1"]["energy_j"] == 900.0 and by_node["node-2"]["source"] == "model"
    [c] = store.energy.history(by="container")
    assert c.to_json()["container"] == "web-1" and c.energy_j == 400.0
    assert store.energy.history(since=t0 + timedelta(seconds=30), by="node")[0].energy_j == 300.0
    with pytest.raises(ValueError):
        store.energy.add([EnergyRow("node-1", t0, t0, -1.0, "rapl")])


def test_traffic_pairs_and_reads_round_trip(store: Store) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    pair = TrafficRecord(t0, 60.0, "node-2", PeerKind.CONTAINER, "cli", "node-1", PeerKind.CONTAINER, "srv",
                         "node-2", 2000, 300000, 3, "joined")
    read = TrafficRead(t0, "node-3", None, 4, 4, False, "traffic not measured on node-3: enable x")
    store.traffic.add([read], [pair])
    assert store.traffic.pairs() == [pair] and store.traffic.reads() == [read]
    assert store.traffic.pairs(since=t0 + timedelta(seconds=1)) == []
    assert pair.to_json()["client_kind"] == "container" and pair.bytes == 302000
    with pytest.raises(ValueError):
        store.traffic.add([], [TrafficRecord(t0, 1.0, "n", PeerKind.HOST, "n", "n", PeerKind.HOST, "m", "m", -1, 0,
                                             1, "local")])


def test_savings_rows_open_close_and_refuse_unsourced_energy(store: Store) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    off = store.savings.add(SavingRecord(SavingKind.OFF, "node-3", None, t0, source="rapl", idle_w=100.0))
    assert store.savings.open_off("node-3") == SavingRecord(SavingKind.OFF, "node-3", None, t0, source="rapl",
                                                            idle_w=100.0, id=off)
    store.savings.close(off, t0 + timedelta(hours=1))
    assert store.savings.open_off("node-3") is None
    store.savings.add(SavingRecord(SavingKind.BOOT, "node-3", None, t0 + timedelta(hours=1), source="rapl",
                                   model_j=1800.0, note="not measured"))
    assert [r.kind for r in store.savings.history(since=t0 + timedelta(minutes=30))] == [SavingKind.OFF,
                                                                                       SavingKind.BOOT]
    with pytest.raises(ValueError, match="without the counter"):
        store.savings.add(SavingRecord(SavingKind.MIGRATION, None, None, t0, energy_j=5.0))


def url_of(store: Store) -> str:
    return store.engine.url.render_as_string(hide_password=False)


def test_lease_tokens_grow_and_an_expired_lease_is_taken_over(store: Store) -> None:
    assert store.lease.holder() is None
    first = store.lease.acquire("a", ttl_s=60)
    assert first is not None and store.lease.holder().holder == "a"
    assert store.lease.acquire("b", ttl_s=60) is None  # a's lease runs
    assert store.lease.renew("a", first, ttl_s=60) and not store.lease.renew("b", first, ttl_s=60)
    store.lease.release("a", first)
    assert store.lease.holder() is None
    second = store.lease.acquire("b", ttl_s=-1)  # taken, and expired at once
    assert second == first + 1 and store.lease.holder() is None
    third = store.lease.acquire("c", ttl_s=60)  # an expired lease is taken over
    assert third == second + 1 and store.lease.holder().token == third
    assert not store.lease.renew("b", second, ttl_s=60)  # b may not extend what c holds now
    store.lease.release("b", second)  # nor free it
    assert store.lease.holder().holder == "c"
    assert store.lease.acquire("d", ttl_s=60) is None
    assert store.lease.acquire("d", ttl_s=60, replacing="c") == third + 1  # c is known dead
    assert store.lease.acquire("e", ttl_s=60, replacing="c") is None  # but d is not


def test_a_stale_holder_is_fenced_on_every_kind_of_write(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = make_plan(inv, snap, time_limit_s=5)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with Store.open(url_of(store)) as old:
        mine = old.lease.acquire("old", ttl_s=-1)  # a leader whose renewal stopped
        old.fence(mine)
        plan_id = old.plans.save(plan, inventory="demo", snapshot=snap)
        action = old.plans.action_ids(plan_id)[0]
        mid = old.migrations.begin("web-1", "node-1", "node-2", action)
        step = old.migrations.step_started(mid, "checkpointing")
        event = old.power.begin("node-3", "power_off")
        theirs = store.lease.acquire("new", ttl_s=60)
        store.fence(theirs)
        writes: dict[str, Callable[[], object]] = {
            "plans.save": lambda: old.plans.save(plan, inventory="demo", snapshot=snap),
            "plans.set_action_state": lambda: old.plans.set_action_state(action, ActionState.ONGOING),
            "migrations.begin": lambda: old.migrations.begin("web-2", "node-1", "node-2"),
            "migrations.step_started": lambda: old.migrations.step_started(mid, "transferring"),
            "migrations.step_finished": lambda: old.migrations.step_finished(step, ok=True),
            "migrations.finish": lambda: old.migrations.finish(mid, MigrationState.FAILED, "late"),
            "pinning.record": lambda: old.pinning.record("node-1", "web-1", "0-1"),
            "power.begin": lambda: old.power.begin("node-4", "power_on"),
            "power.finish": lambda: old.power.finish(event, "SUCCEEDED"),
            "power.quarantine": lambda: old.power.quarantine("node-4", "late"),
            "power.clear_quarantine": lambda: old.power.clear_quarantine("node-4"),
            "power.set_idle_since": lambda: old.power.set_idle_since("node-3", t0),
            "energy.add_samples": lambda: old.energy.add_samples([EnergySample("node-1", t0, "rapl", energy_uj=1)]),
            "energy.add": lambda: old.energy.add([EnergyRow("node-1", t0, t0 + timedelta(seconds=1), 1.0, "rapl")]),
            "demand.add": lambda: old.demand.add([DemandRecord(t0, "web-1", "node-1", 60.0, 0.5, 10**9, 10.0,
                                                               "cgroup")]),
            "plans.set_status": lambda: old.plans.set_status(plan_id, PlanStatus.APPLYING,
                                                           only_from=[PlanStatus.RECOMMENDED]),
            "plans.expire": lambda: old.plans.expire(),
            "traffic.add": lambda: old.traffic.add([TrafficRead(t0, "node-1", None, 0, 0, True)], []),
            "savings.add": lambda: old.savings.add(SavingRecord(SavingKind.OFF, "node-3", None, t0)),
            "savings.close": lambda: old.savings.close(1, t0),
            "approvals.request": lambda: old.approvals.request(plan_id, False, "web:ana"),
            "approvals.finish": lambda: old.approvals.finish(1, ApprovalState.APPLIED, "APPLIED", "old"),
            "retention._sum_hours": lambda: old.prune(StoreConfig(raw_days=1), t0 + timedelta(days=800)),
            "retention._remove": lambda: old._retention._remove(PinningRow, PinningRow.at < t0, 10),
            "pressure.add": lambda: old.pressure.add([PressureRecord(t0, "web-1", "node-1", "ls", 60.0, 0.1, 0.0,
                                                                     0.0, None, 10**6, 0, 0, None)]),
            "qos.add": lambda: old.qos.add([QosEventRecord("node-1", "a1b2", 1, t0, "cpu_suppress")]),
            "qos.record": lambda: old.qos.record("node-1", "be_restart", "batch-1", "room again"),
        }
        assert set(writes) == writes_of_the_store(), "every write of the store is tried here"
        for write in writes.values():
            with pytest.raises(
                FencedError,
                match=rf"^--db: controller new took over \(lease token {theirs} > {mine}\); "
                r"this one stops$",
            ):
                write()
        assert [p.plan_id for p in old.plans.history()] == [plan_id]  # reads are not fenced; nothing landed
        assert {a.state for a in old.plans.actions()} == {ActionState.PENDING}
        assert [m.state for m in old.migrations.unfinished()] == [MigrationState.CHECKPOINTING]
        assert old.pinning.history() == [] and old.power.quarantined() == {} and old.power.idle_since("node-3") is None
        assert [p.state for p in old.power.events()] == ["ONGOING"]
        assert old.energy.samples("node-1", "rapl") == [] and old.energy.history() == []
        assert old.demand.history() == [] and old.pressure.history() == [] and old.qos.events() == []
    store.plans.set_action_state(action, ActionState.FAILED, "taken over")  # the new leader writes
    store.fence(None)
    with Store.open(url_of(store)) as unfenced:  # e.g. `peakpack power clear`: writes as before
        unfenced.power.quarantine("node-5", "by hand")
        assert unfenced.power.quarantined() == {"node-5": "by hand"}


def writes_of_the_store() -> set[str]:
    """The repository methods that open a write transaction (self._write()), read from the source,
    as "repository.method" (e.g. "plans.save")."""
    found = set()
    for path in sorted(Path(peakpack.db.repos.__file__).parent.glob("*.py")):
        for cls in (n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)):
            found |= {f"{path.stem}.{f.name}" for f in cls.body if isinstance(f, ast.FunctionDef)
                      and "self._write()" in ast.unparse(f)}
    return found


def test_a_write_in_a_read_transaction_is_a_bug(store: Store) -> None:
    from peakpack.db.schema import PinningRow

    with pytest.raises(RuntimeError, match="fenced"):
        with store.pinning._tx() as s:
            s.add(PinningRow(node="n", container="c", cpuset="0", at=datetime.now(UTC)))


def test_racing_take_overs_have_exactly_one_winner(store: Store) -> None:
    """Eight controllers on their own connections race for a free, then an expired, lease."""
    url = url_of(store)
    handles = [Store.open(url) for _ in range(8)]
    try:
        for left in ("free", "expired"):
            if (held := store.lease.holder()) is not None:
                store.lease.release(held.holder, held.token)
            if left == "expired":
                assert store.lease.acquire("dead", ttl_s=-1) is not None
            start = threading.Barrier(len(handles))
            got: dict[int, int | BaseException | None] = {}

            def race(i: int, h: Store, start: threading.Barrier = start, got: dict = got) -> None:
                start.wait()
                try:
                    got[i] = h.lease.acquire(f"racer-{i}", ttl_s=60)
                except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                    got[i] = exc

            threads = [threading.Thread(target=race, args=(i, h)) for i, h in enumerate(handles)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not [v for v in got.values() if isinstance(v, BaseException)], got
            winners = [i for i, v in got.items() if v is not None]
            assert len(got) == len(handles) and len(winners) == 1, got
    finally:
        for h in handles:
            h.close()


def test_first_opens_racing_on_an_empty_database_create_the_schema_once(store: Store) -> None:
    """Two controllers started together on a new database: both open it, no "table exists"."""
    import subprocess
    import sys

    url = url_of(store)
    drop_schema(store)
    code = "import sys; from peakpack.db.store import Store; Store.open(sys.argv[1]).close()"
    root = REPO
    procs = [subprocess.Popen([sys.executable, "-c", code, url], cwd=root, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    assert store.lease.acquire("a", 60) == 1  # one lease row, token from the start


def test_bad_urls_and_durations_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="--db"):
        Store.open("not a url")
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(f"sqlite:///{tmp_path / 'missing' / 'pp.db'}")
    assert parse_duration("90m") == timedelta(minutes=90)
    assert parse_duration("1.5h") == timedelta(minutes=90)
    with pytest.raises(PeakpackError, match="--since"):
        parse_duration("yesterday", flag="--since")


def test_revisions_build_exactly_the_declared_schema(store: Store) -> None:
    """Alembic owns the schema: after upgrading to head, autogenerate finds nothing to add,
    drop or change, so a column declared in db/schema.py without a revision fails here."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from peakpack.db.schema import Base

    with store.engine.connect() as c:
        diff = compare_metadata(MigrationContext.configure(c), Base.metadata)
    assert diff == []
