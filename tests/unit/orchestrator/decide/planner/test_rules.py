"""Power decisions and hysteresis as problem data (orchestrator/decide/planner/rules.py): the objective
sees them, so no plan migrates to empty a node that then stays on."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from peakpack.orchestrator.decide.planner.rules import Remembered, break_even_seconds, idle_updates
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.model import (
    ClusterConfig,
    ClusterSnapshot,
    Container,
    Inventory,
    NodeState,
    PowerCurve,
)
from peakpack.orchestrator.domain.plan import ActionKind, Plan
from peakpack.orchestrator.domain.settings import PlannerSettings
from tests.support.build import node_spec

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def two_light_nodes(settings: PlannerSettings | None = None) -> tuple[Inventory, ClusterSnapshot]:
    """Two powered 8-core workers with one small container each: draining one pays (100 W idle)."""
    settings = settings or PlannerSettings()
    nodes = tuple(node_spec(f"w{i}", address=f"10.0.0.{i + 1}", cpus=8, memory_mb=16384,
                            curve=PowerCurve.linear(100, 200)) for i in range(2))
    inv = Inventory(ClusterConfig("t", cap=settings.cap, memory_cap=settings.memory_cap, epoch_seconds=600),
                    nodes, planner=settings)
    snap = ClusterSnapshot(nodes=(NodeState("w0"), NodeState("w1")),
                           containers=(Container("a", "w0", 1.0, 512), Container("b", "w1", 1.0, 512)),
                           taken_at=NOW)
    return inv, snap


def kinds(plan: Plan) -> list[ActionKind]:
    return [a.kind for a in plan.actions]


def emptied_but_on(plan: Plan, snap: ClusterSnapshot) -> set[str]:
    """Nodes the plan's migrations empty that it does not switch off."""
    hosts = {c.node for c in snap.containers}
    after = {c.name: c.node for c in snap.containers}
    for a in plan.migrations:
        assert a.container and a.target
        after[a.container] = a.target
    offs = {a.node for a in plan.actions if a.kind is ActionKind.POWER_OFF}
    return hosts - set(after.values()) - offs


def test_a_drain_that_pays_migrates_and_switches_off() -> None:
    inv, snap = two_light_nodes()
    plan = make_plan(inv, snap)
    assert sorted(kinds(plan)) == sorted([ActionKind.MIGRATE, ActionKind.POWER_OFF])


def test_with_a_break_even_longer_than_the_off_horizon_nothing_migrates_to_power_off() -> None:
    settings = PlannerSettings(boot_seconds=3600)  # 3600 s x 200 W / 100 W = 2 h > 1.5 x 600 s
    inv, snap = two_light_nodes(settings)
    assert break_even_seconds(inv.node("w0"), settings) > settings.off_horizon_s(inv.cluster.epoch_seconds)
    plan = make_plan(inv, snap)
    assert plan.actions == ()
    assert all("may not be switched off this epoch (a boot costs" in why for why in plan.explanations.values())


@pytest.mark.parametrize("facts", [
    Remembered(woken_at={"w0": NOW - timedelta(seconds=60), "w1": NOW - timedelta(seconds=60)}),
    Remembered(quarantined={"w0": "did not wake", "w1": "did not wake"}),
])
def test_a_node_that_may_not_go_off_is_not_drained(facts: Remembered) -> None:
    inv, snap = two_light_nodes()
    assert make_plan(inv, snap, facts=facts).actions == ()


def test_grace_protects_only_nodes_that_emptied_by_themselves() -> None:
    inv, _ = two_light_nodes()
    snap = ClusterSnapshot(nodes=(NodeState("w0"), NodeState("w1")),
                           containers=(Container("a", "w0", 1.0, 512),), taken_at=NOW)
    fresh = Remembered(idle_since={"w1": NOW - timedelta(seconds=60)})
    plan = make_plan(inv, snap, facts=fresh)
    # w1 stays on, so the cheapest answer is to fill it and switch w0 off instead
    assert [(a.kind, a.node) for a in plan.actions if a.kind is ActionKind.POWER_OFF] == [(ActionKind.POWER_OFF, "w0")]
    assert emptied_but_on(plan, snap) == set()
    old = Remembered(idle_since={"w1": NOW - timedelta(hours=1)})
    assert [(a.kind, a.node) for a in make_plan(inv, snap, facts=old).actions] == [(ActionKind.POWER_OFF, "w1")]


