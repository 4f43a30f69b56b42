"""One line per container of why a plan moves it or leaves it where it is.

Pure: the problem and the plan in, {container: line} out. Reasons, first that applies:

- moves: off a node over the cap; to empty a node that the plan switches off (with the watts
  that node draws now, from its power curve: a model figure); else to lower the objective's
  other terms (devils sharing a node, a group spread over nodes, a less efficient node);
- stays: cannot be live-migrated (the opt-out label or another reason found by observation);
  its node is held (an unsettled migration, a node being drained); a maintenance window; the
  migration budget left cannot empty its node; its node may not be switched off (power-off budget
  or window, or a power rule: grace, break-even, quarantine); pinned by hysteresis; may run on no
  other node; otherwise moving it would cost more than it saves.

A container on a node that plans under a lowered cap (its latency-sensitive containers stalled,
`decide/qos.py`) gets that cap and why appended, moving or staying.
"""

from __future__ import annotations

from collections import defaultdict

from ...domain.capacity import node_cap, over_cap_nodes
from ...domain.model import ClusterSnapshot, Container, Inventory, node_loads
from ...domain.plan import ActionKind, Plan
from .problem import PlacementProblem


def explain(problem: PlacementProblem, plan: Plan) -> dict[str, str]:
    """{container: why it moves or stays} for every container of the problem's snapshot."""
    inv, snap = problem.inventory, problem.snapshot
    moves: dict[str, list[str]] = defaultdict(list)
    for a in plan.migrations:
        assert a.container and a.target
        moves[a.container].append(a.target)
    switched_off = {a.node for a in plan.actions if a.kind is ActionKind.POWER_OFF}
    power_offs = len(switched_off)
    over = over_cap_nodes(inv, snap.containers, problem.cpu_cap)
    staying: dict[str, int] = defaultdict(int)  # containers on each node after the plan
    for c in snap.containers:
        staying[moves[c.name][-1] if c.name in moves else c.node] += 1
    draws = _draws(inv, snap)
    lines: dict[str, str] = {}
    for c in snap.containers:
        if c.name in moves:
            route = " -> ".join([c.node, *moves[c.name]])
            if c.node in over:
                cap = node_cap(inv.node(c.node), problem.cpu_cap)
                why = f"{c.node} is over its {cap:.0%} CPU cap or its memory cap"
            elif c.node in switched_off:
                why = (f"empties {c.node}, which is switched off: saves {draws[c.node]:.0f} W "
                       "(power model, its draw now)")
            else:
                why = "lowers the objective (devils sharing a node, a group spread out, or power)"
            lines[c.name] = f"moves {route}: {why}"
        else:
            lines[c.name] = f"stays on {c.node}: " + _why_stays(
                problem, c, len(plan.migrations), power_offs, staying[c.node]
            )
        if c.node in problem.lowered_caps:
            lines[c.name] += f" ({c.node}: {problem.lowered_caps[c.node]})"
    return lines


def _why_stays(
    problem: PlacementProblem, c: Container, migrations: int, power_offs: int, neighbours: int
) -> str:
    """`neighbours`: containers on c's node after the plan, c included (the moves emptying it
    would take)."""
    snap, allow, node = problem.snapshot, problem.allowance, c.node
    spec = problem.inventory.node(node)
    if c.immovable is not None:
        return f"cannot be live-migrated ({c.immovable})"
    if node in snap.held:
        return f"its node is held ({snap.held[node]})"
    if not allow.consolidate:
        return f"maintenance {allow.consolidate_why}: only cap fixes now"
    if allow.migrations is not None and allow.migrations - migrations < neighbours:
        left = max(allow.migrations - migrations, 0)
        return (f"emptying {node} takes {neighbours} move(s), the migration budget leaves {left} "
                f"after this plan's {migrations} ({allow.migrations_why})")
    if spec.can_power_off and allow.power_offs is not None and power_offs >= allow.power_offs:
        return f"{node} may not be switched off now ({allow.power_offs_why})"
    if c.name in problem.pinned:
        return problem.pinned[c.name]
    if node in problem.keep_power:
        return f"{node} may not be switched off this epoch ({problem.keep_power[node]}): emptying it saves nothing"
    allowed = problem.eligible.get(c.name)
    if allowed is not None and allowed <= {node}:
        return "it may run on no other node"
    cost = problem.weights.migration_cost(c.memory_mb)
    return (f"not worth its migration cost ({cost:.0f} W averaged over the epoch): moving it "
            "empties no node worth switching off")


def _draws(inv: Inventory, snap: ClusterSnapshot) -> dict[str, float]:
    """Watts each powered node draws at its load now, from its power curve."""
    loads = node_loads(snap.containers)
    return {
        spec.name: spec.power.at(loads[spec.name].cpu / spec.cpus if spec.name in loads else 0.0)
        for spec in inv.nodes
    }
