"""A cheap lower bound on the objective, so every policy can report its gap.

Fluid power bound: let the summed CPU demand flow, like a liquid, into the cheapest capacity.
Each node's cost as a function of the load it takes is 0 when off (if it may be switched off) or
its curve up to the cap; the convex envelope of that function is a valid under-estimate, and
filling the envelopes' segments in increasing order of watts per unit of load minimises their
sum exactly. Nodes that must stay on add their idle power. On top comes the migration cost that
no placement avoids: containers on a node they are not eligible for, and the cheapest fractional
cover of each over-cap node's excess. Devil contention is bounded jointly with power (devils
spread over more nodes need more nodes on: a Lagrangian bound on power with m nodes on), and a
split group pays for its spread or for the moves that join it; a pair of talking containers
that may share no node pays its traffic. Memory and eligibility are relaxed, so the bound is
loose where those bind (and where traffic forces a choice between joining and packing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...domain.capacity import within
from .instance import TINY, Instance


def lower_hull(xs: Sequence[float], ys: Sequence[float]) -> list[tuple[float, float]]:
    """The lower convex hull of points sorted by x (Andrew's monotone chain)."""
    hull: list[tuple[float, float]] = []
    for p in zip(xs, ys):
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) <= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def curve_points(inst: Instance, n: int, from_zero: bool) -> tuple[list[float], list[float]]:
    """Node n's curve as (load, watts) points on [0, cap x cpus], the cap included.

    `from_zero`: the node may be off, so load 0 costs 0 W; otherwise load 0 costs idle power.
    """
    cap_load = float(inst.cpu_cap[n])
    cpus = float(inst.cpus[n])
    xs = [0.0]
    ys = [0.0 if from_zero else float(inst.watts[n, 0])]
    for i in range(1, 11):
        load = cpus * i / 10
        if load >= cap_load - TINY:
            break
        xs.append(load)
        ys.append(float(inst.watts[n, i]))
    if cap_load > TINY:
        xs.append(cap_load)
        ys.append(inst.power1(n, cap_load))
    return xs, ys


def node_envelope(inst: Instance, n: int, from_zero: bool) -> list[tuple[float, float]]:
    """Vertices (load, watts) of node n's convex cost envelope on [0, cap x cpus]."""
    return lower_hull(*curve_points(inst, n, from_zero))


@dataclass(frozen=True)
class _NodeClass:
    """Usable nodes of one type and one power rule, with their envelopes as segments."""

    count: int
    idle: float
    cap_load: float
    must_on: bool
    from_zero: tuple[np.ndarray, np.ndarray]  # slopes, lengths of the envelope from (0, 0)
    dynamic: tuple[np.ndarray, np.ndarray]  # slopes, lengths of the envelope from (0, idle)


