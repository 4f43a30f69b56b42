"""One line per container of why a plan moves it or leaves it where it is.

Pure: the problem and the plan in, {container: line} out. Reasons, first that applies:

- moves: off a node over the cap; to empty a node that the plan switches off (with the watts
  that node draws now, from its power curve: a model figure); to join the container it talks to
  most, which it was apart from ("moves to join web-3 (42 MB/s)", the forecast of measured
  traffic); else to lower the objective's other terms (devils sharing a node, a group spread over
  nodes, a less efficient node);
- stays: cannot be live-migrated (the opt-out label or another reason found by observation);
  its node is held (an unsettled migration, a node being drained); a maintenance window; the
  migration budget left cannot empty its node; its node may not be switched off (power-off budget
  or window, or a power rule: grace, break-even, quarantine); pinned by hysteresis; may run on no
  other node; apart from the container it talks to most, joining which would cost more than the
  traffic saves or does not fit ("stays: joining db-1 would cost more than its 12 MB/s saves");
  otherwise moving it would cost more than it saves.

A moving container's line ends with what its clients see (`Clients.says`): connections kept, or
reconnect to the same address, or at the target node's, and how long it is predicted to be
frozen, from this node pair's own migrations where the store has enough of them
(`predict.frozen_fits`: "frozen ~3.1 s (fit to 7 moves node-1 -> node-2)", "(cluster fit, 5
moves)" or "(lab default)" until the store has 3); a container not
worth moving names the frozen time its moves would cost, over the nodes it may go to.

A container on a node that plans under a lowered cap (its latency-sensitive containers stalled,
`decide/pressure.py`) gets that cap and why appended, moving or staying.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from ...domain.capacity import node_cap, node_capacity, over_cap_nodes, within
from ...domain.model import ClusterSnapshot, Container, Inventory, node_loads
from ...domain.plan import ActionKind, Plan
from ..predict import FrozenModel
from .graph import MB
from .problem import PlacementProblem


def mb_per_s(rate: float) -> str:
    """Bytes per second as "42 MB/s" or "0.92 MB/s"."""
    v = rate / MB
    return f"{v:.0f} MB/s" if v >= 10 else f"{v:.2g} MB/s"


def partners(traffic: Mapping[tuple[str, str], float]) -> dict[str, list[tuple[float, str]]]:
    """Each container's traffic partners, the heaviest first: (forecast bytes/s, name)."""
    out: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for (a, b), rate in traffic.items():
        if rate > 0 and a != b:
            out[a].append((rate, b))
            out[b].append((rate, a))
    return {c: sorted(p, key=lambda x: (-x[0], x[1])) for c, p in out.items()}


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
    before = snap.placement()
    after = {c.name: moves[c.name][-1] if c.name in moves else c.node for c in snap.containers}
    talks = partners(problem.traffic) if problem.weights.traffic_w_per_mbps > 0 else {}
    lines: dict[str, str] = {}
    for c in snap.containers:
        if c.name in moves:
            route = " -> ".join([c.node, *moves[c.name]])
            joined = next(((rate, b) for rate, b in talks.get(c.name, ())
                           if before.get(b) != c.node and after.get(b) == after[c.name]), None)
            if c.node in over:
                cap = node_cap(inv.node(c.node), problem.cpu_cap)
                lines[c.name] = f"moves {route}: {c.node} is over its {cap:.0%} CPU cap or its memory cap"
            elif c.node in switched_off:
                lines[c.name] = (f"moves {route}: empties {c.node}, which is switched off: saves "
                                 f"{draws[c.node]:.0f} W (power model, its draw now)")
            elif joined is not None:
                lines[c.name] = f"moves to join {joined[1]} ({mb_per_s(joined[0])}): {route}"
            else:
                lines[c.name] = (f"moves {route}: lowers the objective (devils sharing a node, a group spread out, "
                                 "or power)")
            lines[c.name] += f"; {c.clients.says(after[c.name])}; {_frozen(problem, c, [c.node, *moves[c.name]])}"
        else:
            why = _why_stays(problem, c, len(plan.migrations), power_offs, staying[c.node])
            apart = next(((rate, b) for rate, b in talks.get(c.name, ()) if after.get(b) != c.node), None)
            if why is None and apart is not None:
                lines[c.name] = _stays_apart(problem, c, after, *apart)
            else:
                lines[c.name] = f"stays on {c.node}: " + (why or _not_worth(problem, c))
        if c.node in problem.lowered_caps:
            lines[c.name] += f" ({c.node}: {problem.lowered_caps[c.node]})"
    return lines


