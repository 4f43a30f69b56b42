"""Improve a packing with CP-SAT: the whole model when small, else a few nodes at a time.

Large-neighbourhood search: pick a handful of nodes (one to drain and some with room; an
efficient node that is off with the least efficient ones that are on; nodes where devils share
or a group is split; the two nodes of a split pair of talking containers, drawn by weight; or
random ones), let CP-SAT re-place their containers exactly, and keep the
answer only if the true objective (`Packing.local_objective`, i.e. `objective.evaluate`'s terms)
falls. The whole model stops once CP-SAT proves its answer within `target_gap` of the optimum;
LNS stops when its work is spent, when within `target_gap` of the lower bound, or after
`patience` neighbourhoods in a row without a gain worth `min_gain` of the objective in its
terms other than traffic; with a container graph it does not start on a placement that is
`settled`. Both rules leave the trade of moves for traffic to `heuristic.join`: a neighbourhood
that cuts traffic is kept, but does not make the search go on (at 1,000 containers such gains
kept LNS running to its time limit, 4x the graph-blind solve, for 0.1% of the objective:
docs/planner.md). Every CP-SAT solve spends deterministic work from the search's `Budget`, and
the search stops when that is spent, so a run repeats for a given seed; the wall clock only
stops it as the budget's safety net, and the answer then says so.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ...domain.settings import PlannerSettings
from .bounds import power_contention_bound
from .budget import Budget
from .cpsat import SubResult, solve_nodes
from .instance import TINY, Instance
from .objective import Objective, evaluate
from .packing import Packing

#: CP-SAT's linearization level for the whole model with one worker: its strongest LP relaxation,
#: which proves the demo within 1% after 0.19 deterministic s (the default level: 1.03; the old
#: 8-worker portfolio, not deterministic: 0.1-0.3 on 8 threads; docs/planner.md "Determinism")
WHOLE_LP_LEVEL = 2


@dataclass(frozen=True)
class SearchOptions:
    """Knobs of the search; the defaults are what the bench and the simulator run."""

    #: CP-SAT workers for the whole model (None: `PlannerSettings`' default, one)
    workers: int | None = None
    exact_limit: int = 2500  # solve the whole model at once up to this many x[c,n] variables
    neighbourhood_nodes: int = 6
    neighbourhood_containers: int = 60
    patience: int = 8  # neighbourhoods in a row without a significant gain
    min_gain: float = 1e-4  # a gain (in terms but traffic) below this share of the objective: patience goes on
    #: stop once proven within this share of the optimum (None: `PlannerSettings`' default)
    target_gap: float | None = None
    sub_deterministic_s: float = 0.05  # work of one LNS neighbourhood's solve (unstick: 10x)

    def resolved(self) -> SearchOptions:
        """Concrete knobs: the values given (`make_plan` passes `PlannerSettings`' workers and
        relative gap), else the settings' defaults."""
        return replace(self, workers=self.worker_count, target_gap=self.gap)

    @property
    def worker_count(self) -> int:
        """`workers`, or the settings' default when unset."""
        return self.workers or PlannerSettings.workers

    @property
    def gap(self) -> float:
        """`target_gap`, or the settings' default when unset."""
        return PlannerSettings.relative_gap if self.target_gap is None else self.target_gap


@dataclass
class Outcome:
    """What the search achieved: whether the whole model was proved optimal, and its bound."""

    optimal: bool = False
    model_bound: float | None = None
    neighbourhoods: int = 0
    improved: int = 0


def apply_if_better(pack: Packing, nodes: list[int], res: SubResult, force: bool = False) -> bool:
    """Apply a sub-solution if the true objective falls (or, with `force`, anyway: CP-SAT's
    answers meet every cap, so they fix an infeasible neighbourhood); else leave `pack` as is."""
    conts = list(res.assign)
    before = pack.local_objective(nodes, conts)
    old_node = {c: int(pack.assign[c]) for c in conts}
    old_on = {n: bool(pack.on[n]) for n in nodes}
    for n, on in res.on.items():
        pack.on[n] = pack.on[n] or on
    for c, n in res.assign.items():
        pack.move(c, n)
    for n, on in res.on.items():
        pack.on[n] = on
    if force or pack.local_objective(nodes, conts) < before - 1e-6:
        return True
    for c, n in old_node.items():
        pack.move(c, n)
    for n, on in old_on.items():
        pack.on[n] = on
    return False


def infeasible_nodes(pack: Packing) -> np.ndarray:
    """Nodes over a cap or hosting a container that may not run there: the answer is only
    feasible when there are none. LNS leaves them alone; `unstick` works on them."""
    bad = pack.over_cap()
    bad[pack.assign[pack.misplaced()]] = True
    return bad


