"""Energy accounting, pure: integrate stored samples into per-node energy over an interval and
attribute it to containers by their share of the node's CPU use.

Never negative, never silently zero: a node with no counter over the interval gets no measured
row; the caller may add a row with source "model" (from the node's power curve), labelled so."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from db.store import EnergyRow, EnergySample
from orchestrator.model import Container, PowerCurve

from .rapl import counter_delta_uj


def integrate_rapl(node: str, samples: Sequence[EnergySample], plan_id: int | None = None) -> EnergyRow | None:
    """Energy from the first to the last sample (per zone, wraps handled), or None if < 2 samples."""
    by_zone: dict[str, list[EnergySample]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: s.at):
        if s.source == "rapl" and s.energy_uj is not None:
            by_zone[s.zone].append(s)
    total_uj, start, end = 0, None, None
    for zone_samples in by_zone.values():
        if len(zone_samples) < 2:
            continue
        for a, b in zip(zone_samples, zone_samples[1:]):
            top = b.max_energy_range_uj or a.max_energy_range_uj
            if top is None:
                raise ValueError(f"{node}: RAPL sample without max_energy_range_uj")
            total_uj += counter_delta_uj(a.energy_uj, b.energy_uj, top)  # type: ignore[arg-type]
        start = min(start or zone_samples[0].at, zone_samples[0].at)
        end = max(end or zone_samples[-1].at, zone_samples[-1].at)
    if start is None or end is None or end <= start:
        return None
    return EnergyRow(node=node, start=start, end=end, energy_j=total_uj / 1e6, source="rapl", plan_id=plan_id)


def integrate_power(node: str, samples: Sequence[EnergySample], plan_id: int | None = None) -> EnergyRow | None:
    """DCMI watts by the trapezoid rule; None if fewer than two readings."""
    points = sorted((s for s in samples if s.source == "dcmi" and s.power_w is not None), key=lambda s: s.at)
    if len(points) < 2:
        return None
    joules = sum((b.at - a.at).total_seconds() * (a.power_w + b.power_w) / 2  # type: ignore[operator]
                 for a, b in zip(points, points[1:]))
    return EnergyRow(node=node, start=points[0].at, end=points[-1].at, energy_j=joules, source="dcmi", plan_id=plan_id)


def model_energy(node: str, curve: PowerCurve, cpus: int, load_cores: float, start: datetime, end: datetime,
                 plan_id: int | None = None) -> EnergyRow:
    """Modelled energy for a node with no counter: its curve at the observed load; labelled model."""
    seconds = max(0.0, (end - start).total_seconds())
    return EnergyRow(node=node, start=start, end=end, energy_j=curve.at(min(1.0, load_cores / cpus)) * seconds,
                     source="model", plan_id=plan_id)


def attribute(row: EnergyRow, containers: Sequence[Container]) -> list[EnergyRow]:
    """Split a node's energy over its containers by CPU share. The idle part is split too, so the
    containers' rows sum to the node's; a node that hosted nothing keeps it all."""
    mine = [c for c in containers if c.node == row.node]
    total_cpu = sum(c.cpu for c in mine)
    if not mine:
        return []
    shares = {c.name: (c.cpu / total_cpu if total_cpu > 0 else 1 / len(mine)) for c in mine}
    return [EnergyRow(node=row.node, start=row.start, end=row.end, energy_j=row.energy_j * share,
                      source=row.source, container=name, plan_id=row.plan_id) for name, share in shares.items()]
