"""Container demand: one row per container per observation, from its cgroup CPU-time counter."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select

from peakpack.orchestrator.domain.records import (
    DemandRecord,
)

from ..base import Repo, newest_ids
from ..schema import (
    ContainerDemandRow,
    DemandHourlyRow,
)

#: the source of a demand row summed over an hour by retention
HOURLY = "hourly"


class DemandRepo(Repo):
    def add(self, rows: Sequence[DemandRecord]) -> None:
        with self._write() as s:
            s.add_all(ContainerDemandRow(at=r.at, container=r.container, node=r.node, interval_s=r.interval_s,
                                         cpu=r.cpu, cpu_time_ns=r.cpu_time_ns, memory_mb=r.memory_mb,
                                         source=r.source) for r in rows)

    def history(self, container: str | None = None, since: datetime | None = None) -> list[DemandRecord]:
        """Demand rows oldest first, of one container or all; where retention has summed the raw
        rows (older than `[store] raw_days`), one row per hour (source "hourly": the CPU averaged
        over the hour, the largest memory)."""
        q = select(ContainerDemandRow).order_by(ContainerDemandRow.at, ContainerDemandRow.id)
        H = DemandHourlyRow
        hours = select(H).order_by(H.hour, H.id)
        if container is not None:
            q = q.where(ContainerDemandRow.container == container)
            hours = hours.where(H.container == container)
        if since is not None:
            q = q.where(ContainerDemandRow.at >= since)
            hours = hours.where(H.hour >= since)
        with self._tx() as s:
            summed = [DemandRecord(at=r.hour, container=r.container, node=r.node, interval_s=r.seconds, cpu=r.cpu,
                                   cpu_time_ns=None, memory_mb=r.memory_mb, source=HOURLY)
                      for r in s.scalars(hours)]
            return summed + [DemandRecord(at=r.at, container=r.container, node=r.node, interval_s=r.interval_s,
                                          cpu=r.cpu, cpu_time_ns=r.cpu_time_ns, memory_mb=r.memory_mb,
                                          source=r.source)
                             for r in s.scalars(q)]

    def latest(self, since: datetime | None = None) -> dict[str, DemandRecord]:
        """Each container's newest demand row (of those at or after `since`: an index range, not a
        year of rows): the counter the next one is a delta against."""
        C = ContainerDemandRow
        newest = newest_ids(C.id, C.container, C.at, since).subquery()
        q = select(C).join(newest, C.id == newest.c.id)
        with self._tx() as s:
            return {r.container: DemandRecord(at=r.at, container=r.container, node=r.node, interval_s=r.interval_s,
                                              cpu=r.cpu, cpu_time_ns=r.cpu_time_ns, memory_mb=r.memory_mb,
                                              source=r.source)
                    for r in s.scalars(q)}
