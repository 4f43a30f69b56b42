"""Energy: raw counter samples and the per-interval rows of every node and container; a total
never mixes sources (measured and modelled energy are summed apart)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select

from peakpack.orchestrator.domain.errors import PeakpackError
from peakpack.orchestrator.domain.records import (
    EnergyRow,
    EnergySample,
)

from ..base import Repo
from ..schema import (
    EnergyHourlyRow,
    EnergyRowDb,
    EnergySampleRow,
)


class EnergyRepo(Repo):
    def add_samples(self, samples: Sequence[EnergySample]) -> None:
        with self._write() as s:
            s.add_all(EnergySampleRow(node=x.node, at=x.at, source=x.source, zone=x.zone, energy_uj=x.energy_uj,
                                      max_energy_range_uj=x.max_energy_range_uj, power_w=x.power_w,
                                      boot_id=x.boot_id, busy_ns=x.busy_ns)
                      for x in samples)

    def samples(self, node: str, source: str, since: datetime | None = None) -> list[EnergySample]:
        q = (select(EnergySampleRow).where(EnergySampleRow.node == node, EnergySampleRow.source == source)
             .order_by(EnergySampleRow.at, EnergySampleRow.id))
        if since is not None:
            q = q.where(EnergySampleRow.at >= since)
        with self._tx() as s:
            return [EnergySample(node=r.node, at=r.at, source=r.source, energy_uj=r.energy_uj, power_w=r.power_w,
                                 zone=r.zone, max_energy_range_uj=r.max_energy_range_uj, boot_id=r.boot_id,
                                 busy_ns=r.busy_ns)
                    for r in s.scalars(q)]

    def add(self, rows: Sequence[EnergyRow]) -> None:
        for r in rows:
            if r.energy_j < 0 or r.end < r.start:
                raise ValueError(f"energy row for {r.node} is negative or ends before it starts: {r}")
        with self._write() as s:
            s.add_all(EnergyRowDb(node=r.node, container=r.container, start=r.start, end=r.end,
                                  energy_j=r.energy_j, source=r.source, plan_id=r.plan_id, idle_j=r.idle_j,
                                  residual_j=r.residual_j) for r in rows)

    def history(self, since: datetime | None = None, by: str | None = None) -> list[EnergyRow]:
        """Node intervals (by=None), totals per node, or totals per container; a total never
        mixes sources (measured and modelled energy are summed apart)."""
        rows = self._rows(since, containers=by == "container")
        if by is None:
            return rows
        if by not in ("node", "container"):
            raise PeakpackError(f"--by: {by!r} is not node or container")
        groups: dict[tuple[str, str | None, str], list[EnergyRow]] = defaultdict(list)
        for r in rows:
            groups[(r.node, r.container, r.source)].append(r)

        def total(g: list[EnergyRow], part: str) -> float | None:
            parts = [getattr(r, part) for r in g if getattr(r, part) is not None]
            return sum(parts) if parts else None

        return [
            EnergyRow(
                node=node, container=container,
                start=min(r.start for r in g), end=max(r.end for r in g),
                energy_j=sum(r.energy_j for r in g), source=source,
                idle_j=total(g, "idle_j"), residual_j=total(g, "residual_j"),
            )
            for (node, container, source), g in sorted(groups.items(),
                                                       key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2]))
        ]

    def _rows(self, since: datetime | None, *, containers: bool) -> list[EnergyRow]:
        """Energy intervals in time order: the nodes' own, or those attributed to containers; where
        retention has summed the raw rows (older than `[store] raw_days`), one row per hour."""
        q = select(EnergyRowDb).order_by(EnergyRowDb.start, EnergyRowDb.id)
        H = EnergyHourlyRow
        hours = select(H).order_by(H.start, H.id)
        if since is not None:
            q = q.where(EnergyRowDb.start >= since)
            hours = hours.where(H.start >= since)
        q = q.where(EnergyRowDb.container.is_not(None) if containers else EnergyRowDb.container.is_(None))
        hours = hours.where(H.container.is_not(None) if containers else H.container.is_(None))
        with self._tx() as s:
            summed = [EnergyRow(node=r.node, start=r.start, end=r.end, energy_j=r.energy_j, source=r.source,
                                container=r.container, idle_j=r.idle_j, residual_j=r.residual_j)
                      for r in s.scalars(hours)]
            return summed + [EnergyRow(node=r.node, start=r.start, end=r.end, energy_j=r.energy_j, source=r.source,
                                       container=r.container, plan_id=r.plan_id, idle_j=r.idle_j,
                                       residual_j=r.residual_j)
                             for r in s.scalars(q)]

    def of_containers(self, since: datetime | None = None) -> list[EnergyRow]:
        """Energy intervals attributed to containers, in time order (`list_energy` sums them)."""
        return self._rows(since, containers=True)
