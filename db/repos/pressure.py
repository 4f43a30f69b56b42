"""Container pressure: one row per container per observation, from its PSI and run-queue wait."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select

from peakpack.orchestrator.domain.records import PressureRecord

from ..base import Repo, newest_ids
from ..schema import ContainerPressureRow


def _record(r: ContainerPressureRow) -> PressureRecord:
    return PressureRecord(at=r.at, container=r.container, node=r.node, qos=r.qos, interval_s=r.interval_s,
                          cpu_stall=r.cpu_stall, memory_some=r.memory_some, memory_full=r.memory_full, wait=r.wait,
                          cpu_some_us=r.cpu_some_us, memory_some_us=r.memory_some_us,
                          memory_full_us=r.memory_full_us, wait_ns=r.wait_ns)


class PressureRepo(Repo):
    def add(self, rows: Sequence[PressureRecord]) -> None:
        with self._write() as s:
            s.add_all(ContainerPressureRow(at=r.at, container=r.container, node=r.node, qos=r.qos,
                                           interval_s=r.interval_s, cpu_stall=r.cpu_stall,
                                           memory_some=r.memory_some, memory_full=r.memory_full, wait=r.wait,
                                           cpu_some_us=r.cpu_some_us, memory_some_us=r.memory_some_us,
                                           memory_full_us=r.memory_full_us, wait_ns=r.wait_ns) for r in rows)

    def history(self, container: str | None = None, since: datetime | None = None) -> list[PressureRecord]:
        """Pressure rows oldest first, of one container or all."""
        q = select(ContainerPressureRow).order_by(ContainerPressureRow.at, ContainerPressureRow.id)
        if container is not None:
            q = q.where(ContainerPressureRow.container == container)
        if since is not None:
            q = q.where(ContainerPressureRow.at >= since)
        with self._tx() as s:
            return [_record(r) for r in s.scalars(q)]

    def latest(self, since: datetime | None = None) -> dict[str, PressureRecord]:
        """Each container's newest row (of those since `since`: a range of the index, not the whole
        table): the counters the next interval is a delta against."""
        P = ContainerPressureRow
        newest = newest_ids(P.id, P.container, P.at, since).subquery()
        with self._tx() as s:
            return {r.container: _record(r) for r in s.scalars(select(P).join(newest, P.id == newest.c.id))}
