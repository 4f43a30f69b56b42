"""The container graph as the objective prices it: an edge per pair of containers that talk,
weighted with what it costs (W) while its two ends are on different nodes.

Built once per Instance from `PlacementProblem.traffic` (forecast bytes per second) and
`Weights.traffic_w_per_mbps`; stored both as an edge list (the cut of a placement is one numpy
expression) and as adjacency in CSR form (a move's traffic price is O(degree)).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat

import numpy as np

MB = 1e6


def flat_ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranges [starts[i], starts[i] + counts[i]) laid end to end: for each entry, which range
    (i) it is from, and its index. How CSR rows of many containers (or nodes) are read at once."""
    row = np.repeat(np.arange(len(starts)), counts)
    idx = np.arange(int(counts.sum())) + np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return row, idx


def stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """`np.argsort(keys, kind="stable")` of integer keys in [0, bound): as 16-bit integers where
    they fit, which numpy sorts by radix, ~8x faster than int64 (node or container indices)."""
    return np.argsort(keys.astype(np.int16) if bound <= np.iinfo(np.int16).max + 1 else keys, kind="stable")


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)`, by a sort: numpy 2's default hash-based unique took ~18x longer on the
    few thousand node or edge keys the planner dedupes (5,000 keys: 282 us against 16 us)."""
    s = np.sort(values)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


@dataclass(frozen=True)
class TrafficGraph:
    a: np.ndarray  # int (E,): one end of each edge (container index), a < b
    b: np.ndarray  # int (E,): the other
    w: np.ndarray  # float (E,): W the edge costs while its ends are on different nodes
    rate: np.ndarray  # float (E,): its forecast bytes per second (for explanations)
    ptr: np.ndarray  # int (C+1,): CSR row pointers over both directions
    nbr: np.ndarray  # int (2E,): the neighbour at the other end
    eid: np.ndarray  # int (2E,): which edge

    @classmethod
    def build(cls, traffic: Mapping[tuple[str, str], float], index: Mapping[str, int], w_per_mbps: float,
              containers: int) -> TrafficGraph:
        """Edges between known containers with a positive weight (none when the weight is 0)."""
        n = len(traffic) if w_per_mbps > 0 else 0
        xs, ys = zip(*traffic) if n else ((), ())
        x, y = (np.fromiter(map(index.get, names, repeat(-1, n)), np.int64, n) for names in (xs, ys))
        rate = np.fromiter(traffic.values(), float, n)
        keep = (x >= 0) & (y >= 0) & (x != y) & (rate > 0)
        x, y, rate = x[keep], y[keep], rate[keep]
        order = np.argsort(x * containers + y)  # the pairs by (x, y): unique, as the mapping's keys are
        a, b, rate = np.minimum(x, y)[order], np.maximum(x, y)[order], rate[order]
        ends = np.concatenate([a, b])
        order = stable_order(ends, containers)
        eid = np.concatenate([np.arange(len(a)), np.arange(len(a))])[order]
        nbr = np.concatenate([b, a])[order]
        ptr = np.zeros(containers + 1, dtype=np.int64)
        np.cumsum(np.bincount(ends, minlength=containers), out=ptr[1:])
        return cls(a, b, rate / MB * w_per_mbps, rate, ptr, nbr, eid)

    @property
    def edges(self) -> int:
        return len(self.a)

    @cached_property
    def incident(self) -> np.ndarray:
        """W of each container's pairs: the most that moving it can save in traffic."""
        n = len(self.ptr) - 1
        return np.bincount(self.a, self.w, minlength=n) + np.bincount(self.b, self.w, minlength=n)

    def cut(self, assign: np.ndarray) -> float:
        """W paid by a placement: the edges whose ends are on different nodes."""
        return float(self.w[assign[self.a] != assign[self.b]].sum())

    @cached_property
    def edge_lists(self) -> tuple[list[int], list[int], list[float]]:
        """`a`, `b` and `w` as lists, for loops over edges one at a time."""
        return self.a.tolist(), self.b.tolist(), self.w.tolist()

    @cached_property
    def adjacency(self) -> tuple[list[int], list[int], list[float]]:
        """The CSR rows as lists, for loops over one container's pairs: row pointers, the
        neighbour and the pair's weight of each entry."""
        return self.ptr.tolist(), self.nbr.tolist(), self.w[self.eid].tolist()

    def around(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Container c's neighbours and the edges to them."""
        s, e = self.ptr[c], self.ptr[c + 1]
        return self.nbr[s:e], self.eid[s:e]

    def gather(self, containers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pairs of each of `containers` at once (CSR rows concatenated): for every entry,
        which of `containers` it belongs to (its position), the neighbour, and the edge."""
        starts = self.ptr[containers]
        row, idx = flat_ranges(starts, self.ptr[containers + 1] - starts)
        return row, self.nbr[idx], self.eid[idx]

    def touching(self, containers: np.ndarray) -> np.ndarray:
        """Indices of the edges with at least one end in `containers`, each once."""
        if self.edges == 0 or len(containers) == 0:
            return np.zeros(0, dtype=np.int64)
        return sorted_unique(np.concatenate([self.around(int(c))[1] for c in containers]))