def test_spare_nodes_stay_on_and_empty() -> None:
    inv, _ = two_light_nodes(PlannerSettings(spare_nodes=1))
    snap = ClusterSnapshot(nodes=(NodeState("w0"), NodeState("w1")),
                           containers=(Container("a", "w0", 1.0, 512), Container("b", "w0", 1.0, 512)),
                           taken_at=NOW)
    plan = make_plan(inv, snap)
    assert plan.actions == () and any("w1 stays on: kept on as spare" in n for n in plan.notes)


def test_a_quarantined_node_is_not_woken() -> None:
    inv, _ = two_light_nodes(PlannerSettings(cap=0.5))
    snap = ClusterSnapshot(nodes=(NodeState("w0"), NodeState("w1", powered=False)),
                           containers=(Container("a", "w0", 3.0, 512), Container("b", "w0", 3.0, 512)),
                           taken_at=NOW)  # 6 cores over the 4-core cap: w1 must be woken
    assert ActionKind.POWER_ON in kinds(make_plan(inv, snap))
    plan = make_plan(inv, snap, facts=Remembered(quarantined={"w1": "did not wake"}))
    assert ActionKind.POWER_ON not in kinds(plan) and any("w1 not woken" in n for n in plan.notes)


@pytest.mark.parametrize("facts", [
    Remembered(),
    Remembered(woken_at={"node-2": NOW, "node-5": NOW}),
    Remembered(idle_since={"node-3": NOW}),
    Remembered(quarantined={"node-4": "x"}),
])
def test_a_plan_never_empties_a_node_that_then_stays_on(facts: Remembered) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    for settings in (inv.planner, PlannerSettings(spare_nodes=2), PlannerSettings(boot_seconds=2000)):
        plan = make_plan(inv, replace(snap, taken_at=NOW), settings=settings, facts=facts, time_limit_s=1)
        assert emptied_but_on(plan, snap) == set(), (settings, facts)


def test_hysteresis_keeps_a_recent_mover_unless_the_cap_forces_it() -> None:
    inv, snap = two_light_nodes()
    moved = Remembered(moved_at={"a": NOW - timedelta(minutes=10), "b": NOW - timedelta(minutes=10)})
    held = make_plan(inv, snap, facts=moved)
    assert held.actions == ()  # the drain would move one of them
    assert held.explanations["a"] == "stays on w0: moved 600 s ago, within the 7200 s forecast window (hysteresis)"
    long_ago = Remembered(moved_at={"a": NOW - timedelta(hours=3), "b": NOW - timedelta(hours=3)})
    assert ActionKind.MIGRATE in kinds(make_plan(inv, snap, facts=long_ago))
    off = PlannerSettings(hysteresis=False)
    assert ActionKind.MIGRATE in kinds(make_plan(inv, snap, settings=off, facts=moved))
    over = ClusterSnapshot(
        nodes=snap.nodes, containers=(Container("a", "w0", 4.0, 512), Container("b", "w0", 3.0, 512)), taken_at=NOW
    )  # 7 cores on w0, cap 5.6: one of them must move
    plan = make_plan(inv, over, facts=moved)
    assert [a.kind for a in plan.migrations] == [ActionKind.MIGRATE]


def test_idle_tracking() -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    empty = {n.name for n in snap.nodes if n.powered} - {c.node for c in snap.containers}
    updates = idle_updates(snap, {"node-1": NOW}, NOW)
    assert updates.get("node-1", "unset") is None  # hosts work again: no longer idle
    assert {n for n, t in updates.items() if t is not None} == empty


def test_the_store_remembers_moves_wake_ups_and_idle_nodes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from peakpack.db.store import Store
    from peakpack.orchestrator.act.remembered import remembered
    from peakpack.orchestrator.domain.states import MigrationState

    inv, _ = two_light_nodes()
    snap = ClusterSnapshot(nodes=(NodeState("w0"), NodeState("w1")), containers=(Container("a", "w0", 1.0, 512),))
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.migrations.finish(store.migrations.begin("a", "w1", "w0"), MigrationState.SUCCEEDED)
        store.migrations.finish(store.migrations.begin("b", "w1", "w0"), MigrationState.ROLLED_BACK)
        store.power.finish(store.power.begin("w0", "power_on"), "SUCCEEDED")
        dry = remembered(store, inv, snap, record=False)
        assert set(dry.moved_at) == {"a"} and set(dry.woken_at) == {"w0"} and set(dry.idle_since) == {"w1"}
        assert store.power.idle_since("w1") is None  # a dry run stores nothing
        remembered(store, inv, snap)
        assert store.power.idle_since("w1") == snap.taken_at
    plan = make_plan(inv, snap, facts=dry)  # w0 just woken and w1 just emptied: nothing goes off
    assert plan.actions == ()
