"""Energy accounting, pure: integrate stored samples into per-node energy over an interval and
split it as Kepler does: idle, each container's share of the active part by CPU time, residual.

Never negative, never silently zero: a node with no counter over the interval gets no measured
row; the caller may add a row with source "model" (from the node's power curve), labelled so."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from peakpack.orchestrator.domain.model import PowerCurve
from peakpack.orchestrator.domain.records import EnergyRow, EnergySample

from .rapl import counter_delta_uj, restarted

#: how far back a node's measured rows teach its idle power (`split_idle_w`): a day includes the
#: quiet hours of a daily load
IDLE_LOOKBACK = timedelta(days=1)


def integrate_rapl(node: str, samples: Sequence[EnergySample], plan_id: int | None = None) -> EnergyRow | None:
    """Energy from the first to the last sample (per zone, wraps handled), or None if < 2 samples.

    A reboot between two samples restarts the counters (`rapl.restarted`): that pair gives no
    delta, and the row starts at the first sample after the reboot, so its interval is exactly
    the time it counts; None when no pair after the last reboot is left."""
    by_zone: dict[str, list[EnergySample]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: s.at):
        if s.source == "rapl" and s.energy_uj is not None:
            by_zone[s.zone].append(s)
    starts = []
    for zone_samples in by_zone.values():
        for a, b in zip(zone_samples, zone_samples[1:]):
            if restarted(a.boot_id, b.boot_id, a.energy_uj, b.energy_uj):  # type: ignore[arg-type]
                starts.append(b.at)
    since = max(starts, default=None)
    total_uj, start, end = 0, None, None
    for zone_samples in by_zone.values():
        kept = [s for s in zone_samples if since is None or s.at >= since]
        if len(kept) < 2:
            continue
        for a, b in zip(kept, kept[1:]):
            top = b.max_energy_range_uj or a.max_energy_range_uj
            if top is None:
                raise ValueError(f"{node}: RAPL sample without max_energy_range_uj")
            total_uj += counter_delta_uj(a.energy_uj, b.energy_uj, top)  # type: ignore[arg-type]
        start = min(start or kept[0].at, kept[0].at)
        end = max(end or kept[-1].at, kept[-1].at)
    if start is None or end is None or end <= start:
        return None
    return EnergyRow(node=node, start=start, end=end, energy_j=total_uj / 1e6, source="rapl", plan_id=plan_id)


def trapezoid_j(watts: Sequence[tuple[datetime, float]]) -> float:
    """Joules of power readings (when, watts) in time order, by the trapezoid rule."""
    return sum((t1 - t0).total_seconds() * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(watts, watts[1:]))


def integrate_power(node: str, samples: Sequence[EnergySample], plan_id: int | None = None) -> EnergyRow | None:
    """DCMI watts by the trapezoid rule; None if fewer than two readings."""
    points = sorted((s for s in samples if s.source == "dcmi" and s.power_w is not None), key=lambda s: s.at)
    if len(points) < 2:
        return None
    joules = trapezoid_j([(s.at, s.power_w) for s in points if s.power_w is not None])
    return EnergyRow(node=node, start=points[0].at, end=points[-1].at, energy_j=joules, source="dcmi", plan_id=plan_id)


def model_energy(node: str, curve: PowerCurve, cpus: int, load_cores: float, start: datetime, end: datetime,
                 plan_id: int | None = None) -> EnergyRow:
    """Modelled energy for a node with no counter: its curve at the observed load; labelled model."""
    seconds = max(0.0, (end - start).total_seconds())
    return EnergyRow(node=node, start=start, end=end, energy_j=curve.at(min(1.0, load_cores / cpus)) * seconds,
                     source="model", plan_id=plan_id)


def split_idle_w(row: EnergyRow, curve: PowerCurve, history: Iterable[EnergyRow]) -> float:
    """The idle power that `kepler_split` takes out of `row`, in the domain of `row`'s own number.

    A `model` row is the node's power curve, so its idle is the curve's `idle_w`. A measured row
    is not: RAPL counts the CPU package only, often far below the wall idle of the curve, which
    would make every interval all idle and every container 0 J. So a measured row's idle is
    learned from the counter itself, as Kepler does: the lowest mean power that this node's
    counter of the same source reported over any interval in `history` (its earlier node rows,
    the sampler keeps `IDLE_LOOKBACK` of them) or `row` itself. That is an upper bound on the
    counter's idle (the node is rarely fully idle), so no idle power is ever given to containers,
    and it tightens as the node sees quieter intervals; the first interval a node reports is
    all idle."""
    if row.source == "model":
        return curve.idle_w
    mine = [r for r in (*history, row) if r.node == row.node and r.source == row.source
            and r.container is None and r.end > r.start]
    return min((r.energy_j / (r.end - r.start).total_seconds() for r in mine), default=0.0)


def kepler_split(row: EnergyRow, idle_w: float, busy_cores: float | None,
                 container_cores: Mapping[str, float]) -> list[EnergyRow]:
    """Kepler's accounting of a node's energy over an interval: the node row with its idle and
    residual parts set, then one row per container with its share of the active energy.

    idle = `idle_w` x the interval (at most the energy), `idle_w` in the row's own domain
    (`split_idle_w`: learned from the counter for measured rows, the curve's for model rows);
    active = the rest. Each container gets active x its cores / the node's busy cores over the
    interval (cgroup CPU-time delta against /proc/stat's non-idle time). The residual is the
    active energy of busy time no container accounts for: the OS, daemons, processes outside
    containers, containers that came or went within the interval. When the containers' cores
    exceed the node's busy cores (the two are read a moment apart) their shares are scaled to the
    whole active part and the
    residual is 0. With no busy time for the interval (the first after the controller started,
    or a reboot) nothing is attributed: the whole active part is residual, never guessed."""
    seconds = (row.end - row.start).total_seconds()
    idle = min(row.energy_j, max(0.0, idle_w * seconds))
    active = row.energy_j - idle
    cores = {name: c for name, c in container_cores.items() if c > 0}
    used = sum(cores.values())
    if busy_cores is None or used <= 0:
        return [replace(row, idle_j=idle, residual_j=active)]
    whole = max(busy_cores, used)
    shares = {name: active * c / whole for name, c in cores.items()}
    node = replace(row, idle_j=idle, residual_j=max(0.0, active - sum(shares.values())))
    return [node] + [EnergyRow(node=row.node, start=row.start, end=row.end, energy_j=j, source=row.source,
                               container=name, plan_id=row.plan_id) for name, j in sorted(shares.items())]
