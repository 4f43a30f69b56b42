"""build_plan: power_on -> migrate (cap-safe order, cycles staged or dropped) -> power_off."""

from __future__ import annotations

import pytest

from peakpack.orchestrator.decide.planner.build import build_plan
from peakpack.orchestrator.decide.planner.problem import Placement
from peakpack.orchestrator.domain.errors import PlanError
from peakpack.orchestrator.domain.model import Container, cluster_metrics
from peakpack.orchestrator.domain.plan import ActionKind, SolverReport, replay
from tests.support.synthetic import node, problem_from

REPORT = SolverReport("TEST", 0.0, 0.0, 0.0)


def placement(assignment: dict[str, str], powered: set[str]) -> Placement:
    return Placement(assignment, frozenset(powered), REPORT)


def test_moves_wait_until_their_target_has_room() -> None:
    nodes = [node("a", 10), node("b", 10), node("c", 10)]
    containers = [Container("x", "a", 5.0, 0), Container("y", "b", 5.0, 0)]
    problem = problem_from(nodes, containers)
    plan = build_plan(problem, placement({"x": "b", "y": "c"}, {"b", "c"}), "t")
    # x must wait for y to leave b (5 + 5 > 7), then a is empty and goes off
    assert [a.describe() for a in plan.actions] == [
        "migrate y: b -> c",
        "migrate x: a -> b",
        "power_off a",
    ]
    assert plan.notes == ()


def test_power_on_first_and_power_off_last() -> None:
    nodes = [node("a", 10), node("b", 10), node("big", 40, idle_w=150, max_w=400)]
    containers = [Container("x", "a", 5.0, 0), Container("y", "b", 5.0, 0)]
    problem = problem_from(nodes, containers, off=["big"])
    plan = build_plan(problem, placement({"x": "big", "y": "big"}, {"big"}), "t")
    kinds = [a.kind for a in plan.actions]
    assert kinds == [
        ActionKind.POWER_ON,
        ActionKind.MIGRATE,
        ActionKind.MIGRATE,
        ActionKind.POWER_OFF,
        ActionKind.POWER_OFF,
    ]
    final = replay(problem.inventory, problem.snapshot, plan.actions)
    assert plan.before == cluster_metrics(problem.inventory, problem.snapshot)
    assert plan.after == cluster_metrics(problem.inventory, final)
    assert plan.after.nodes_on == 1


def test_a_swap_between_full_nodes_is_staged_through_a_node_with_room() -> None:
    nodes = [node("a", 10), node("b", 10), node("c", 10)]
    containers = [
        Container("x", "a", 6.0, 1024),
        Container("y", "b", 6.0, 1024),
        Container("z", "c", 0.5, 0),
    ]
    problem = problem_from(nodes, containers)
    swap = Placement(
        {"x": "b", "y": "a", "z": "c"},
        frozenset({"a", "b", "c"}),
        SolverReport("TEST", 0.0, 100.0, 0.0),
    )
    plan = build_plan(problem, swap, "t")
    final = replay(problem.inventory, problem.snapshot, plan.actions)
    assert final.placement() == {"x": "b", "y": "a", "z": "c"}
    assert len(plan.migrations) == 3  # one extra hop through c
    assert any("staged" in n for n in plan.notes)
    # the plan's objective prices the real moves: the swap's two plus the staging hop (9 W each)
    assert plan.solver.objective == pytest.approx(
        sum(nodes[i].power.at(6.0 / 10) for i in range(2)) + nodes[2].power.at(0.05) + 3 * 9.0
    )


def test_an_unsequenceable_cycle_is_dropped_and_nothing_breaks() -> None:
    nodes = [node("a", 10), node("b", 10)]
    containers = [Container("x", "a", 6.0, 0), Container("y", "b", 6.0, 0)]
    problem = problem_from(nodes, containers)
    plan = build_plan(problem, placement({"x": "b", "y": "a"}, {"a", "b"}), "t")
    assert plan.actions == ()
    assert sum("dropped" in n for n in plan.notes) == 2


def two_full_nodes_and_a_straggler(**options):
    """x (a) and y (b) swap, w (c) joins y on a; no order works without staging."""
    nodes = [node("a", 10), node("b", 10), node("c", 10)]
    containers = [
        Container("x", "a", 6.5, 0),
        Container("y", "b", 6.0, 0),
        Container("w", "c", 1.0, 0),
    ]
    return problem_from(nodes, containers, **options)


def test_a_node_that_keeps_a_dropped_container_stays_on() -> None:
    # nothing may be staged on c (eligibility), so the x/y swap cannot be ordered; w waits for
    # room on a that never comes, so c, meant to be emptied and switched off, keeps it
    only = {"x": frozenset("ab"), "y": frozenset("ab"), "w": frozenset("a")}
    problem = two_full_nodes_and_a_straggler(eligible=only)
    plan = build_plan(problem, placement({"x": "b", "y": "a", "w": "a"}, {"a", "b"}), "t")
    assert plan.actions == ()
    assert sum("dropped" in n for n in plan.notes) == 3


def test_chained_cycles_resolve_through_staging() -> None:
    problem = two_full_nodes_and_a_straggler()
    wanted = {"x": "b", "y": "a", "w": "a"}
    plan = build_plan(problem, placement(wanted, {"a", "b"}), "t")
    final = replay(problem.inventory, problem.snapshot, plan.actions)
    assert final.placement() == wanted and final.powered() == {"a", "b"}
    assert plan.actions[-1].describe() == "power_off c"


@pytest.mark.parametrize(
    ("assignment", "powered", "message"),
    [
        ({"x": "b"}, {"a"}, "container x placed on powered-off b"),
        ({}, {"a"}, "container x has no node in the placement"),
        ({"x": "a"}, {"a", "b"}, "node head is not power-managed"),
    ],
)
def test_invalid_placements_are_refused_by_name(assignment, powered, message) -> None:
    nodes = [node("head", 4, head=True), node("a", 10), node("b", 10)]
    problem = problem_from(nodes, [Container("x", "a", 1.0, 0)])
    with pytest.raises(PlanError, match=message):
        build_plan(
            problem,
            placement(assignment, powered | ({"head"} if "head" not in message else set())),
            "t",
        )
