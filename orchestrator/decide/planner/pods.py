"""Decomposition for problems past what one process plans in seconds (~100,000 containers).

1. Partition the nodes into pods of about `Peakpack.pod_nodes`, dealing each node type (and
   powered / off, busy / idle) round-robin so every pod is a small copy of the cluster; each
   container belongs to the pod of the node it runs on. With a traffic graph the container graph
   is cut first, pMACH's way: nodes joined by heavy traffic form clumps (at most an eighth of a
   pod), and a clump is dealt whole, so its pairs are solved together.
2. Solve the pods in parallel with `concurrent.futures.ProcessPoolExecutor` (forkserver: safe
   in a threaded caller, like the controller's scheduler), each with the ordinary single-pod
   planner and an equal share of the work (and of the safety net's time). Each pod's answer
   depends on its problem only, and they are read in the pods' order, so which process
   finishes first changes nothing.
3. Refine across pods in this process: place what a pod could not (a container whose eligible
   nodes are all elsewhere), drain each pod's least utilised nodes into any pod's spare room,
   untangle devils and groups, join pairs, send home what need not have moved, then
   large-neighbourhood search over the whole cluster.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np

from ...domain.model import ClusterSnapshot, Inventory
from ...domain.plan import SolverReport
from .budget import Budget
from .heuristic import consolidate, homecoming, join, repair, untangle
from .instance import Instance
from .packing import Packing
from .problem import PlacementProblem, Policy
from .search import Outcome, SearchOptions, improve

#: Share of the remaining work (and time) the pods get; the rest is for refining across them.
POD_SHARE = 0.6
#: Share of each pod's powered nodes, the least utilised, that refinement tries to drain.
REFINE_SHARE = 0.15


def partition(inst: Instance, pod_nodes: int) -> list[np.ndarray]:
    """Usable node indices dealt into pods that each look like the whole cluster; nodes joined
    by heavy traffic (`clumps`) go to one pod."""
    nodes = np.flatnonzero(inst.usable)
    count = max(1, -(-len(nodes) // pod_nodes))
    load = np.bincount(inst.orig, inst.cpu, minlength=inst.n_nodes)[nodes]
    order = nodes[np.lexsort((nodes, -load, ~inst.initially_on[nodes], inst.node_type[nodes]))]
    if not inst.graph.edges:
        return [np.sort(order[i::count]) for i in range(count)]
    return deal(inst, order, count, clumps(inst, order, max(2, pod_nodes // CLUMP_SHARE)))


#: a clump of nodes joined by traffic holds at most this share of a pod's nodes (1 / CLUMP_SHARE)
CLUMP_SHARE = 8


def deal(inst: Instance, order: np.ndarray, count: int, groups: list[list[int]]) -> list[np.ndarray]:
    """Pods of the sizes round-robin dealing gives, from `groups` of nodes that stay together:
    those with containers the heaviest first (CPU load), each to the pod with the least load that
    has room for it (split over the roomiest pods if none has); then the nodes left alone, in
    `order`, each to the pod with the fewest nodes of its kind (type, powered) that has room. So
    every pod carries about the same load and looks like the cluster."""
    quota = [len(order[i::count]) for i in range(count)]
    load = np.bincount(inst.orig, minlength=inst.n_nodes).astype(float)
    pods: list[list[int]] = [[] for _ in range(count)]
    carried = [0.0] * count
    busy = [g for g in groups if len(g) > 1 or load[g[0]] > 0]
    alone = [g[0] for g in groups if not (len(g) > 1 or load[g[0]] > 0)]
    busy.sort(key=lambda g: -float(load[g].sum()))  # stable: ties keep the clumps' order
    for group in busy:
        fits = [i for i in range(count) if len(pods[i]) + len(group) <= quota[i]]
        rest = list(group)
        while rest:
            i = (min(fits, key=lambda j: (carried[j], j)) if fits
                 else max(range(count), key=lambda j: (quota[j] - len(pods[j]), -j)))
            take = rest if fits else rest[: max(quota[i] - len(pods[i]), 1)]
            rest = rest[len(take):]
            pods[i].extend(take)
            carried[i] += float(load[take].sum())
            fits = []
    kind = {int(n): (int(inst.node_type[n]), bool(inst.initially_on[n])) for n in order.tolist()}
    have: list[dict[tuple[int, bool], int]] = [{} for _ in range(count)]
    for i, pod in enumerate(pods):
        for n in pod:
            have[i][kind[n]] = have[i].get(kind[n], 0) + 1
    place = {int(n): r for r, n in enumerate(order.tolist())}
    for n in sorted(alone, key=place.__getitem__):
        room = [i for i in range(count) if len(pods[i]) < quota[i]] or list(range(count))
        i = min(room, key=lambda j: (have[j].get(kind[n], 0), len(pods[j]), j))
        pods[i].append(n)
        have[i][kind[n]] = have[i].get(kind[n], 0) + 1
    return [np.sort(np.array(p, dtype=np.int64)) for p in pods]


def clumps(inst: Instance, order: np.ndarray, most: int) -> list[list[int]]:
    """Nodes joined by the traffic between the containers on them, heaviest node pairs first
    (union-find), a clump never above `most` nodes; the largest clumps first, each listed and
    then ordered by its first node's place in `order`."""
    graph = inst.graph
    na, nb = inst.orig[graph.a], inst.orig[graph.b]
    usable = inst.usable[na] & inst.usable[nb] & (na != nb)
    lo, hi = np.minimum(na, nb)[usable], np.maximum(na, nb)[usable]
    keys, weight = np.unique(lo * inst.n_nodes + hi, return_inverse=True)
    between = np.bincount(weight, graph.w[usable], minlength=len(keys))
    parent = {int(n): int(n) for n in order}
    size = dict.fromkeys(parent, 1)

    def root(n: int) -> int:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for k in np.argsort(-between, kind="stable").tolist():
        x, y = root(int(keys[k] // inst.n_nodes)), root(int(keys[k] % inst.n_nodes))
        if x != y and size[x] + size[y] <= most:
            parent[y] = x
            size[x] += size[y]
    rank = {int(n): i for i, n in enumerate(order)}
    groups: dict[int, list[int]] = {}
    for n in order.tolist():
        groups.setdefault(root(n), []).append(n)
    return sorted(groups.values(), key=lambda g: (-len(g), rank[g[0]]))


def subproblem(
    problem: PlacementProblem, inst: Instance, pod: np.ndarray, time_limit_s: float, work_limit: float
) -> PlacementProblem:
    """The pod as a problem of its own: its nodes, the containers on them, eligibility within,
    and its share of the work and time."""
    names = {inst.node_names[n] for n in pod.tolist()}
    inv = problem.inventory
    snap = problem.snapshot
    containers = tuple(c for c in snap.containers if c.node in names)
    eligible = {
        c.name: problem.eligible[c.name] & names for c in containers if c.name in problem.eligible
    }
    inside = {c.name for c in containers}
    traffic = {e: rate for e, rate in problem.traffic.items() if e[0] in inside and e[1] in inside}
    return replace(
        problem,
        inventory=Inventory(
            inv.cluster, tuple(s for s in inv.nodes if s.name in names), inv.source
        ),
        snapshot=ClusterSnapshot(
            tuple(n for n in snap.nodes if n.name in names), containers, snap.version, snap.taken_at
        ),
        eligible=eligible,
        time_limit_s=time_limit_s,
        work_limit=work_limit,
        cap=problem.cpu_cap,
        traffic=traffic,
    )


def _solve_pod(
    policy: Policy, problem: PlacementProblem
) -> tuple[dict[str, str], frozenset[str], SolverReport]:
    placement = policy.solve(problem)
    return dict(placement.assignment), placement.powered, placement.report


def solve_in_pods(
    single: Policy, pod_nodes: int, search: SearchOptions, inst: Instance, budget: Budget, bound: float
) -> tuple[Packing, Outcome]:
    """Pods in parallel, then refinement across them (see the module docstring). `single` solves
    one pod (a picklable policy that never splits again); `pod_nodes` is a pod's size. The pods'
    work is spent from `budget`, and their safety nets fire into it."""
    problem = inst.problem
    pods = partition(inst, pod_nodes)
    workers = max(1, min(os.cpu_count() or 1, len(pods)))  # one process per core
    rounds = -(-len(pods) // workers)  # the processes' turns: only the safety net's share counts them
    seconds = budget.seconds_left() * POD_SHARE / rounds
    work = budget.left * POD_SHARE / len(pods)
    subs = [subproblem(problem, inst, pod, seconds, work) for pod in pods]
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        answers = list(pool.map(_solve_pod, [single] * len(subs), subs))
    index = {name: i for i, name in enumerate(inst.node_names)}
    assign = inst.orig.copy()
    on = inst.initially_on.copy()
    position = {name: i for i, name in enumerate(inst.names)}
    for pod, (assignment, powered, report) in zip(pods, answers):
        budget.spend(report.work, clock_stopped=report.stopped_by_clock)
        for name, node in assignment.items():
            assign[position[name]] = index[node]
        for n in pod.tolist():
            on[n] = inst.node_names[n] in powered
    pack = Packing(inst, assign, on)
    repair(pack)
    consolidate(pack, candidates=_least_utilised(pack, pods))
    untangle(pack)
    join(pack, budget)
    homecoming(pack)
    return pack, improve(pack, budget, search, problem.seed, bound)


def _least_utilised(pack: Packing, pods: list[np.ndarray]) -> np.ndarray:
    """Mask of each pod's least utilised powered nodes: where cross-pod draining can pay."""
    inst = pack.inst
    mask = np.zeros(inst.n_nodes, dtype=bool)
    for pod in pods:
        powered = pod[pack.on[pod] & inst.can_off[pod]]
        if len(powered) == 0:
            continue
        util = pack.load[powered] / inst.cpu_cap[powered]
        keep = max(1, int(len(powered) * REFINE_SHARE))
        mask[powered[np.argsort(util, kind="stable")[:keep]]] = True
    return mask
