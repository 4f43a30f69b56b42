"""Container demand: one row per container per observation, from its cgroup CPU-time counter."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select

from peakpack.orchestrator.domain.records import (
    DemandRecord,
)

from ..base import Repo
from ..schema import (
    ContainerDemandRow,
)


class DemandRepo(Repo):
    def add(self, rows: Sequence[DemandRecord]) -> None:
        with self._write() as s:
            s.add_all(ContainerDemandRow(at=r.at, container=r.container, node=r.node, interval_s=r.interval_s,
                                         cpu=r.cpu, cpu_time_ns=r.cpu_time_ns, memory_mb=r.memory_mb,
                                         source=r.source) for r in rows)

    def history(self, container: str | None = None, since: datetime | None = None) -> list[DemandRecord]:
        """Demand rows oldest first, of one container or all."""
        q = select(ContainerDemandRow).order_by(ContainerDemandRow.at, ContainerDemandRow.id)
        if container is not None:
            q = q.where(ContainerDemandRow.container == container)
        if since is not None:
            q = q.where(ContainerDemandRow.at >= since)
        with self._tx() as s:
            return [DemandRecord(at=r.at, container=r.container, node=r.node, interval_s=r.interval_s, cpu=r.cpu,
                                 cpu_time_ns=r.cpu_time_ns, memory_mb=r.memory_mb, source=r.source)
                    for r in s.scalars(q)]

    def latest(self) -> dict[str, DemandRecord]:
        """Each container's newest demand row: the counter the next one is a delta against."""
        C = ContainerDemandRow
        newest = select(C.container, func.max(C.id).label("id")).group_by(C.container).subquery()
        q = select(C).join(newest, C.id == newest.c.id)
        with self._tx() as s:
            return {r.container: DemandRecord(at=r.at, container=r.container, node=r.node, interval_s=r.interval_s,
                                              cpu=r.cpu, cpu_time_ns=r.cpu_time_ns, memory_mb=r.memory_mb,
                                              source=r.source)
                    for r in s.scalars(q)}
