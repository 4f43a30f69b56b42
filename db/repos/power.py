"""Power events (each switch journaled before and after), quarantined nodes and the nodes that
became idle by themselves: what the power rules remember across restarts."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from peakpack.orchestrator.domain.plan import ActionKind
from peakpack.orchestrator.domain.records import (
    PowerEventRecord,
)

from ..base import Repo, now
from ..schema import (
    NodeStatusRow,
    PowerEventRow,
)


class PowerRepo(Repo):
    def begin(self, node: str, action: str, reason: str | None = None) -> int:
        if action not in (ActionKind.POWER_ON.value, ActionKind.POWER_OFF.value):
            raise ValueError(f"power action must be power_on or power_off, not {action!r}")
        with self._write() as s:
            row = PowerEventRow(node=node, action=action, state="ONGOING", reason=reason, at=now())
            s.add(row)
            s.flush()
            return row.id

    def finish(self, event_id: int, state: str, detail: str | None = None) -> None:
        if state not in ("SUCCEEDED", "FAILED"):
            raise ValueError(f"power event state must be SUCCEEDED or FAILED, not {state!r}")
        with self._write() as s:
            s.execute(update(PowerEventRow).where(PowerEventRow.id == event_id).values(
                state=state, detail=detail, finished_at=now()))

    def events(self, since: datetime | None = None, state: str | None = None) -> list[PowerEventRecord]:
        """Power events oldest first, since a time and/or in one state (reconciliation: ONGOING)."""
        q = select(PowerEventRow).order_by(PowerEventRow.id)
        if since is not None:
            q = q.where(PowerEventRow.at >= since)
        if state is not None:
            q = q.where(PowerEventRow.state == state)
        with self._tx() as s:
            return [
                PowerEventRecord(id=r.id, node=r.node, action=r.action, state=r.state, reason=r.reason,
                                 detail=r.detail, at=r.at, finished_at=r.finished_at)
                for r in s.scalars(q)
            ]

    def woken_since(self, since: datetime) -> dict[str, datetime]:
        """Nodes switched on successfully at or after `since` -> when: the power rules' grace."""
        q = (select(PowerEventRow.node, func.max(PowerEventRow.finished_at))
             .where(PowerEventRow.action == ActionKind.POWER_ON.value, PowerEventRow.state == "SUCCEEDED",
                    PowerEventRow.finished_at >= since)
             .group_by(PowerEventRow.node))
        with self._tx() as s:
            return {n: at for n, at in s.execute(q) if at is not None}

    def _node_status(self, s: Session, node: str) -> NodeStatusRow:
        row = s.get(NodeStatusRow, node)
        if row is None:
            row = NodeStatusRow(node=node)
            s.add(row)
        return row

    def quarantine(self, node: str, reason: str) -> None:
        with self._write() as s:
            row = self._node_status(s, node)
            row.quarantined_reason, row.quarantined_at = reason, now()

    def clear_quarantine(self, node: str) -> None:
        with self._write() as s:
            row = self._node_status(s, node)
            row.quarantined_reason, row.quarantined_at = None, None

    def quarantined(self) -> dict[str, str]:
        q = select(NodeStatusRow).where(NodeStatusRow.quarantined_reason.is_not(None))
        with self._tx() as s:
            return {r.node: r.quarantined_reason or "" for r in s.scalars(q)}

    def set_idle_since(self, node: str, at: datetime | None) -> None:
        with self._write() as s:
            self._node_status(s, node).idle_since = at

    def idle_since(self, node: str) -> datetime | None:
        with self._tx() as s:
            row = s.get(NodeStatusRow, node)
            return None if row is None else row.idle_since
