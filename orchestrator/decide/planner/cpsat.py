"""The exact CP-SAT model of placement on a set of nodes; the only module that imports ortools.

The search calls it on the whole problem when that is small, and on a few nodes at a time (large
neighbourhood search) otherwise: the containers currently on those nodes may be re-placed among
them, every other container stays put. Model, in integers:

- x[c,n] (c on n), on[n] (n powered; a constant for nodes that must stay on);
- CPU and memory rows: sum demand x[c,n] <= cap x on[n] (demands rounded up, caps down by
  `orchestrator.domain.capacity.integer_units`, so an integer-feasible answer passes `capacity.fits`);
- power: idle x on[n] + P[n], P[n] above every line of the convex envelope of the curve's
  dynamic part (exact for convex curves, a valid under-estimate otherwise: what is reported is
  always `objective.evaluate` on the answer);
- migrations, devil pairs (P(k) = k(k-1)/2 via its tangent lines) and group spans (y[g,n]);
- traffic: split[a,b] >= x[a,n] - x[b,n] for every node a may use, for the heaviest pairs of
  the neighbourhood (`_add_traffic`; pairs with one end outside it are split whatever happens);
- symmetry: interchangeable empty nodes (same type, power state, eligibility, no container
  that comes from them) are used in order, the busiest first;
- cuts the LP relaxation misses: devil pairs against the number of nodes on
  (`_add_contention_cut`), the number of nodes on against the demand (`_add_count_cut`);
- the disruption budget (`_add_budget`): at most so many migrations and power-offs.
"""

from __future__ import annotations

import importlib
import math
import sys
import types
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...domain.capacity import integer_units
from .bounds import curve_points, devil_pairs, lower_hull
from .budget import Budget
from .instance import Instance
from .packing import Packing

MW = 1000.0  # the model counts milliwatts


def _import_without_pandas(name: str) -> types.ModuleType:
    """Module `name` (ortools' `cp_model`), imported without loading pandas when pandas is not
    loaded yet.

    cp_model imports pandas at module level only for its `*_series` helpers, which peakpack
    never calls; pandas was 0.4 s of a 2 s `peakpack plan`. A placeholder with the two names
    cp_model's annotations read stands in during that import only, so a later real
    `import pandas` is unaffected. Should an ortools release need more of pandas at import (a
    missing attribute, or `from pandas.x import y`: an ImportError), the placeholder is dropped
    and the module is imported normally (slower, still correct).
    """
    if name in sys.modules or "pandas" in sys.modules:
        return importlib.import_module(name)
    placeholder = types.ModuleType("pandas", "stands in while ortools' cp_model is imported")
    placeholder.Index = type("Index", (), {})  # type: ignore[attr-defined]
    placeholder.Series = type("Series", (), {})  # type: ignore[attr-defined]
    sys.modules["pandas"] = placeholder
    before = set(sys.modules)
    try:
        return importlib.import_module(name)
    except (AttributeError, ImportError):
        del sys.modules["pandas"]
        for loaded in set(sys.modules) - before:  # modules that bound the placeholder load again
            if any(v is placeholder for v in vars(sys.modules[loaded]).values()):
                del sys.modules[loaded]
        return importlib.import_module(name)
    finally:
        if sys.modules.get("pandas") is placeholder:
            del sys.modules["pandas"]


if TYPE_CHECKING:  # the checker reads the module's own types; at run time it is imported as above
    from ortools.sat.python import cp_model
else:
    cp_model = _import_without_pandas("ortools.sat.python.cp_model")


def cpu_scale(inst: Instance) -> float:
    """Integer CPU units per unit of `cpus`, so the largest node has ~1e5-1e6 units.

    Cores (16) and MIPS (5320) both work: 0.7 x 16 cores is 112,000 units of 1e-4 core.
    """
    biggest = float(inst.cpus.max()) if inst.n_nodes else 1.0
    return 1e5 / 10.0 ** math.floor(math.log10(max(biggest, 1e-9)))


