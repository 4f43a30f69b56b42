"""One capacity rule: a load exactly at the cap fits everywhere, one just above fits nowhere.

Each case has one container `c` on a big node `src` that it may not run on (eligible only on
`dst`), so every policy wants to move it to `dst`: 3 cpus x cap 0.7 = 2.1 cores (2.0999999999999996
in floats, so the at-cap load needs the shared epsilon) and 2000 MB x 0.95 = 1900 MB of memory.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from peakpack.orchestrator.decide.planner.budget import Budget
from peakpack.orchestrator.decide.planner.build import build_plan
from peakpack.orchestrator.decide.planner.cpsat import solve_nodes
from peakpack.orchestrator.decide.planner.heuristic import start
from peakpack.orchestrator.decide.planner.instance import Instance
from peakpack.orchestrator.decide.planner.objective import violations
from peakpack.orchestrator.decide.planner.packing import Packing
from peakpack.orchestrator.decide.planner.problem import Placement, PlacementProblem
from peakpack.orchestrator.decide.planner.registry import get_policy
from peakpack.orchestrator.domain import capacity
from peakpack.orchestrator.domain.errors import PlanError
from peakpack.orchestrator.domain.model import Container
from peakpack.orchestrator.domain.plan import Action, SolverReport, check_capacity, replay
from tests.support.synthetic import node, problem_from

#: (cpu cores, memory MB) of `c`: exactly at dst's cap in one resource, or 1e-3 above it.
LOADS = {
    ("cpu", "at"): (2.1, 100.0),
    ("cpu", "above"): (2.1 + 1e-3, 100.0),
    ("memory", "at"): (0.1, 1900.0),
    ("memory", "above"): (0.1, 1900.0 + 1e-3),
}
CASES = [pytest.param(resource, where, id=f"{resource}-{where}") for resource, where in LOADS]
SRC, DST = 0, 1  # node indices in the Instance


def problem(resource: str, where: str, dst_on: bool = True) -> PlacementProblem:
    cpu, memory_mb = LOADS[(resource, where)]
    return problem_from(
        [node("src", 8, 65536), node("dst", 3, 2000)],
        [Container("c", "src", cpu, memory_mb)],
        off=() if dst_on else ("dst",),
        cap=0.7,
        memory_cap=0.95,
        eligible={"c": frozenset({"dst"})},
        time_limit_s=5.0,
    )


def test_the_rule_on_floats_and_arrays() -> None:
    cpu_cap, mem_cap = capacity.capacity(3, 2000, 0.7, 0.95)
    assert cpu_cap < 2.1  # float noise the rule must forgive
    assert capacity.fits(2.1, 1900.0, cpu_cap, mem_cap)
    assert not capacity.fits(2.101, 1900.0, cpu_cap, mem_cap)
    assert not capacity.fits(2.1, 1900.001, cpu_cap, mem_cap)
    caps = capacity.capacity(np.array([3.0, 3.0, 3.0]), np.array([2000.0] * 3), 0.7, 0.95)
    got = capacity.fits(np.array([2.1, 2.101, 0.0]), np.array([0.0, 0.0, 1900.001]), *caps)
    assert got.tolist() == [True, False, False]


def test_integer_units_never_accept_what_the_rule_rejects() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        k = int(rng.integers(1, 8))
        demands = rng.uniform(0.0, 1.0, k) * rng.choice([1.0, 1e-3, 1e3])
        limit = float(demands.sum()) + float(rng.normal(0.0, 1e-5))
        scale = float(rng.choice([1.0, 1e2, 1e5]))
        units, (limit_units,) = capacity.integer_units(demands, [limit], scale)
        if sum(units) <= limit_units:
            assert capacity.within(float(demands.sum()), limit)
    # an exact fit survives the rounding
    units, limits = capacity.integer_units([2.1], [0.7 * 3], 1e5)
    assert units == limits == [210000]


@pytest.mark.parametrize("resource, where", CASES)
def test_replay_and_check_capacity(resource: str, where: str) -> None:
    p = problem(resource, where)
    inv, snap = p.inventory, p.snapshot
    move = [Action.migrate("c", "src", "dst")]
    after = snap.with_changes(moves={"c": "dst"})
    if where == "at":
        assert replay(inv, snap, move).placement() == {"c": "dst"}
        check_capacity(inv, after)
    else:
        what = "CPU" if resource == "cpu" else "memory"
        with pytest.raises(PlanError, match=f"node dst: {what}"):
            replay(inv, snap, move)
        with pytest.raises(PlanError, match="node dst"):
            check_capacity(inv, after)


@pytest.mark.parametrize("resource, where", CASES)
def test_objective_violations(resource: str, where: str) -> None:
    p = problem(resource, where)
    found = violations(p, {"c": "dst"}, frozenset({"src", "dst"}))
    if where == "at":
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith("node dst:"), found


@pytest.mark.parametrize("resource, where", CASES)
def test_build_plan(resource: str, where: str) -> None:
    p = problem(resource, where)
    wanted = Placement({"c": "dst"}, frozenset({"src", "dst"}), SolverReport("T", 0, 0, 0))
    plan = build_plan(p, wanted, "t")
    if where == "at":
        assert plan.migrations == (Action.migrate("c", "src", "dst"),)
        assert plan.notes == ()
    else:  # no order keeps the cap: the move is dropped, c stays
        assert plan.migrations == ()
        assert any("dropped move of c" in n for n in plan.notes)


@pytest.mark.parametrize("resource, where", CASES)
def test_packing(resource: str, where: str) -> None:
    pack = Packing(Instance.build(problem(resource, where)))
    assert bool(pack.fits(0)[DST]) is (where == "at")
    assert not pack.over_cap().any()
    pack.move(0, DST)
    assert pack.over_cap().tolist() == [False, where == "above"]


@pytest.mark.parametrize("name", ["ffd", "bestfit95", "spread", "dotproduct"])
@pytest.mark.parametrize("resource, where", CASES)
def test_baselines(name: str, resource: str, where: str) -> None:
    # best fit packs to its own cap (0.95 by default): give it the problem's
    policy = get_policy(name, cap=0.7) if name == "bestfit95" else get_policy(name)
    placement = policy.solve(problem(resource, where))
    # a container that fits nowhere stays where it is
    assert placement.assignment["c"] == ("dst" if where == "at" else "src")


@pytest.mark.parametrize("dst_on", [True, False], ids=["dst-on", "dst-off"])
@pytest.mark.parametrize("resource, where", CASES)
def test_heuristic(resource: str, where: str, dst_on: bool) -> None:
    """Repair moves c onto a powered dst, or wakes dst for it."""
    pack = Packing(Instance.build(problem(resource, where, dst_on=dst_on)))
    start(pack)
    assert int(pack.assign[0]) == (DST if where == "at" else SRC)
    if not dst_on:  # woken only for a load that fits
        assert bool(pack.on[DST]) is (where == "at")


@pytest.mark.parametrize("resource, where", CASES)
def test_cpsat(resource: str, where: str) -> None:
    pack = Packing(Instance.build(problem(resource, where)))
    res = solve_nodes(pack, [SRC, DST], budget=Budget(limit=5.0, deadline=math.inf), work=5.0)
    if where == "at":
        assert res is not None and res.assign == {0: DST}
    else:  # dst is c's only node and it does not fit there
        assert res is None


@pytest.mark.parametrize("resource, where", CASES)
def test_peakpack_policy(resource: str, where: str) -> None:
    placement = get_policy("peakpack").solve(problem(resource, where))
    if where == "at":
        assert placement.assignment["c"] == "dst"
        assert placement.report.status != "INFEASIBLE"
    else:
        assert placement.assignment["c"] == "src"
        assert placement.report.status == "INFEASIBLE"
