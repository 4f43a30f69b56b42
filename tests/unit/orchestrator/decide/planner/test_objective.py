"""The shared objective, the constraint checker and the lower bound, on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from peakpack.orchestrator.decide.planner.bounds import fluid_power_bound, forced_migration_bound, lower_bound
from peakpack.orchestrator.decide.planner.instance import Instance
from peakpack.orchestrator.decide.planner.objective import evaluate, violations
from peakpack.orchestrator.decide.planner.packing import Packing
from peakpack.orchestrator.decide.planner.problem import Weights
from peakpack.orchestrator.decide.planner.registry import POLICY_NAMES, get_policy
from peakpack.orchestrator.domain.model import Container, ContainerClass
from tests.support.synthetic import brute_force_optimum, node, problem_from, random_problem, tiny_problem

DEVIL = ContainerClass.DEVIL


def two_nodes(**kw):
    nodes = [node("a", 10, 10000, 100, 200), node("b", 10, 10000, 100, 200)]
    containers = [
        Container("x", "a", 2.0, 1024, cls=DEVIL, group="g"),
        Container("y", "a", 3.0, 2048, cls=DEVIL, group="g"),
        Container("z", "b", 1.0, 512, cls=DEVIL),
    ]
    return problem_from(nodes, containers, weights=Weights(6, 3, 10, 2), **kw)


def test_evaluate_adds_the_four_terms_in_watts() -> None:
    problem = two_nodes()
    same = evaluate(problem, {"x": "a", "y": "a", "z": "b"}, frozenset({"a", "b"}))
    # a at 5/10 cores: 150 W, b at 1/10: 110 W; one devil pair on a; group g on one node
    assert (same.power_w, same.migration_w, same.contention_w, same.affinity_w) == (260, 0, 10, 0)
    moved = evaluate(problem, {"x": "b", "y": "a", "z": "b"}, frozenset({"a", "b"}))
    # x (1 GB) moved: 6 + 3 W; devils now pair on b; g spans two nodes
    assert (moved.power_w, moved.migration_w, moved.contention_w, moved.affinity_w) == (
        260,
        9,
        10,
        2,
    )
    assert moved.total == 281
    packed = evaluate(problem, {"x": "a", "y": "a", "z": "a"}, frozenset({"a"}))
    # b off: a at 6/10 = 160 W; z (0.5 GB) moved: 7.5 W; three devils: three pairs
    assert packed.total == 160 + 7.5 + 30


def test_standby_counts_the_idle_power_of_powered_nodes_for_the_further_epochs() -> None:
    base = two_nodes()
    problem = problem_from(base.inventory.nodes, base.snapshot.containers,
                           weights=Weights(6, 3, 10, 2, off_epochs=2.5))
    both = evaluate(problem, {"x": "a", "y": "a", "z": "b"}, frozenset({"a", "b"}))
    assert both.standby_w == 1.5 * (100 + 100) and both.total == 260 + 10 + 300
    packed = evaluate(problem, {"x": "a", "y": "a", "z": "a"}, frozenset({"a"}))
    assert packed.standby_w == 150 and packed.total == 160 + 7.5 + 30 + 150
    assert evaluate(two_nodes(), {"x": "a", "y": "a", "z": "b"}, frozenset({"a", "b"})).standby_w == 0


def test_violations_name_each_broken_rule() -> None:
    nodes = [node("head", 4, head=True), node("a", 10, 1000), node("b", 10, 1000)]
    containers = [Container("x", "a", 6.0, 800), Container("y", "b", 2.0, 300)]
    problem = problem_from(nodes, containers, eligible={"y": frozenset({"b"})})
    assert violations(problem, {"x": "a", "y": "b"}, frozenset({"head", "a", "b"})) == []
    found = violations(problem, {"x": "a", "y": "a"}, frozenset({"a", "b"}))
    assert any("y: node a is not eligible" in f for f in found)
    assert any("node a: CPU 8.000 over cap 7.000" in f for f in found)
    assert any("node a: memory 1100 over cap 950" in f for f in found)
    assert any("node head: not power-managed" in f for f in found)
    assert violations(problem, {"x": "a", "y": "b"}, frozenset({"head", "a"}))[0] == (
        "container y: placed on powered-off node b"
    )
    assert violations(problem, {"x": "a", "y": "b"}, frozenset({"head", "a", "b"}), cap=0.5)


def test_move_prices_are_exact_differences_of_evaluate() -> None:
    problem = random_problem(60, 12, seed=3, devil_share=0.4, group_share=0.5)
    inst = Instance.build(problem)
    pack = Packing(inst)
    rng = np.random.default_rng(0)
    on = np.flatnonzero(pack.on)
    for _ in range(80):
        c = int(rng.integers(inst.n_containers))
        targets = on
        before = pack.objective()
        deltas = pack.move_delta(c, targets)
        t = int(rng.choice(targets))
        pack.move(c, t)
        assert pack.objective() - before == pytest.approx(deltas[list(targets).index(t)], abs=1e-6)


def test_local_objective_tracks_evaluate() -> None:
    problem = random_problem(40, 10, seed=5, devil_share=0.5, group_share=0.5)
    inst = Instance.build(problem)
    pack = Packing(inst)
    nodes = np.flatnonzero(pack.on)[:3].tolist()
    conts = [c for n in nodes for c in pack.members[n]]
    before_local, before = pack.local_objective(nodes, conts), pack.objective()
    for c in conts[::2]:
        pack.move(c, nodes[(nodes.index(int(pack.assign[c])) + 1) % len(nodes)])
    assert pack.local_objective(nodes, conts) - before_local == pytest.approx(
        pack.objective() - before, abs=1e-6
    )


def test_fluid_bound_fills_the_most_efficient_capacity_first() -> None:
    nodes = [
        node("head", 4, idle_w=50, max_w=90, head=True),  # must stay on: 50 W whatever happens
        node("big", 20, idle_w=100, max_w=300),  # at the cap (14 cores): 240 W, 17.1 W/core
        node("small", 10, idle_w=100, max_w=200),  # at the cap (7 cores): 170 W, 24.3 W/core
    ]
    containers = [Container("x", "big", 7.0, 0), Container("y", "small", 7.0, 0)]
    problem = problem_from(nodes, containers)
    inst = Instance.build(problem)
    # The head's dynamic slope (40 W / 4 cores = 10 W/core) is cheapest: 2.8 cores there, 10.0
    # W/core x 2.8 = 28 W; the remaining 11.2 cores at big's 240/14 W per core = 192 W.
    assert fluid_power_bound(inst) == pytest.approx(50 + 28 + 11.2 * 240 / 14)
    assert forced_migration_bound(inst) == 0


def test_forced_migrations_are_in_the_bound() -> None:
    nodes = [node("a", 10), node("b", 10)]
    containers = [
        Container("x", "a", 4.0, 1024),  # 9 W to move, 2.25 W per core
        Container("y", "a", 4.0, 4096),  # 18 W to move
        Container(
            "z",
            "b",
            1.0,
            0,
        ),  # must leave b: 6 W
    ]
    problem = problem_from(nodes, containers, eligible={"z": frozenset({"a"})})
    # a is 1 core over its cap of 7: a quarter of moving x, 2.25 W; plus z's 6 W
    assert forced_migration_bound(Instance.build(problem)) == pytest.approx(2.25 + 6)


@pytest.mark.parametrize("seed", range(4))
def test_bound_is_below_every_policy(seed: int) -> None:
    problem = random_problem(50, 12, seed=seed, devil_share=0.3, time_limit_s=2)
    bound = lower_bound(Instance.build(problem))
    for name in POLICY_NAMES:
        report = get_policy(name).solve(problem).report
        if name == "peakpack":  # may add CP-SAT's own proven bound
            assert bound - 1e-6 <= report.bound <= report.objective + 1e-6
        else:  # the baselines report the same bound
            assert report.bound == pytest.approx(bound)
        assert bound <= report.objective + 1e-6


@pytest.mark.parametrize("seed", range(8))
def test_bound_is_below_the_brute_force_optimum(seed: int) -> None:
    problem = tiny_problem(seed, containers=6)
    assert lower_bound(Instance.build(problem)) <= brute_force_optimum(problem) + 1e-9
