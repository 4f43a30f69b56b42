"""Review then apply: run exactly a stored plan, after checking it still holds; or reject it.

`peakpack apply` and the web page's approve/reject buttons call `apply_plan` and `reject_plan`.
Applying re-observes the cluster and re-checks every action on the fresh snapshot
(`review.review_plan`); a plan whose base has drifted is refused with the reason, or, with
`partial`, run without the actions that no longer hold (journaled SKIPPED with the reason). What
runs goes through the controller's own path (`PlanExecutor` over the live services, under the
store's lease), so a crash mid-apply is reconciled like any epoch's plan.

The plan's status moves RECOMMENDED -> APPLYING -> APPLIED / PARTIAL / FAILED, each step one
conditional UPDATE: of two concurrent appliers exactly one gets past RECOMMENDED.

Only the lease holder executes. A web page beside a controller (`serve --http-port`, the leader's
or a standby's, or `peakpack web` while a controller leads) does not apply an approved plan: it
hands the approval to the leader through the store (`hand_to_leader`), and the leader runs it
between epochs (`run_approvals`); the page waits a while for the outcome and shows it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..decide.review import Review, inventory_digest, review_plan
from ..domain.budgets import allowance_at, exceeds
from ..domain.capacity import over_cap_nodes
from ..domain.errors import FencedError, PeakpackError, PlanError, StoreError
from ..domain.model import ClusterMetrics, Inventory
from ..domain.plan import Action, ActionKind, Plan, SolverReport
from ..domain.ports import Journal, Services
from ..domain.records import ActionRecord, ApprovalRecord, ApprovalState, PlanRecord
from ..domain.states import ActionState, PlanStatus
from .epoch import execute_plan, planning_view, settle_unfinished
from .leadership import MIN_TTL_S, Lease


@dataclass(frozen=True)
class ApplyResult:
    """How an apply ended: the plan's final status, the review of every action on the fresh
    snapshot, and each action's journal state by its index in the plan."""

    plan_id: int
    status: PlanStatus
    review: Review
    states: dict[int, ActionState] = field(default_factory=dict)
    errors: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id,
            "status": self.status.value,
            "actions": [{**c.to_json(), "state": s.value if (s := self.states.get(c.index)) else None}
                        for c in self.review.checks],
            "skipped": [c.to_json() for c in self.review.skipped],
            "errors": list(self.errors),
        }


def check_applicable(record: PlanRecord, inventory: Inventory | None) -> None:
    """Raise PlanError (one line, the fix) unless a person may still apply or reject `record`
    (with `inventory`: also unless it was made for that inventory)."""
    pid = record.plan_id
    if record.status is PlanStatus.EXPIRED:
        when = f" at {record.expires_at:%Y-%m-%d %H:%M:%S} UTC" if record.expires_at else ""
        raise PlanError(f"PLAN_ID: plan {pid} expired{when}; make a fresh one with `peakpack plan --inventory FILE`")
    if record.status is not PlanStatus.RECOMMENDED:
        by = f" by {record.decided_by}" if record.decided_by else ""
        raise PlanError(f"PLAN_ID: plan {pid} is already {record.status.value}{by}; "
                        "`peakpack plan show` it, or make a fresh one with `peakpack plan`")
    if inventory is not None and record.inventory_digest != inventory_digest(inventory):
        raise PlanError(f"--inventory: plan {pid} was made for another inventory ({record.inventory}, or this "
                        "file has changed since); give the inventory it was made with, or plan again")


def stored_plan(store: Journal, record: PlanRecord) -> Plan:
    """The journaled plan as the executor runs it: its actions in their stored order."""
    actions = tuple(Action.from_json({"kind": a.kind, "container": a.container, "source": a.source,
                                      "target": a.target, "node": a.node})
                    for a in store.plans.actions(plan_id=record.plan_id))
    return Plan(policy=record.policy, actions=actions, before=ClusterMetrics(**record.before),
                after=ClusterMetrics(**record.after), solver=SolverReport(**record.solver),
                dry_run=False, plan_id=record.plan_id)


def _open(store: Journal, inventory: Inventory, plan_id: int) -> PlanRecord:
    store.plans.expire()
    record = store.plans.get(plan_id)
    check_applicable(record, inventory)
    return record


