"""The objective every policy is scored by, and the constraints every answer must meet.

One function, one unit (watts averaged over the epoch), so the CP-SAT planner, the baselines, the
bench and the tests all compare the same number. Solvers may use approximations internally (the
convex envelope of a curve, integer scaling); what they report is this function's value.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from ...domain.capacity import node_capacity, within
from ...domain.model import ContainerClass
from .graph import MB
from .problem import PlacementProblem


@dataclass(frozen=True)
class Objective:
    """The six terms of the objective, each in watts; `total` is what policies minimise.

    `standby_w` is the idle power of the powered nodes counted for the epochs beyond this one
    that switching them off would also save (`Weights.off_epochs` - 1); `traffic_w` the forecast
    traffic between containers on different nodes, priced by `Weights.traffic_w_per_mbps`.
    """

    power_w: float
    migration_w: float
    contention_w: float
    affinity_w: float
    standby_w: float = 0.0
    traffic_w: float = 0.0

    @property
    def total(self) -> float:
        return (self.power_w + self.migration_w + self.contention_w + self.affinity_w + self.standby_w
                + self.traffic_w)

    @property
    def energy_w(self) -> float:
        """Everything but the traffic term: what the plan costs in power and migrations."""
        return self.total - self.traffic_w


def evaluate(
    problem: PlacementProblem, assignment: Mapping[str, str], powered: frozenset[str]
) -> Objective:
    """Score a placement: curve power of powered nodes, moves, devil pairs, group spread, traffic.

    Power is each powered node's curve at its load (idle included; `standby_w` adds the idle
    power of the further epochs); a container whose node differs from the snapshot's costs
    `Weights.migration_cost`; every pair of devils sharing a node costs `contention_w`; every
    node a group spans beyond its first costs `affinity_w`; every pair of `problem.traffic` on two
    nodes costs its forecast MB/s x `traffic_w_per_mbps`.
    """
    w = problem.weights
    load: dict[str, float] = defaultdict(float)
    devils: Counter[str] = Counter()
    spans: dict[str, set[str]] = defaultdict(set)
    migration = 0.0
    for c in problem.snapshot.containers:
        node = assignment[c.name]
        load[node] += c.cpu
        if node != c.node:
            migration += w.migration_cost(c.memory_mb)
        if c.cls is ContainerClass.DEVIL:
            devils[node] += 1
        if c.group:
            spans[c.group].add(node)
    on = [spec for spec in problem.inventory.nodes if spec.name in powered]
    power = sum(spec.power.at(load.get(spec.name, 0.0) / spec.cpus) for spec in on)
    standby = (w.off_epochs - 1.0) * sum(spec.power.idle_w for spec in on)
    pairs = sum(k * (k - 1) // 2 for k in devils.values())
    extra_nodes = sum(len(nodes) - 1 for nodes in spans.values())
    traffic = sum(rate / MB * w.traffic_w_per_mbps for (a, b), rate in problem.traffic.items()
                  if rate > 0 and a != b and a in assignment and b in assignment and assignment[a] != assignment[b])
    return Objective(power, migration, w.contention_w * pairs, w.affinity_w * extra_nodes, standby, traffic)


def violations(
    problem: PlacementProblem,
    assignment: Mapping[str, str],
    powered: frozenset[str],
    cap: float | None = None,
) -> list[str]:
    """Every constraint the placement breaks, one line each; empty means feasible.

    Checks: every container placed on a known, powered, eligible node; CPU <= cap x cpus and
    memory <= memory_cap x memory_mb per node; nodes that may not be power-managed (head, not
    power-managed) keep their current power state.
    """
    inv, snap = problem.inventory, problem.snapshot
    cap = problem.cpu_cap if cap is None else cap
    names = set(inv.node_names)
    was_on = snap.powered()
    found: list[str] = []
    cpu: dict[str, float] = defaultdict(float)
    mem: dict[str, float] = defaultdict(float)
    for c in snap.containers:
        node = assignment.get(c.name)
        if node is None or node not in names:
            found.append(f"container {c.name}: not placed on an inventory node ({node!r})")
            continue
        if node not in powered:
            found.append(f"container {c.name}: placed on powered-off node {node}")
        allowed = problem.eligible.get(c.name)
        if allowed is not None and node not in allowed:
            found.append(f"container {c.name}: node {node} is not eligible")
        cpu[node] += c.cpu
        mem[node] += c.memory_mb
    for spec in inv.nodes:
        cpu_cap, mem_cap = node_capacity(spec, inv.cluster, cap)
        if not within(cpu[spec.name], cpu_cap):
            found.append(f"node {spec.name}: CPU {cpu[spec.name]:.3f} over cap {cpu_cap:.3f}")
        if not within(mem[spec.name], mem_cap):
            found.append(f"node {spec.name}: memory {mem[spec.name]:.0f} over cap {mem_cap:.0f}")
        if not spec.can_power_off and (spec.name in powered) != (spec.name in was_on):
            found.append(f"node {spec.name}: not power-managed, its power state may not change")
    return found
