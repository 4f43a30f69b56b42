"""Review then apply: run exactly a stored plan, after checking it still holds; or reject it.

`peakpack apply` and the web page's approve/reject buttons call `apply_plan` and `reject_plan`.
Applying is an epoch (`epoch.run_epoch` with the stored plan, under the store's lease): it settles
what is open, re-observes the cluster and re-checks every action on the fresh snapshot
(`epoch.review_stored`); a plan whose base has drifted is refused with the reason, or, with
`partial`, run without the actions that no longer hold (journaled SKIPPED with the reason). What
runs goes through the controller's own path, so a crash mid-apply is reconciled like any epoch's
plan.

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
from typing import Any

from ..decide.review import Review
from ..domain.errors import FencedError, PeakpackError, PlanError, StoreError
from ..domain.model import Inventory
from ..domain.ports import Journal, Services
from ..domain.records import ActionRecord, ApprovalRecord, ApprovalState, PlanRecord
from ..domain.states import ActionState, PlanStatus
from .epoch import EpochReport, EpochSettings, Stored, check_applicable, run_epoch, stored_plan
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
    epoch: EpochReport = field(default_factory=EpochReport)  # the epoch that ran it

    def to_json(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id,
            "status": self.status.value,
            "actions": [{**c.to_json(), "state": s.value if (s := self.states.get(c.index)) else None}
                        for c in self.review.checks],
            "skipped": [c.to_json() for c in self.review.skipped],
            "errors": list(self.errors),
        }


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

        def stop() -> bool:
            return stop_requested() or (lease is not None and lease.lost.is_set())

        report = run_epoch(store, inventory, EpochSettings(act=True), observe=services.observe, services=services,
                           stop_requested=stop, log=log, stored=Stored(record, partial, decided_by))
        assert report.review is not None and report.outcome is not None
        return ApplyResult(plan_id, report.outcome.status, report.review, report.outcome.states,
                           tuple(report.outcome.report.errors), report)
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
                  log: Callable[[str], None], stop_requested: Callable[[], bool]) -> list[ApplyResult]:
    """The leader's side of `hand_to_leader`, between epochs: apply each approval waiting in the
    store (re-checked like `peakpack apply`: a plan that drifted or expired is refused with the
    reason), and record the outcome and who ran it. A controller that only plans (`--dry-run`)
    refuses them. What ran, for the caller's metrics."""
    ran: list[ApplyResult] = []
    for approval in store.approvals.pending():
        if stop_requested():
            return ran
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
        ran.append(result)
        outcome = result.status.value + "".join(f"; {e}" for e in result.errors)
        store.approvals.finish(approval.id, ApprovalState.APPLIED, outcome, leader)
        log(f"approved plan {approval.plan_id} ({approval.requested_by}): {outcome}")
    return ran


__all__ = ["ApplyResult", "Handed", "apply_plan", "check_applicable", "hand_to_leader", "reject_plan",
           "run_approvals", "stored_plan"]
