"""The plan executor and the controller's live path with fake node operations: order, journal
before/after every action, and the rules that keep a failed step from cascading."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from peakpack.db.store import Store
from peakpack.orchestrator.act.controller import Controller, ControllerSettings
from peakpack.orchestrator.act.epoch import planning_view, wakes_for_unsettled
from peakpack.orchestrator.act.executor import PlanExecutor
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.errors import FencedError, StoreError
from peakpack.orchestrator.domain.plan import Action, ActionKind, Plan
from peakpack.orchestrator.domain.records import EnergyRow
from peakpack.orchestrator.domain.states import ActionState, MigrationState, PlanStatus
from tests.support.fakes import FakeNodeOps, FakeWorld, fake_services


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as s:
        yield s


def demo_world() -> FakeWorld:
    """The demo cluster, which the plans here are made for."""
    return FakeWorld.from_snapshot(demo_snapshot(demo_inventory()))


def consolidating_plan(store: Store) -> tuple[Plan, int]:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = replace(make_plan(inv, snap, time_limit_s=5), dry_run=False)
    assert plan.migrations and any(a.kind is ActionKind.POWER_OFF for a in plan.actions)
    return plan, store.plans.save(plan, inventory="demo", snapshot=snap)


def test_actions_run_in_order_and_are_journaled_before_and_after(store: Store) -> None:
    plan, plan_id = consolidating_plan(store)
    ops = FakeNodeOps(store, demo_world())
    report = PlanExecutor(store, ops, log=lambda _: None).execute(plan, plan_id)
    kinds = [k for k, _ in ops.calls if k != "pin"]
    assert kinds.index("power_off") > max(i for i, k in enumerate(kinds) if k == "migrate")
    assert set(ops.seen_states) == {"ONGOING"}
    assert {a.state for a in store.plans.actions(plan_id=plan_id)} == {ActionState.SUCCEEDED}
    assert report.count(ActionState.SUCCEEDED) == len(plan.actions)
    emptied = {a.node for a in plan.actions if a.kind is ActionKind.POWER_OFF}
    pinned = {n for k, n in ops.calls if k == "pin"}
    assert pinned and not pinned & emptied


def test_a_rolled_back_migration_keeps_its_source_on(store: Store) -> None:
    plan, plan_id = consolidating_plan(store)
    off = next(a.node for a in plan.actions if a.kind is ActionKind.POWER_OFF)
    stuck = next(a.container for a in plan.migrations if a.source == off)
    ops = FakeNodeOps(store, demo_world(), fail_containers={stuck})
    report = PlanExecutor(store, ops, log=lambda _: None).execute(plan, plan_id)
    rows = {(a.kind, a.node): a for a in store.plans.actions(plan_id=plan_id)}
    assert rows[("power_off", off)].state is ActionState.SKIPPED
    assert stuck in (rows[("power_off", off)].detail or "")
    assert report.count(ActionState.ROLLED_BACK) == 1


def test_unknown_containers_keep_a_node_on(store: Store) -> None:
    plan, plan_id = consolidating_plan(store)
    off = next(a.node for a in plan.actions if a.kind is ActionKind.POWER_OFF)
    ops = FakeNodeOps(store, demo_world(), busy_nodes={off})
    PlanExecutor(store, ops, log=lambda _: None).execute(plan, plan_id)
    assert ("power_off", off) not in ops.calls


def test_a_node_that_cannot_be_checked_stays_on_and_the_rest_of_the_plan_runs(store: Store) -> None:
    plan, plan_id = consolidating_plan(store)
    offs = [a.node for a in plan.actions if a.kind is ActionKind.POWER_OFF]
    ops = FakeNodeOps(store, demo_world(), unreachable={offs[0]})
    report = PlanExecutor(store, ops, log=lambda _: None).execute(plan, plan_id)
    rows = {(a.kind, a.node): a for a in store.plans.actions(plan_id=plan_id)}
    first = rows[("power_off", offs[0])]
    assert first.state is ActionState.SKIPPED and "could not check that it hosts nothing" in (first.detail or "")
    assert ("power_off", offs[0]) not in ops.calls
    assert all(("power_off", n) in ops.calls for n in offs[1:])  # the rest of the plan still ran
    assert report.count(ActionState.SKIPPED) == 1 and report.count(ActionState.SUCCEEDED) == len(plan.actions) - 1


def test_a_node_that_does_not_wake_gets_no_work(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = Plan(
        policy="test",
        actions=(Action.power_on("node-8"), Action.migrate(snap.containers[0].name, snap.containers[0].node, "node-8")),
        before=make_plan(inv, snap, policy="noop").before,
        after=make_plan(inv, snap, policy="noop").after,
        solver=make_plan(inv, snap, policy="noop").solver,
        dry_run=False,
    )
    plan_id = store.plans.save(plan, inventory="demo", snapshot=snap)
    ops = FakeNodeOps(store, demo_world(), fail_power_on={"node-8"})
    PlanExecutor(store, ops, log=lambda _: None).execute(plan, plan_id)
    states = [a.state for a in store.plans.actions(plan_id=plan_id)]
    assert states == [ActionState.FAILED, ActionState.SKIPPED]
    assert [k for k, _ in ops.calls] == ["power_on"]


def test_stop_request_skips_what_has_not_started(store: Store) -> None:
    plan, plan_id = consolidating_plan(store)
    ops = FakeNodeOps(store, demo_world())
    PlanExecutor(store, ops, log=lambda _: None, stop_requested=lambda: True).execute(plan, plan_id)
    assert ops.calls == []
    assert {a.state for a in store.plans.actions(plan_id=plan_id)} == {ActionState.SKIPPED}


def test_live_controller_holds_the_lease_reconciles_and_executes(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    settings = ControllerSettings(dry_run=False, time_limit_s=5)
    first = Controller(inv, store, settings, services=fake_services(store, snap, ["migration 7: rolled back"]))
    first.start()
    second = Controller(inv, store, settings, services=fake_services(store, snap, []))
    with pytest.raises(StoreError, match="locked by controller"):
        second.run_once()
    plan = first.run_once()  # releases the lease when done
    assert not plan.dry_run
    assert {a.state for a in store.plans.actions(plan_id=plan.plan_id)} == {ActionState.SUCCEEDED}
    second.run_once()


def test_energy_metric_counts_node_rows_once(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [EnergyRow("node-1", t0, t0 + timedelta(seconds=60), 1500.0, "rapl"),
            EnergyRow("node-1", t0, t0 + timedelta(seconds=60), 900.0, "rapl", container="web-1"),
            EnergyRow("node-2", t0, t0 + timedelta(seconds=60), 600.0, "model")]
    controller = Controller(inv, store, ControllerSettings(dry_run=False, time_limit_s=5),
                            services=fake_services(store, snap, [], rows))
    controller.run_once()  # samples twice: before planning and after executing
    value = controller.metrics.registry.get_sample_value
    assert value("peakpack_energy_joules_total", {"node": "node-1", "source": "rapl"}) == 3000.0
    assert value("peakpack_energy_joules_total", {"node": "node-2", "source": "model"}) == 1200.0


def test_energy_of_a_plan_approved_on_the_web_page_is_counted(store: Store) -> None:
    inv = demo_inventory()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [EnergyRow("node-1", t0, t0 + timedelta(seconds=60), 1500.0, "rapl"),
            EnergyRow("node-1", t0, t0 + timedelta(seconds=60), 900.0, "rapl", container="web-1")]
    controller = Controller(inv, store, ControllerSettings(dry_run=False, approve=True, time_limit_s=5),
                            services=fake_services(store, demo_snapshot(inv), [], rows))
    plan = controller.run_epoch()  # RECOMMENDED: sampled once, before planning
    value = controller.metrics.registry.get_sample_value
    assert value("peakpack_energy_joules_total", {"node": "node-1", "source": "rapl"}) == 1500.0
    store.approvals.request(plan.plan_id or 0, False, "web:ana")  # what a page hands to the leader
    controller.run_approved()  # between epochs: samples twice more
    assert store.plans.get(plan.plan_id or 0).status is PlanStatus.APPLIED
    assert value("peakpack_energy_joules_total", {"node": "node-1", "source": "rapl"}) == 4500.0
    controller.finish()


def test_a_failed_reconciliation_is_logged_and_the_epoch_goes_on(store: Store) -> None:
    inv = demo_inventory()

    def reconcile() -> list[str]:
        raise KeyError("State")  # e.g. a bug, or a node answering nonsense

    log = io.StringIO()
    services = replace(fake_services(store, demo_snapshot(inv), []), settle=reconcile)
    controller = Controller(inv, store, ControllerSettings(dry_run=False, time_limit_s=5),
                            console=Console(file=log, width=300), services=services)
    controller.start()  # taking office (a standby's take-over) survives it
    controller.run_epoch()  # (taking office has just reconciled)
    plan = controller.run_epoch()  # and so does every epoch: the nodes are still planned and switched
    assert plan.actions and store.plans.get(plan.plan_id or 0).status is PlanStatus.APPLIED
    assert log.getvalue().count("reconcile failed: KeyError: 'State'; unsettled migrations keep their nodes held") == 2
    controller.finish()


def in_doubt(store: Store, container: str, source: str, target: str) -> int:
    """A migration reconciliation could not settle yet."""
    mid = store.migrations.begin(container, source, target)
    store.migrations.step_finished(
        store.migrations.step_started(mid, "in_doubt"), ok=False, detail="node-2 does not answer"
    )
    return mid


def test_an_unsettled_migration_holds_both_nodes_and_is_listed_first(store: Store) -> None:
    inv = demo_inventory()
    free = make_plan(inv, demo_snapshot(inv), time_limit_s=5)
    move = free.migrations[0]
    assert move.source and move.target
    mid = in_doubt(store, move.container or "", move.source, move.target)
    assert [m.state for m in store.migrations.unfinished()] == [MigrationState.IN_DOUBT]
    log = io.StringIO()
    controller = Controller(inv, store, ControllerSettings(dry_run=True, demo=True, time_limit_s=5),
                            console=Console(file=log, width=300))
    held = planning_view(store, inv, demo_snapshot(inv))[0].held
    assert set(held) == {move.source, move.target} and f"migration {mid} of {move.container}" in held[move.source]
    plan = controller.run_once()
    touched = {n for a in plan.actions for n in (a.node, a.source, a.target)}
    assert not touched & {move.source, move.target}
    lines = log.getvalue().splitlines()
    first = next(
        i
        for i, line in enumerate(lines)
        if line.startswith(
            f"unsettled: migration {mid} of {move.container} ({move.source} -> {move.target}) is IN_DOUBT"
        )
    )
    assert first < next(i for i, line in enumerate(lines) if line.startswith("epoch: plan"))


def test_what_an_unsettled_migration_waits_for_is_woken_only_when_it_runs_nowhere() -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    off = replace(snap, nodes=tuple(replace(n, powered=n.name != "node-8") for n in snap.nodes),
                  containers=tuple(c for c in snap.containers if c.node != "node-8"))

    @dataclass(frozen=True)
    class M:
        id: int = 4
        container: str = "db-23"  # its checkpoint may be on node-8's disk
        source: str = "node-8"
        target: str = "node-1"

    wake, advice = wakes_for_unsettled(inv, off, [M()], {})
    assert list(wake) == ["node-8"] and "migration 4 of db-23 runs nowhere" in wake["node-8"] and advice == []
    # it runs somewhere: waiting costs nothing, the off node stays off
    assert wakes_for_unsettled(inv, off, [M(container="web-10")], {}) == ({}, [])
    # the node it runs on might not be observable: it might run there
    assert wakes_for_unsettled(inv, replace(off, held={"node-1": "not observed"}), [M()], {}) == ({}, [])
    # peakpack may not switch it: the operator is told what to do
    wake, advice = wakes_for_unsettled(inv, off, [M()], {"node-8": "failed to wake"})
    assert wake == {} and advice == ["migration 4 of db-23 runs nowhere and waits for node-8, which is off and it is "
                                     "quarantined (failed to wake): power it on by hand, then `peakpack reconcile`"]
    unmanaged = replace(inv, nodes=tuple(replace(n, power_managed=n.name != "node-8") for n in inv.nodes))
    assert "it is not power-managed" in wakes_for_unsettled(unmanaged, off, [M()], {})[1][0]


def test_the_controller_wakes_that_node_then_reconciles_before_planning(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    off = replace(snap, nodes=tuple(replace(n, powered=n.name != "node-8") for n in snap.nodes),
                  containers=tuple(c for c in snap.containers if c.node != "node-8"))
    in_doubt(store, "db-23", "node-8", "node-1")
    reconciled: list[str] = []

    def reconcile() -> list[str]:
        reconciled.append("reconcile")
        return []

    services = replace(fake_services(store, off, []), settle=reconcile)
    controller = Controller(inv, store, ControllerSettings(dry_run=False, approve=True, time_limit_s=5),
                            console=Console(file=io.StringIO()), services=services)
    controller.run_once()
    assert services.ops.calls == [("power_on", "node-8")]  # type: ignore[attr-defined]
    assert reconciled == ["reconcile", "reconcile"]  # on taking office, and again once node-8 answers

    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inv = demo_inventory()
    controller = Controller(inv, store, ControllerSettings(dry_run=True, demo=True, time_limit_s=5, metrics_port=port))
    plan = controller.run_once()
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert f"peakpack_nodes_on {float(plan.after.nodes_on)}" in text
    assert "peakpack_plan_seconds_count 1.0" in text


def test_a_controller_that_lost_the_lease_starts_no_new_action(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    services = fake_services(store, snap, [])
    controller = Controller(inv, store, ControllerSettings(dry_run=False, time_limit_s=5), services=services)
    ops = services.ops
    assert isinstance(ops, FakeNodeOps)
    controller.start()
    migrate = ops.migrate

    def renewal_fails_meanwhile(actions: Sequence[tuple[int, Action]],
                                stop_requested: Callable[[], bool]) -> dict[int, ActionState]:
        done = migrate(actions, stop_requested)
        controller.lease.lose("renewal failed")
        assert stop_requested()  # the batch starts no further migration either
        return done

    ops.migrate = renewal_fails_meanwhile  # type: ignore[method-assign]
    plan = controller.run_epoch()
    offs = [a for a in store.plans.actions(plan_id=plan.plan_id) if a.kind == "power_off"]
    assert offs and {(a.state, a.detail) for a in offs} == {(ActionState.SKIPPED, "the controller is stopping")}
    assert "power_off" not in {k for k, _ in ops.calls}  # nothing after the loss was started
    with pytest.raises(FencedError, match="lease lost: renewal failed"):
        controller.run_epoch()  # checked before each epoch
    controller.finish()


def test_a_taken_over_controller_is_fenced_at_its_next_write(store: Store) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    services = fake_services(store, snap, [])
    controller = Controller(inv, store, ControllerSettings(dry_run=False, time_limit_s=5), services=services)
    controller.start()
    successor = Store(store.engine)  # another controller's handle on the same database
    token = successor.lease.acquire("serve@elsewhere:1:x:y", ttl_s=60, replacing=controller.owner)
    with pytest.raises(FencedError, match=rf"controller serve@elsewhere:1:x:y took over \(lease token {token} > "):
        controller.run_epoch()
    controller._epoch_job()  # in the service the first fenced write ends the leadership
    assert controller.lease.lost.is_set()
    assert store.plans.history() == [] and services.ops.calls == []  # type: ignore[attr-defined]
    controller.finish()
