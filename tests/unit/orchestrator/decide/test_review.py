"""Review then apply, the pure part: each action of a stored plan re-checked on a fresh snapshot,
those that fail skipped with the reason (and those that depended on them too), the inventory
digest, the plan's final status, and the predictions stored with a plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

from peakpack.orchestrator.act.epoch import final_status
from peakpack.orchestrator.decide.review import inventory_digest, review_plan
from peakpack.orchestrator.domain.model import (
    ClusterConfig,
    ClusterSnapshot,
    Container,
    Inventory,
    NodeState,
    PowerCurve,
)
from peakpack.orchestrator.domain.plan import Action
from peakpack.orchestrator.domain.states import ActionState, PlanStatus
from tests.support.build import node_spec


def inventory(cap: float = 0.7) -> Inventory:
    curve = PowerCurve.linear(100, 200)
    nodes = (
        node_spec("head", address="192.0.2.1", curve=curve, head=True),
        node_spec("n1", address="192.0.2.2", cpus=10, memory_mb=10000, curve=curve),
        node_spec("n2", address="192.0.2.3", cpus=10, memory_mb=10000, curve=curve),
        node_spec("n3", address="192.0.2.4", cpus=10, memory_mb=10000, curve=curve),
    )
    return Inventory(ClusterConfig("t", cap=cap, memory_cap=0.9), nodes)


def snapshot(**cpu: float) -> ClusterSnapshot:
    """a, b on n1 (to be drained onto n2), c on n2; n3 off."""
    load = {"a": 2.0, "b": 2.0, "c": 1.0, **cpu}
    return ClusterSnapshot(
        nodes=(NodeState("head"), NodeState("n1"), NodeState("n2"), NodeState("n3", False)),
        containers=(Container("a", "n1", load["a"], 1000), Container("b", "n1", load["b"], 1000),
                    Container("c", "n2", load["c"], 500)),
    )


DRAIN = (Action.migrate("a", "n1", "n2"), Action.migrate("b", "n1", "n2"), Action.power_off("n1"))


def reasons(
    fresh: ClusterSnapshot, actions: tuple[Action, ...] = DRAIN, inv: Inventory | None = None
) -> list[str | None]:
    return [c.reason for c in review_plan(inv or inventory(), fresh, actions).checks]


def test_a_plan_that_still_holds_passes_whole() -> None:
    review = review_plan(inventory(), snapshot(), DRAIN)
    assert not review.drifted and [c.ok for c in review.checks] == [True, True, True]


def test_a_container_gone_skips_its_move_and_the_power_off_that_needed_it() -> None:
    fresh = replace(snapshot(), containers=snapshot().containers[1:])  # "a" stopped
    got = reasons(fresh)
    assert got[0] == "no such container in the snapshot"
    assert got[1] is None  # b still moves
    assert got[2] is None  # n1 is empty all the same: it may go off


def test_a_container_moved_elsewhere_skips_the_move_and_the_node_stays_on() -> None:
    moved = snapshot().with_changes(moves={"b": "n2"}, power={"n3": True})
    fresh = moved.with_changes(moves={"b": "n3"})
    got = reasons(fresh)
    assert got[0] is None
    assert got[1] == "container is on n3, not n1"
    assert got[2] is None  # n1 is empty: b left it by another way


def test_grown_demand_breaks_the_cap_on_the_target_and_strands_the_power_off() -> None:
    got = reasons(snapshot(b=4.5))  # 1 + 2 + 4.5 > 7 cores on n2
    assert got[0] is None
    assert got[1] is not None and got[1].startswith("node n2: CPU load 7.50 exceeds cap 7.00")
    assert got[2] == "node still hosts containers (after skipping #2)"


def test_a_skipped_power_on_skips_the_moves_onto_that_node() -> None:
    actions = (Action.power_on("n3"), Action.migrate("a", "n1", "n3"), Action.power_off("n1"))
    fresh = snapshot().with_changes(power={"n3": True})  # someone woke n3 meanwhile
    fresh = replace(fresh, held={"n3": "node did not answer"})
    got = reasons(fresh, actions)
    assert got[0] == "node n3 is held: node did not answer"
    assert got[1] == "node n3 is held: node did not answer (after skipping #1)"
    assert got[2] == "node still hosts containers (after skipping #2)"


def test_a_node_quarantined_since_the_plan_is_not_woken_nor_moved_onto() -> None:
    actions = (Action.power_on("n3"), Action.migrate("a", "n1", "n3"))
    got = [c.reason for c in review_plan(inventory(), snapshot(), actions, {"n3": "wake timed out"}).checks]
    assert got[0] == "node n3 is quarantined (wake timed out); `peakpack power clear n3` once fixed"
    assert got[1] is not None and got[1].endswith("(after skipping #1)")


def test_a_container_that_became_immovable_is_not_moved() -> None:
    fresh = snapshot()
    fresh = replace(fresh, containers=(replace(fresh.containers[0], immovable="uses a GPU"),) + fresh.containers[1:])
    assert reasons(fresh)[0] == "it cannot be live-migrated: uses a GPU (immovable)"


def test_a_target_that_now_refuses_the_container_is_not_moved_onto() -> None:
    fresh = snapshot()
    why = "a volume named data already exists there: remove or rename it"
    fresh = replace(fresh, containers=(replace(fresh.containers[0], refused_on=(("n2", why),)),) + fresh.containers[1:])
    got = reasons(fresh)
    assert got[0] == f"node n2 refuses it: {why} (preflight)"
    assert got[1] is None  # b may still go to n2
    assert got[2] == "node still hosts containers (after skipping #1)"


def test_the_review_summary_names_each_failed_action() -> None:
    review = review_plan(inventory(), snapshot(b=4.5), DRAIN)
    assert review.drifted and [c.index for c in review.skipped] == [1, 2]
    assert review.summary().startswith("#2 migrate b: n1 -> n2: node n2: CPU load")


def test_the_digest_tells_inventories_apart_and_ignores_the_file_path() -> None:
    a = inventory()
    assert inventory_digest(a) == inventory_digest(replace(a, source=None))
    assert inventory_digest(a) != inventory_digest(inventory(cap=0.8))
    assert len(inventory_digest(a)) == 64


@pytest.mark.parametrize(("states", "status"), [
    ([], PlanStatus.APPLIED),
    ([ActionState.SUCCEEDED, ActionState.SUCCEEDED], PlanStatus.APPLIED),
    ([ActionState.SUCCEEDED, ActionState.SKIPPED], PlanStatus.PARTIAL),
    ([ActionState.SUCCEEDED, ActionState.FAILED], PlanStatus.PARTIAL),
    ([ActionState.FAILED, ActionState.SKIPPED], PlanStatus.FAILED),
    ([ActionState.SKIPPED], PlanStatus.PARTIAL),
])
def test_final_status(states: list[ActionState], status: PlanStatus) -> None:
    assert final_status(dict(enumerate(states))) is status
