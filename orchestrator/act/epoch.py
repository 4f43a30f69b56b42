"""One epoch, written once. `serve` runs all of it every epoch, `peakpack plan` runs it up to the
stored plan, and `apply` (with the web page's approve button) re-runs the view and executes:

    settle_unfinished     what a crash or an in-doubt migration left open, from the nodes' facts
    (observe)             the caller's: live services, a snapshot file, or the embedded demo
    restart_stopped       containers a node's QoS guard stopped for memory, started again where
                          there is room (`serve`, not its dry run)
    planning_view         unsettled migrations hold both their nodes; each container's CPU is the
                          forecast of its stored demand history (as the simulator plans)
    propose_plan          budgets and windows (allowance), what the store remembers (grace,
                          quarantine, hysteresis) and the forecast traffic between containers
                          -> solve -> the power policy's last check ->
                          predict -> store it with its status, expiry and inventory digest
    execute_plan          journaled execution, the plan's final status, the energy after it

Each step reads and writes the store through its repositories and the world through `Services`,
so the three callers differ only in what they pass, never in the order of the steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from ..decide.demand import Forecast, forecast_demand
from ..decide.forecast import window_epochs
from ..decide.predict import Prediction, predict
from ..decide.qos import RESTART_FAILED, RESTARTED, LoweredCap, restarts
from ..decide.review import inventory_digest
from ..decide.solve import DEFAULT_POLICY, hold_unsettled, make_plan
from ..decide.traffic import Edge, forecast_traffic
from ..domain.budgets import allowance_at
from ..domain.errors import PeakpackError
from ..domain.model import ClusterSnapshot, Inventory
from ..domain.plan import Plan
from ..domain.ports import Journal, Services
from ..domain.settings import ForecastSettings
from ..domain.states import ActionState, PlanStatus
from .executor import ExecutionReport, PlanExecutor
from .remembered import guard_events, remembered, stopped_by_guards


@dataclass(frozen=True)
class Proposal:
    """A stored plan and what it was made from."""

    plan: Plan  # carries its plan_id
    snapshot: ClusterSnapshot  # what it was planned on: unsettled held, CPU forecast
    prediction: Prediction
    status: PlanStatus
    expires_at: datetime
    forecasts: Mapping[str, Forecast]
    lowered: Mapping[str, LoweredCap]  # nodes planned under a lower cap (their containers stalled)


def expires_at(inventory: Inventory, made: datetime | None = None) -> datetime:
    """Until when a plan made now may be applied (inventory `[review] plan_ttl_seconds`)."""
    return (made or datetime.now(UTC)) + timedelta(seconds=inventory.review.plan_ttl_seconds)


def final_status(states: Mapping[int, ActionState]) -> PlanStatus:
    """APPLIED: every action succeeded; FAILED: none did and one failed; else PARTIAL."""
    if all(s is ActionState.SUCCEEDED for s in states.values()):
        return PlanStatus.APPLIED
    if not any(s is ActionState.SUCCEEDED for s in states.values()) and ActionState.FAILED in states.values():
        return PlanStatus.FAILED
    return PlanStatus.PARTIAL


def settle_orphans(journal: Journal) -> list[str]:
    """Finish plans a crash left APPLYING (call under the lease, with no plan executing): actions
    that never started are SKIPPED, and the plan gets the status its actions earned. A plan with an
    action still ONGOING (in doubt after reconcile) stays APPLYING until that is settled."""
    lines = []
    plans = journal.plans
    for record in plans.history(status=PlanStatus.APPLYING):
        actions = plans.actions(plan_id=record.plan_id)
        if any(a.state is ActionState.ONGOING for a in actions):
            continue
        for a in actions:
            if a.state is ActionState.PENDING:
                plans.set_action_state(a.id, ActionState.SKIPPED, "the applier stopped before it began")
        status = final_status({a.index: a.state if a.state is not ActionState.PENDING else ActionState.SKIPPED
                               for a in actions})
        if plans.set_status(record.plan_id, status, only_from=[PlanStatus.APPLYING]):
            lines.append(f"plan {record.plan_id}: left APPLYING by a stopped applier, now {status.value}")
    return lines


def settle_unfinished(journal: Journal, services: Services) -> list[str]:
    """Migrations and power actions left open, settled from what the nodes show, then plans a
    stopped applier left APPLYING; one line per thing found."""
    return [*services.reconcile(), *settle_orphans(journal)]


def restart_stopped(journal: Journal, services: Services, inventory: Inventory, observed: ClusterSnapshot
                    ) -> list[str]:
    """Start again, where they were, the best-effort containers the nodes' QoS guards stopped for
    memory (`decide/qos.restarts`: when the node has room for what they usually use, at most
    `[qos] restarts_per_hour`), each start journaled as a QoS event; one line per container."""
    now = observed.taken_at
    window = now - timedelta(seconds=inventory.planner.forecast.window_seconds)
    lines = []
    for r in restarts(guard_events(journal, inventory, now), observed, inventory, journal.demand.history(since=window),
                      inventory.qos.restarts_per_hour, now):
        if not r.now:
            lines.append(f"{r.container} stays stopped: {r.why}")
            continue
        try:
            services.ops.start(r.node, r.container)
        except PeakpackError as exc:
            journal.qos.record(r.node, RESTART_FAILED, r.container, str(exc))
            lines.append(f"{r.container}: starting it on {r.node} failed: {exc}")
            continue
        journal.qos.record(r.node, RESTARTED, r.container, r.why)
        lines.append(f"{r.container}: started again on {r.node}: {r.why}")
    return lines


def forecast_from_store(journal: Journal, snapshot: ClusterSnapshot, settings: ForecastSettings,
                        epoch_seconds: float) -> tuple[ClusterSnapshot, dict[str, Forecast]]:
    """`demand.forecast_demand` over the stored history of the window ending at the snapshot."""
    since = snapshot.taken_at - timedelta(seconds=window_epochs(settings, epoch_seconds) * epoch_seconds)
    return forecast_demand(snapshot, journal.demand.history(since=since), settings, epoch_seconds)


def traffic_from_store(journal: Journal, snapshot: ClusterSnapshot, settings: ForecastSettings,
                       epoch_seconds: float) -> dict[Edge, float]:
    """`traffic.forecast_traffic` over the measured traffic of the window ending at the snapshot."""
    since = snapshot.taken_at - timedelta(seconds=window_epochs(settings, epoch_seconds) * epoch_seconds)
    return forecast_traffic(journal.traffic.pairs(since), journal.traffic.reads(since),
                            (c.name for c in snapshot.containers), snapshot.taken_at, settings, epoch_seconds)


def planning_view(journal: Journal, inventory: Inventory, observed: ClusterSnapshot
                  ) -> tuple[ClusterSnapshot, dict[str, Forecast]]:
    """What a plan is made (and re-checked) on: until a migration is settled both its nodes are
    held; each container's CPU is its forecast from the stored demand history."""
    held = hold_unsettled(observed, journal.migrations.unfinished())
    return forecast_from_store(journal, held, inventory.planner.forecast, inventory.cluster.epoch_seconds)