def solve_whole(pack: Packing, budget: Budget, opts: SearchOptions, seed: int) -> Outcome:
    """One CP-SAT model over every usable node, hinted with `pack`, with all the work left."""
    inst = pack.inst
    nodes = np.flatnonzero(inst.usable).tolist()
    res = solve_nodes(
        pack,
        nodes,
        budget=budget,
        work=budget.left,
        workers=opts.worker_count,
        relative_gap=opts.gap,
        seed=seed,
        lp_level=WHOLE_LP_LEVEL if opts.workers == 1 else None,
    )
    if res is None:
        return Outcome()
    apply_if_better(pack, nodes, res, force=bool(infeasible_nodes(pack).any()))
    return Outcome(optimal=res.status == "OPTIMAL", model_bound=res.bound_w)


def unstick(pack: Packing, budget: Budget, opts: SearchOptions, seed: int) -> None:
    """For each infeasible node, let CP-SAT re-place its containers together with those of the
    nodes with the most room (and the most efficient nodes that are off): what single moves
    could not fix, a few coordinated ones often can."""
    inst = pack.inst
    for n in np.flatnonzero(infeasible_nodes(pack)).tolist():
        if budget.exhausted or budget.late():
            return
        bad = infeasible_nodes(pack)
        if not bad[n]:
            continue
        allowed = np.ones(inst.n_nodes, dtype=bool)
        for c in pack.members[n]:
            allowed &= inst.allowed(c) | (np.arange(inst.n_nodes) == n)
        room = np.flatnonzero(pack.on & allowed & ~bad)
        room = room[np.argsort(pack.load[room] - inst.cpu_cap[room], kind="stable")]
        off = [m for m in inst.efficiency_order.tolist() if not pack.on[m] and allowed[m]]
        nodes = [n, *off[:2], *room.tolist()][: 2 * opts.neighbourhood_nodes]
        res = solve_nodes(pack, nodes, budget=budget, work=10 * opts.sub_deterministic_s, seed=seed)
        if res is not None:
            apply_if_better(pack, nodes, res, force=True)


def x_variables(pack: Packing) -> int:
    """How many x[c,n] the whole model would have."""
    inst = pack.inst
    n_usable = int(inst.usable.sum())
    restricted = sum(int((inst.usable & mask).sum()) for mask in inst.eligible.values())
    return (inst.n_containers - len(inst.eligible)) * n_usable + restricted


