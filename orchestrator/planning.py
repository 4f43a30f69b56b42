"""snapshot -> problem -> placement -> plan: the pure pipeline shared by the CLI, the controller
and the simulator's production policy."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from .model import ClusterSnapshot, Inventory
from .plan import Plan
from .planner.build import build_plan
from .planner.problem import Placement, PlacementProblem, Policy, Weights
from .planner.registry import get_policy

DEFAULT_POLICY = "peakpack"
#: re-solves allowed to separate containers that publish the same host port
MAX_PORT_ROUNDS = 5


def eligibility(inventory: Inventory, snapshot: ClusterSnapshot) -> dict[str, frozenset[str]]:
    """Where each container may run: an immovable one only where it is; one that publishes a host
    port nowhere another container already publishes that port (migration preflight refuses both,
    so the planner must not propose them)."""
    holders: dict[str, set[str]] = defaultdict(set)
    for c in snapshot.containers:
        for port in c.ports:
            holders[port].add(c.node)
    everywhere = frozenset(inventory.node_names)
    result: dict[str, frozenset[str]] = {}
    for c in snapshot.containers:
        if c.immovable is not None:
            result[c.name] = frozenset({c.node})
        elif c.ports:
            taken = {n for p in c.ports for n in holders[p] if n != c.node}
            if taken:
                result[c.name] = everywhere - taken
    return result


def port_clashes(snapshot: ClusterSnapshot, assignment: Mapping[str, str]) -> dict[str, str]:
    """Containers the placement puts on a node where another container publishes one of their
    ports -> that node. Containers that stay where they are keep their ports, so the mover yields."""
    seen: dict[tuple[str, str], str] = {}
    clashes: dict[str, str] = {}
    for c in sorted(snapshot.containers, key=lambda c: (assignment[c.name] != c.node, c.name)):
        node = assignment[c.name]
        for port in c.ports:
            if (node, port) in seen:
                clashes[c.name] = node
            else:
                seen[(node, port)] = c.name
    return clashes


def make_plan(
    inventory: Inventory,
    snapshot: ClusterSnapshot,
    *,
    policy: str = DEFAULT_POLICY,
    time_limit_s: float = 10.0,
    weights: Weights | None = None,
    dry_run: bool = True,
) -> Plan:
    """Solve the placement for `snapshot` with the named policy and order it into a plan."""
    solver = get_policy(policy)
    problem = PlacementProblem(
        inventory=inventory,
        snapshot=snapshot,
        weights=weights or Weights(),
        time_limit_s=time_limit_s,
        eligible=eligibility(inventory, snapshot),
    )
    placement = _solve_without_port_clashes(solver, problem)
    plan = build_plan(problem, placement, policy)
    return replace(plan, dry_run=dry_run, based_on_version=snapshot.version)


def _solve_without_port_clashes(solver: Policy, problem: PlacementProblem) -> Placement:
    """Two movers may pick the same node for the same port; forbid that node to the one that
    clashed and solve again (clashes are rare, so this converges in a round or two)."""
    eligible = dict(problem.eligible)
    everywhere = frozenset(problem.inventory.node_names)
    for _ in range(MAX_PORT_ROUNDS):
        placement = solver.solve(problem)
        clashes = port_clashes(problem.snapshot, placement.assignment)
        if not clashes:
            return placement
        for name, node in clashes.items():
            eligible[name] = eligible.get(name, everywhere) - {node}
        problem = replace(problem, eligible=dict(eligible))
    where = problem.snapshot.placement()  # give up moving the containers that keep clashing
    problem = replace(problem, eligible={**eligible, **{n: frozenset({where[n]}) for n in clashes}})
    return solver.solve(problem)
