"""A PlacementProblem as numpy arrays indexed by node and container number.

Every policy and the search work on indices, not names: at 10,000 containers a name lookup per
candidate node is what makes a heuristic slow. Built once per solve; read-only afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...domain import capacity
from ...domain.model import ContainerClass
from .graph import TrafficGraph
from .problem import PlacementProblem

#: Guards divisions by a zero capacity or size and merges float-equal points; not a capacity
#: tolerance (whether a load fits is `orchestrator.domain.capacity`'s rule).
TINY = 1e-9


@dataclass(frozen=True)
class PerContainer:
    """`Instance`'s container arrays as lists (reading a list item costs a tenth of a numpy one)."""

    cpu: list[float]
    mem: list[float]
    mig_cost: list[float]
    orig: list[int]
    devil: list[bool]
    group: list[int]


@dataclass(frozen=True)
class Instance:
    """Node arrays (length N) and container arrays (length C) of one problem under one CPU cap."""

    problem: PlacementProblem
    cap: float
    node_names: tuple[str, ...]
    cpus: np.ndarray  # float, per node
    cpu_cap: np.ndarray  # cap x cpus
    mem_cap: np.ndarray  # memory_cap x memory_mb
    watts: np.ndarray  # (N, 11) power curve points, idle priced off_epochs times
    initially_on: np.ndarray  # bool
    can_off: np.ndarray  # bool: worker and power-managed
    usable: np.ndarray  # bool: may be powered in the answer (on now, or can be woken)
    node_type: np.ndarray  # int: nodes with equal specs share a type
    names: tuple[str, ...]
    cpu: np.ndarray  # float, per container
    mem: np.ndarray
    orig: np.ndarray  # int: node index the container runs on now
    mig_cost: np.ndarray  # W: Weights.migration_cost(memory_mb)
    devil: np.ndarray  # bool
    group: np.ndarray  # int group id, -1 for none
    eligible: dict[int, np.ndarray]  # container -> bool mask over nodes (restricted ones only)
    graph: TrafficGraph  # who talks to whom, and what a split pair costs
    #: most migrations / power-offs the answer may hold (None: no limit; Allowance)
    max_migrations: int | None = None
    max_power_offs: int | None = None

    @classmethod
    def build(cls, problem: PlacementProblem, cap: float | None = None) -> Instance:
        inv, snap, w = problem.inventory, problem.snapshot, problem.weights
        cap = problem.cpu_cap if cap is None else cap
        specs = inv.nodes
        index = {s.name: i for i, s in enumerate(specs)}
        powered = snap.powered()
        cpus = np.array([float(s.cpus) for s in specs])
        memory_mb = np.array([float(s.memory_mb) for s in specs])
        caps = np.array([capacity.node_cap(s, cap) for s in specs])
        cpu_cap, mem_cap = capacity.capacity(cpus, memory_mb, caps, inv.cluster.memory_cap)
        watts = np.array([s.power.watts for s in specs], dtype=float).reshape(len(specs), 11)
        watts += (w.off_epochs - 1.0) * watts[:, :1]  # the objective's idle price (Weights)
        initially_on = np.array([s.name in powered for s in specs], dtype=bool)
        can_off = np.array([s.can_power_off for s in specs], dtype=bool)
        allow = problem.allowance
        if allow.power_offs == 0 or not allow.consolidate:
            can_off &= ~initially_on  # nothing may go off: those on stay on, those off may wake
        types: dict[tuple[object, ...], int] = {}
        node_type = np.array(
            [
                types.setdefault((s.cpus, s.memory_mb, s.power.watts, s.can_power_off, s.cap), len(types))
                for s in specs
            ],
            dtype=np.int64,
        )
        conts = snap.containers
        groups: dict[str, int] = {}
        eligible: dict[int, np.ndarray] = {}
        for i, c in enumerate(conts):
            allowed = problem.eligible.get(c.name)
            if allowed is not None:
                eligible[i] = np.array([s.name in allowed for s in specs], dtype=bool)
        orig = np.array([index[c.node] for c in conts], dtype=np.int64)
        cpu = np.array([c.cpu for c in conts], dtype=float)
        mem = np.array([c.memory_mb for c in conts], dtype=float)
        if not allow.consolidate:  # only cap fixes: containers on nodes within the caps stay
            n = len(specs)
            load, used = np.bincount(orig, cpu, n), np.bincount(orig, mem, n)
            ok = capacity.fits(load, used, cpu_cap, mem_cap)
            for i in np.flatnonzero(ok[orig]).tolist():
                eligible[i] = np.arange(n) == orig[i]
        return cls(
            problem=problem,
            cap=cap,
            node_names=tuple(s.name for s in specs),
            cpus=cpus,
            cpu_cap=cpu_cap,
            mem_cap=mem_cap,
            watts=watts,
            initially_on=initially_on,
            can_off=can_off,
            usable=initially_on | can_off,
            node_type=node_type,
            names=tuple(c.name for c in conts),
            cpu=cpu,
            mem=mem,
            orig=orig,
            mig_cost=np.array([w.migration_cost(c.memory_mb) for c in conts], dtype=float),
            devil=np.array([c.cls is ContainerClass.DEVIL for c in conts], dtype=bool),
            group=np.array(
                [groups.setdefault(c.group, len(groups)) if c.group else -1 for c in conts],
                dtype=np.int64,
            ),
            eligible=eligible,
            graph=TrafficGraph.build(problem.traffic, {c.name: i for i, c in enumerate(conts)},
                                     w.traffic_w_per_mbps, len(conts)),
            max_migrations=allow.migrations,
            max_power_offs=allow.power_offs,
        )

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_containers(self) -> int:
        return len(self.names)

    @property
    def must_on(self) -> np.ndarray:
        """Nodes that are on and may not be switched off (head / not power-managed)."""
        return self.initially_on & ~self.can_off

    def power(self, nodes: np.ndarray, load: np.ndarray) -> np.ndarray:
        """Watts of `nodes` (1-d index array) at CPU `load` (absolute), as PowerCurve.at does."""
        if len(nodes) == 1:  # a move priced on one node: numpy's per-call overhead would be most of it
            return np.array([self.power1(int(nodes[0]), float(load[0]))])
        u = np.clip(load / self.cpus[nodes], 0.0, 1.0) * 10.0
        i = np.minimum(u.astype(np.int64), 9)
        at = nodes * 11 + i  # watts[nodes, i] in the flat array: no (nodes, 11) copy
        lo = self.watts.ravel()[at]
        return lo + (self.watts.ravel()[at + 1] - lo) * (u - i)

    def power1(self, node: int, load: float) -> float:
        """Watts of one node at CPU `load`; the scalar twin of `power` for inner loops."""
        cpus, watts = self._curves
        u = min(max(float(load) / cpus[node], 0.0), 1.0) * 10.0
        i = min(int(u), 9)
        w = watts[node]
        return w[i] + (w[i + 1] - w[i]) * (u - i)

    @cached_property
    def _curves(self) -> tuple[list[float], list[list[float]]]:
        """`cpus` and `watts` as Python lists: `power1` reads them without numpy's cost per item."""
        return self.cpus.tolist(), self.watts.tolist()

    def fits1(self, cpu: float, mem: float, node: int) -> bool:
        """`fits` of one node, for inner loops: the same rule on Python floats."""
        cpu_cap, mem_cap = self._caps
        return bool(capacity.fits(cpu, mem, cpu_cap[node], mem_cap[node]))

    @cached_property
    def _caps(self) -> tuple[list[float], list[float]]:
        return self.cpu_cap.tolist(), self.mem_cap.tolist()

    @cached_property
    def per_container(self) -> PerContainer:
        """The container arrays as Python lists, for loops that price one move at a time."""
        return PerContainer(self.cpu.tolist(), self.mem.tolist(), self.mig_cost.tolist(), self.orig.tolist(),
                            self.devil.tolist(), self.group.tolist())

    def fits(
        self,
        cpu: capacity.Amount,
        mem: capacity.Amount,
        nodes: int | slice | np.ndarray = slice(None),
    ) -> capacity.Verdict:
        """Whether CPU and memory loads fit `nodes` (all, by default) under this instance's
        caps: `orchestrator.domain.capacity.fits`, elementwise over arrays."""
        return capacity.fits(cpu, mem, self.cpu_cap[nodes], self.mem_cap[nodes])

    def allowed(self, c: int) -> np.ndarray:
        """Bool mask of nodes container `c` may run on (usable and eligible)."""
        mask = self.eligible.get(c)
        return self.usable if mask is None else self.usable & mask

    def allowed_at(self, cs: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Whether each container cs[i] may run on nodes[i] (`allowed`, row by row)."""
        ok = self.usable[nodes].copy()
        if self.eligible:
            for i in np.flatnonzero(self.restricted[cs]).tolist():
                ok[i] &= bool(self.eligible[int(cs[i])][nodes[i]])
        return ok

    @cached_property
    def restricted(self) -> np.ndarray:
        """Bool per container: eligible only on some nodes (a key of `eligible`)."""
        mask = np.zeros(self.n_containers, dtype=bool)
        mask[list(self.eligible)] = True
        return mask

    @cached_property
    def least_slope(self) -> np.ndarray:
        """Per node, the fewest watts one more unit of CPU load adds anywhere on its curve (0 if
        the curve ever falls): adding x to a node within its cores costs at least x times this."""
        slopes = np.diff(self.watts, axis=1) / (0.1 * np.maximum(self.cpus, TINY))[:, None]
        return np.maximum(slopes.min(axis=1), 0.0) if self.n_nodes else np.zeros(0)

    @cached_property
    def largest_first(self) -> np.ndarray:
        """Containers, the largest first: CPU, then memory, descending (ties by index). The order
        in which a node is drained or its containers re-placed."""
        return np.lexsort((np.arange(self.n_containers), -self.mem, -self.cpu))

    @cached_property
    def size_rank(self) -> list[int]:
        """Each container's place in `largest_first` (a sort key for Python lists of them)."""
        rank = np.empty(self.n_containers, dtype=np.int64)
        rank[self.largest_first] = np.arange(self.n_containers)
        return rank.tolist()

    @cached_property
    def cheapest_to_move(self) -> np.ndarray:
        """Containers, the cheapest to migrate first (ties by index)."""
        return np.argsort(self.mig_cost, kind="stable")

    @cached_property
    def efficiency_order(self) -> np.ndarray:
        """Usable nodes, most work per watt at the cap first (watts at the cap / capacity)."""
        idx = np.flatnonzero(self.usable)
        per_unit = self.power(idx, self.cpu_cap[idx]) / np.maximum(self.cpu_cap[idx], TINY)
        return idx[np.lexsort((idx, -self.cpu_cap[idx], per_unit))]
