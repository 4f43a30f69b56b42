"""Deterministic placement problems for tests and `bench/plan_scale.py`.

`random_problem` models a cluster one epoch after a consolidated plan: the previous placement
packed the demand of the time onto the most efficient nodes; demand has drifted since (some
nodes are now over the cap, some under-used), a few idle nodes were left on, the rest are off.
That is the situation the planner meets every epoch. Same arguments, same problem.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from peakpack.orchestrator.decide.planner.objective import evaluate, violations
from peakpack.orchestrator.decide.planner.problem import PlacementProblem, Weights
from peakpack.orchestrator.domain import capacity
from peakpack.orchestrator.domain.model import (
    ClusterConfig,
    ClusterSnapshot,
    Container,
    ContainerClass,
    Inventory,
    NodeRole,
    NodeSpec,
    NodeState,
    PowerCurve,
)

#: (cpus, memory_mb, idle_w, max_w) of the node types random problems draw from.
NODE_TYPES = ((16, 65536, 90.0, 220.0), (32, 131072, 120.0, 340.0), (64, 262144, 180.0, 520.0))


def concave_curve(idle_w: float, max_w: float, exponent: float = 0.8) -> PowerCurve:
    """SPECpower-like: power rises fastest at low load, so a fuller node does more per watt."""
    return PowerCurve(tuple(idle_w + (max_w - idle_w) * (i / 10) ** exponent for i in range(11)))


def node(
    name: str,
    cpus: float,
    memory_mb: int = 65536,
    idle_w: float = 100.0,
    max_w: float = 200.0,
    *,
    head: bool = False,
    power_managed: bool = True,
    curve: PowerCurve | None = None,
) -> NodeSpec:
    """A node spec with a documentation address (192.0.2.0/24: never routed)."""
    return NodeSpec(
        name=name,
        address=f"192.0.2.{zlib.crc32(name.encode()) % 250 + 1}",
        cpus=cpus,  # type: ignore[arg-type]  # MIPS-scale or fractional cpus are fine here
        memory_mb=memory_mb,
        power=curve or PowerCurve.linear(idle_w, max_w),
        role=NodeRole.HEAD if head else NodeRole.WORKER,
        power_managed=power_managed and not head,
    )


def problem_from(
    nodes: Sequence[NodeSpec],
    containers: Iterable[Container],
    *,
    off: Iterable[str] = (),
    cap: float = 0.7,
    memory_cap: float = 0.95,
    **problem_options,
) -> PlacementProblem:
    """A problem from explicit nodes and containers; nodes in `off` are powered off."""
    off = set(off)
    inventory = Inventory(ClusterConfig("synthetic", cap=cap, memory_cap=memory_cap), tuple(nodes))
    snapshot = ClusterSnapshot(
        nodes=tuple(NodeState(n.name, n.name not in off) for n in nodes),
        containers=tuple(containers),
    )
    return PlacementProblem(inventory=inventory, snapshot=snapshot, **problem_options)


def random_problem(
    n_containers: int,
    n_nodes: int,
    seed: int = 0,
    *,
    drift: float = 0.25,
    spare_on: float = 0.05,
    devil_share: float = 0.05,
    group_share: float = 0.1,
    cap: float = 0.7,
    memory_cap: float = 0.95,
    **problem_options,
) -> PlacementProblem:
    """A cluster one epoch after a consolidated plan (see the module docstring).

    Containers use ~0.1-8 cores (log-normal, mean ~1) and 256 MB-16 GB; `drift` is the relative
    change of each container's demand since the last plan; `spare_on` the share of empty nodes
    left on. Raises ValueError if the demand cannot fit the nodes at the cap.
    """
    rng = np.random.default_rng(seed)
    kinds = rng.integers(0, len(NODE_TYPES), n_nodes)
    nodes = [
        node(
            f"n{i:05d}",
            NODE_TYPES[k][0],
            NODE_TYPES[k][1],
            curve=concave_curve(NODE_TYPES[k][2], NODE_TYPES[k][3]),
        )
        for i, k in enumerate(kinds)
    ]
    now = np.clip(rng.lognormal(-0.35, 0.8, n_containers), 0.1, 8.0).round(3)
    before = np.clip(now * (1 + rng.uniform(-drift, drift, n_containers)), 0.05, 8.0)
    memory = np.clip(np.round(now * rng.uniform(512, 2048, n_containers)), 256, 16384)
    devil = rng.random(n_containers) < devil_share
    grouped = rng.random(n_containers) < group_share
    group_of = (np.cumsum(grouped) - 1) // 3  # consecutive grouped containers, three a group
    cpu_cap, mem_cap = capacity.capacity(np.array([NODE_TYPES[k][0] for k in kinds], dtype=float),
                                         np.array([NODE_TYPES[k][1] for k in kinds], dtype=float), cap, memory_cap)
    # The previous plan: best fit of the old demand, most efficient (largest) nodes first.
    order = np.lexsort((rng.random(n_nodes), -cpu_cap))
    load = np.zeros(n_nodes)
    mem = np.zeros(n_nodes)
    used = np.zeros(n_nodes, dtype=bool)
    where = np.empty(n_containers, dtype=np.int64)
    for c in np.argsort(-before, kind="stable"):
        fits = capacity.fits(load + before[c], mem + memory[c], cpu_cap, mem_cap)
        open_fit = fits & used
        if open_fit.any():
            n = int(np.argmin(np.where(open_fit, cpu_cap - load, np.inf)))
        else:
            candidates = order[fits[order]]
            if len(candidates) == 0:
                raise ValueError(f"{n_containers} containers do not fit on {n_nodes} nodes")
            n = int(candidates[0])
        where[c] = n
        load[n] += before[c]
        mem[n] += memory[c]
        used[n] = True
    powered = used | (rng.random(n_nodes) < spare_on)
    containers = [
        Container(
            name=f"c{i:06d}",
            node=nodes[where[i]].name,
            cpu=float(now[i]),
            memory_mb=float(memory[i]),
            cls=ContainerClass.DEVIL if devil[i] else ContainerClass.TURTLE,
            group=f"g{group_of[i]:05d}" if grouped[i] else None,
        )
        for i in range(n_containers)
    ]
    return problem_from(
        nodes,
        containers,
        off=[nodes[i].name for i in np.flatnonzero(~powered)],
        cap=cap,
        memory_cap=memory_cap,
        **problem_options,
    )


def inventory_toml(inv: Inventory) -> str:
    """The inventory as the TOML an operator would write (only what the planner reads), for
    `peakpack plan --inventory` on a synthetic cluster."""
    c = inv.cluster
    lines = ["[cluster]", f'name = "{c.name}"', f"cap = {c.cap}", f"memory_cap = {c.memory_cap}"]
    for i, n in enumerate(inv.nodes):  # synthetic addresses may collide: number them
        lines += [
            "", "[[nodes]]", f'name = "{n.name}"', f'address = "10.0.{i // 250}.{i % 250 + 1}"',
            f"cpus = {int(n.cpus)}", f"memory_mb = {n.memory_mb}", f'role = "{n.role.value}"',
            f"power_managed = {str(n.power_managed).lower()}",
            "[nodes.power]", f"curve_w = {[round(w, 3) for w in n.power.watts]}",
        ]
    return "\n".join(lines) + "\n"


def tiny_problem(seed: int, containers: int = 5) -> PlacementProblem:
    """Three unlike nodes (one off), a few containers with devils and a group: small enough to
    enumerate every placement, so tests can compare with the brute-force optimum."""
    rng = np.random.default_rng(seed)
    nodes = [
        node("n0", 4, 4000, 40, 100),
        node("n1", 8, 4000, 60, 180),
        node("n2", 6, 4000, 30, 90),
    ]
    items = [
        Container(
            f"c{j}",
            f"n{rng.integers(2)}",
            float(rng.choice([0.5, 1.0, 1.5, 2.0])),
            float(rng.choice([0, 512, 2048])),
            cls=ContainerClass.DEVIL if rng.random() < 0.5 else ContainerClass.TURTLE,
            group="g" if rng.random() < 0.4 else None,
        )
        for j in range(containers)
    ]
    return problem_from(nodes, items, off=["n2"], weights=Weights(contention_w=15, affinity_w=5))


def brute_force_optimum(problem: PlacementProblem) -> float:
    """The best objective over every feasible placement (nodes on = nodes used, plus the ones
    that must stay on): the reference tiny problems are checked against. Exponential."""
    names = [c.name for c in problem.snapshot.containers]
    keep = {
        s.name for s in problem.inventory.nodes if not s.can_power_off
    } & problem.snapshot.powered()
    best = math.inf
    for combo in itertools.product(problem.inventory.node_names, repeat=len(names)):
        assignment = dict(zip(names, combo))
        powered = frozenset(combo) | keep
        if not violations(problem, assignment, powered):
            best = min(best, evaluate(problem, assignment, powered).total)
    return best


def tiered_traffic(containers: Sequence[Container], seed: int = 0, *, app_size: int = 12, mean_mbps: float = 10.0,
                   alpha: float = 1.1, cross_share: float = 0.05) -> dict[tuple[str, str], float]:
    """A CloudSuite-like container graph over `containers` (bytes per second per unordered pair):
    consecutive containers form applications of about `app_size` in three tiers (clients,
    caches, servers: 40/30/30%); each client talks to one or two caches of its application and
    each cache to one or two servers, and `cross_share` of the containers talk to a cache of
    another application. Pair rates are Pareto(`alpha`) with mean `mean_mbps` MB/s (clipped at
    1 GB/s): heavy-tailed, the top tenth of pairs carrying about 80% of the bytes at 1.1."""
    rng = np.random.default_rng(seed)
    names = [c.name for c in containers]
    scale = mean_mbps * 1e6 * (alpha - 1) / alpha  # Pareto's minimum for that mean
    traffic: dict[tuple[str, str], float] = {}

    def talk(a: str, b: str) -> None:
        if a != b:
            key = (a, b) if a < b else (b, a)
            traffic[key] = min(float(scale * (1 + rng.pareto(alpha))), 1e9)

    caches_of: list[list[str]] = []
    for start in range(0, len(names), app_size):
        app = names[start:start + app_size]
        k1, k2 = max(1, round(0.4 * len(app))), max(1, round(0.7 * len(app)))
        clients, caches, servers = app[:k1], app[k1:k2] or app[:1], app[k2:] or app[-1:]
        caches_of.append(caches)
        for c in clients:
            for cache in rng.choice(caches, size=min(len(caches), int(rng.integers(1, 3))), replace=False):
                talk(c, str(cache))
        for cache in caches:
            for server in rng.choice(servers, size=min(len(servers), int(rng.integers(1, 3))), replace=False):
                talk(cache, str(server))
    for i in np.flatnonzero(rng.random(len(names)) < cross_share).tolist():
        other = caches_of[int(rng.integers(len(caches_of)))]
        talk(names[i], str(other[int(rng.integers(len(other)))]))
    return traffic


def cross_node_share(traffic: Mapping[tuple[str, str], float], assignment: Mapping[str, str]) -> float:
    """Share of the bytes per second that cross between nodes under `assignment`."""
    total = sum(traffic.values())
    crossing = sum(r for (a, b), r in traffic.items() if assignment[a] != assignment[b])
    return crossing / total if total else 0.0
