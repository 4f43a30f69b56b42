"""Traffic between containers from the stored conntrack measurements, pure: totals per pair for
`peakpack history traffic`, and the forecast the planner weighs its edges with.

A pair's rows carry only the intervals it sent something in; which intervals were measured at
all is in the reads (`TrafficRead`): a pair without bytes in a measured interval sent nothing
then, an interval no node was read in is unknown. The forecast is the CPU's rule
(`forecast.forecast` over one value per epoch, the window of `[planner.forecast]`), applied to
each container pair's bytes per second, both directions summed; the pair is unordered and kept
by container name, so it follows a migration as demand history does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from ..domain.records import PeerKind, TrafficRead, TrafficRecord
from ..domain.settings import ForecastSettings
from .forecast import forecast, window_epochs

#: an unordered container pair, names sorted
Edge = tuple[str, str]
#: the most one pair's forecast may weigh: what one 10 GbE link carries. Two containers split over
#: two nodes cannot send more between them, so joining them cannot save more; a pair measured
#: faster (two containers on one bridge) is worth this much to keep together, and no single pair,
#: whatever its counters say, can outweigh every other term of the objective
MAX_PAIR_BYTES_PER_S = 1.25e9


def edge(a: str, b: str) -> Edge:
    return (a, b) if a <= b else (b, a)


def measured_seconds(reads: Iterable[TrafficRead]) -> float:
    """Seconds the reads cover: the most any one node was measured (all are read together)."""
    per_node: dict[str, float] = defaultdict(float)
    for r in reads:
        if r.measured and r.interval_s:
            per_node[r.node] += r.interval_s
    return max(per_node.values(), default=0.0)


@dataclass(frozen=True)
class PairTotal:
    """One client/server pair over a period: bytes each way, flows, where its ends were last
    seen, how its bytes were attributed, and bytes per second over the measured time."""

    client: str
    server: str
    client_node: str | None
    server_node: str | None
    c2s_bytes: int
    s2c_bytes: int
    flows: int
    how: str
    rate_bps: float | None

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "bytes": self.c2s_bytes + self.s2c_bytes}


def pair_totals(pairs: Iterable[TrafficRecord], reads: Sequence[TrafficRead]) -> list[PairTotal]:
    """Totals per (client, server), the heaviest first; non-container ends are named by kind
    ("host:node-1", "external:10.0.0.9"), as they were measured."""
    seconds = measured_seconds(reads)
    acc: dict[tuple[str, str], list[Any]] = {}
    for p in pairs:
        key = (_name(p.client_kind, p.client), _name(p.server_kind, p.server))
        a = acc.setdefault(key, [0, 0, 0, set(), None, None])
        a[0] += p.c2s_bytes
        a[1] += p.s2c_bytes
        a[2] += p.flows
        a[3].add(p.how)
        a[4], a[5] = p.client_node, p.server_node
    totals = [PairTotal(c, s, a[4], a[5], a[0], a[1], a[2], "+".join(sorted(a[3])),
                        (a[0] + a[1]) / seconds if seconds > 0 else None)
              for (c, s), a in acc.items()]
    return sorted(totals, key=lambda t: (-(t.c2s_bytes + t.s2c_bytes), t.client, t.server))


def _name(kind: PeerKind, name: str) -> str:
    return name if kind is PeerKind.CONTAINER else f"{kind.value}:{name}"


def traffic_matrix(pairs: Iterable[TrafficRecord], reads: Iterable[TrafficRead], edges: Sequence[Edge],
                   now: datetime, epoch_seconds: float, epochs: int) -> np.ndarray:
    """One row per edge, one column per epoch ending at `now` (oldest first): bytes per second
    between the two containers; 0 in a measured epoch without bytes, NaN in one not measured."""
    index = {e: i for i, e in enumerate(edges)}

    def column(at: datetime) -> int | None:
        age = (now - at).total_seconds()
        j = epochs - 1 - math.floor(age / epoch_seconds) if age >= 0 else -1
        return j if j >= 0 else None

    covered: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in reads:
        j = column(r.at)
        if j is not None and r.measured and r.interval_s:
            covered[j][r.node] += r.interval_s
    seconds = np.array([max(covered[j].values(), default=0.0) for j in range(epochs)])
    sent = np.zeros((len(edges), epochs))
    for p in pairs:
        if p.client_kind is not PeerKind.CONTAINER or p.server_kind is not PeerKind.CONTAINER:
            continue
        i, j = index.get(edge(p.client, p.server)), column(p.at)
        if i is not None and j is not None:
            sent[i, j] += p.c2s_bytes + p.s2c_bytes
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(seconds > 0, sent / np.where(seconds > 0, seconds, 1.0), np.nan)


def forecast_traffic(pairs: Sequence[TrafficRecord], reads: Sequence[TrafficRead], containers: Iterable[str],
                     now: datetime, settings: ForecastSettings, epoch_seconds: float) -> dict[Edge, float]:
    """Forecast bytes per second of every pair of `containers` that talked in the window (the
    CPU's forecast rule over per-epoch rates), at most MAX_PAIR_BYTES_PER_S each; pairs forecast
    at 0 are left out."""
    names = set(containers)
    edges = sorted({edge(p.client, p.server) for p in pairs
                    if p.client_kind is PeerKind.CONTAINER and p.server_kind is PeerKind.CONTAINER
                    and p.client != p.server and p.client in names and p.server in names})
    if not edges:
        return {}
    epochs = window_epochs(settings, epoch_seconds)
    rates = forecast(traffic_matrix(pairs, reads, edges, now, epoch_seconds, epochs), settings)
    return {e: min(float(r), MAX_PAIR_BYTES_PER_S) for e, r in zip(edges, rates) if not np.isnan(r) and r > 0}
