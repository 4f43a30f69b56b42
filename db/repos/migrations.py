"""Migrations step by step: every step journaled before and after it runs, so reconciliation
knows what was in flight."""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import func, select, update

from peakpack.orchestrator.domain.errors import StoreError
from peakpack.orchestrator.domain.records import (
    FrozenSample,
    MigrationRecord,
    StepRecord,
)
from peakpack.orchestrator.domain.states import TERMINAL_MIGRATION_STATES, MigrationState, Step

from ..base import Repo, now
from ..schema import (
    ActionRow,
    MigrationRow,
    MigrationStepRow,
    PlanRow,
)


class MigrationRepo(Repo):
    def begin(self, container: str, source: str, target: str, action_id: int | None = None) -> int:
        with self._write() as s:
            row = MigrationRow(container=container, source=source, target=target, action_id=action_id,
                               state=MigrationState.PENDING.value, started_at=now())
            s.add(row)
            s.flush()
            return row.id

    def step_started(self, migration_id: int, step: Step) -> int:
        """Journal a step before it runs; the migration's state names the step in flight."""
        with self._write() as s:
            mig = s.get(MigrationRow, migration_id)
            if mig is None:
                raise StoreError(f"migration {migration_id}: no such migration")
            if (state := Step(step).state) is not None:
                mig.state = state.value
            row = MigrationStepRow(migration_id=migration_id, step=Step(step).value, state="STARTED",
                                   started_at=now())
            s.add(row)
            s.flush()
            return row.id

    def step_finished(self, step_id: int, ok: bool, detail: str | None = None, bytes: int | None = None) -> None:
        with self._write() as s:
            s.execute(update(MigrationStepRow).where(MigrationStepRow.id == step_id).values(
                state="DONE" if ok else "FAILED", detail=detail, bytes=bytes, finished_at=now()))

    def finish(
        self,
        migration_id: int,
        state: MigrationState,
        reason: str | None = None,
        *,
        checkpoint_ms: float | None = None,
        transfer_ms: float | None = None,
        restore_ms: float | None = None,
        frozen_ms: float | None = None,
        total_ms: float | None = None,
        bytes: int | None = None,
    ) -> None:
        state = MigrationState(state)
        if state not in TERMINAL_MIGRATION_STATES:
            raise ValueError(f"finish_migration needs a terminal state, not {state}")
        with self._write() as s:
            s.execute(update(MigrationRow).where(MigrationRow.id == migration_id).values(
                state=state.value, reason=reason, checkpoint_ms=checkpoint_ms, transfer_ms=transfer_ms,
                restore_ms=restore_ms, frozen_ms=frozen_ms, total_ms=total_ms, bytes=bytes,
                finished_at=now()))

    def history(self, since: datetime | None = None) -> list[MigrationRecord]:
        q = select(MigrationRow).order_by(MigrationRow.id)
        if since is not None:
            q = q.where(MigrationRow.started_at >= since)
        with self._tx() as s:
            return [_migration(r) for r in s.scalars(q)]

    def unfinished(self) -> list[MigrationRecord]:
        open_states = [m.value for m in MigrationState if m not in TERMINAL_MIGRATION_STATES]  # indexed: not a scan
        q = select(MigrationRow).where(MigrationRow.state.in_(open_states)).order_by(MigrationRow.id)
        with self._tx() as s:
            return [_migration(r) for r in s.scalars(q)]

    def moved_since(self, since: datetime) -> dict[str, datetime]:
        """Containers whose migration succeeded at or after `since` -> the latest such time: the
        planner's hysteresis keeps them where they are."""
        q = (select(MigrationRow.container, func.max(MigrationRow.finished_at))
             .where(MigrationRow.state == MigrationState.SUCCEEDED.value, MigrationRow.finished_at >= since)
             .group_by(MigrationRow.container))
        with self._tx() as s:
            return {c: at for c, at in s.execute(q) if at is not None}

    def steps(self, migration_id: int) -> list[StepRecord]:
        q = select(MigrationStepRow).where(MigrationStepRow.migration_id == migration_id).order_by(MigrationStepRow.id)
        with self._tx() as s:
            return [
                StepRecord(id=r.id, migration_id=r.migration_id, step=r.step, state=r.state, detail=r.detail,
                           bytes=r.bytes, started_at=r.started_at, finished_at=r.finished_at)
                for r in s.scalars(q)
            ]

    def frozen_history(self, limit: int = 200) -> list[FrozenSample]:
        """The newest SUCCEEDED migrations that a plan journaled, with the node pair each crossed:
        the container's memory as its plan's snapshot saw it, the frame a prediction starts from."""
        q = (select(MigrationRow.container, MigrationRow.source, MigrationRow.target, MigrationRow.frozen_ms,
                    ActionRow.plan_id)
             .join(ActionRow, ActionRow.id == MigrationRow.action_id)
             .where(MigrationRow.state == MigrationState.SUCCEEDED.value, MigrationRow.frozen_ms.is_not(None))
             .order_by(MigrationRow.id.desc()).limit(limit))
        with self._tx() as s:
            rows = s.execute(q).all()
            memory: dict[int, dict[str, float]] = {}
            for plan_id in {r.plan_id for r in rows}:
                snap = json.loads(s.scalar(select(PlanRow.snapshot_json).where(PlanRow.id == plan_id)) or "{}")
                memory[plan_id] = {c["name"]: float(c["memory_mb"]) for c in snap.get("containers", [])}
        return [FrozenSample(r.source, r.target, memory[r.plan_id][r.container], float(r.frozen_ms)) for r in rows
                if r.container in memory[r.plan_id]]


def _migration(r: MigrationRow) -> MigrationRecord:
    return MigrationRecord(
        id=r.id, action_id=r.action_id, container=r.container, source=r.source, target=r.target,
        state=MigrationState(r.state), reason=r.reason, checkpoint_ms=r.checkpoint_ms,
        transfer_ms=r.transfer_ms, restore_ms=r.restore_ms, frozen_ms=r.frozen_ms, total_ms=r.total_ms,
        bytes=r.bytes, started_at=r.started_at, finished_at=r.finished_at,
    )