@dataclass(frozen=True)
class SubResult:
    """CP-SAT's answer on a node set: new node of each container, new power state of each node."""

    assign: dict[int, int]
    on: dict[int, bool]
    status: str
    objective_w: float  # the model's objective (envelope power), including constants
    bound_w: float  # the model's proven lower bound, same terms


def solve_nodes(
    pack: Packing,
    nodes: list[int],
    *,
    budget: Budget,
    work: float,
    workers: int = 1,
    relative_gap: float = 0.0,
    seed: int = 0,
    presolve: bool = True,
    lp_level: int | None = None,
) -> SubResult | None:
    """Re-place the containers now on `nodes` among `nodes`, optimally within the limits.

    Returns None when CP-SAT finds no solution in time. The incumbent is the hint. Presolve
    pays on the whole model but costs more than it saves on LNS neighbourhoods (measured 2x).
    CP-SAT stops once its answer is proven within `relative_gap` of the optimum (the status is
    OPTIMAL only when the answer meets its bound) or after `work` deterministic seconds (at most
    what `budget` has left), which it spends from `budget`; the wall clock only as the budget's
    safety net. One worker searches deterministically; more run CP-SAT's interleaved search,
    its only deterministic parallel mode. `lp_level`: CP-SAT's linearization level (None: its
    default).
    """
    inst = pack.inst
    w = inst.problem.weights
    scale = cpu_scale(inst)
    node_set = set(nodes)
    conts = sorted(c for n in nodes for c in pack.members[n])
    classes = _interchangeable(inst, nodes, conts)
    hint_node, hint_on = _hint(pack, nodes, conts, classes)
    m = cp_model.CpModel()
    const = 0.0  # objective offset in mW
    terms: list[tuple[cp_model.IntVar, int]] = []

    on: dict[int, cp_model.IntVar | int] = {}
    for n in nodes:
        if inst.can_off[n]:
            on[n] = var = m.new_bool_var(f"on{n}")
            m.add_hint(var, hint_on[n])
            terms.append((var, round(inst.watts[n, 0] * MW)))
        else:
            on[n] = 1
            const += inst.watts[n, 0] * MW

    x: dict[int, dict[int, cp_model.IntVar]] = {}
    for c in conts:
        allowed = inst.allowed(c)
        cand = [n for n in nodes if allowed[n]]
        x[c] = {n: m.new_bool_var(f"x{c}_{n}") for n in cand}
        m.add_exactly_one(x[c].values())
        for n, v in x[c].items():
            m.add_hint(v, n == hint_node[c])
            if not isinstance(on[n], int):
                m.add_implication(v, on[n])
        cost = round(inst.mig_cost[c] * MW)
        const += cost
        if int(inst.orig[c]) in x[c]:
            terms.append((x[c][int(inst.orig[c])], -cost))

    _add_budget(m, pack, nodes, conts, x, on)

    cpu_u, cpu_cap_u = integer_units(inst.cpu[conts], inst.cpu_cap[nodes], scale)
    mem_u, mem_cap_u = integer_units(inst.mem[conts], inst.mem_cap[nodes], 1.0)
    cpu_units, mem_units = dict(zip(conts, cpu_u)), dict(zip(conts, mem_u))
    on_node: dict[int, list[int]] = defaultdict(list)
    for c in conts:
        for n in x[c]:
            on_node[n].append(c)
    load: dict[int, cp_model.IntVar] = {}
    for n, cap_units, mem_cap in zip(nodes, cpu_cap_u, mem_cap_u):
        here = on_node[n]
        load[n] = m.new_int_var(0, cap_units, f"load{n}")
        m.add(load[n] == sum(cpu_units[c] * x[c][n] for c in here))
        m.add(load[n] <= cap_units * on[n])
        if any(mem_units[c] for c in here):
            m.add(sum(mem_units[c] * x[c][n] for c in here) <= mem_cap * on[n])
        _add_power(m, inst, n, on[n], load[n], scale, terms)
    _add_count_cut(m, [on[n] for n in nodes], cpu_cap_u, sum(cpu_u))
    _add_count_cut(m, [on[n] for n in nodes], mem_cap_u, sum(mem_u))

    devils = [c for c in conts if inst.devil[c]]
    if len(devils) >= 2 and w.contention_w > 0:
        all_pairs: list[cp_model.IntVar] = []
        for n in nodes:
            here = [c for c in devils if n in x[c]]
            if len(here) < 2:
                continue
            k = sum(x[c][n] for c in here)
            pairs = m.new_int_var(0, len(here) * (len(here) - 1) // 2, f"pairs{n}")
            for j in range(1, len(here)):
                m.add(pairs >= j * k - j * (j + 1) // 2)
            terms.append((pairs, round(w.contention_w * MW)))
            all_pairs.append(pairs)
        _add_contention_cut(m, len(devils), all_pairs, [on[n] for n in nodes])

    if w.affinity_w > 0:
        by_group: dict[int, list[int]] = defaultdict(list)
        for c in conts:
            if inst.group[c] >= 0:
                by_group[int(inst.group[c])].append(c)
        aff = round(w.affinity_w * MW)
        for g, members in by_group.items():
            outside = [n for n in pack.groups[g] if n not in node_set]
            const += aff * (len(outside) - 1)
            for n in {n for c in members for n in x[c]}:
                y = m.new_bool_var(f"y{g}_{n}")
                for c in members:
                    if n in x[c]:
                        m.add_implication(x[c][n], y)
                terms.append((y, aff))

    const += _add_traffic(m, inst, conts, x, hint_node, terms)

    for members in classes:
        for a, b in zip(members, members[1:]):
            if not isinstance(on[a], int):
                m.add(on[a] >= on[b])
            m.add(load[a] >= load[b])
    m.minimize(sum(coef * v for v, coef in terms) + round(const))

    limit = min(work, budget.left)
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = limit
    solver.parameters.max_time_in_seconds = max(budget.seconds_left(), 0.001)
    solver.parameters.num_workers = workers
    solver.parameters.interleave_search = workers > 1
    solver.parameters.random_seed = seed
    solver.parameters.cp_model_presolve = presolve
    solver.parameters.relative_gap_limit = relative_gap
    if lp_level is not None:
        solver.parameters.linearization_level = lp_level
    status = solver.solve(m)
    done = solver.response_proto.deterministic_time
    # unproven and short of its work: only the wall clock stops CP-SAT there
    budget.spend(done, clock_stopped=status in (cp_model.FEASIBLE, cp_model.UNKNOWN) and done < limit)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    assign = {c: next(n for n, v in x[c].items() if solver.value(v)) for c in conts}
    power = {n: bool(solver.value(v)) if not isinstance(v, int) else True for n, v in on.items()}
    objective, bound = solver.objective_value, solver.best_objective_bound
    proven = status == cp_model.OPTIMAL and objective <= bound + 0.5  # within rounding
    return SubResult(
        assign, power, "OPTIMAL" if proven else "FEASIBLE", objective / MW, bound / MW
    )


def _add_power(
    m: cp_model.CpModel,
    inst: Instance,
    n: int,
    on: cp_model.IntVar | int,
    load: cp_model.IntVar,
    scale: float,
    terms: list[tuple[cp_model.IntVar, int]],
) -> None:
    """Dynamic power P (mW) of node n at `load` (units): above every line of the convex envelope
    of (curve - idle) on [0, cap]; where the curve is not convex, also above the line of the
    segment the load is in (one literal per segment, enforced only when on), so the model
    prices the true curve."""
    xs, ys = curve_points(inst, n, from_zero=False)
    if len(xs) < 2:
        return
    idle = ys[0]
    hull = lower_hull(xs, ys)
    top = max(ys) - idle
    p = m.new_int_var(0, math.ceil(max(top, 0.0) * MW) + 1, f"p{n}")
    for a, b in zip(hull, hull[1:]):
        m.add(_line(p, load, a, b, idle, scale) >= 0)
    if not _is_convex(xs, ys, hull):
        picks = []
        for i, (a, b) in enumerate(zip(zip(xs, ys), zip(xs[1:], ys[1:]))):
            z = m.new_bool_var(f"seg{n}_{i}")
            picks.append(z)
            m.add(load >= math.floor(a[0] * scale)).OnlyEnforceIf(z)
            m.add(load <= math.ceil(b[0] * scale)).OnlyEnforceIf(z)
            m.add(_line(p, load, a, b, idle, scale) >= 0).OnlyEnforceIf(z)
        m.add(sum(picks) == on)
    terms.append((p, 1))


#: pairs the model prices per container of the neighbourhood (the heaviest); the others are left
#: out, which only weakens its bound: a sub-solution is kept on the true objective
TRAFFIC_EDGES_PER_CONTAINER = 4


def _add_traffic(
    m: cp_model.CpModel,
    inst: Instance,
    conts: list[int],
    x: dict[int, dict[int, cp_model.IntVar]],
    hint_node: dict[int, int],
    terms: list[tuple[cp_model.IntVar, int]],
) -> float:
    """One boolean per pair of the neighbourhood: split >= x[a,n] - x[b,n] for every node n that
    a may use. With exactly one node each, split is forced to 1 exactly when a and b part, and
    the objective keeps it at 0 otherwise. A pair with one end outside the neighbourhood is split
    whatever happens (that end's node is not among `nodes`): its weight is a constant (mW)."""
    graph = inst.graph
    if not graph.edges or not conts:
        return 0.0
    inside = np.zeros(inst.n_containers, dtype=bool)
    inside[conts] = True
    e = graph.touching(np.asarray(conts, dtype=np.int64))
    both = inside[graph.a[e]] & inside[graph.b[e]]
    internal = e[both][np.argsort(-graph.w[e[both]], kind="stable")][: TRAFFIC_EDGES_PER_CONTAINER * len(conts)]
    for k in internal.tolist():
        a, b, coef = int(graph.a[k]), int(graph.b[k]), round(float(graph.w[k]) * MW)
        if coef <= 0:
            continue
        split = m.new_bool_var(f"split{a}_{b}")
        m.add_hint(split, hint_node[a] != hint_node[b])
        for n, xa in x[a].items():
            m.add(split >= xa - x[b][n] if n in x[b] else split >= xa)
        terms.append((split, coef))
    return float(graph.w[e[~both]].sum()) * MW


def _add_budget(
    m: cp_model.CpModel,
    pack: Packing,
    nodes: list[int],
    conts: list[int],
    x: dict[int, dict[int, cp_model.IntVar]],
    on: dict[int, cp_model.IntVar | int],
) -> None:
    """The disruption budget: migrations and power-offs of the whole answer (those outside
    the neighbourhood are constants) within the packing's limits."""
    inst = pack.inst
    if pack.migration_limit is not None:
        inside = sum(int(pack.assign[c] != inst.orig[c]) for c in conts)
        moved = [1 - x[c][int(inst.orig[c])] if int(inst.orig[c]) in x[c] else 1 for c in conts]
        m.add(sum(moved) <= pack.migration_limit - (pack.migrations() - inside))
    if pack.power_off_limit is not None:
        mine = [n for n in nodes if inst.initially_on[n]]
        inside = sum(int(not pack.on[n]) for n in mine)
        offs = [1 - on[n] for n in mine if not isinstance(on[n], int)]
        m.add(sum(offs) <= pack.power_off_limit - (pack.power_offs() - inside))


def _add_count_cut(
    m: cp_model.CpModel, on: list[cp_model.IntVar | int], capacities: list[int], demand: int
) -> None:
    """At least as many nodes on as the fewest whose capacities hold the demand. Implied by the
    integer model, but the LP relaxation powers nodes fractionally and so pays a fraction of an
    idle node's power where a whole one is needed."""
    total, needed = 0, 0
    for cap in sorted(capacities, reverse=True):
        if total >= demand:
            break
        total += cap
        needed += 1
    if needed > 1:
        m.add(sum(on) >= needed)


def _add_contention_cut(
    m: cp_model.CpModel,
    devils: int,
    pairs: list[cp_model.IntVar],
    on: list[cp_model.IntVar | int],
) -> None:
    """Devils share at least as many pairs as when spread evenly over the nodes that are on:
    sum(pairs) >= devil_pairs(devils, sum(on)), as the lines of that function's convex envelope.
    Implied by the integer model, but the LP relaxation spreads devils fractionally over nodes
    half on; without this cut CP-SAT finds the optimum of the demo in 0.7 s and proves it in 6."""
    counts = np.arange(1, len(on) + 1)
    hull = lower_hull(counts.tolist(), devil_pairs(devils, counts).tolist())
    total, powered = sum(pairs), sum(on)
    points = [(int(a), int(fa)) for a, fa in hull]  # integers: counts of nodes and of pairs
    for (a, fa), (b, fb) in zip(points, points[1:]):
        m.add((b - a) * total >= fa * (b - a) + (fb - fa) * (powered - a))


def _line(
    p: cp_model.IntVar,
    load: cp_model.IntVar,
    a: tuple[float, float],
    b: tuple[float, float],
    idle: float,
    scale: float,
) -> cp_model.LinearExpr:
    """r x P - (the line through a and b, minus idle, in mW over load units), in integers."""
    slope = (b[1] - a[1]) / (b[0] - a[0]) * MW / scale  # mW per unit of load
    intercept = (a[1] - idle) * MW - slope * a[0] * scale  # mW at load 0
    r = 10.0 ** min(6, max(0, math.ceil(4 - math.log10(max(abs(slope), 1e-12)))))
    return round(r) * p - round(slope * r) * load - math.floor(intercept * r)


def _is_convex(xs: list[float], ys: list[float], hull: list[tuple[float, float]]) -> bool:
    """True when every curve point lies on the envelope (so the envelope is the curve)."""
    hx = [h[0] for h in hull]
    hy = [h[1] for h in hull]
    return bool(np.all(np.array(ys) <= np.interp(xs, hx, hy) + 1e-9))


def _interchangeable(inst: Instance, nodes: list[int], conts: list[int]) -> list[list[int]]:
    """Classes of nodes no objective term or budget tells apart: same type, power state now
    and eligibility, and no container of the neighbourhood comes from them (so no migration
    cost differs)."""
    origins = {int(inst.orig[c]) for c in conts}
    restricted = [c for c in conts if c in inst.eligible]
    elig = (
        np.array([inst.eligible[c][nodes] for c in restricted], dtype=bool)
        if restricted
        else np.zeros((0, len(nodes)), dtype=bool)
    )
    classes: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for i, n in enumerate(nodes):
        if n not in origins:
            key = (int(inst.node_type[n]), bool(inst.initially_on[n]), elig[:, i].tobytes())
            classes[key].append(n)
    return [members for members in classes.values() if len(members) > 1]


def _hint(
    pack: Packing, nodes: list[int], conts: list[int], classes: list[list[int]]
) -> tuple[dict[int, int], dict[int, bool]]:
    """The incumbent, with the contents of interchangeable nodes permuted to obey the order."""
    node_of = {c: int(pack.assign[c]) for c in conts}
    on = {n: bool(pack.on[n]) for n in nodes}
    for members in classes:
        ranked = sorted(members, key=lambda n: (-on[n], -pack.load[n], n))
        rename = dict(zip(ranked, members))
        for c in conts:
            if node_of[c] in rename:
                node_of[c] = rename[node_of[c]]
        on.update({rename[n]: bool(pack.on[n]) for n in ranked})
    return node_of, on
