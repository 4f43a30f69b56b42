"""Container demand from cgroup counters, pure: the delta rule that turns two readings of a
container's CPU-time counter into cores, and the forecast the planner gets from the stored history.

The service plans the way the simulator does: each container's CPU is the forecast
(`forecast.forecast`) of its per-epoch demand over the configured window, not one sample. The
stored rows may come at any cadence (the controller observes at the start of an epoch and after
executing it); each epoch's value is the CPU-time-weighted mean of the rows ending in it, so a short
interval counts for what it lasted.

History is a container's by name, whatever node its rows were on: it follows a container across
a migration or a restart, as the simulator's VMs keep theirs (its load moved with it). The
interval with the move or restart has no delta (a new cgroup, its counter started over), so the
first reading after it counts from the container's start on its new node (`cores_since_start`:
the counter over the time since the restore or restart); a `peakpack.cpu` label is used only by
a container with no history in the window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

import numpy as np

from ..domain.model import ClusterSnapshot
from ..domain.settings import ForecastSettings
from .forecast import forecast, window_epochs

#: a row's CPU figure is a counter delta over its interval, or a one-second sample (no earlier
#: counter to subtract). Rows stored before labels became a fallback may say "label".
COUNTER, SAMPLE = "cgroup", "stats"


class DemandRow(Protocol):
    """What the forecast reads of a stored demand row (`db.records.DemandRecord`)."""

    @property
    def at(self) -> datetime: ...
    @property
    def container(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def interval_s(self) -> float | None: ...
    @property
    def cpu(self) -> float | None: ...
    @property
    def cpu_time_ns(self) -> int | None: ...
    @property
    def source(self) -> str: ...
    def to_json(self) -> dict[str, object]: ...


def cores_between(previous: DemandRow | None, node: str, cpu_time_ns: int | None,
                  at: datetime) -> tuple[float, float] | None:
    """(cores, seconds) since `previous`, or None when there is no delta to take: no earlier
    reading, another node (a migrated container has a new cgroup), or a counter that went down
    (the container restarted: its cgroup is new). Never negative."""
    if previous is None or previous.cpu_time_ns is None or cpu_time_ns is None or previous.node != node:
        return None
    seconds = (at - previous.at).total_seconds()
    if seconds <= 0 or cpu_time_ns < previous.cpu_time_ns:
        return None
    return (cpu_time_ns - previous.cpu_time_ns) / 1e9 / seconds, seconds


def cores_since_start(cpu_time_ns: int | None, started_at: datetime | None,
                      at: datetime) -> tuple[float, float] | None:
    """(cores, seconds) since the container started (its cgroup is new then, so its counter
    started at zero), or None without a counter or a start before `at` (a clock skewed between
    the node and the head node leaves it out rather than dividing by a guess)."""
    if cpu_time_ns is None or started_at is None:
        return None
    seconds = (at - started_at).total_seconds()
    if seconds <= 0:
        return None
    return cpu_time_ns / 1e9 / seconds, seconds


def measured_cores(rows: Iterable[DemandRow], node: str, since: datetime) -> dict[str, float]:
    """Each container's cores on `node` between its two newest rows, when the newest ends after
    `since`: the counters' delta, whatever the rows' CPU figure says (a label's, for instance)."""
    last: dict[str, list[DemandRow]] = {}
    for r in sorted(rows, key=lambda r: r.at):
        last.setdefault(r.container, []).append(r)
    out = {}
    for name, mine in last.items():
        if len(mine) < 2 or mine[-1].node != node or mine[-1].at <= since:
            continue
        delta = cores_between(mine[-2], node, mine[-1].cpu_time_ns, mine[-1].at)
        if delta is not None:
            out[name] = delta[0]
    return out


def history_matrix(rows: Iterable[DemandRow], containers: Sequence[str], now: datetime, epoch_seconds: float,
                   epochs: int) -> np.ndarray:
    """One row per container (by name, on any node), one column per epoch ending at `now` (oldest
    first): the mean cores of the counter rows that end in that epoch, weighted by their
    intervals; NaN where a container has none."""
    index = {name: i for i, name in enumerate(containers)}
    cpu_s = np.zeros((len(containers), epochs))
    seconds = np.zeros((len(containers), epochs))
    for r in rows:
        i = index.get(r.container)
        if i is None or r.source != COUNTER or r.cpu is None or not r.interval_s:
            continue
        age = (now - r.at).total_seconds()
        if age < 0:
            continue
        j = epochs - 1 - math.floor(age / epoch_seconds)
        if j < 0:
            continue
        cpu_s[i, j] += r.cpu * r.interval_s
        seconds[i, j] += r.interval_s
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(seconds > 0, cpu_s / np.where(seconds > 0, seconds, 1.0), np.nan)


@dataclass(frozen=True)
class Forecast:
    """The CPU the planner is given for one container, and where it came from: "forecast" (from
    `epochs` epochs of counter history), "label" (no history yet, and a `peakpack.cpu` label
    declares it), or "observed" (no history yet: its one-second sample)."""

    container: str
    cpu: float
    source: str
    epochs: int


def forecast_demand(snapshot: ClusterSnapshot, rows: Iterable[DemandRow], settings: ForecastSettings,
                    epoch_seconds: float) -> tuple[ClusterSnapshot, dict[str, Forecast]]:
    """The snapshot with each container's CPU replaced by its forecast over the window ending at
    the snapshot's time (the history the container has, if shorter); one with no history keeps
    what its label declares, else what was observed."""
    rows = list(rows)
    names = [c.name for c in snapshot.containers]
    epochs = window_epochs(settings, epoch_seconds)
    history = history_matrix(rows, names, snapshot.taken_at, epoch_seconds, epochs)
    predicted = forecast(history, settings) if names else np.zeros(0)
    seen = (~np.isnan(history)).sum(axis=1) if names else np.zeros(0, dtype=int)
    result: dict[str, Forecast] = {}
    containers = []
    for c, value, n in zip(snapshot.containers, predicted, seen):
        if np.isnan(value):
            result[c.name] = Forecast(c.name, c.cpu, "label" if c.declared else "observed", int(n))
            containers.append(c)
        else:
            result[c.name] = Forecast(c.name, float(value), "forecast", int(n))
            containers.append(replace(c, cpu=float(value)))
    return replace(snapshot, containers=tuple(containers)), result


def with_forecasts(rows: Sequence[DemandRow], plans: Sequence[tuple[int, datetime, dict[str, float]]]
                   ) -> list[dict[str, object]]:
    """Demand rows as JSON, each with the CPU the next plan was given for its container (the plan's
    stored snapshot: the forecast) when it is the container's last row before that plan."""
    out = [{**r.to_json(), "plan_id": None, "forecast": None} for r in rows]
    for plan_id, created_at, cpus in plans:
        last: dict[str, int] = {}
        for i, r in enumerate(rows):
            if r.at <= created_at and r.container in cpus:
                last[r.container] = i
        for container, i in last.items():
            if out[i]["plan_id"] is None:
                out[i]["plan_id"], out[i]["forecast"] = plan_id, cpus[container]
    return out
