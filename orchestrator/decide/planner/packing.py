"""A mutable working placement with per-node totals, shared by the baselines and the search.

It keeps what the objective needs incrementally (CPU and memory per node, devils per node,
members of each group per node) so a candidate move is priced for every node at once in numpy.
The prices are exact differences of `objective.evaluate`; `test_planner_objective` checks that.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np

from ...domain.plan import SolverReport
from .bounds import lower_bound
from .instance import Instance
from .objective import evaluate
from .problem import Placement

#: up to this many targets a move's traffic is priced target by target, beyond in one bincount
FEW = 8


class Packing:
    """Where each container is (node index) and which nodes are on; totals kept in step."""

    def __init__(
        self, inst: Instance, assign: np.ndarray | None = None, on: np.ndarray | None = None
    ):
        self.inst = inst
        self.assign = (inst.orig if assign is None else assign).copy()
        self.on = (inst.initially_on if on is None else on).copy()
        #: the disruption budget (None: no limit); `heuristic.repair` may raise the migration
        #: limit to what fixing the caps takes, since a cap violation is never left standing
        self.migration_limit = inst.max_migrations
        self.power_off_limit = inst.max_power_offs
        n = inst.n_nodes
        self.load = np.bincount(self.assign, inst.cpu, minlength=n).astype(float)
        self.mem = np.bincount(self.assign, inst.mem, minlength=n).astype(float)
        self.devils = np.bincount(self.assign[inst.devil], minlength=n).astype(np.int64)
        self.members: list[set[int]] = [set() for _ in range(n)]
        for c, node in enumerate(self.assign.tolist()):
            self.members[node].add(c)
        self.groups: dict[int, Counter[int]] = {}
        for c in np.flatnonzero(inst.group >= 0).tolist():
            self.groups.setdefault(int(inst.group[c]), Counter())[int(self.assign[c])] += 1

    def copy(self) -> Packing:
        twin = Packing(self.inst, self.assign, self.on)
        twin.migration_limit = self.migration_limit
        return twin

    # -- changes -------------------------------------------------------------------------------

    def move(self, c: int, t: int) -> None:
        inst = self.inst
        s = int(self.assign[c])
        if s == t:
            return
        self.assign[c] = t
        self.load[s] -= inst.cpu[c]
        self.load[t] += inst.cpu[c]
        self.mem[s] -= inst.mem[c]
        self.mem[t] += inst.mem[c]
        self.members[s].discard(c)
        self.members[t].add(c)
        if inst.devil[c]:
            self.devils[s] -= 1
            self.devils[t] += 1
        g = int(inst.group[c])
        if g >= 0:
            counter = self.groups[g]
            counter[s] -= 1
            if counter[s] == 0:
                del counter[s]
            counter[t] += 1

    def power_off_empty(self) -> None:
        """Switch off every node that hosts nothing and may be switched off."""
        empty = np.array([not m for m in self.members], dtype=bool)
        self.on &= ~(empty & self.inst.can_off)

    # -- queries -------------------------------------------------------------------------------

    def fits(self, c: int, nodes: np.ndarray | None = None) -> np.ndarray:
        """Bool mask (over all nodes, or over `nodes`) of powered, allowed nodes c fits on now.

        The node c is on counts as fitting (staying is always possible).
        """
        inst = self.inst
        idx = slice(None) if nodes is None else nodes
        room = inst.fits(self.load[idx] + inst.cpu[c], self.mem[idx] + inst.mem[c], idx)
        return self.on[idx] & inst.allowed(c)[idx] & room

    def migrations(self) -> int:
        """Containers away from the node they run on now."""
        return int((self.assign != self.inst.orig).sum())

    def power_offs(self) -> int:
        """Nodes on now that this placement switches off."""
        return int((self.inst.initially_on & ~self.on).sum())

    def within_budget(self) -> bool:
        """Whether the migrations and power-offs fit the disruption budget."""
        return (self.migration_limit is None or self.migrations() <= self.migration_limit) and (
            self.power_off_limit is None or self.power_offs() <= self.power_off_limit
        )

    def over_cap(self) -> np.ndarray:
        """Bool mask of nodes whose CPU or memory load does not fit their capacity."""
        return np.asarray(~self.inst.fits(self.load, self.mem))

    def misplaced(self) -> list[int]:
        """Containers on a node they may not run on (ineligible, or switched off)."""
        bad = [c for c, mask in self.inst.eligible.items() if not mask[self.assign[c]]]
        bad += [c for c in np.flatnonzero(~self.on[self.assign]).tolist() if c not in bad]
        return bad

    def move_delta(self, c: int, targets: np.ndarray) -> np.ndarray:
        """Objective change (W) of moving c from its node to each of `targets` (on or not).

        The source's power change is included; switching nodes on or off is not (callers add
        idle power when they wake or empty a node).
        """
        inst, w = self.inst, self.inst.problem.weights
        s = int(self.assign[c])
        cpu = inst.cpu[c]
        load = self.load[targets]
        delta = inst.power(targets, load + cpu) - inst.power(targets, load)
        delta += inst.power1(s, self.load[s] - cpu) - inst.power1(s, self.load[s])
        cost = inst.mig_cost[c]
        delta += np.where(targets != inst.orig[c], cost, 0.0) - (cost if s != inst.orig[c] else 0.0)
        if inst.devil[c]:
            delta += w.contention_w * (self.devils[targets] - (self.devils[s] - 1))
        g = int(inst.group[c])
        if g >= 0:
            counter = self.groups[g]
            present = np.isin(targets, np.fromiter(counter.keys(), dtype=np.int64))
            delta += w.affinity_w * (~present) - (w.affinity_w if counter[s] == 1 else 0.0)
        nbr, eid = inst.graph.around(c)
        if len(nbr):  # its pairs on s become split, those on a target joined
            where, weight = self.assign[nbr], inst.graph.w[eid]
            on = (np.array([weight[where == t].sum() for t in targets.tolist()]) if len(targets) <= FEW
                  else np.bincount(where, weight, minlength=inst.n_nodes)[targets])
            delta += weight[where == s].sum() - on
        delta[targets == s] = 0.0
        return delta

    def fits_at(self, cs: np.ndarray, nodes: np.ndarray, cpu: np.ndarray | None = None,
                mem: np.ndarray | None = None) -> np.ndarray:
        """Whether each container cs[i] may go to nodes[i] now (powered, allowed, room), row by
        row; `cpu` / `mem` (per row) replace the containers' own demands, e.g. a pair's."""
        inst = self.inst
        cpu = inst.cpu[cs] if cpu is None else cpu
        mem = inst.mem[cs] if mem is None else mem
        room = inst.fits(self.load[nodes] + cpu, self.mem[nodes] + mem, nodes)
        return self.on[nodes] & room & inst.allowed_at(cs, nodes)

    def price_moves(self, c1: np.ndarray, t1: np.ndarray, c2: np.ndarray | None = None,
                    t2: np.ndarray | None = None) -> np.ndarray:
        """Objective change (W) of each row's moves made together, for all rows at once: c1[i] to
        t1[i] and, where c2[i] >= 0, c2[i] (another container) to t2[i], from the current
        placement (each row on its own). The same price as `move_delta` for one move, and as
        successive `move_delta`s for two (tested); switching nodes on or off is not included."""
        inst, w, assign = self.inst, self.inst.problem.weights, self.assign
        c1, t1 = np.asarray(c1, dtype=np.int64), np.asarray(t1, dtype=np.int64)
        rows = len(c1)
        if c2 is None or t2 is None:
            c2, t2 = np.full(rows, -1, dtype=np.int64), np.full(rows, -1, dtype=np.int64)
        c2, t2 = np.asarray(c2, dtype=np.int64), np.asarray(t2, dtype=np.int64)
        two = c2 >= 0
        d2 = np.where(two, c2, c1)  # a stand-in where there is no second move (weighted 0)
        s1 = assign[c1]
        s2 = np.where(two, assign[d2], s1)
        t2 = np.where(two, t2, s1)
        nodes = np.stack([s1, t1, s2, t2], axis=1)
        cpu1, cpu2 = inst.cpu[c1], np.where(two, inst.cpu[d2], 0.0)
        dev1, dev2 = inst.devil[c1].astype(np.int64), (inst.devil[d2] & two).astype(np.int64)
        cpu = np.stack([-cpu1, cpu1, -cpu2, cpu2], axis=1)
        dev = np.stack([-dev1, dev1, -dev2, dev2], axis=1)
        same = nodes[:, :, None] == nodes[:, None, :]  # [i, j, k]: row i's j-th and k-th node are one
        first = ~np.tril(same, -1).any(axis=2)  # each node of a row once, with every change made to it
        row = np.broadcast_to(np.arange(rows)[:, None], nodes.shape)[first]
        n = nodes[first]
        change = (same * cpu[:, None, :]).sum(axis=2)[first]
        node = inst.power(n, self.load[n] + change) - inst.power(n, self.load[n])
        if w.contention_w > 0 and (dev1.any() or dev2.any()):  # (no devil moves: no pair changes)
            k, dk = self.devils[n], (same * dev[:, None, :]).sum(axis=2)[first]
            node += w.contention_w * ((k + dk) * (k + dk - 1) // 2 - k * (k - 1) // 2)
        delta = np.bincount(row, node, minlength=rows).astype(float)  # no rows: bincount gives ints
        o1, o2 = inst.orig[c1], inst.orig[d2]
        delta += inst.mig_cost[c1] * ((t1 != o1).astype(float) - (s1 != o1))
        delta += np.where(two, inst.mig_cost[d2] * ((t2 != o2).astype(float) - (s2 != o2)), 0.0)
        if w.affinity_w > 0:
            for i in np.flatnonzero((inst.group[c1] >= 0) | (two & (inst.group[d2] >= 0))).tolist():
                delta[i] += w.affinity_w * self._span_change(
                    [(int(c1[i]), int(s1[i]), int(t1[i]))] + ([(int(c2[i]), int(s2[i]), int(t2[i]))] if two[i] else []))
        graph = inst.graph
        if graph.edges:  # each pair touching a moved container, once
            row, p, e = graph.gather(c1)
            there = np.where(p == c2[row], t2[row], assign[p])
            cut = graph.w[e] * ((t1[row] != there).astype(float) - (s1[row] != assign[p]))
            delta += np.bincount(row, cut, minlength=rows)
            second = np.flatnonzero(two)
            row, p, e = graph.gather(c2[second])
            keep = p != c1[second][row]
            row, p, e = second[row[keep]], p[keep], e[keep]
            cut = graph.w[e] * ((t2[row] != assign[p]).astype(float) - (s2[row] != assign[p]))
            delta += np.bincount(row, cut, minlength=rows)
        return delta

    def _span_change(self, moves: list[tuple[int, int, int]]) -> int:
        """How many nodes the groups of `moves` (container, from, to) span more afterwards."""
        counts: dict[int, Counter[int]] = {}
        for c, s, t in moves:
            g = int(self.inst.group[c])
            if g >= 0:
                counts.setdefault(g, Counter())
                counts[g][s] -= 1
                counts[g][t] += 1
        change = 0
        for g, diff in counts.items():
            now = self.groups[g]
            change += sum(int(now[n] + d > 0) - int(now[n] > 0) for n, d in diff.items())
        return change

    def local_objective(self, nodes: list[int], containers: list[int]) -> float:
        """The objective terms that nodes and containers can change (see objective.evaluate):
        power and devil pairs of `nodes`, moves of `containers`, spans of their groups, and the
        traffic of their pairs."""
        return self.local_energy(nodes, containers) + self.local_traffic(containers)

    def local_energy(self, nodes: list[int], containers: list[int]) -> float:
        """`local_objective` but traffic (as `Objective.energy_w` is the objective but traffic)."""
        inst, w = self.inst, self.inst.problem.weights
        total = sum(inst.power1(n, self.load[n]) for n in nodes if self.on[n])
        k = self.devils[nodes]
        total += w.contention_w * float((k * (k - 1) // 2).sum())
        cs = np.asarray(containers, dtype=np.int64)
        total += float(inst.mig_cost[cs][self.assign[cs] != inst.orig[cs]].sum())
        groups = {int(g) for g in inst.group[cs] if g >= 0}
        total += w.affinity_w * sum(len(self.groups[g]) - 1 for g in groups)
        return total

    def local_traffic(self, containers: list[int] | np.ndarray) -> float:
        """The traffic part of `local_objective`: W of the split pairs touching `containers`."""
        graph = self.inst.graph
        if not graph.edges:
            return 0.0
        e = graph.touching(np.asarray(containers, dtype=np.int64))
        return float(graph.w[e][self.assign[graph.a[e]] != self.assign[graph.b[e]]].sum())

    def mapping(self) -> tuple[dict[str, str], frozenset[str]]:
        """The placement by name: container -> node, and the powered nodes."""
        inst = self.inst
        assignment = {inst.names[c]: inst.node_names[n] for c, n in enumerate(self.assign.tolist())}
        return assignment, frozenset(inst.node_names[n] for n in np.flatnonzero(self.on))

    def objective(self) -> float:
        return evaluate(self.inst.problem, *self.mapping()).total

    def result(
        self, status: str, started: float, cap: float | None = None, bound: float | None = None
    ) -> Placement:
        """The Placement, scored by `objective.evaluate` and bounded by `bounds.lower_bound`
        (at the problem's cap, also for policies with their own, so gaps compare)."""
        inst = self.inst
        assignment, powered = self.mapping()
        score = evaluate(inst.problem, assignment, powered).total
        if bound is None:
            bounded = inst if inst.cap == inst.problem.cpu_cap else Instance.build(inst.problem)
            bound = lower_bound(bounded)
        report = SolverReport(status, time.perf_counter() - started, float(score), float(bound))
        return Placement(assignment, powered, report, cap)
