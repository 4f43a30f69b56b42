"""A plan means what replaying it on its snapshot does; illegal steps are refused by name."""

from __future__ import annotations

import pytest

from peakpack.orchestrator.domain.errors import PlanError
from peakpack.orchestrator.domain.model import (
    ClusterConfig,
    ClusterSnapshot,
    Container,
    Inventory,
    NodeState,
    PowerCurve,
    cluster_metrics,
)
from peakpack.orchestrator.domain.plan import Action, replay
from tests.support.build import node_spec


def inventory() -> Inventory:
    curve = PowerCurve.linear(100, 200)
    nodes = (
        node_spec("head", address="192.0.2.1", curve=curve, head=True),
        node_spec("n1", address="192.0.2.2", cpus=10, memory_mb=10000, curve=curve),
        node_spec("n2", address="192.0.2.3", cpus=10, memory_mb=10000, curve=curve),
    )
    return Inventory(ClusterConfig("t", cap=0.7, memory_cap=0.9), nodes)


def snapshot(n2_on: bool = True) -> ClusterSnapshot:
    return ClusterSnapshot(
        nodes=(NodeState("head"), NodeState("n1"), NodeState("n2", n2_on)),
        containers=(
            Container("a1", "n1", 3.0, 1000),
            Container("b1", "n1", 3.0, 1000),
            Container("c1", "n2", 1.0, 1000) if n2_on else Container("c1", "n1", 0.5, 1000),
        ),
    )


def test_consolidation_replays_and_lowers_power() -> None:
    inv = inventory()
    before = snapshot()
    after = replay(inv, before, [Action.migrate("a1", "n1", "n2"), Action.migrate("b1", "n1", "n2")])
    after = replay(inv, after, [Action.power_off("n1")])
    assert after.placement() == {"a1": "n2", "b1": "n2", "c1": "n2"}
    assert "n1" not in after.powered()
    assert cluster_metrics(inv, after).power_w < cluster_metrics(inv, before).power_w
    assert before.placement()["a1"] == "n1"  # replay never mutates its input


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        ([Action.power_off("n1")], "still hosts containers"),
        ([Action.power_off("head")], "head node or not power-managed"),
        ([Action.migrate("a1", "n2", "n1")], "container is on n1, not n2"),
        ([Action.migrate("zz", "n1", "n2")], "no such container"),
        ([Action.migrate("a1", "n1", "n1")], "same node"),
        ([Action.migrate("a1", "n1", "nowhere")], "not in the inventory"),
        ([Action.migrate("c1", "n2", "n1"), Action.migrate("a1", "n1", "head")], "exceeds cap"),
        ([Action.power_on("n1")], "already powered on"),
    ],
)
def test_illegal_actions_are_refused(actions: list[Action], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        replay(inventory(), snapshot(), actions)


def test_migration_onto_a_powered_off_node_needs_power_on_first() -> None:
    inv = inventory()
    snap = snapshot(n2_on=False)
    with pytest.raises(PlanError, match="powered off"):
        replay(inv, snap, [Action.migrate("a1", "n1", "n2")])
    after = replay(inv, snap, [Action.power_on("n2"), Action.migrate("a1", "n1", "n2")])
    assert after.placement()["a1"] == "n2"


def test_action_json_round_trip_and_bad_plan_files() -> None:
    for a in (Action.migrate("a1", "n1", "n2"), Action.power_on("n2"), Action.power_off("n1")):
        assert Action.from_json(a.to_json()) == a
    with pytest.raises(PlanError, match=r"action\.kind"):
        Action.from_json({"kind": "reboot", "node": "n1"})
    with pytest.raises(PlanError, match=r"action\.target"):
        Action.from_json({"kind": "migrate", "container": "a1", "source": "n1"})


def test_power_curve_interpolates_and_finds_peak_efficiency() -> None:
    g4 = PowerCurve((86, 89.4, 92.6, 96, 99.5, 102, 106, 108, 112, 114, 117))
    assert g4.at(0.05) == pytest.approx(87.7)
    assert g4.at(1.5) == 117
    assert g4.peak_efficiency_util() == 1.0  # old servers: most work per watt at full load
    assert g4.peak_efficiency_util(hi=0.7) == pytest.approx(0.7)
    dip = PowerCurve((50, 55, 60, 62, 64, 66, 70, 90, 120, 160, 200))
    assert dip.peak_efficiency_util() == pytest.approx(0.6)
