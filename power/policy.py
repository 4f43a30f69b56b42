"""The last check on a plan's power actions before it runs, pure.

Every power decision is made before solving (orchestrator/planner/rules.py: grace, spare nodes,
quarantine, break-even become problem data), so a plan never empties a node that then stays on.
One thing can change between planning and running: a node may be quarantined meanwhile (its
wake-up failed in a concurrent `apply`). A wake-up of a quarantined node is removed here, and
with it anything that needed the node; normally this finds nothing to remove.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from peakpack.orchestrator.domain.model import ClusterSnapshot, Inventory, cluster_metrics
from peakpack.orchestrator.domain.plan import ActionKind, Plan, PlanError, replay


def adjust_plan(plan: Plan, snapshot: ClusterSnapshot, inventory: Inventory,
                quarantined: Mapping[str, str]) -> Plan:
    """The plan without wake-ups of quarantined nodes; notes say why. Migrations that needed a
    refused wake-up would be stranded, so then the plan is reduced to nothing."""
    refused = [a for a in plan.actions if a.kind is ActionKind.POWER_ON and a.node in quarantined]
    if not refused:
        return plan
    notes = [*plan.notes, *(f"{a.node} not woken: quarantined ({quarantined[a.node or '']}); "
                            f"`peakpack power clear {a.node}` once fixed" for a in refused)]
    keep = tuple(a for a in plan.actions if a not in refused)
    try:
        after = replay(inventory, snapshot, keep)
    except PlanError as exc:
        notes.append(f"plan reduced to nothing: {exc}")
        keep, after = (), snapshot
    return replace(plan, actions=keep, after=cluster_metrics(inventory, after), notes=tuple(notes))
