"""The last check on a plan's power actions before it runs (`adjust_plan`, pure; `PowerCheck`
reads the quarantine and logs what it removed).

Every power decision is made before solving (orchestrator/decide/planner/rules.py: grace, spare nodes,
quarantine, break-even become problem data), so a plan never empties a node that then stays on.
One thing can change between planning and running: a node may be quarantined meanwhile (its
wake-up failed in a concurrent `apply`). A wake-up of a quarantined node is removed here, and
with it anything that needed the node; normally this finds nothing to remove.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from peakpack.orchestrator.decide.planner.explain import all_stay
from peakpack.orchestrator.domain.errors import PlanError
from peakpack.orchestrator.domain.model import ClusterSnapshot, Inventory, cluster_metrics
from peakpack.orchestrator.domain.plan import ActionKind, Plan, replay
from peakpack.orchestrator.domain.ports import PowerRepo


def adjust_plan(plan: Plan, snapshot: ClusterSnapshot, inventory: Inventory,
                quarantined: Mapping[str, str]) -> Plan:
    """The plan without wake-ups of quarantined nodes; notes say why. Migrations that needed a
    refused wake-up would be stranded, so then the plan is reduced to nothing, and its
    explanations say that every container stays (no container's line mentions a wake-up, so
    they hold otherwise)."""
    refused = [a for a in plan.actions if a.kind is ActionKind.POWER_ON and a.node in quarantined]
    if not refused:
        return plan
    notes = [*plan.notes, *(f"{a.node} not woken: quarantined ({quarantined[a.node or '']}); "
                            f"`peakpack power clear {a.node}` once fixed" for a in refused)]
    keep = tuple(a for a in plan.actions if a not in refused)
    explanations = plan.explanations
    try:
        after = replay(inventory, snapshot, keep)
    except PlanError as exc:
        notes.append(f"plan reduced to nothing: {exc}")
        keep, after = (), snapshot
        quarantined_now = ", ".join(str(a.node) for a in refused)
        explanations = all_stay(snapshot, f"the plan was reduced to nothing: it needed {quarantined_now}, "
                                          "quarantined since it was made")
    return replace(plan, actions=keep, after=cluster_metrics(inventory, after), notes=tuple(notes),
                   explanations=explanations)


class PowerCheck:
    """`adjust_plan` against the quarantine as the store knows it now, each note logged: the last
    check of a plan that may be executed."""

    def __init__(self, inventory: Inventory, power: PowerRepo, log: Callable[[str], None]) -> None:
        self.inventory, self.power, self.log = inventory, power, log

    def __call__(self, plan: Plan, snapshot: ClusterSnapshot) -> Plan:
        adjusted = adjust_plan(plan, snapshot, self.inventory, self.power.quarantined())
        for note in adjusted.notes[len(plan.notes):]:
            self.log(f"power policy: {note}")
        return adjusted
