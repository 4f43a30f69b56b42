"""Approvals: a plan approved on a web page is handed to the controller that leads through this
table, and runs there between epochs; the page that took the approval executes nothing."""

from __future__ import annotations

from sqlalchemy import select, update

from peakpack.orchestrator.domain.errors import StoreError
from peakpack.orchestrator.domain.records import ApprovalRecord, ApprovalState

from ..base import Repo, now, rowcount
from ..schema import ApprovalRow


class ApprovalRepo(Repo):
    """Approvals handed from a web page to the controller that leads (the page executes nothing)."""

    def request(self, plan_id: int, partial: bool, requested_by: str) -> int:
        """Queue an approval of `plan_id` for the leader; its id."""
        with self._write() as s:
            row = ApprovalRow(plan_id=plan_id, partial=partial, requested_by=requested_by, requested_at=now(),
                              state=ApprovalState.PENDING.value)
            s.add(row)
            s.flush()
            return row.id

    def pending(self) -> list[ApprovalRecord]:
        """Approvals no leader has taken yet, oldest first."""
        q = select(ApprovalRow).where(ApprovalRow.state == ApprovalState.PENDING.value).order_by(ApprovalRow.id)
        with self._tx() as s:
            return [_approval(r) for r in s.scalars(q)]

    def get(self, approval_id: int) -> ApprovalRecord:
        with self._tx() as s:
            row = s.get(ApprovalRow, approval_id)
            if row is None:
                raise StoreError(f"approval {approval_id}: no such approval in this store")
            return _approval(row)

    def finish(self, approval_id: int, state: ApprovalState, outcome: str | None, applied_by: str) -> bool:
        """PENDING -> APPLIED or REFUSED, once (False when it was no longer PENDING)."""
        q = (update(ApprovalRow).where(ApprovalRow.id == approval_id,
                                       ApprovalRow.state == ApprovalState.PENDING.value)
             .values(state=ApprovalState(state).value, outcome=outcome, applied_by=applied_by, finished_at=now()))
        with self._write() as s:
            return rowcount(s.execute(q)) == 1


def _approval(r: ApprovalRow) -> ApprovalRecord:
    return ApprovalRecord(id=r.id, plan_id=r.plan_id, partial=r.partial, requested_by=r.requested_by,
                          requested_at=r.requested_at, state=ApprovalState(r.state), outcome=r.outcome,
                          applied_by=r.applied_by, finished_at=r.finished_at)