def all_stay(snapshot: ClusterSnapshot, why: str) -> dict[str, str]:
    """The lines of a plan a last check reduced to nothing (`power/policy.adjust_plan`): every
    container stays where it is, for `why`."""
    return {c.name: f"stays on {c.node}: {why}" for c in snapshot.containers}


def _stays_apart(problem: PlacementProblem, c: Container, after: Mapping[str, str], rate: float,
                 partner: str) -> str:
    """Why c stays apart from the container it talks to most: joining it would not fit, or its
    migration (W averaged over the epoch) costs more than the traffic it would save (W at
    `traffic_w_per_mbps`)."""
    there = after[partner]
    spec = problem.inventory.node(there)
    load = node_loads(problem.snapshot.containers, after).get(there)
    cpu_cap, mem_cap = node_capacity(spec, problem.inventory.cluster, problem.cpu_cap)
    if load is not None and not (within(load.cpu + c.cpu, cpu_cap) and within(load.memory_mb + c.memory_mb, mem_cap)):
        return f"stays: joining {partner} ({mb_per_s(rate)}) does not fit on {there}; on {c.node}"
    w = problem.weights
    cost, saves = w.migration_cost(c.memory_mb), rate / MB * w.traffic_w_per_mbps
    return (f"stays: joining {partner} would cost more than its {mb_per_s(rate)} saves ({cost:.0f} W to move "
            f"and the power on {there} vs {saves:.1f} W of traffic, averaged over the epoch); on {c.node}")


def _why_stays(
    problem: PlacementProblem, c: Container, migrations: int, power_offs: int, neighbours: int
) -> str | None:
    """What keeps c where it is, None when nothing does (it is not worth moving). `neighbours`:
    containers on c's node after the plan, c included (the moves emptying it would take)."""
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
    return None


def _not_worth(problem: PlacementProblem, c: Container) -> str:
    cost = problem.weights.migration_cost(c.memory_mb)
    targets = sorted(problem.eligible.get(c.name, frozenset(problem.inventory.node_names)) - {c.node})
    seconds = sorted({round(problem.frozen.at(c.node, t, c.memory_mb) / 1000, 1) for t in targets}) or [
        round(problem.frozen.cluster.at(c.memory_mb) / 1000, 1)]
    frozen = f"{seconds[0]:.1f} s" if len(seconds) == 1 else f"{seconds[0]:.1f}-{seconds[-1]:.1f} s by target"
    return (f"not worth its migration cost ({cost:.0f} W averaged over the epoch, and frozen about {frozen}): "
            "moving it empties no node worth switching off")


def _frozen(problem: PlacementProblem, c: Container, route: list[str]) -> str:
    """The frozen time predicted for `route`'s hops and the line it came from."""
    hops = list(zip(route, route[1:], strict=False))
    models = [problem.frozen.model(a, b) for a, b in hops]
    seconds = sum(m.at(c.memory_mb) for m in models) / 1000
    lines = ", ".join(_fitted(m, a, b) for m, (a, b) in zip(models, hops, strict=True))
    return f"frozen ~{seconds:.1f} s ({lines})"


def _fitted(model: FrozenModel, source: str, target: str) -> str:
    if model.source == "pair":
        return f"fit to {model.points} moves {source} -> {target}"
    if model.source == "fit":
        return f"cluster fit, {model.points} moves"
    return "lab default"


def _draws(inv: Inventory, snap: ClusterSnapshot) -> dict[str, float]:
    """Watts each powered node draws at its load now, from its power curve."""
    loads = node_loads(snap.containers)
    return {
        spec.name: spec.power.at(loads[spec.name].cpu / spec.cpus if spec.name in loads else 0.0)
        for spec in inv.nodes
    }
