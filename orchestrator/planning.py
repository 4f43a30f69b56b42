"""snapshot -> problem -> placement -> plan: the pure pipeline shared by the CLI, the controller
and the simulator's production policy."""

from __future__ import annotations

from dataclasses import replace

from .model import ClusterSnapshot, Inventory
from .plan import Plan
from .planner.build import build_plan
from .planner.problem import PlacementProblem, Weights
from .planner.registry import get_policy

DEFAULT_POLICY = "peakpack"


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
    )
    placement = solver.solve(problem)
    plan = build_plan(problem, placement, policy)
    return replace(plan, dry_run=dry_run, based_on_version=snapshot.version)
