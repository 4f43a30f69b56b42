"""The one capacity rule: does a load fit on a node?

A node holds at most `cap x cpus` cores of CPU and `memory_cap x memory_mb` MB of memory; a load
fits when it is within both, up to `EPS`. A node whose latency-sensitive containers stalled plans
under a lower CPU cap of its own (`NodeSpec.cap`, set by `decide/pressure.py`), never a higher one.
Replay, plan building, the objective's constraint check, every policy and the CP-SAT model decide
it here, so a load one of them accepts no other rejects (they differ only by the order in which
they add floats, which EPS absorbs).

Pure: floats or numpy arrays in (elementwise, for the vectorised policies), bools out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Union, overload

import numpy as np

from .model import ClusterConfig, Container, Inventory, NodeSpec, node_loads

#: Slack, in the load's own unit (cores or MB), when comparing a summed load with a capacity:
#: float sums of the same loads in another order differ by far less; a micro-core or a byte
#: is no real overload.
EPS = 1e-6

#: A load or a capacity: a float, or an array of them (one per node or container).
Amount = Union[float, np.ndarray]
#: What a test returns: a bool for floats, a bool array for arrays.
Verdict = Union[bool, np.bool_, np.ndarray]


@overload
def capacity(cpus: float, memory_mb: float, cap: float, memory_cap: float) -> tuple[float, float]: ...
@overload
def capacity(cpus: np.ndarray, memory_mb: np.ndarray, cap: Amount, memory_cap: float) -> tuple[np.ndarray, np.ndarray]:
    ...
def capacity(cpus: Amount, memory_mb: Amount, cap: Amount, memory_cap: float) -> tuple[Amount, Amount]:
    """(CPU capacity in cores, memory capacity in MB) of nodes with `cpus` and `memory_mb`."""
    return cap * cpus, memory_cap * memory_mb


def node_cap(spec: NodeSpec, cap: float) -> float:
    """The CPU cap of one node: `cap` (the cluster's, a problem's or a baseline's), or the node's
    own lowered one when that is lower."""
    return cap if spec.cap is None else min(cap, spec.cap)


def node_capacity(
    spec: NodeSpec, cluster: ClusterConfig, cap: float | None = None
) -> tuple[float, float]:
    """`capacity` of one inventory node; `cap` overrides the cluster's CPU cap (a problem's
    own, or a baseline's)."""
    cpu_cap = node_cap(spec, cluster.cap if cap is None else cap)
    cpu, mem = capacity(float(spec.cpus), float(spec.memory_mb), cpu_cap, cluster.memory_cap)
    return float(cpu), float(mem)


@overload
def within(load: float, limit: float) -> bool: ...
@overload
def within(load: np.ndarray, limit: Amount) -> np.ndarray: ...
@overload
def within(load: float, limit: np.ndarray) -> np.ndarray: ...
def within(load: Amount, limit: Amount) -> Verdict:
    """One resource: `load` is at most `limit` (up to EPS). Bool, or a bool array."""
    return load <= limit + EPS


@overload
def fits(cpu: float, memory_mb: float, cpu_capacity: float, memory_capacity: float) -> bool: ...
@overload
def fits(cpu: np.ndarray, memory_mb: Amount, cpu_capacity: Amount, memory_capacity: Amount) -> np.ndarray: ...
@overload
def fits(cpu: float, memory_mb: Amount, cpu_capacity: np.ndarray, memory_capacity: Amount) -> np.ndarray: ...
def fits(cpu: Amount, memory_mb: Amount, cpu_capacity: Amount, memory_capacity: Amount) -> Verdict:
    """Both resources: CPU and memory loads within their capacities. Bool, or a bool array."""
    return within(cpu, cpu_capacity) & within(memory_mb, memory_capacity)


def over_cap_nodes(inventory: Inventory, containers: Iterable[Container], cap: float | None = None) -> set[str]:
    """Inventory nodes whose containers do not `fit` under the caps (`cap` overrides the
    cluster's CPU cap): where moves are cap fixes, which windows, budgets and hysteresis allow."""
    return {n for n, load in node_loads(containers).items() if n in inventory.nodes_by_name
            and not fits(load.cpu, load.memory_mb, *node_capacity(inventory.node(n), inventory.cluster, cap))}


def integer_units(
    demands: Sequence[float] | np.ndarray, capacities: Sequence[float] | np.ndarray, scale: float
) -> tuple[list[int], list[int]]:
    """Demands rounded up and capacities rounded down to integer units of 1/`scale`, for an
    integer model (CP-SAT) that must never accept what `within` rejects.

    Each rounding may forgive float noise of `slack` units; with k <= len(demands) demands on a
    capacity, an integer-feasible sum is within (k + 1) x slack / scale of the capacity, which
    this slack keeps under EPS / 2 (the other half absorbs the order of float additions).
    """
    d = np.asarray(demands, dtype=float)
    slack = EPS * scale / (2 * (len(d) + 1))
    units = np.ceil(d * scale - slack).astype(np.int64)
    limits = np.maximum(0, np.floor(np.asarray(capacities, dtype=float) * scale + slack))
    return units.tolist(), limits.astype(np.int64).tolist()


__all__ = [
    "EPS",
    "Amount",
    "Verdict",
    "capacity",
    "fits",
    "integer_units",
    "node_cap",
    "node_capacity",
    "within",
]
