"""The store on a real SQLite file: round trips, journal states, crash leftovers, the lock."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from collections.abc import Iterator
from pathlib import Path

import pytest

from db.store import ActionState, EnergyRow, EnergySample, MigrationState, Store, parse_duration
from orchestrator.config import demo_inventory, demo_snapshot
from orchestrator.errors import PeakpackError, StoreError
from orchestrator.planning import make_plan
from tests.support.postgres import postgres_server


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Every contract test runs on SQLite and on a real PostgreSQL server."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'pp.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    with Store.open(url) as s:
        yield s
        if request.param == "postgresql":  # one server per module: start each test empty
            from db.schema import Base

            Base.metadata.drop_all(s.engine)
            with s.engine.begin() as c:
                c.exec_driver_sql("DROP TABLE alembic_version")


def test_sqlite_is_wal_with_foreign_keys_and_schema_at_head(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    Store.open(url).close()
    Store.open(url).close()  # a second open finds the schema at head and changes nothing
    con = sqlite3.connect(tmp_path / "pp.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [("0001",)]
    with Store.open(url) as s, s.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10000


def test_plan_round_trip_journals_every_action_pending(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = make_plan(inv, snap, policy="peakpack", time_limit_s=5)
    assert plan.actions
    plan_id = store.save_plan(plan, inventory="demo", snapshot=snap)
    [rec] = store.list_plans()
    assert rec.plan_id == plan_id and rec.policy == "peakpack" and rec.dry_run
    assert rec.before == plan.before.to_json() and rec.after == plan.after.to_json()
    assert rec.actions == len(plan.actions) and rec.migrations == len(plan.migrations)
    actions = store.list_actions(plan_id=plan_id)
    assert [a.kind for a in actions] == [a.kind.value for a in plan.actions]
    assert {a.state for a in actions} == {ActionState.PENDING}
    assert store.plan_snapshot(plan_id)["version"] == snap.version


def test_action_states_and_crash_leftovers(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan_id = store.save_plan(make_plan(inv, snap, time_limit_s=5), inventory="demo", snapshot=snap)
    first, second, *_ = store.plan_action_ids(plan_id)
    store.set_action_state(first, ActionState.ONGOING)
    store.set_action_state(first, ActionState.SUCCEEDED)
    store.set_action_state(second, ActionState.ONGOING)  # the controller dies here
    [left] = store.unfinished_actions()
    assert left.id == second and left.started_at is not None and left.finished_at is None
    done = next(a for a in store.list_actions() if a.id == first)
    assert done.state is ActionState.SUCCEEDED and done.finished_at >= done.started_at
    with pytest.raises(StoreError):
        store.set_action_state(10_000, ActionState.FAILED)


def test_migration_journal_steps_and_terminal_states(store: Store) -> None:
    mid = store.begin_migration("web-1", "node-1", "node-2")
    step = store.step_started(mid, "checkpointing")
    [m] = store.unfinished_migrations()
    assert m.state is MigrationState.CHECKPOINTING
    store.step_finished(step, ok=False, detail="criu dump failed")
    store.finish_migration(mid, MigrationState.ROLLED_BACK, "restore on node-2 failed",
                           checkpoint_ms=900.0, frozen_ms=2100.0, bytes=4096)
    assert store.unfinished_migrations() == []
    [rec] = store.list_migrations()
    j = rec.to_json()
    assert j["state"] == "ROLLED_BACK" and j["reason"] == "restore on node-2 failed"
    assert j["frozen_ms"] == 2100.0 and j["finished_at"] is not None
    [s] = store.migration_steps(mid)
    assert (s.step, s.state, s.detail) == ("checkpointing", "FAILED", "criu dump failed")
    with pytest.raises(ValueError):
        store.finish_migration(mid, MigrationState.RESTORING)


def test_power_events_quarantine_and_idle(store: Store) -> None:
    ev = store.begin_power_event("node-3", "power_off", reason="empty for 10 min")
    store.finish_power_event(ev, "SUCCEEDED")
    [p] = store.list_power_events()
    assert p.to_json()["action"] == "power_off" and p.state == "SUCCEEDED"
    store.quarantine("node-4", "did not wake within 300 s")
    assert store.quarantined() == {"node-4": "did not wake within 300 s"}
    store.clear_quarantine("node-4")
    assert store.quarantined() == {}
    t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    store.set_idle_since("node-3", t)
    assert store.idle_since("node-3") == t and store.idle_since("node-9") is None
    with pytest.raises(ValueError):
        store.begin_power_event("node-3", "reboot")


def test_energy_samples_and_grouping(store: Store) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    store.add_energy_samples([EnergySample("node-1", t0 + timedelta(seconds=i), "rapl", energy_uj=i * 10**6)
                              for i in (2, 0, 1)])
    assert [s.energy_uj for s in store.energy_samples("node-1", "rapl")] == [0, 10**6, 2 * 10**6]
    rows = [
        EnergyRow("node-1", t0, t0 + timedelta(seconds=60), 600.0, "rapl"),
        EnergyRow("node-1", t0 + timedelta(seconds=60), t0 + timedelta(seconds=120), 300.0, "rapl"),
        EnergyRow("node-2", t0, t0 + timedelta(seconds=60), 50.0, "model"),
        EnergyRow("node-1", t0, t0 + timedelta(seconds=60), 400.0, "rapl", container="web-1"),
    ]
    store.add_energy(rows)
    assert len(store.list_energy()) == 3
    by_node = {r.node: r.to_json() for r in store.list_energy(by="node")}
    assert by_node["node-1"]["energy_j"] == 900.0 and by_node["node-2"]["source"] == "model"
    [c] = store.list_energy(by="container")
    assert c.to_json()["container"] == "web-1" and c.energy_j == 400.0
    assert store.list_energy(since=t0 + timedelta(seconds=30), by="node")[0].energy_j == 300.0
    with pytest.raises(ValueError):
        store.add_energy([EnergyRow("node-1", t0, t0, -1.0, "rapl")])


def test_one_controller_per_store(store: Store) -> None:
    assert store.acquire_lock("head:100")
    assert not store.acquire_lock("head:200")
    assert store.acquire_lock("head:100")  # re-entrant for its owner
    store.release_lock("head:100")
    assert store.acquire_lock("head:200")
    assert store.acquire_lock("head:300", stale_after_s=-1)  # a dead holder is replaced
    assert store.lock_holder()[0] == "head:300"


def test_bad_urls_and_durations_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="--db"):
        Store.open("not a url")
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(f"sqlite:///{tmp_path / 'missing' / 'pp.db'}")
    assert parse_duration("90m") == timedelta(minutes=90)
    assert parse_duration("1.5h") == timedelta(minutes=90)
    with pytest.raises(PeakpackError, match="--since"):
        parse_duration("yesterday", flag="--since")
