"""The savings ledger: nodes' time off with their measured idle power, and the measured energy
of the migrations and wakes it cost (orchestrator/domain/savings.py sums it)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update

from peakpack.orchestrator.domain.savings import SavingKind, SavingRecord

from ..base import Repo
from ..schema import SavingRow


def _record(r: SavingRow) -> SavingRecord:
    return SavingRecord(kind=SavingKind(r.kind), node=r.node, plan_id=r.plan_id, start=r.start, end=r.end,
                        source=r.source, idle_w=r.idle_w, energy_j=r.energy_j, model_j=r.model_j, note=r.note,
                        id=r.id)


class SavingsRepo(Repo):
    def add(self, row: SavingRecord) -> int:
        if row.energy_j is not None and row.source is None:
            raise ValueError(f"savings row for {row.node}: measured energy without the counter it came from")
        if row.idle_w is not None and row.idle_w < 0:
            raise ValueError(f"savings row for {row.node}: negative idle power")
        with self._write() as s:
            db = SavingRow(kind=row.kind.value, node=row.node, plan_id=row.plan_id, start=row.start, end=row.end,
                           source=row.source, idle_w=row.idle_w, energy_j=row.energy_j, model_j=row.model_j,
                           note=row.note)
            s.add(db)
            s.flush()
            return db.id

    def close(self, row_id: int, end: datetime) -> None:
        """An `off` row's node answered again at `end`."""
        with self._write() as s:
            s.execute(update(SavingRow).where(SavingRow.id == row_id, SavingRow.end.is_(None)).values(end=end))

    def open_off(self, node: str) -> SavingRecord | None:
        """The node's `off` row that no wake has closed yet."""
        q = (select(SavingRow).where(SavingRow.node == node, SavingRow.kind == SavingKind.OFF.value,
                                     SavingRow.end.is_(None)).order_by(SavingRow.start.desc()))
        with self._tx() as s:
            row = s.scalars(q).first()
            return None if row is None else _record(row)

    def history(self, since: datetime | None = None) -> list[SavingRecord]:
        """Rows oldest first; `off` rows still open, or ending after `since`, are included."""
        q = select(SavingRow).order_by(SavingRow.start, SavingRow.id)
        if since is not None:
            q = q.where((SavingRow.start >= since) | SavingRow.end.is_(None) | (SavingRow.end >= since))
        with self._tx() as s:
            return [_record(r) for r in s.scalars(q)]