def propose_plan(journal: Journal, inventory: Inventory, observed: ClusterSnapshot, *, status: PlanStatus,
                 dry_run: bool, remember: bool, policy: str = DEFAULT_POLICY, time_limit_s: float | None = None,
                 adjust: Callable[[Plan, ClusterSnapshot], Plan] | None = None) -> Proposal:
    """Plan on `observed` and store the plan (and its actions, PENDING) with `status`.

    `remember`: store what this observation teaches the power rules (a node seen empty since
    when); `peakpack plan` changes nothing, so it passes False. `adjust`: the power policy's last
    check (a node quarantined meanwhile is not woken), for a plan that may be executed."""
    snapshot, forecasts = planning_view(journal, inventory, observed)
    allowance = allowance_at(inventory.budgets, inventory.windows, datetime.now(UTC),
                             journal.disruption_since)
    traffic = traffic_from_store(journal, snapshot, inventory.planner.forecast, inventory.cluster.epoch_seconds)
    facts = remembered(journal, inventory, snapshot, record=remember)
    plan = make_plan(inventory, snapshot, policy=policy, time_limit_s=time_limit_s, dry_run=dry_run,
                     facts=facts, allowance=allowance, traffic=traffic)
    if adjust is not None:
        plan = adjust(plan, snapshot)
    prediction = predict(inventory, snapshot, plan, inventory.planner, journal.migrations.frozen_history())
    until = expires_at(inventory)
    plan_id = journal.plans.save(plan, inventory=inventory.cluster.name, snapshot=snapshot, status=status,
                                 expires_at=until, inventory_digest=inventory_digest(inventory),
                                 prediction=prediction.to_json(),
                                 action_predictions=[a.to_json() for a in prediction.actions])
    return Proposal(replace(plan, plan_id=plan_id), snapshot, prediction, status, until, forecasts, facts.lowered)


@dataclass(frozen=True)
class Outcome:
    """How an executed plan ended: its final status and each action's state by index."""

    report: ExecutionReport
    status: PlanStatus
    states: dict[int, ActionState]


def execute_plan(journal: Journal, services: Services, inventory: Inventory, plan: Plan, plan_id: int, *,
                 log: Callable[[str], None], stop_requested: Callable[[], bool],
                 skip: Mapping[int, str] | None = None) -> Outcome:
    """Run an APPLYING plan's actions (journaled before and after each), give the plan the status
    they earned, and store the energy of the interval that ends with it. A node to switch off is
    asked, just before, whether anything runs there or a container its QoS guard stopped (as the
    store knows them now) is still there."""
    executor = PlanExecutor(journal, services.ops, log, stop_requested,
                            stopped=lambda: stopped_by_guards(journal, inventory, datetime.now(UTC), ()))
    report = executor.execute(plan, plan_id, skip=skip)
    ids = journal.plans.action_ids(plan_id)
    states = {ids.index(aid): s for aid, s in report.states.items()}
    status = final_status(states)
    journal.plans.set_status(plan_id, status, only_from=[PlanStatus.APPLYING])
    services.account_energy(services.observe(), plan_id)
    return Outcome(report, status, states)
