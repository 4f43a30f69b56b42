"""Baselines: the textbook behaviour of each, their own caps, and the registry."""

from __future__ import annotations

import pytest

from peakpack.orchestrator.decide.planner.build import build_plan
from peakpack.orchestrator.decide.planner.objective import evaluate, violations
from peakpack.orchestrator.decide.planner.registry import POLICY_NAMES, get_policy
from peakpack.orchestrator.domain.errors import PeakpackError
from peakpack.orchestrator.domain.model import Container
from tests.support.synthetic import node, problem_from, random_problem


def four_nodes(off=()):
    nodes = [node(f"w{i}", 10, 10000) for i in range(4)]
    sizes = [4.0, 3.0, 3.0, 2.5, 2.0, 1.5]
    containers = [Container(f"c{i}", f"w{i % 2}", s, 500) for i, s in enumerate(sizes)]
    return problem_from(nodes, containers, off=off)


def test_registry_names_and_errors() -> None:
    assert POLICY_NAMES == ("peakpack", "noop", "ffd", "bestfit95", "spread", "dotproduct")
    for name in POLICY_NAMES:
        assert get_policy(name).name == name
    with pytest.raises(PeakpackError, match="unknown name 'best'; choose one of peakpack, noop"):
        get_policy("best")
    with pytest.raises(PeakpackError, match="policy ffd: unknown option"):
        get_policy("ffd", speed=3)
    assert get_policy("bestfit95", cap=0.9).cap == 0.9
    assert get_policy("peakpack", patience=3).search.patience == 3


@pytest.mark.parametrize("name", POLICY_NAMES[1:])
@pytest.mark.parametrize("seed", range(3))
def test_baselines_are_feasible_scored_and_replayable(name: str, seed: int) -> None:
    problem = random_problem(120, 30, seed=seed)
    placement = get_policy(name).solve(problem)
    cap = placement.cap
    assert placement.report.status == "HEURISTIC"
    if name != "noop":  # noop keeps whatever over-cap nodes the snapshot has
        assert violations(problem, placement.assignment, placement.powered, cap) == []
    assert placement.report.objective == pytest.approx(
        evaluate(problem, placement.assignment, placement.powered).total
    )
    plan = build_plan(problem, placement, name)
    assert plan.policy == name
    if plan.notes:  # re-packing from scratch can need staged moves, which the plan prices
        assert plan.solver.objective > placement.report.objective
    else:
        assert plan.solver == placement.report


def test_ffd_fills_nodes_in_order() -> None:
    placement = get_policy("ffd").solve(four_nodes())
    # cap 7: w0 takes 4 + 3; w1 takes 3 + 2.5 (2.0 would make 7.5: it opens w2); 1.5 fills w1
    assert placement.assignment == {
        "c0": "w0",
        "c1": "w0",
        "c2": "w1",
        "c3": "w1",
        "c4": "w2",
        "c5": "w1",
    }
    assert placement.powered == frozenset({"w0", "w1", "w2"})


def test_bestfit_packs_to_its_own_cap_of_95_percent() -> None:
    problem = four_nodes()
    placement = get_policy("bestfit95").solve(problem)
    assert placement.cap == 0.95
    assert len(placement.powered) == 2  # 16 cores fit two nodes at 9.5, not at 7
    assert violations(problem, placement.assignment, placement.powered)  # over the 0.7 cap
    build_plan(problem, placement, "bestfit95")  # replays under its own cap


def test_spread_balances_over_the_powered_nodes() -> None:
    problem = four_nodes()
    placement = get_policy("spread").solve(problem)
    assert placement.powered == frozenset({"w0", "w1", "w2", "w3"})  # never switches off
    loads = {n: 0.0 for n in placement.powered}
    for c in problem.snapshot.containers:
        loads[placement.assignment[c.name]] += c.cpu
    # largest first onto the least loaded: 4, 3, 3, 2.5 one each; 2 joins 2.5; 1.5 joins a 3
    assert sorted(loads.values()) == [3.0, 4.0, 4.5, 4.5]


def test_spread_wakes_nodes_only_when_nothing_powered_fits() -> None:
    problem = four_nodes(off=["w2", "w3"])  # 16 cores on two nodes of cap 7: one must wake
    placement = get_policy("spread").solve(problem)
    assert len(placement.powered) == 3


def test_dotproduct_fills_a_node_before_opening_the_next() -> None:
    placement = get_policy("dotproduct").solve(four_nodes())
    by_node: dict[str, float] = {}
    for c in four_nodes().snapshot.containers:
        by_node[placement.assignment[c.name]] = by_node.get(placement.assignment[c.name], 0) + c.cpu
    assert sorted(by_node.values(), reverse=True) == [7.0, 7.0, 2.0]


def test_container_too_big_for_any_node_stays_put() -> None:
    nodes = [node("a", 10), node("b", 10)]
    problem = problem_from(nodes, [Container("huge", "a", 8.0, 0), Container("x", "b", 1.0, 0)])
    for name in POLICY_NAMES:
        placement = get_policy(name).solve(problem)
        assert placement.assignment["huge"] == "a"
