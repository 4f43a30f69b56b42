"""Plans and their action journal: a plan is stored with every action PENDING before anything
runs; its status moves by conditional UPDATEs, so of two appliers exactly one wins."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update

from peakpack.orchestrator.domain.errors import StoreError
from peakpack.orchestrator.domain.model import ClusterSnapshot
from peakpack.orchestrator.domain.plan import ActionKind, Plan
from peakpack.orchestrator.domain.records import (
    ActionRecord,
    PlanRecord,
)
from peakpack.orchestrator.domain.states import ActionState, PlanStatus

from ..base import Repo, now, rowcount
from ..schema import (
    ActionRow,
    PlanRow,
)


class PlanRepo(Repo):
    def save(self, plan: Plan, inventory: str, snapshot: ClusterSnapshot, *,
                  status: PlanStatus = PlanStatus.RECOMMENDED, expires_at: datetime | None = None,
                  inventory_digest: str | None = None, prediction: dict[str, Any] | None = None,
                  action_predictions: Sequence[dict[str, Any] | None] = ()) -> int:
        """The plan and every action (PENDING) in one transaction, before anything runs.
        `action_predictions[i]` is action i's part of `prediction` (orchestrator.decide.predict)."""
        t = now()
        with self._write() as s:
            row = PlanRow(
                created_at=t,
                inventory=inventory,
                policy=plan.policy,
                dry_run=plan.dry_run,
                based_on_version=plan.based_on_version,
                solver_status=plan.solver.status,
                solver_seconds=plan.solver.seconds,
                objective=plan.solver.objective,
                bound=plan.solver.bound,
                before_json=json.dumps(plan.before.to_json()),
                after_json=json.dumps(plan.after.to_json()),
                snapshot_json=json.dumps(snapshot.to_json()),
                notes="\n".join(plan.notes),
                status=PlanStatus(status).value,
                expires_at=expires_at,
                inventory_digest=inventory_digest,
                prediction_json=None if prediction is None else json.dumps(prediction),
                explanations_json=json.dumps(dict(plan.explanations)) if plan.explanations else None,
                settings_json=json.dumps(dict(plan.settings)) if plan.settings else None,
            )
            s.add(row)
            s.flush()
            predicted = list(action_predictions) or [None] * len(plan.actions)
            for i, (a, p) in enumerate(zip(plan.actions, predicted, strict=True)):
                s.add(ActionRow(
                    plan_id=row.id, idx=i, kind=a.kind.value, container=a.container,
                    source=a.source, target=a.target, node=a.node,
                    state=ActionState.PENDING.value, created_at=t,
                    prediction_json=None if p is None else json.dumps(p),
                ))
            return row.id

    def explanations(self, plan_id: int) -> dict[str, str]:
        """Container -> why the plan moves it or leaves it (orchestrator.decide.planner.explain)."""
        with self._tx() as s:
            row = s.get(PlanRow, plan_id)
            if row is None:
                raise StoreError(f"plan {plan_id}: no such plan; see `peakpack history plans`")
            return {} if row.explanations_json is None else json.loads(row.explanations_json)

    def history(self, since: datetime | None = None, status: PlanStatus | None = None) -> list[PlanRecord]:
        with self._tx() as s:
            q = select(PlanRow).order_by(PlanRow.id)
            if since is not None:
                q = q.where(PlanRow.created_at >= since)
            if status is not None:
                q = q.where(PlanRow.status == PlanStatus(status).value)
            plans = s.scalars(q).all()
            counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
            ids = [p.id for p in plans]
            if ids:
                for plan_id, kind, n in s.execute(
                    select(ActionRow.plan_id, ActionRow.kind, func.count())
                    .where(ActionRow.plan_id.in_(ids)).group_by(ActionRow.plan_id, ActionRow.kind)
                ):
                    counts[plan_id][kind] = n
            return [
                PlanRecord(
                    plan_id=p.id, created_at=p.created_at, inventory=p.inventory, policy=p.policy,
                    dry_run=p.dry_run, actions=sum(counts[p.id].values()),
                    migrations=counts[p.id][ActionKind.MIGRATE.value],
                    before=json.loads(p.before_json), after=json.loads(p.after_json),
                    solver={"status": p.solver_status, "seconds": p.solver_seconds,
                            "objective": p.objective, "bound": p.bound},
                    status=PlanStatus(p.status), expires_at=p.expires_at, inventory_digest=p.inventory_digest,
                    decided_by=p.decided_by, decided_at=p.decided_at,
                    prediction=None if p.prediction_json is None else json.loads(p.prediction_json),
                    settings=None if p.settings_json is None else json.loads(p.settings_json),
                    notes=tuple(p.notes.splitlines()),
                )
                for p in plans
            ]

    def get(self, plan_id: int) -> PlanRecord:
        """One stored plan; an unknown id is the operator's typo, said on one line."""
        with self._tx() as s:
            created = s.scalar(select(PlanRow.created_at).where(PlanRow.id == plan_id))
        if created is None:
            raise StoreError(f"PLAN_ID: no plan {plan_id} in this store; `peakpack history plans` lists them")
        return next(p for p in self.history(created) if p.plan_id == plan_id)

    def set_status(self, plan_id: int, to: PlanStatus, *, only_from: Sequence[PlanStatus],
                        decided_by: str | None = None) -> bool:
        """Move a plan to `to` only if it is in one of `only_from`, in one conditional UPDATE:
        of two concurrent appliers exactly one sees True. `decided_by` records who decided."""
        values: dict[str, Any] = {"status": PlanStatus(to).value}
        if decided_by is not None:
            values.update(decided_by=decided_by, decided_at=now())
        q = (update(PlanRow).where(PlanRow.id == plan_id, PlanRow.status.in_([PlanStatus(f).value for f in only_from]))
             .values(**values))
        with self._write() as s:
            return rowcount(s.execute(q)) == 1

    def expire(self, at: datetime | None = None) -> int:
        """RECOMMENDED plans past their `expires_at` become EXPIRED; how many did."""
        q = (update(PlanRow).where(PlanRow.status == PlanStatus.RECOMMENDED.value,
                                   PlanRow.expires_at.is_not(None), PlanRow.expires_at <= (at or now()))
             .values(status=PlanStatus.EXPIRED.value))
        with self._write() as s:
            return rowcount(s.execute(q))

    def snapshot(self, plan_id: int) -> dict[str, Any]:
        with self._tx() as s:
            row = s.get(PlanRow, plan_id)
            if row is None:
                raise StoreError(f"plan {plan_id}: no such plan in this store")
            return json.loads(row.snapshot_json)

    def cpus(self, since: datetime | None = None) -> list[tuple[int, datetime, dict[str, float]]]:
        """Per plan: when it was made and the CPU its snapshot gave each container (the forecast)."""
        q = select(PlanRow.id, PlanRow.created_at, PlanRow.snapshot_json).order_by(PlanRow.id)
        if since is not None:
            q = q.where(PlanRow.created_at >= since)
        with self._tx() as s:
            return [(i, t, {c["name"]: c["cpu"] for c in json.loads(snap).get("containers", [])})
                    for i, t, snap in s.execute(q)]

    def action_ids(self, plan_id: int) -> list[int]:
        with self._tx() as s:
            return list(s.scalars(select(ActionRow.id).where(ActionRow.plan_id == plan_id).order_by(ActionRow.idx)))

    def set_action_state(self, action_id: int, state: ActionState, detail: str | None = None) -> None:
        t = now()
        values: dict[str, Any] = {"state": ActionState(state).value}
        if detail is not None:
            values["detail"] = detail
        if state is ActionState.ONGOING:
            values["started_at"] = t
        elif state is not ActionState.PENDING:
            values["finished_at"] = t
        with self._write() as s:
            if rowcount(s.execute(update(ActionRow).where(ActionRow.id == action_id).values(**values))) != 1:
                raise StoreError(f"action {action_id}: no such action in the journal")

    def actions(self, since: datetime | None = None, plan_id: int | None = None) -> list[ActionRecord]:
        q = select(ActionRow).order_by(ActionRow.id)
        if since is not None:
            q = q.where(ActionRow.created_at >= since)
        if plan_id is not None:
            q = q.where(ActionRow.plan_id == plan_id)
        with self._tx() as s:
            return [_action(r) for r in s.scalars(q)]

    def unfinished_actions(self) -> list[ActionRecord]:
        with self._tx() as s:
            q = select(ActionRow).where(ActionRow.state == ActionState.ONGOING.value).order_by(ActionRow.id)
            return [_action(r) for r in s.scalars(q)]

    def recent(self, limit: int) -> list[PlanRecord]:
        """The `limit` newest plans, oldest first: the page shows the recent ones, not a week's."""
        with self._tx() as s:
            oldest = s.scalar(select(PlanRow.created_at).order_by(PlanRow.id.desc()).offset(limit - 1).limit(1))
        return self.history(oldest)


def _action(r: ActionRow) -> ActionRecord:
    return ActionRecord(
        id=r.id, plan_id=r.plan_id, index=r.idx, kind=r.kind, container=r.container, source=r.source,
        target=r.target, node=r.node, state=ActionState(r.state), detail=r.detail, created_at=r.created_at,
        started_at=r.started_at, finished_at=r.finished_at,
        prediction=None if r.prediction_json is None else json.loads(r.prediction_json),
    )

