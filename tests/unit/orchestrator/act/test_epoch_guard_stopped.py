"""A container a node's QoS guard stopped for memory is still hosted there: it is started again
there once the node has room (`epoch.restart_stopped`), so the node is never planned off, nor
switched off by the executor, while it holds one; switched off, nothing would start it again. One
rule (`decide/pressure.guard_stopped`) for the planner, the executor and the restarts. The real-lab
case is tests/integration/test_guard_stopped_hosted.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from peakpack.db.store import Store
from peakpack.orchestrator.act.epoch import execute_plan
from peakpack.orchestrator.act.remembered import remembered
from peakpack.orchestrator.decide.planner.rules import Remembered, restraints
from peakpack.orchestrator.decide.pressure import EVICTED, RESTARTED
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.model import ClusterMetrics, ClusterSnapshot, Container, NodeState
from peakpack.orchestrator.domain.plan import Action, ActionKind, Plan, SolverReport
from peakpack.orchestrator.domain.states import ActionState, PlanStatus
from tests.support.fakes import FakeWorld, fake_services
from tests.unit.orchestrator.decide.planner.test_rules import NOW, two_light_nodes


def alone_and_a_stopped_one() -> ClusterSnapshot:
    """`a` runs on w0; w1 runs nothing: `b`, stopped there by its guard, is not in a snapshot."""
    return ClusterSnapshot(nodes=(NodeState("w0"), NodeState("w1")), containers=(Container("a", "w0", 1.0, 512),),
                           taken_at=NOW)


def offs(plan: Plan) -> set[str]:
    return {a.node or "" for a in plan.actions if a.kind is ActionKind.POWER_OFF}


def test_the_planner_keeps_a_node_on_while_it_holds_a_container_its_guard_stopped() -> None:
    inv, _ = two_light_nodes()
    snap = alone_and_a_stopped_one()
    assert offs(make_plan(inv, snap)) == {"w1"}  # empty of running containers: off, and b with it
    facts = Remembered(stopped={"b": "w1"})
    assert "w1" not in offs(make_plan(inv, snap, facts=facts))  # (a may join it there, and w0 go off)
    kept = restraints(inv, snap, inv.planner, facts, NOW)
    assert kept.keep_power == {"w1": "hosts b, stopped by its QoS guard for memory: started there again once it "
                                     "has room"}
    assert not restraints(inv, snap, replace(inv.planner, spare_nodes=1), facts, NOW).spare  # not empty: no spare


def test_the_store_says_which_containers_a_guard_stopped_and_nothing_started_since(tmp_path: Path) -> None:
    inv, _ = two_light_nodes()
    snap = alone_and_a_stopped_one()
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        assert remembered(store, inv, snap, record=False).stopped == {}
        store.qos.record("w1", EVICTED, "b", "available 40 MiB < 10% of 512 MiB")
        store.qos.record("w0", EVICTED, "a", "available 40 MiB < 10% of 512 MiB")  # a runs again: started by hand
        snap = ClusterSnapshot(nodes=snap.nodes, containers=snap.containers, taken_at=datetime.now(UTC))
        assert remembered(store, inv, snap, record=False).stopped == {"b": "w1"}
        store.qos.record("w1", RESTARTED, "b", "room again")
        assert remembered(store, inv, snap, record=False).stopped == {}


def test_the_executor_does_not_switch_off_a_node_its_guard_stopped_a_container_on(tmp_path: Path) -> None:
    """A plan made before the stop (or applied later) still says power_off: just before it, the
    node is asked whether the stopped container is still there."""
    inv, _ = two_light_nodes()
    snap = alone_and_a_stopped_one()
    nothing = ClusterMetrics(nodes_on=0, power_w=0.0, max_cpu_util=0.0)
    plan = Plan(policy="test", actions=(Action(ActionKind.POWER_OFF, node="w1"),), before=nothing, after=nothing,
                solver=SolverReport("test", 0.0, 0.0, 0.0), dry_run=False)
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        services = fake_services(store, snap)
        services.ops.world = FakeWorld({"w0", "w1"}, {"a": "w0"}, {"b": "w1"})  # type: ignore[attr-defined]
        store.qos.record("w1", EVICTED, "b", "available 40 MiB < 10% of 512 MiB")
        plan_id = store.plans.save(plan, "t", snap, status=PlanStatus.APPLYING)
        outcome = execute_plan(store, services, inv, plan, plan_id, snap, log=lambda _: None,
                               stop_requested=lambda: False)
        [action] = store.plans.actions(plan_id=plan_id)
        assert outcome.states == {0: ActionState.SKIPPED} and ("power_off", "w1") not in services.ops.calls  # type: ignore[attr-defined]
        assert action.detail == ("the node hosts containers that the plan did not know of, or b, stopped there by "
                                 "its QoS guard to be started again")
        # once b is gone from w1 (removed by hand), nothing keeps it on
        services.ops.world = FakeWorld({"w0", "w1"}, {"a": "w0"})  # type: ignore[attr-defined]
        plan_id = store.plans.save(plan, "t", snap, status=PlanStatus.APPLYING)
        outcome = execute_plan(store, services, inv, plan, plan_id, snap, log=lambda _: None,
                               stop_requested=lambda: False)
        assert outcome.states == {0: ActionState.SUCCEEDED}


def test_an_old_stop_is_forgotten_with_the_window_the_restarts_look_at(tmp_path: Path) -> None:
    inv, _ = two_light_nodes()
    snap = alone_and_a_stopped_one()
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        store.qos.record("w1", EVICTED, "b", "available 40 MiB < 10% of 512 MiB")
        later = datetime.now(UTC) + timedelta(seconds=inv.planner.forecast.window_seconds + 60)
        snap = ClusterSnapshot(nodes=snap.nodes, containers=snap.containers, taken_at=later)
        assert remembered(store, inv, snap, record=False).stopped == {}
