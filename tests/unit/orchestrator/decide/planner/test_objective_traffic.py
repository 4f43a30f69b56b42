"""The traffic term: what a pair on two nodes costs, priced exactly everywhere the planner prices
(evaluate, move prices, local objectives, CP-SAT, the bound), the plan joining a heavy pair
with its explanation, and pods that keep heavy talkers together."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from peakpack.orchestrator.decide.planner.bounds import lower_bound
from peakpack.orchestrator.decide.planner.build import build_plan
from peakpack.orchestrator.decide.planner.instance import Instance
from peakpack.orchestrator.decide.planner.objective import evaluate
from peakpack.orchestrator.decide.planner.packing import Packing
from peakpack.orchestrator.decide.planner.pods import partition
from peakpack.orchestrator.decide.planner.problem import Weights
from peakpack.orchestrator.decide.planner.registry import get_policy
from peakpack.orchestrator.domain.model import Container
from peakpack.orchestrator.domain.settings import ForecastSettings, PlannerSettings
from tests.support.synthetic import (
    brute_force_optimum,
    cross_node_share,
    node,
    problem_from,
    random_problem,
    tiered_traffic,
    tiny_problem,
)

MB = 1e6


def test_the_weight_is_the_settings_energy_per_byte_over_the_forecast_window_per_epoch() -> None:
    w = Weights.from_settings(PlannerSettings(), epoch_seconds=600)
    assert w.traffic_w_per_mbps == pytest.approx(100 / 1000 * 7200 / 600)  # 1.2 W per MB/s
    lab = Weights.from_settings(PlannerSettings(forecast=ForecastSettings(window_seconds=3600)), 60)
    assert lab.traffic_w_per_mbps == pytest.approx(0.1 * 60)
    assert Weights.from_settings(PlannerSettings(traffic_j_per_gb=0), 600).traffic_w_per_mbps == 0


def pair_problem(rate_mbps: float, weight: float = 1.0, memory_mb: float = 512):
    """Two nodes that may not be switched off (so consolidating saves nothing), a client and a
    server apart, talking at `rate_mbps`."""
    nodes = [node("n1", 8, power_managed=False), node("n2", 8, power_managed=False)]
    containers = [Container("cli", "n1", 1.0, memory_mb), Container("srv", "n2", 1.0, memory_mb),
                  Container("other", "n2", 1.0, memory_mb)]
    return problem_from(nodes, containers, time_limit_s=5, traffic={("cli", "srv"): rate_mbps * MB},
                        weights=Weights(migration_w=6, migration_w_per_gb=3, traffic_w_per_mbps=weight))


def test_evaluate_charges_a_pair_only_while_it_is_split() -> None:
    problem = pair_problem(42)
    on = frozenset({"n1", "n2"})
    assert evaluate(problem, {"cli": "n1", "srv": "n2", "other": "n2"}, on).traffic_w == pytest.approx(42)
    joined = evaluate(problem, {"cli": "n2", "srv": "n2", "other": "n2"}, on)
    assert joined.traffic_w == 0 and joined.energy_w == joined.total
    assert evaluate(pair_problem(42, weight=0), {"cli": "n1", "srv": "n2", "other": "n2"}, on).traffic_w == 0


def traffic_problem(containers: int = 60, nodes: int = 12, seed: int = 3):
    problem = random_problem(containers, nodes, seed=seed, devil_share=0.3, group_share=0.3)
    return replace(problem, traffic=tiered_traffic(problem.snapshot.containers, seed, app_size=6),
                   weights=replace(problem.weights, traffic_w_per_mbps=1.2))


def test_move_prices_and_local_objectives_are_exact_with_traffic() -> None:
    inst = Instance.build(traffic_problem())
    assert inst.graph.edges > 20
    pack = Packing(inst)
    rng = np.random.default_rng(0)
    on = np.flatnonzero(pack.on)
    for _ in range(80):
        c = int(rng.integers(inst.n_containers))
        for targets in (on, on[:3]):  # priced in one bincount, and target by target
            before = pack.objective()
            deltas = pack.move_delta(c, targets)
            t = int(rng.choice(targets))
            pack.move(c, t)
            assert pack.objective() - before == pytest.approx(deltas[list(targets).index(t)], abs=1e-6)
    nodes = on[:3].tolist()
    conts = [c for n in nodes for c in pack.members[n]]
    local, whole = pack.local_objective(nodes, conts), pack.objective()
    for c in conts[::2]:
        pack.move(c, nodes[(nodes.index(int(pack.assign[c])) + 1) % len(nodes)])
    assert pack.local_objective(nodes, conts) - local == pytest.approx(pack.objective() - whole, abs=1e-6)


def explained(problem):
    plan = build_plan(problem, get_policy("peakpack", target_gap=0).solve(problem), "peakpack")
    return plan, plan.explanations


def test_a_heavy_pair_is_joined_and_the_plan_says_why() -> None:
    plan, why = explained(pair_problem(42))  # 42 W of traffic against a 7.5 W move
    assert [(a.container, a.source, a.target) for a in plan.migrations] == [("cli", "n1", "n2")]
    assert why["cli"] == ("moves to join srv (42 MB/s): n1 -> n2; its clients must reconnect at n2's address; "
                          "frozen ~1.8 s (lab default)")
    plan, why = explained(pair_problem(42, weight=0))
    assert not plan.migrations
    assert why["cli"].startswith("stays on n1: not worth its migration cost")


def test_a_light_pair_stays_apart_and_the_plan_says_why() -> None:
    plan, why = explained(pair_problem(3))  # 3 W of traffic against 6 W + 1.5 W to move either
    assert not plan.migrations
    assert why["cli"].startswith("stays: joining srv would cost more than its 3 MB/s saves (8 W to move")
    assert why["srv"].startswith("stays: joining cli would cost more than its 3 MB/s saves")
    heavy = pair_problem(42)
    full = tuple(replace(c, immovable="opted out") if c.node == "n2" else c for c in heavy.snapshot.containers)
    full += (Container("big", "n2", 3.6, 0, immovable="opted out"),)  # n2: 5.6 of its 5.6 cores
    plan, why = explained(replace(heavy, snapshot=replace(heavy.snapshot, containers=full),
                                  eligible={n: frozenset({"n2"}) for n in ("srv", "other", "big")}))
    assert not plan.migrations
    assert why["cli"] == "stays: joining srv (42 MB/s) does not fit on n2; on n1"


@pytest.mark.parametrize("seed", range(6))
def test_the_bound_stays_below_the_brute_force_optimum_with_traffic(seed: int) -> None:
    problem = tiny_problem(seed, containers=5)
    names = [c.name for c in problem.snapshot.containers]
    rng = np.random.default_rng(seed)
    traffic = {(a, b): float(rng.uniform(0, 30)) * MB for i, a in enumerate(names) for b in names[i + 1:]
               if rng.random() < 0.5}
    problem = replace(problem, traffic=traffic, weights=replace(problem.weights, traffic_w_per_mbps=1.0),
                      eligible={names[0]: frozenset({"n0"}), names[1]: frozenset({"n1"})})
    optimum = brute_force_optimum(problem)
    assert lower_bound(Instance.build(problem)) <= optimum + 1e-9
    answer = get_policy("peakpack", target_gap=0).solve(problem)
    assert answer.report.objective == pytest.approx(optimum, abs=1e-6)


def test_the_planner_cuts_the_traffic_crossing_nodes() -> None:
    problem = replace(random_problem(300, 120, seed=2, devil_share=0.0, group_share=0.0, time_limit_s=3),
                      weights=Weights.from_settings(PlannerSettings(), 600))
    traffic = tiered_traffic(problem.snapshot.containers, 2)
    blind = get_policy("peakpack").solve(replace(problem, traffic=traffic,
                                                 weights=replace(problem.weights, traffic_w_per_mbps=0)))
    aware = get_policy("peakpack").solve(replace(problem, traffic=traffic))
    assert cross_node_share(traffic, aware.assignment) < 0.7 * cross_node_share(traffic, blind.assignment)


def test_pods_deal_nodes_joined_by_heavy_traffic_together() -> None:
    inst = Instance.build(traffic_problem(containers=400, nodes=200, seed=4))
    g = inst.graph
    na, nb = inst.orig[g.a], inst.orig[g.b]
    apart = (na != nb) & inst.usable[na] & inst.usable[nb]
    heavy = g.w[apart] >= np.quantile(g.w[apart], 0.75)

    def together(pods: list[np.ndarray]) -> float:
        """Share of the heaviest quarter of pairs between two nodes whose nodes share a pod."""
        pod_of = {int(n): i for i, pod in enumerate(pods) for n in pod.tolist()}
        same = np.array([pod_of[int(x)] == pod_of[int(y)] for x, y in zip(na[apart], nb[apart])])
        return float(same[heavy].mean())

    clumped = partition(inst, pod_nodes=40)
    blind = partition(replace(inst, graph=replace(g, a=g.a[:0], b=g.b[:0], w=g.w[:0])), pod_nodes=40)
    assert sorted(len(p) for p in clumped) == sorted(len(p) for p in blind)  # pods of the same sizes
    assert together(clumped) > 2.5 * together(blind)
