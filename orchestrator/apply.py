"""Review then apply: run exactly a stored plan, after checking it still holds; or reject it.

`peakpack apply` and the web page's approve/reject buttons call `apply_plan` and `reject_plan`.
Applying re-observes the cluster and re-checks every action on the fresh snapshot
(`review.review_plan`); a plan whose base has drifted is refused with the reason, or, with
`partial`, run without the actions that no longer hold (journaled SKIPPED with the reason). What
runs goes through the controller's own path (`PlanExecutor` over the live services, under the
store's lease), so a crash mid-apply is reconciled like any epoch's plan.

The plan's status moves RECOMMENDED -> APPLYING -> APPLIED / PARTIAL / FAILED, each step one
conditional UPDATE: of two concurrent appliers exactly one gets past RECOMMENDED.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from db.records import ActionState, PlanRecord, PlanStatus
from db.store import Store

from .budgets import allowance_at, exceeds
from .capacity import over_cap_nodes
from .errors import PlanError, StoreError
from .model import ClusterMetrics, Inventory
from .plan import Action, ActionKind, Plan, SolverReport
from .review import Review, inventory_digest, review_plan

if TYPE_CHECKING:
    from .controller import Services


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


def expires_at(inventory: Inventory, made: datetime | None = None) -> datetime:
    """Until when a plan made now may be applied (inventory `[review] plan_ttl_seconds`)."""
    return (made or datetime.now(timezone.utc)) + timedelta(seconds=inventory.review.plan_ttl_seconds)


def check_applicable(record: PlanRecord, inventory: Inventory) -> None:
    """Raise PlanError (one line, the fix) unless a person may still apply or reject `record`."""
    pid = record.plan_id
    if record.status is PlanStatus.EXPIRED:
        when = f" at {record.expires_at:%Y-%m-%d %H:%M:%S} UTC" if record.expires_at else ""
        raise PlanError(f"PLAN_ID: plan {pid} expired{when}; make a fresh one with `peakpack plan --inventory FILE`")
    if record.status is not PlanStatus.RECOMMENDED:
        by = f" by {record.decided_by}" if record.decided_by else ""
        raise PlanError(f"PLAN_ID: plan {pid} is already {record.status.value}{by}; "
                        "`peakpack plan show` it, or make a fresh one with `peakpack plan`")
    if record.inventory_digest != inventory_digest(inventory):
        raise PlanError(f"--inventory: plan {pid} was made for another inventory ({record.inventory}, or this "
                        "file has changed since); give the inventory it was made with, or plan again")


def stored_plan(store: Store, record: PlanRecord) -> Plan:
    """The journaled plan as the executor runs it: its actions in their stored order."""
    actions = tuple(Action.from_json({"kind": a.kind, "container": a.container, "source": a.source,
                                      "target": a.target, "node": a.node})
                    for a in store.list_actions(plan_id=record.plan_id))
    return Plan(policy=record.policy, actions=actions, before=ClusterMetrics(**record.before),
                after=ClusterMetrics(**record.after), solver=SolverReport(**record.solver),
                dry_run=False, plan_id=record.plan_id)


def final_status(states: dict[int, ActionState]) -> PlanStatus:
    """APPLIED: every action succeeded; FAILED: none did and one failed; else PARTIAL."""
    if all(s is ActionState.SUCCEEDED for s in states.values()):
        return PlanStatus.APPLIED
    if not any(s is ActionState.SUCCEEDED for s in states.values()) and ActionState.FAILED in states.values():
        return PlanStatus.FAILED
    return PlanStatus.PARTIAL


def _open(store: Store, inventory: Inventory, plan_id: int) -> PlanRecord:
    store.expire_plans()
    record = store.get_plan(plan_id)
    check_applicable(record, inventory)
    return record


def apply_plan(store: Store, inventory: Inventory, plan_id: int, *, partial: bool, decided_by: str,
               services: Services | None = None, take_lease: bool = True,
               log: Callable[[str], None] = print) -> ApplyResult:
    """Apply stored plan `plan_id` to the live cluster (synchronous: returns when it has run).

    Refused with a PlanError/StoreError (one line; nothing executed, status unchanged) when the id
    is unknown, the plan expired, was already decided, was made for another inventory, or has
    drifted (unless `partial`). `decided_by` is recorded (e.g. "cli:alice", "web"). `services`:
    the live services to act through (default: built here from the inventory). `take_lease`:
    hold the store's controller lease while applying (False only for a caller that already leads,
    i.e. the controller's own process, which must then not run an epoch at the same time).
    """
    from .leadership import MIN_TTL_S, Lease
    from .observe import forecast_from_store
    from .planning import hold_unsettled

    _open(store, inventory, plan_id)
    lease = Lease(store, MIN_TTL_S, role="apply", log=log) if take_lease else None
    if lease is not None:
        try:
            lease.acquire()
        except StoreError as exc:
            raise StoreError(f"{exc}; while `serve` leads, approve the plan on its web page (--http-port)") from None
    own = services is None
    try:
        if services is None:
            from rich.console import Console

            from .wiring import live_services

            services = live_services(inventory, store, Console(stderr=True))
        record = _open(store, inventory, plan_id)  # again: another applier may have won meanwhile
        for line in [*services.reconcile(), *settle_orphans(store)]:
            log(f"reconcile: {line}")
        observed = hold_unsettled(services.observe(), store.unfinished_migrations())
        # each container's CPU as the planner saw it: its forecast from the stored demand history
        fresh = forecast_from_store(store, observed, inventory.planner.forecast, inventory.cluster.epoch_seconds)[0]
        plan = stored_plan(store, record)
        review = review_plan(inventory, fresh, plan.actions, store.quarantined())
        if review.drifted and not partial:
            raise PlanError(f"PLAN_ID: plan {plan_id} no longer holds: {review.summary()}; "
                            "add --partial to apply the rest, or make a fresh plan")
        skipped = {c.index for c in review.skipped}
        to_run = [a for i, a in enumerate(plan.actions) if i not in skipped]
        over_budget = exceeds(
            allowance_at(inventory.budgets, inventory.windows, datetime.now(timezone.utc), store.disruption_since),
            [a.source for a in to_run if a.kind is ActionKind.MIGRATE and a.source],
            sum(a.kind is ActionKind.POWER_OFF for a in to_run),
            over_cap_nodes(inventory, fresh.containers, inventory.planner.cap))
        if over_budget:
            raise PlanError(f"PLAN_ID: plan {plan_id} may not run now: {over_budget}; make a fresh plan, "
                            "which plans within what is allowed")
        if not store.set_plan_status(plan_id, PlanStatus.APPLYING, only_from=[PlanStatus.RECOMMENDED],
                                     decided_by=decided_by):
            check_applicable(store.get_plan(plan_id), inventory)  # names who won
            raise PlanError(f"PLAN_ID: plan {plan_id} was decided by another applier meanwhile")
        services.account_energy(observed, None)  # closes the interval before the plan
        from .plan_executor import PlanExecutor

        stop = (lambda: lease.lost.is_set()) if lease is not None else (lambda: False)
        report = PlanExecutor(store, services.ops, log, stop).execute(
            plan, plan_id, skip={c.index: f"apply --partial: {c.reason}" for c in review.skipped})
        services.account_energy(services.observe(), plan_id)
        ids = store.plan_action_ids(plan_id)
        states = {ids.index(aid): s for aid, s in report.states.items()}
        status = final_status(states)
        store.set_plan_status(plan_id, status, only_from=[PlanStatus.APPLYING])
        return ApplyResult(plan_id, status, review, states, tuple(report.errors))
    finally:
        if own and services is not None:
            services.close()
        if lease is not None:
            lease.release()


def settle_orphans(store: Store) -> list[str]:
    """Finish plans a crash left APPLYING (call under the lease, with no plan executing): actions
    that never started are SKIPPED, and the plan gets the status its actions earned. A plan with an
    action still ONGOING (in doubt after reconcile) stays APPLYING until that is settled."""
    lines = []
    for record in store.list_plans(status=PlanStatus.APPLYING):
        actions = store.list_actions(plan_id=record.plan_id)
        if any(a.state is ActionState.ONGOING for a in actions):
            continue
        for a in actions:
            if a.state is ActionState.PENDING:
                store.set_action_state(a.id, ActionState.SKIPPED, "the applier stopped before it began")
        status = final_status({a.index: a.state if a.state is not ActionState.PENDING else ActionState.SKIPPED
                               for a in actions})
        if store.set_plan_status(record.plan_id, status, only_from=[PlanStatus.APPLYING]):
            lines.append(f"plan {record.plan_id}: left APPLYING by a stopped applier, now {status.value}")
    return lines


def reject_plan(store: Store, plan_id: int, decided_by: str, inventory: Inventory | None = None) -> None:
    """Mark a RECOMMENDED plan REJECTED (nothing runs); refused like `apply_plan` otherwise. With
    `inventory`, a plan made for another inventory is refused too."""
    store.expire_plans()
    record = store.get_plan(plan_id)
    if inventory is not None:
        check_applicable(record, inventory)
    elif record.status is not PlanStatus.RECOMMENDED:
        raise PlanError(f"PLAN_ID: plan {plan_id} is {record.status.value}, not RECOMMENDED; nothing to reject")
    if not store.set_plan_status(plan_id, PlanStatus.REJECTED, only_from=[PlanStatus.RECOMMENDED],
                                 decided_by=decided_by):
        raise PlanError(f"PLAN_ID: plan {plan_id} was decided by another person meanwhile")


__all__ = ["ApplyResult", "apply_plan", "check_applicable", "expires_at", "final_status", "reject_plan",
           "settle_orphans", "stored_plan"]
