"""Baselines behind the same interface as the production planner, for comparison.

They are the textbook heuristics, deliberately migration-blind (except `noop`): each re-packs
every container from scratch in decreasing CPU order, which is how they are usually evaluated
and why they churn. All respect eligibility, memory and their CPU cap; a container that fits
nowhere stays where it is. They are scored by the shared objective and lower bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .instance import Instance
from .packing import Packing
from .problem import Placement, PlacementProblem

HEURISTIC = "HEURISTIC"


class _Bins:
    """Loads of nodes filled from empty; containers not yet placed sit at -1."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        self.assign = np.full(inst.n_containers, -1, dtype=np.int64)
        self.load = np.zeros(inst.n_nodes)
        self.mem = np.zeros(inst.n_nodes)
        self.open = inst.must_on.copy()

    def fits(self, c: int) -> np.ndarray:
        inst = self.inst
        return inst.allowed(c) & inst.fits(self.load + inst.cpu[c], self.mem + inst.mem[c])

    def put(self, c: int, n: int) -> None:
        self.assign[c] = n
        self.load[n] += self.inst.cpu[c]
        self.mem[n] += self.inst.mem[c]
        self.open[n] = True

    def packing(self, keep_on: np.ndarray | None = None) -> Packing:
        """Unplaced containers stay on their node; nodes hosting something (or kept) are on."""
        inst = self.inst
        assign = np.where(self.assign < 0, inst.orig, self.assign)
        on = np.zeros(inst.n_nodes, dtype=bool)
        on[assign] = True
        on |= inst.must_on
        if keep_on is not None:
            on |= keep_on
        return Packing(inst, assign, on)


def opening_order(inst: Instance) -> np.ndarray:
    """Nodes a packer opens: powered ones first, each part most efficient first."""
    eff = inst.efficiency_order
    return np.concatenate([eff[inst.initially_on[eff]], eff[~inst.initially_on[eff]]])


@dataclass(frozen=True)
class Noop:
    """Leave everything where it is: the reference every other policy must beat."""

    name: str = "noop"

    def solve(self, problem: PlacementProblem) -> Placement:
        started = time.perf_counter()
        return Packing(Instance.build(problem)).result(HEURISTIC, started)


@dataclass(frozen=True)
class FirstFitDecreasing:
    """Each container, largest first, onto the first node in opening order it fits on."""

    name: str = "ffd"

    def solve(self, problem: PlacementProblem) -> Placement:
        started = time.perf_counter()
        inst = Instance.build(problem)
        bins = _Bins(inst)
        order = opening_order(inst)
        for c in inst.largest_first:
            ok = bins.fits(c)[order]
            if ok.any():
                bins.put(c, int(order[np.argmax(ok)]))
        return bins.packing().result(HEURISTIC, started)


@dataclass(frozen=True)
class BestFit:
    """Largest first onto the open node left with the least spare CPU; opens nodes as needed.

    Beloglazov's power-aware best fit packs to a high utilisation threshold; 95% by default,
    which is also why it is reported with its own cap.
    """

    name: str = "bestfit95"
    cap: float = 0.95

    def solve(self, problem: PlacementProblem) -> Placement:
        started = time.perf_counter()
        inst = Instance.build(problem, cap=self.cap)
        bins = _Bins(inst)
        order = opening_order(inst)
        for c in inst.largest_first:
            ok = bins.fits(c)
            open_ok = ok & bins.open
            if open_ok.any():
                spare = np.where(open_ok, (inst.cpu_cap - bins.load) / inst.cpu_cap, np.inf)
                bins.put(c, int(np.argmin(spare)))
            elif ok[order].any():
                bins.put(c, int(order[np.argmax(ok[order])]))
        return bins.packing().result(HEURISTIC, started, cap=self.cap)


@dataclass(frozen=True)
class Spread:
    """E-PVM style: largest first onto the least utilised powered node; wakes nodes only when
    nothing powered fits. It balances load and never switches nodes off."""

    name: str = "spread"

    def solve(self, problem: PlacementProblem) -> Placement:
        started = time.perf_counter()
        inst = Instance.build(problem)
        bins = _Bins(inst)
        bins.open |= inst.initially_on
        order = opening_order(inst)
        for c in inst.largest_first:
            ok = bins.fits(c)
            open_ok = ok & bins.open
            if open_ok.any():
                util = np.where(open_ok, (bins.load + inst.cpu[c]) / inst.cpus, np.inf)
                bins.put(c, int(np.argmin(util)))
            elif ok[order].any():
                bins.put(c, int(order[np.argmax(ok[order])]))
        return bins.packing(keep_on=inst.initially_on).result(HEURISTIC, started)


@dataclass(frozen=True)
class DotProduct:
    """Panigrahy et al.'s bin-centric dot product: fill one node at a time, each step taking the
    container whose (CPU, memory) demand best aligns with the node's remaining capacity."""

    name: str = "dotproduct"

    def solve(self, problem: PlacementProblem) -> Placement:
        started = time.perf_counter()
        inst = Instance.build(problem)
        bins = _Bins(inst)
        left = np.ones(inst.n_containers, dtype=bool)
        allowed = np.ones(inst.n_containers, dtype=bool)
        for n in opening_order(inst):
            if not left.any():
                break
            for c, mask in inst.eligible.items():
                allowed[c] = mask[n]
            while True:
                room = inst.fits(bins.load[n] + inst.cpu, bins.mem[n] + inst.mem, n)
                cand = left & allowed & room
                if not cand.any():
                    break
                cpu_room = inst.cpu_cap[n] - bins.load[n]
                mem_room = inst.mem_cap[n] - bins.mem[n]
                score = inst.cpu * cpu_room / inst.cpu_cap[n] ** 2
                if inst.mem_cap[n] > 0:
                    score = score + inst.mem * mem_room / inst.mem_cap[n] ** 2
                c = int(np.argmax(np.where(cand, score, -np.inf)))
                bins.put(c, int(n))
                left[c] = False
        return bins.packing().result(HEURISTIC, started)