def apply_plan(store: Journal, inventory: Inventory, plan_id: int, *, partial: bool, decided_by: str,
               services: Services, take_lease: bool = True, log: Callable[[str], None] = print,
               stop_requested: Callable[[], bool] = lambda: False) -> ApplyResult:
    """Apply stored plan `plan_id` to the live cluster through `services` (synchronous: returns
    when it has run).

    Refused with a PlanError/StoreError (one line; nothing executed, status unchanged) when the id
    is unknown, the plan expired, was already decided, was made for another inventory, or has
    drifted (unless `partial`). `decided_by` is recorded (e.g. "cli:alice", "web"). `take_lease`:
    hold the store's controller lease while applying (False only for a caller that already leads,
    i.e. the controller's own process, which must then not run an epoch at the same time).
    `stop_requested`: once true, no new action starts (those in flight settle).
    """
    _open(store, inventory, plan_id)
    lease = Lease(store, MIN_TTL_S, role="apply", log=log) if take_lease else None
    if lease is not None:
        try:
            lease.acquire()
        except StoreError as exc:
            raise StoreError(f"{exc}; while `serve` leads, approve the plan on its web page (--http-port)") from None
    try:
        record = _open(store, inventory, plan_id)  # again: another applier may have won meanwhile
        for line in settle_unfinished(store, services):
            log(f"reconcile: {line}")
        observed = services.observe()
        # held as the planner holds them; each container's CPU as the planner saw it (its forecast)
        fresh = planning_view(store, inventory, observed)[0]
        plan = stored_plan(store, record)
        review = review_plan(inventory, fresh, plan.actions, store.power.quarantined())
        if review.drifted and not partial:
            raise PlanError(f"PLAN_ID: plan {plan_id} no longer holds: {review.summary()}; "
                            "add --partial to apply the rest, or make a fresh plan")
        skipped = {c.index for c in review.skipped}
        to_run = [a for i, a in enumerate(plan.actions) if i not in skipped]
        over_budget = exceeds(
            allowance_at(inventory.budgets, inventory.windows, datetime.now(UTC), store.disruption_since),
            [a.source for a in to_run if a.kind is ActionKind.MIGRATE and a.source],
            sum(a.kind is ActionKind.POWER_OFF for a in to_run),
            over_cap_nodes(inventory, fresh.containers, inventory.planner.cap))
        if over_budget:
            raise PlanError(f"PLAN_ID: plan {plan_id} may not run now: {over_budget}; make a fresh plan, "
                            "which plans within what is allowed")
        if not store.plans.set_status(plan_id, PlanStatus.APPLYING, only_from=[PlanStatus.RECOMMENDED],
                                      decided_by=decided_by):
            check_applicable(store.plans.get(plan_id), inventory)  # names who won
            raise PlanError(f"PLAN_ID: plan {plan_id} was decided by another applier meanwhile")
        services.account_energy(observed, None)  # closes the interval before the plan

        def stop() -> bool:
            return stop_requested() or (lease is not None and lease.lost.is_set())

        outcome = execute_plan(store, services, inventory, plan, plan_id, log=log, stop_requested=stop,
                               skip={c.index: f"apply --partial: {c.reason}" for c in review.skipped})
        return ApplyResult(plan_id, outcome.status, review, outcome.states, tuple(outcome.report.errors))
    finally:
        if lease is not None:
            lease.release()


def reject_plan(store: Journal, plan_id: int, decided_by: str, inventory: Inventory | None = None) -> None:
    """Mark a RECOMMENDED plan REJECTED (nothing runs); refused like `apply_plan` otherwise. With
    `inventory`, a plan made for another inventory is refused too."""
    store.plans.expire()
    record = store.plans.get(plan_id)
    if inventory is not None:
        check_applicable(record, inventory)
    elif record.status is not PlanStatus.RECOMMENDED:
        raise PlanError(f"PLAN_ID: plan {plan_id} is {record.status.value}, not RECOMMENDED; nothing to reject")
    if not store.plans.set_status(plan_id, PlanStatus.REJECTED, only_from=[PlanStatus.RECOMMENDED],
                                 decided_by=decided_by):
        raise PlanError(f"PLAN_ID: plan {plan_id} was decided by another person meanwhile")


@dataclass(frozen=True)
class Handed:
    """An approval handed to the leader, as far as it got while the page waited: PENDING (the
    leader has not run it yet), APPLIED (`plan` has its final status, `actions` their states) or
    REFUSED (`approval.outcome` says why)."""

    approval: ApprovalRecord
    plan: PlanRecord
    actions: list[ActionRecord]
    leader: str | None


def hand_to_leader(store: Journal, plan_id: int, partial: bool, decided_by: str, *, wait_s: float,
                   poll_s: float = 0.5, stop_requested: Callable[[], bool] = lambda: False) -> Handed:
    """Queue an approval of RECOMMENDED plan `plan_id` for the controller that leads, then wait up
    to `wait_s` for it to be run (or refused). Nothing is executed here: whichever process this
    is, only the lease holder acts. Refused at once (PlanError) when the plan is not RECOMMENDED."""
    store.plans.expire()
    record = store.plans.get(plan_id)
    if record.status is not PlanStatus.RECOMMENDED:
        check_applicable(record, inventory=None)
    approval_id = store.approvals.request(plan_id, partial, decided_by)
    deadline = time.monotonic() + wait_s
    approval = store.approvals.get(approval_id)
    while approval.state is ApprovalState.PENDING and time.monotonic() < deadline and not stop_requested():
        time.sleep(poll_s)
        approval = store.approvals.get(approval_id)
    holder = store.lease.holder()
    return Handed(approval, store.plans.get(plan_id), store.plans.actions(plan_id=plan_id),
                  holder.holder if holder is not None else None)


def run_approvals(store: Journal, inventory: Inventory, services: Services | None, *, leader: str,
                  log: Callable[[str], None], stop_requested: Callable[[], bool]) -> None:
    """The leader's side of `hand_to_leader`, between epochs: apply each approval waiting in the
    store (re-checked like `peakpack apply`: a plan that drifted or expired is refused with the
    reason), and record the outcome and who ran it. A controller that only plans (`--dry-run`)
    refuses them."""
    for approval in store.approvals.pending():
        if stop_requested():
            return
        try:
            if services is None:
                raise PlanError(f"PLAN_ID: this controller ({leader}) runs --dry-run; it cannot apply plans")
            result = apply_plan(store, inventory, approval.plan_id, partial=approval.partial,
                                decided_by=approval.requested_by, services=services, take_lease=False, log=log,
                                stop_requested=stop_requested)
        except FencedError:
            raise
        except PeakpackError as exc:
            store.approvals.finish(approval.id, ApprovalState.REFUSED, str(exc), leader)
            log(f"approved plan {approval.plan_id} not applied: {exc}")
            continue
        outcome = result.status.value + "".join(f"; {e}" for e in result.errors)
        store.approvals.finish(approval.id, ApprovalState.APPLIED, outcome, leader)
        log(f"approved plan {approval.plan_id} ({approval.requested_by}): {outcome}")


__all__ = ["ApplyResult", "Handed", "apply_plan", "check_applicable", "hand_to_leader", "reject_plan",
           "run_approvals", "stored_plan"]