class Neighbourhoods:
    """Chooses the node sets LNS re-solves, rotating through strategies that target the
    objective's terms; a drained node is not retried until others have been."""

    def __init__(self, pack: Packing, frozen: np.ndarray, opts: SearchOptions, seed: int):
        self.pack = pack
        self.frozen = frozen
        self.opts = opts
        self.rng = random.Random(seed)
        self.recent: deque[int] = deque(maxlen=max(4, opts.patience // 2))
        self.turn = 0
        inst = pack.inst
        self.eff = inst.efficiency_order
        per_unit = inst.power(self.eff, inst.cpu_cap[self.eff]) / np.maximum(inst.cpu_cap[self.eff], TINY)
        self.per_unit = dict(zip(self.eff.tolist(), per_unit.tolist()))

    def next(self) -> list[int]:
        strategies: tuple[Callable[[], list[int]], ...] = (
            self.drain, self.efficiency, self.conflict, self.drain, self.random)
        if self.pack.inst.graph.edges:
            strategies = (*strategies[:3], self.traffic, *strategies[3:])
        for _ in range(len(strategies)):
            chosen = strategies[self.turn % len(strategies)]()
            self.turn += 1
            if chosen:
                return self.fill(chosen)
        return []

    def active(self) -> np.ndarray:
        return np.flatnonzero(self.pack.on & ~self.frozen)

    def fill(self, seed_nodes: list[int]) -> list[int]:
        """Add nodes with room (and a few random ones) up to the size limits."""
        pack, opts = self.pack, self.opts
        chosen = list(dict.fromkeys(seed_nodes))
        count = sum(len(pack.members[n]) for n in chosen)
        active = self.active()
        spare = pack.inst.cpu_cap[active] - pack.load[active]
        roomy = active[np.argsort(-spare, kind="stable")[: 4 * opts.neighbourhood_nodes]].tolist()
        pool = self.rng.sample(roomy, len(roomy)) + self.rng.sample(
            active.tolist(), min(len(active), 16)
        )
        for n in pool:
            if len(chosen) >= opts.neighbourhood_nodes:
                break
            if n in chosen or count + len(pack.members[n]) > opts.neighbourhood_containers:
                continue
            chosen.append(n)
            count += len(pack.members[n])
        return chosen

    def drain(self) -> list[int]:
        """The least utilised node that may go off (not tried lately)."""
        pack, inst = self.pack, self.pack.inst
        nodes = np.flatnonzero(pack.on & ~self.frozen & inst.can_off)
        nodes = nodes[[n not in self.recent for n in nodes.tolist()]] if len(nodes) else nodes
        if len(nodes) == 0:
            return []
        util = pack.load[nodes] / inst.cpu_cap[nodes]
        few = nodes[np.argsort(util, kind="stable")[:3]].tolist()
        s = self.rng.choice(few)
        self.recent.append(s)
        return [s]

    def efficiency(self) -> list[int]:
        """An efficient node that is off, with the least efficient nodes that are on."""
        pack = self.pack
        off = [n for n in self.eff.tolist() if not pack.on[n] and not self.frozen[n]]
        on = [
            n
            for n in self.eff.tolist()
            if pack.on[n] and not self.frozen[n] and pack.inst.can_off[n]
        ]
        if not off or not on or self.per_unit[off[0]] >= self.per_unit[on[-1]] - 1e-9:
            return []
        worst = on[-3 * self.opts.neighbourhood_nodes :]
        picked = self.rng.sample(worst, min(len(worst), self.opts.neighbourhood_nodes - 1))
        return [off[0], *picked]

    def conflict(self) -> list[int]:
        """A node where devils share, or the nodes a split group spans."""
        pack, inst = self.pack, self.pack.inst
        w = inst.problem.weights
        shared: Sequence[int] = (np.flatnonzero((pack.devils >= 2) & ~self.frozen).tolist()
                                 if w.contention_w > 0 else [])
        split = (
            [g for g, nodes in pack.groups.items() if len(nodes) > 1] if w.affinity_w > 0 else []
        )
        if len(shared) and (not split or self.rng.random() < 0.5):
            return [int(self.rng.choice(list(shared)))]
        if split:
            nodes = [n for n in pack.groups[self.rng.choice(split)] if not self.frozen[n]]
            return nodes[: self.opts.neighbourhood_nodes]
        return []

    def traffic(self) -> list[int]:
        """The nodes of a split pair, drawn in proportion to its weight: CP-SAT may join it on
        either node, or both on a node with room (added by `fill`)."""
        pack, graph = self.pack, self.pack.inst.graph
        split = np.flatnonzero(pack.assign[graph.a] != pack.assign[graph.b])
        if len(split) == 0:
            return []
        cum = np.cumsum(graph.w[split])
        k = split[min(int(np.searchsorted(cum, self.rng.random() * cum[-1])), len(split) - 1)]
        return [n for n in (int(pack.assign[graph.a[k]]), int(pack.assign[graph.b[k]])) if not self.frozen[n]]

    def random(self) -> list[int]:
        active = self.active().tolist()
        return self.rng.sample(active, min(2, len(active)))


def local_search(
    pack: Packing,
    budget: Budget,
    opts: SearchOptions,
    seed: int,
    objective: float,
    bound: float,
) -> Outcome:
    """LNS from `pack` (its true objective is `objective`) until a stopping rule fires: patience,
    the gap to `bound`, the budget's work, or its safety net."""
    outcome = Outcome()
    hoods = Neighbourhoods(pack, infeasible_nodes(pack), opts, seed)
    stale = 0
    while stale < opts.patience and objective > bound * (1 + opts.gap):
        if budget.exhausted or budget.late():
            break
        nodes = hoods.next()
        if not nodes:
            break
        conts = [c for n in nodes for c in pack.members[n]]
        energy, traffic = pack.local_energy(nodes, conts), pack.local_traffic(conts)
        res = solve_nodes(
            pack,
            nodes,
            budget=budget,
            work=opts.sub_deterministic_s,
            seed=seed + outcome.neighbourhoods,
            presolve=False,
        )
        outcome.neighbourhoods += 1
        if res is not None and apply_if_better(pack, nodes, res):
            energy_after = pack.local_energy(nodes, conts)
            objective -= energy + traffic - energy_after - pack.local_traffic(conts)
            outcome.improved += 1
            stale = 0 if energy - energy_after > opts.min_gain * objective else stale + 1  # traffic alone: not
        else:
            stale += 1
    return outcome


def improve(
    pack: Packing, budget: Budget, opts: SearchOptions, seed: int, bound: float
) -> Outcome:
    """The whole model if small enough, else fix what is infeasible and run LNS (with a
    container graph, only if the placement is not `settled`); in place."""
    if x_variables(pack) <= opts.exact_limit:
        return solve_whole(pack, budget, opts, seed)
    unstick(pack, budget, opts, seed)
    scored = evaluate(pack.inst.problem, *pack.mapping())
    if pack.inst.graph.edges and settled(pack.inst, scored, opts.gap):
        return Outcome()
    return local_search(pack, budget, opts, seed, scored.total, bound)


def settled(inst: Instance, scored: Objective, gap: float) -> bool:
    """With a container graph, whether LNS should not start: the placement's power, standby,
    contention and group spread are within `gap` of their bound. LNS otherwise stops there
    only on `patience`, as the bound leaves out the traffic a placement must cut; what is left
    beyond it is the trade of moves for traffic that `heuristic.join` priced pair by pair, where
    LNS gained at most 0.08% of the objective (synthetic clusters of 200-10,000 containers,
    docs/planner.md "Container graphs")."""
    placed = scored.total - scored.migration_w - scored.traffic_w
    return placed <= power_contention_bound(inst) * (1 + gap)
