"""Turn a placement into an ordered plan that replays cleanly on the problem's snapshot.

Order: every `power_on` first (a node is up before anything lands on it), then migrations,
then `power_off` of nodes that ended empty. Migrations are sequenced so that each target stays
within its caps when the container arrives: repeatedly run every pending move that fits now.
When none fits (a cycle: A waits for room on B while B waits for room on A), one container is
bounced through a staging node that is up, eligible and has room (one extra migration, priced
into the reported objective); if no such node exists, or the migration budget has no room for
the extra move, the move is dropped and the container stays where it is (its source then stays
on). Sources may start over the cap; no step makes a target
exceed it, so the final state is within the cap wherever the snapshot was.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...domain.capacity import fits, node_capacity, within
from ...domain.errors import PlanError
from ...domain.model import Container, cluster_metrics
from ...domain.plan import Action, Plan, replay
from .explain import explain
from .objective import evaluate
from .problem import Placement, PlacementProblem


@dataclass
class _Cluster:
    """Per-node CPU and memory while the plan is being sequenced."""

    problem: PlacementProblem
    cap: float
    cpu: dict[str, float]
    mem: dict[str, float]

    def capacity(self, node: str) -> tuple[float, float]:
        inv = self.problem.inventory
        return node_capacity(inv.node(node), inv.cluster, self.cap)

    def fits(self, c: Container, node: str) -> bool:
        return fits(self.cpu[node] + c.cpu, self.mem[node] + c.memory_mb, *self.capacity(node))

    def move(self, c: Container, source: str, target: str) -> None:
        self.cpu[source] -= c.cpu
        self.mem[source] -= c.memory_mb
        self.cpu[target] += c.cpu
        self.mem[target] += c.memory_mb


def _clock_note(problem: PlacementProblem) -> str:
    """What a plan says when the wall-clock safety net, not the work limit, stopped its solve."""
    return (f"the wall-clock safety net ({problem.time_limit_s:g} s) stopped the solver before its work limit "
            f"({problem.work_limit:g} deterministic s): another run may give another plan")


def _validate(problem: PlacementProblem, placement: Placement, policy: str) -> None:
    """A placement that breaks power rules is a policy bug: refuse it by name."""
    inv, snap = problem.inventory, problem.snapshot
    was_on = snap.powered()
    for c in snap.containers:
        node = placement.assignment.get(c.name)
        if node is None:
            raise PlanError(f"policy {policy}: container {c.name} has no node in the placement")
        if node not in placement.powered:
            raise PlanError(f"policy {policy}: container {c.name} placed on powered-off {node}")
    for spec in inv.nodes:
        if not spec.can_power_off and (spec.name in placement.powered) != (spec.name in was_on):
            raise PlanError(f"policy {policy}: node {spec.name} is not power-managed")


def _sequence(
    problem: PlacementProblem, placement: Placement, cap: float, up: set[str]
) -> tuple[list[Action], list[str], float]:
    """Migrations in a safe order; also notes and the cost of extra (bounced) migrations."""
    snap = problem.snapshot
    cluster = _Cluster(problem, cap, dict.fromkeys(problem.inventory.node_names, 0.0), {})
    cluster.mem = dict(cluster.cpu)
    for c in snap.containers:
        cluster.cpu[c.node] += c.cpu
        cluster.mem[c.node] += c.memory_mb
    where = {c.name: c.node for c in snap.containers}
    pending = [c for c in snap.containers if placement.assignment[c.name] != c.node]
    actions: list[Action] = []
    notes: list[str] = []
    bounced: set[str] = set()
    extra = 0.0
    budget = problem.allowance.migrations
    spare = None if budget is None else budget - len(pending)  # bounces the budget leaves room for
    while pending:
        waiting = []
        for c in pending:
            target = placement.assignment[c.name]
            if cluster.fits(c, target):
                actions.append(Action.migrate(c.name, where[c.name], target))
                cluster.move(c, where[c.name], target)
                where[c.name] = target
            else:
                waiting.append(c)
        if len(waiting) < len(pending):
            pending = waiting
            continue
        c, stage = _staging(problem, cluster, waiting, where, placement, up, bounced)
        if stage is None or (spare is not None and spare <= 0):
            why = "no node has room" if stage is None else "the migration budget has no room"
            notes.append(
                f"dropped move of {c.name} to {placement.assignment[c.name]}: no order keeps the "
                f"cap and {why} to stage it; it stays on {where[c.name]}"
            )
            waiting.remove(c)
        else:
            actions.append(Action.migrate(c.name, where[c.name], stage))
            cluster.move(c, where[c.name], stage)
            where[c.name] = stage
            bounced.add(c.name)
            spare = None if spare is None else spare - 1
            extra += problem.weights.migration_cost(c.memory_mb)
            notes.append(f"staged {c.name} on {stage} to break a cycle of moves")
        pending = waiting
    return actions, notes, extra


def _staging(
    problem: PlacementProblem,
    cluster: _Cluster,
    waiting: list[Container],
    where: dict[str, str],
    placement: Placement,
    up: set[str],
    bounced: set[str],
) -> tuple[Container, str | None]:
    """A blocked container to move aside and a node that can hold it meanwhile.

    Prefer a container whose leaving lets another blocked move in, staged on a node no blocked
    move is waiting for. (None: nothing can be staged; the caller drops the first move.)
    """
    wanted = {placement.assignment[c.name] for c in waiting}

    def unblocks(c: Container) -> bool:
        node = where[c.name]
        return any(
            placement.assignment[d.name] == node
            and within(cluster.cpu[node] - c.cpu + d.cpu, cluster.capacity(node)[0])
            for d in waiting
            if d is not c
        )

    ranked = sorted(waiting, key=lambda c: (not unblocks(c), c.cpu, c.memory_mb, c.name))
    nodes = sorted(problem.inventory.node_names, key=lambda n: (n in wanted, n))
    for c in ranked:
        if c.name in bounced:
            continue
        allowed = problem.eligible.get(c.name)
        for node in nodes:
            if (
                node in up
                and node != where[c.name]
                and node != placement.assignment[c.name]
                and (allowed is None or node in allowed)
                and cluster.fits(c, node)
            ):
                return c, node
    return waiting[0], None


def build_plan(problem: PlacementProblem, placement: Placement, policy_name: str) -> Plan:
    """Order a placement into power_on -> migrate -> power_off actions; the plan is replayed on
    the snapshot (raising PlanError if any step breaks a rule) and carries before/after metrics
    and a line per container of why it moves or stays."""
    _validate(problem, placement, policy_name)
    inv, snap = problem.inventory, problem.snapshot
    cap = placement.cap if placement.cap is not None else problem.cpu_cap
    was_on = snap.powered()
    up = set(was_on) | set(placement.powered)
    migrations, notes, extra = _sequence(problem, placement, cap, up)
    final_node = {c.name: c.node for c in snap.containers}
    for a in migrations:
        assert a.container and a.target
        final_node[a.container] = a.target
    hosting = set(final_node.values())
    targets = {a.target for a in migrations}
    power_on = [
        n for n in inv.node_names if n in placement.powered and n not in was_on and n in targets
    ]
    power_off = [
        n for n in inv.node_names if n in was_on and n not in placement.powered and n not in hosting
    ]
    actions = (
        [Action.power_on(n) for n in power_on]
        + migrations
        + [Action.power_off(n) for n in power_off]
    )
    final = replay(inv, snap, actions, cap=cap)
    report = placement.report
    powered = final.powered()
    if final_node != dict(placement.assignment) or powered != placement.powered or extra:
        score = evaluate(problem, final_node, powered).total + extra
        report = replace(report, objective=score)
        notes.append("the plan differs from the placement; the objective is the plan's")
    if report.stopped_by_clock:
        notes.append(_clock_note(problem))
    plan = Plan(
        policy=policy_name,
        actions=tuple(actions),
        before=cluster_metrics(inv, snap),
        after=cluster_metrics(inv, final),
        solver=report,
        based_on_version=snap.version,
        notes=tuple(notes),
    )
    return replace(plan, explanations=explain(problem, plan))