def _segments(hull: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    pairs = [
        ((y2 - y1) / (x2 - x1), x2 - x1)
        for (x1, y1), (x2, y2) in zip(hull, hull[1:])
        if x2 - x1 > TINY
    ]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def _classes(inst: Instance) -> list[_NodeClass]:
    must_on = inst.must_on
    found: dict[tuple[int, bool], list[int]] = {}
    for n in np.flatnonzero(inst.usable).tolist():
        found.setdefault((int(inst.node_type[n]), bool(must_on[n])), []).append(n)
    return [
        _NodeClass(
            count=len(nodes),
            idle=float(inst.watts[nodes[0], 0]),
            cap_load=float(inst.cpu_cap[nodes[0]]),
            must_on=must,
            from_zero=_segments(node_envelope(inst, nodes[0], from_zero=True)),
            dynamic=_segments(node_envelope(inst, nodes[0], from_zero=False)),
        )
        for (_, must), nodes in found.items()
    ]


def _fill(demand: float, parts: list[tuple[np.ndarray, np.ndarray, int]]) -> float:
    """Least cost of serving `demand` with segments (slopes, lengths, copies): filling them in
    increasing order of slope is optimal because each node's envelope is convex."""
    if not parts:
        return 0.0
    slopes = np.concatenate([p[0] for p in parts])
    lengths = np.concatenate([p[1] * p[2] for p in parts])
    order = np.argsort(slopes, kind="stable")
    s, ln = slopes[order], lengths[order]
    filled = np.minimum(ln, np.maximum(demand - (np.cumsum(ln) - ln), 0.0))
    return float((s * filled).sum())


def fluid_power_bound(inst: Instance) -> float:
    """The least power that can serve the summed demand (see the module docstring)."""
    classes = _classes(inst)
    idle = sum(k.idle * k.count for k in classes if k.must_on)
    parts = [(*(k.dynamic if k.must_on else k.from_zero), k.count) for k in classes]
    return idle + _fill(float(inst.cpu.sum()), parts)


def devil_pairs(devils: int, nodes: np.ndarray) -> np.ndarray:
    """Fewest devil pairs when `devils` devils share each count of `nodes` as evenly as can be."""
    q, r = np.divmod(devils, np.maximum(nodes, 1))
    return r * (q + 1) * q // 2 + (nodes - r) * q * (q - 1) // 2


def power_with_nodes_on(inst: Instance) -> np.ndarray:
    """Lower bounds on power when at least m nodes are on, for m = 0 .. usable nodes.

    Lagrangian relaxation of "sum of on[n] >= m" with multiplier lam >= 0 over the relaxed model
    power_n >= idle_n on_n + dynamic_envelope_n(load_n), load_n <= cap_n on_n, 0 <= on_n <= 1:
    a node cheaper to idle than lam is switched fully on, the others pay their idle power in
    proportion to their load. Every lam gives a valid bound lam m + F(lam); we take the best
    of the candidate multipliers (0 and each idle power) together with the fluid bound.
    """
    classes = _classes(inst)
    demand = float(inst.cpu.sum())
    m = np.arange(sum(k.count for k in classes) + 1, dtype=float)
    best = np.full(len(m), fluid_power_bound(inst))
    for lam in {0.0, *(k.idle for k in classes)}:
        const = 0.0
        parts = []
        for k in classes:
            slopes, lengths = k.dynamic
            if k.must_on or k.idle < lam:
                const += (k.idle - lam) * k.count
                parts.append((slopes, lengths, k.count))
            else:
                parts.append((slopes + (k.idle - lam) / k.cap_load, lengths, k.count))
        best = np.maximum(best, lam * m + const + _fill(demand, parts))
    return best


def power_contention_bound(inst: Instance) -> float:
    """Power plus devil contention: devils on m nodes need m nodes on (`power_with_nodes_on`)
    and share them at least as evenly spread (`devil_pairs`); the least sum over m >= 1 (any
    container needs a node) bounds both terms together."""
    if inst.n_containers == 0:
        return fluid_power_bound(inst)
    power = power_with_nodes_on(inst)
    m = np.arange(len(power))
    weight = inst.problem.weights.contention_w
    pairs = devil_pairs(int(inst.devil.sum()), m) if weight > 0 else np.zeros(len(m))
    return float((power + weight * pairs)[1:].min()) if len(m) > 1 else float(power[0])


def _forced(inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """Containers that must move (ineligible where they are) and nodes over a cap without them."""
    forced = np.zeros(inst.n_containers, dtype=bool)
    for c, mask in inst.eligible.items():
        forced[c] = not mask[inst.orig[c]]
    stay = ~forced
    cpu_load = np.bincount(inst.orig[stay], inst.cpu[stay], minlength=inst.n_nodes)
    mem_load = np.bincount(inst.orig[stay], inst.mem[stay], minlength=inst.n_nodes)
    over = np.asarray(~inst.fits(cpu_load, mem_load))
    return forced, over


def forced_migration_bound(inst: Instance) -> float:
    """Migration cost every feasible placement pays: ineligible containers and over-cap nodes."""
    forced, over = _forced(inst)
    total = float(inst.mig_cost[forced].sum())
    stay = ~forced
    for n in np.flatnonzero(over):
        members = np.flatnonzero(stay & (inst.orig == n))
        costs = inst.mig_cost[members]
        total += max(
            _cover_cost(costs, inst.cpu[members], inst.cpu_cap[n]),
            _cover_cost(costs, inst.mem[members], inst.mem_cap[n]),
        )
    return total


def affinity_bound(inst: Instance) -> float:
    """A group split over s nodes ends on s' nodes (paying affinity for s' - 1) only if the
    members on at least s - s' of its nodes all move (paying their migrations): the cheaper.

    Only groups with no member in `forced_migration_bound` count, so the two never share a move.
    """
    weight = inst.problem.weights.affinity_w
    if weight <= 0:
        return 0.0
    forced, over = _forced(inst)
    touched = forced | over[inst.orig]
    total = 0.0
    for g in np.unique(inst.group[inst.group >= 0]):
        members = np.flatnonzero(inst.group == g)
        if touched[members].any():
            continue
        per_node = np.sort(
            np.bincount(inst.orig[members], inst.mig_cost[members])[np.unique(inst.orig[members])]
        )
        span = len(per_node)
        moved = np.concatenate([[0.0], np.cumsum(per_node)])  # cost of emptying the k cheapest
        total += float(min(weight * (span - 1 - k) + moved[k] for k in range(span)))
    return total


def _cover_cost(costs: np.ndarray, sizes: np.ndarray, limit: float) -> float:
    """Cheapest fractional choice of items whose sizes add up to the excess of their sum over
    `limit` (0 if they fit)."""
    if within(sizes.sum(), limit):
        return 0.0
    excess = sizes.sum() - limit
    ratio = np.where(sizes > 0, costs / np.maximum(sizes, TINY), np.inf)
    order = np.argsort(ratio, kind="stable")
    need = excess
    cost = 0.0
    for i in order:
        if sizes[i] <= 0:
            break
        take = min(1.0, need / sizes[i])
        cost += take * costs[i]
        need -= take * sizes[i]
        if need <= TINY:
            break
    return cost


def traffic_bound(inst: Instance) -> float:
    """Pairs whose two containers may share no node are split in every placement."""
    graph = inst.graph
    total = 0.0
    for k in np.flatnonzero(inst.restricted[graph.a] | inst.restricted[graph.b]).tolist():
        if not (inst.allowed(int(graph.a[k])) & inst.allowed(int(graph.b[k]))).any():
            total += float(graph.w[k])
    return total


def lower_bound(inst: Instance) -> float:
    """Power and contention, plus unavoidable migrations and group spread (on disjoint
    containers, so they add up), plus the traffic of pairs that can never share a node (its own
    term); <= the objective of any answer."""
    return power_contention_bound(inst) + forced_migration_bound(inst) + affinity_bound(inst) + traffic_bound(inst)
