"""power/policy.py: the last check on a plan's power actions (the rules themselves are problem
data: orchestrator/decide/planner/test_rules.py; energy accounting: power/test_accounting.py)."""

from __future__ import annotations

from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.model import (
    ClusterConfig,
    ClusterSnapshot,
    Container,
    Inventory,
    NodeState,
    PowerCurve,
)
from peakpack.orchestrator.domain.plan import ActionKind
from peakpack.orchestrator.domain.settings import PlannerSettings
from peakpack.power.policy import adjust_plan
from tests.support.build import node_spec


def overloaded() -> tuple[Inventory, ClusterSnapshot]:
    nodes = tuple(node_spec(f"w{i}", address=f"10.0.0.{i + 1}", cpus=8, memory_mb=16384,
                            curve=PowerCurve.linear(100, 200)) for i in range(2))
    inv = Inventory(ClusterConfig("t", cap=0.5), nodes, planner=PlannerSettings(cap=0.5))
    snap = ClusterSnapshot(nodes=(NodeState("w0"), NodeState("w1", powered=False)),
                           containers=(Container("a", "w0", 3.0, 512), Container("b", "w0", 3.0, 512)))
    return inv, snap


def test_nothing_to_remove_when_no_node_is_quarantined() -> None:
    inv, snap = overloaded()
    plan = make_plan(inv, snap)
    assert adjust_plan(plan, snap, inv, {}) is plan


def test_a_wake_up_quarantined_after_planning_is_removed_without_stranding_migrations() -> None:
    inv, snap = overloaded()
    plan = make_plan(inv, snap)
    assert [a.kind for a in plan.actions] == [ActionKind.POWER_ON, ActionKind.MIGRATE]
    adjusted = adjust_plan(plan, snap, inv, {"w1": "did not wake"})
    assert adjusted.actions == ()  # the migration needed w1: moving it anywhere else is not this plan
    assert any("w1 not woken: quarantined" in n for n in adjusted.notes)
    assert any("reduced to nothing" in n for n in adjusted.notes)
    assert plan.explanations["a"].startswith("moves w0 -> w1") or plan.explanations["b"].startswith("moves w0 -> w1")
    assert adjusted.explanations == {  # the explanations are those of the plan that will run
        name: "stays on w0: the plan was reduced to nothing: it needed w1, quarantined since it was made"
        for name in ("a", "b")}
