"""When to switch nodes off and on, pure: it edits the planner's power actions with what the
planner does not know (how long a node has been idle, quarantines, spare capacity, the energy a
boot costs).

- power_off only when the node will host nothing, is power-managed and not the head, has been
  idle for the grace period, is not quarantined, and staying off for one epoch saves more energy
  than a later boot costs (break-even time); `spare_nodes` empty nodes stay on.
- power_on as the planner asks (the predicted load does not fit under the cap on the powered
  nodes), except for quarantined nodes: a node that failed to wake needs an operator first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from orchestrator.model import ClusterSnapshot, Inventory, NodeSpec, cluster_metrics
from orchestrator.plan import Action, ActionKind, Plan, PlanError, replay


@dataclass(frozen=True)
class NodeFacts:
    """What the store remembers about nodes."""

    idle_since: dict[str, datetime]
    quarantined: dict[str, str]


def break_even_seconds(spec: NodeSpec, boot_seconds: float, boot_power_w: float | None) -> float:
    """How long a node must stay off for the idle energy saved to pay for booting it again."""
    idle = spec.power.at(0.0)
    boot_j = boot_seconds * (boot_power_w if boot_power_w is not None else spec.power.at(1.0))
    return boot_j / idle if idle > 0 else float("inf")


def off_refusal(inventory: Inventory, node: str, now: datetime, facts: NodeFacts) -> str | None:
    spec = inventory.node(node)
    pp = inventory.power_policy
    if not spec.can_power_off:
        return "head node or not power-managed"
    if node in facts.quarantined:
        return f"quarantined: {facts.quarantined[node]}"
    since = facts.idle_since.get(node)
    idle_for = (now - since).total_seconds() if since else 0.0
    if idle_for < pp.grace_seconds:
        return f"idle for {idle_for:.0f} s of the {pp.grace_seconds:.0f} s grace period"
    needed = break_even_seconds(spec, pp.boot_seconds, pp.boot_power_w)
    if needed > inventory.cluster.epoch_seconds:
        return f"staying off one epoch ({inventory.cluster.epoch_seconds} s) saves less than a boot costs ({needed:.0f} s)"
    return None


def adjust_plan(plan: Plan, snapshot: ClusterSnapshot, inventory: Inventory, facts: NodeFacts,
                now: datetime) -> Plan:
    """The plan with power actions the policy refuses removed; notes say why."""
    keep: list[Action] = []
    notes = list(plan.notes)
    spare = inventory.power_policy.spare_nodes
    offs = [a for a in plan.actions if a.kind is ActionKind.POWER_OFF]
    # keep the largest candidates on as spare capacity
    spared = {a.node for a in sorted(offs, key=lambda a: -inventory.node(a.node or "").cpus)[:spare]}
    for a in plan.actions:
        if a.kind is ActionKind.POWER_OFF:
            assert a.node
            why = "kept as spare capacity" if a.node in spared else off_refusal(inventory, a.node, now, facts)
            if why:
                notes.append(f"{a.node} stays on: {why}")
                continue
        if a.kind is ActionKind.POWER_ON and a.node in facts.quarantined:
            notes.append(f"{a.node} not woken: quarantined ({facts.quarantined[a.node]}); "
                         f"`peakpack power clear {a.node}` once fixed")
            continue
        keep.append(a)
    if len(keep) == len(plan.actions):
        return plan
    try:
        after = replay(inventory, snapshot, keep)
    except PlanError as exc:  # a refused wake-up strands migrations onto that node: move nothing
        notes.append(f"plan reduced to nothing: {exc}")
        keep, after = [], snapshot
    return replace(plan, actions=tuple(keep), after=cluster_metrics(inventory, after), notes=tuple(notes))


def idle_updates(snapshot: ClusterSnapshot, facts: NodeFacts, now: datetime) -> dict[str, datetime | None]:
    """New idle_since values: set when a powered node is first seen empty, cleared when it hosts
    work again or is off."""
    hosting = {c.node for c in snapshot.containers}
    updates: dict[str, datetime | None] = {}
    for n in snapshot.nodes:
        empty = n.powered and n.name not in hosting
        if empty and n.name not in facts.idle_since:
            updates[n.name] = now
        elif not empty and n.name in facts.idle_since:
            updates[n.name] = None
    return updates
