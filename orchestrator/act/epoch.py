"""One epoch, written once: `run_epoch` is the whole sequence, and `serve` (every epoch) and
`apply` (a stored plan, from the CLI or an approval) both call it and read what happened off its
`EpochReport`; `peakpack plan` runs its first steps up to the stored plan. The steps, in order:

    settle_unfinished     what a crash or an in-doubt migration left open, from the nodes' facts
    observe               the caller's: live services (reading only), a snapshot file, the demo
    wake_for_unsettled    nodes an unsettled migration waits for, woken; settle and observe again
    record_observation    the rows the observation read: demand, traffic, stall, guard events
    install_guards        QoS guards missing or outdated on a node, installed (`serve` only)
    restart_stopped       containers a node's QoS guard stopped for memory, started again where
                          there is room (`serve`, not its dry run)
    (energy)              the interval since the last sample closed (`Services.account_energy`;
                          `apply`: once the stored plan is APPLYING, just before it runs)
    planning_view         unsettled migrations hold both their nodes; each container's CPU is the
                          forecast of its stored demand history (as the simulator plans)
    propose_plan          budgets and windows (allowance), what the store remembers (grace,
                          quarantine, hysteresis) and the forecast traffic between containers
                          -> solve -> the power policy's last check ->
                          predict -> store it with its status, expiry and inventory digest
      or review_stored    `apply`: the stored plan re-checked on the fresh view, budgets, APPLYING
    execute_plan          journaled execution, the plan's final status, the energy after it (of
                          the snapshot as the plan left it: no second observation)
    (retention)           `[store]` pruning (`serve`)

Each step reads and writes the store through its repositories and the world through `Services`,
so the callers differ only in what they pass, never in the order of the steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from ..decide.demand import Forecast, forecast_demand
from ..decide.forecast import window_epochs
from ..decide.predict import Prediction, predict
from ..decide.pressure import RESTART_FAILED, RESTARTED, LoweredCap, restarts
from ..decide.review import Review, inventory_digest, review_plan
from ..decide.solve import DEFAULT_POLICY, Unsettled, hold_unsettled, make_plan
from ..decide.traffic import Edge, forecast_traffic
from ..domain.budgets import allowance_at, exceeds
from ..domain.capacity import over_cap_nodes
from ..domain.errors import FencedError, PeakpackError, PlanError
from ..domain.model import ClusterMetrics, ClusterSnapshot, Inventory
from ..domain.plan import Action, ActionKind, Plan, SolverReport, apply_action
from ..domain.ports import Journal, Observation, Services
from ..domain.records import EnergyRow, PlanRecord, Pruned
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


def settle_plans(journal: Journal) -> list[str]:
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
    return [*services.settle(), *settle_plans(journal)]


def restart_stopped(journal: Journal, services: Services, inventory: Inventory, observed: ClusterSnapshot
                    ) -> list[str]:
    """Start again, where they were, the best-effort containers the nodes' QoS guards stopped for
    memory (`decide/pressure.restarts`: when the node has room for what they usually use, at most
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
    energy: list[EnergyRow] = field(default_factory=list)  # the rows of the interval it ended


def execute_plan(journal: Journal, services: Services, inventory: Inventory, plan: Plan, plan_id: int,
                 observed: ClusterSnapshot, *, log: Callable[[str], None], stop_requested: Callable[[], bool],
                 skip: Mapping[int, str] | None = None) -> Outcome:
    """Run an APPLYING plan's actions (journaled before and after each), give the plan the status
    they earned, and store the energy of the interval that ends with it (when an action ran), on
    `observed` as the actions that succeeded left it (`after_plan`: no second observation). A node to switch off is
    asked, just before, whether anything runs there or a container its QoS guard stopped (as the
    store knows them now) is still there."""
    executor = PlanExecutor(journal, services.ops, log, stop_requested,
                            stopped=lambda: stopped_by_guards(journal, inventory, datetime.now(UTC), ()))
    report = executor.execute(plan, plan_id, skip=skip)
    ids = journal.plans.action_ids(plan_id)
    states = {ids.index(aid): s for aid, s in report.states.items()}
    status = final_status(states)
    journal.plans.set_status(plan_id, status, only_from=[PlanStatus.APPLYING])
    ran = any(s is not ActionState.SKIPPED for s in states.values())
    # a plan that ran nothing changed nothing: its interval goes on to the next epoch's close
    energy = services.account_energy(after_plan(inventory, observed, plan, states), plan_id) if ran else []
    return Outcome(report, status, states, energy)


def after_plan(inventory: Inventory, observed: ClusterSnapshot, plan: Plan,
               states: Mapping[int, ActionState]) -> ClusterSnapshot:
    """`observed` with the plan's actions that succeeded applied (`plan.apply_action`), in order:
    which nodes are on and what runs where once the plan ran, for the energy that ends with it."""
    snapshot = observed
    for i, action in enumerate(plan.actions):
        if states.get(i) is ActionState.SUCCEEDED:
            snapshot = apply_action(inventory, snapshot, action)
    return snapshot


def wakes_for_unsettled(inventory: Inventory, observed: ClusterSnapshot, unsettled: Iterable[Unsettled],
                        quarantined: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Nodes to power on so that unsettled migrations can end (node -> why), and what an operator
    must do where peakpack may not switch the node.

    A migration waits while a node that its BMC confirms off may hold its container's only state
    (a checkpoint on its disk). While the container runs on no node, waiting changes nothing, so
    that node is woken when it is power-managed and not quarantined: nothing of the migration
    starts there by itself (restart policy "no"), and settling decides once it answers. A node
    that could not be observed (`observed.held`, before the migrations' holds are added) may run
    the container, so then nothing is woken for that migration."""
    running = {c.name for c in observed.containers}
    off = {n.name for n in observed.nodes if not n.powered}
    wake: dict[str, str] = {}
    advice: list[str] = []
    for m in unsettled:
        nodes = (m.source, m.target)
        if m.container in running or any(n in observed.held for n in nodes):
            continue
        for node in (n for n in nodes if n in off):
            spec = inventory.node(node)
            why_not = ("it is not power-managed" if not spec.power_managed
                       else f"it is quarantined ({quarantined[node]})" if node in quarantined else None)
            if why_not is None:
                wake.setdefault(node, f"migration {m.id} of {m.container} runs nowhere and waits for {node}")
            else:
                advice.append(f"migration {m.id} of {m.container} runs nowhere and waits for {node}, which is off "
                              f"and {why_not}: power it on by hand, then `peakpack reconcile`")
    return wake, advice


def wake_for_unsettled(journal: Journal, services: Services, inventory: Inventory, observed: ClusterSnapshot,
                       log: Callable[[str], None]) -> bool:
    """Power on (the journaled power-on path) the nodes `wakes_for_unsettled` names; True when
    one woke, so that the caller settles and observes again."""
    wake, advice = wakes_for_unsettled(inventory, observed, journal.migrations.unfinished(),
                                       journal.power.quarantined())
    for line in advice:
        log(f"unsettled: {line}")
    woke = False
    for node, why in wake.items():
        log(f"waking {node}: {why}")
        try:
            services.ops.power_on(node, why)
            woke = True
        except FencedError:
            raise  # another controller leads: it wakes what still needs waking
        except PeakpackError as exc:
            log(f"waking {node} failed: {exc}")
    return woke


def record_observation(journal: Journal, seen: Observation) -> list[str]:
    """Store what an observation read (demand, traffic, stall, the guards' new events, and a
    guard log that rotated past events not yet read); its notes, one line each."""
    if seen.demand:
        journal.demand.add(seen.demand)
    if seen.traffic_reads or seen.traffic_pairs:
        journal.traffic.add(seen.traffic_reads, seen.traffic_pairs)
    if seen.pressure:
        journal.pressure.add(seen.pressure)
    if seen.guard_events:
        journal.qos.add(seen.guard_events)
    for node in seen.events_lost:
        journal.qos.record(node, "events_lost", None, "the guard's event log rotated past events not yet read")
    return list(seen.notes)


def install_guards(journal: Journal, services: Services, seen: Observation) -> list[str]:
    """Install or update the QoS guard where the observation found it missing, stopped, failing
    to report, or not what this peakpack would install; each install journaled as a QoS event."""
    lines = []
    for node, why in seen.outdated_guards:
        try:
            line = services.install_guard(node)
        except PeakpackError as exc:
            lines.append(f"qos: {node}: installing the guard failed ({why}): {exc}")
            journal.qos.record(node, "guard_install_failed", None, f"{why}: {exc}")
            continue
        lines.append(f"qos: {node}: {why}: installed: {line}")
        journal.qos.record(node, "guard_install", None, f"{why}; {line}")
    return lines


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


def stored_plan(journal: Journal, record: PlanRecord) -> Plan:
    """The journaled plan as the executor runs it: its actions in their stored order."""
    actions = tuple(Action.from_json({"kind": a.kind, "container": a.container, "source": a.source,
                                      "target": a.target, "node": a.node})
                    for a in journal.plans.actions(plan_id=record.plan_id))
    return Plan(policy=record.policy, actions=actions, before=ClusterMetrics(**record.before),
                after=ClusterMetrics(**record.after), solver=SolverReport(**record.solver),
                dry_run=False, plan_id=record.plan_id)


@dataclass(frozen=True)
class Stored:
    """`apply`'s request: run stored plan `record` (`partial`: without what no longer holds)."""

    record: PlanRecord
    partial: bool
    decided_by: str


def review_stored(journal: Journal, inventory: Inventory, observed: ClusterSnapshot, stored: Stored
                  ) -> tuple[Plan, Review]:
    """The stored plan re-checked on a fresh view (held as the planner holds them; each
    container's CPU as the planner saw it, its forecast) and within the budgets and windows now,
    then moved RECOMMENDED -> APPLYING (one conditional UPDATE: of two appliers one wins).
    Refused with one line: drifted (unless partial), over budget, decided meanwhile."""
    plan_id = stored.record.plan_id
    fresh = planning_view(journal, inventory, observed)[0]
    plan = stored_plan(journal, stored.record)
    review = review_plan(inventory, fresh, plan.actions, journal.power.quarantined())
    if review.drifted and not stored.partial:
        raise PlanError(f"PLAN_ID: plan {plan_id} no longer holds: {review.summary()}; "
                        "add --partial to apply the rest, or make a fresh plan")
    skipped = {c.index for c in review.skipped}
    to_run = [a for i, a in enumerate(plan.actions) if i not in skipped]
    over_budget = exceeds(
        allowance_at(inventory.budgets, inventory.windows, datetime.now(UTC), journal.disruption_since),
        [a.source for a in to_run if a.kind is ActionKind.MIGRATE and a.source],
        sum(a.kind is ActionKind.POWER_OFF for a in to_run),
        over_cap_nodes(inventory, fresh.containers, inventory.planner.cap))
    if over_budget:
        raise PlanError(f"PLAN_ID: plan {plan_id} may not run now: {over_budget}; make a fresh plan, "
                        "which plans within what is allowed")
    if not journal.plans.set_status(plan_id, PlanStatus.APPLYING, only_from=[PlanStatus.RECOMMENDED],
                                    decided_by=stored.decided_by):
        check_applicable(journal.plans.get(plan_id), inventory)  # names who won
        raise PlanError(f"PLAN_ID: plan {plan_id} was decided by another applier meanwhile")
    return plan, review


@dataclass(frozen=True)
class EpochSettings:
    """How an epoch runs: `act` (the services act on nodes; False: `serve --dry-run`, a snapshot
    or the demo), `approve` (plans stay RECOMMENDED), the policy and the solver's safety net."""

    act: bool
    approve: bool = False
    policy: str = DEFAULT_POLICY
    time_limit_s: float | None = None
    #: settle what is open first (False: the caller has just done it, taking office)
    settle: bool = True


@dataclass
class EpochReport:
    """What one epoch did, for its caller to log and count: the lines in order, what it observed,
    the plan it stored (or the stored one it ran, with the review), how execution ended, and the
    energy rows it stored."""

    lines: list[str] = field(default_factory=list)
    observed: ClusterSnapshot | None = None
    proposal: Proposal | None = None
    plan: Plan | None = None
    review: Review | None = None
    outcome: Outcome | None = None
    energy: list[EnergyRow] = field(default_factory=list)
    pruned: Pruned | None = None


def run_epoch(journal: Journal, inventory: Inventory, settings: EpochSettings, *,
              observe: Callable[[], Observation], services: Services | None,
              stop_requested: Callable[[], bool] = lambda: False, check_lease: Callable[[], None] = lambda: None,
              log: Callable[[str], None] = lambda _: None, stored: Stored | None = None) -> EpochReport:
    """One epoch, every step in its one order (the module docstring). `stored`: `apply`'s epoch,
    which runs that plan instead of proposing one (and neither wakes, installs, restarts nor
    prunes). A settling that fails during `serve` is logged and the epoch goes on (what stays
    unsettled keeps its nodes held); under `apply` it refuses the plan. `log` gets each line as it
    happens; the report keeps them too."""
    report = EpochReport()

    def say(line: str) -> None:
        report.lines.append(line)
        log(line)

    live = services if settings.act else None
    serving = stored is None
    if live is not None and settings.settle:
        settle_step(journal, live, say, tolerant=serving)
    if serving:
        for m in journal.migrations.unfinished():  # listed first: the plan holds both their nodes
            say(f"unsettled: migration {m.id} of {m.container} ({m.source} -> {m.target}) is {m.state.value}"
                + (f": {m.reason}" if m.reason else ""))
    journal.plans.expire()  # RECOMMENDED plans past `[review] plan_ttl_seconds`: EXPIRED
    seen = observe()
    if (serving and live is not None and not stop_requested()
            and wake_for_unsettled(journal, live, inventory, seen.snapshot, say)):
        settle_step(journal, live, say, tolerant=True)  # what waited for the woken node is settled first
        seen = observe()
    observed = report.observed = seen.snapshot
    if serving:
        for line in held_lines(observed):
            say(f"held: {line}")
    for line in record_observation(journal, seen):
        say(line)
    if serving and live is not None:
        if inventory.qos.install:
            for line in install_guards(journal, live, seen):
                say(line)
        for line in restart_stopped(journal, live, inventory, observed):
            say(f"qos: {line}")
    if stored is not None:
        assert live is not None, "apply needs live services"
        report.plan, report.review = review_stored(journal, inventory, observed, stored)
        skip = {c.index: f"apply --partial: {c.reason}" for c in report.review.skipped}
        report.energy += live.account_energy(observed, None)  # closes the interval before the plan runs
    else:
        if live is not None:
            report.energy += live.account_energy(observed, None)  # closes the interval before planning
        auto = live is not None and not settings.approve
        proposal = report.proposal = propose_plan(
            journal, inventory, observed, status=PlanStatus.APPLYING if auto else PlanStatus.RECOMMENDED,
            dry_run=not settings.act, remember=True, policy=settings.policy, time_limit_s=settings.time_limit_s,
            adjust=None if live is None else live.adjust_plan)
        report.plan, skip = proposal.plan, {}
        plan = proposal.plan
        if proposal.forecasts:
            say("demand: " + ", ".join(f"{sum(1 for f in proposal.forecasts.values() if f.source == s)} {s}"
                                       for s in ("forecast", "label", "observed")))
        say(f"epoch: plan {plan.plan_id} with {len(plan.actions)} action(s), "
            f"{plan.before.power_w:.0f} W -> {plan.after.power_w:.0f} W" + (" (dry run)" if plan.dry_run else ""))
        if not auto:
            if settings.approve and plan.actions:
                say(f"plan {plan.plan_id} is RECOMMENDED: `peakpack plan show {plan.plan_id}` prints it; approve it "
                    "on the web page (serve --http-port), which runs it between epochs")
            report.pruned = prune_step(journal, inventory, stop_requested, say)
            return report
    assert live is not None and report.plan is not None and report.plan.plan_id is not None
    check_lease()
    report.outcome = execute_plan(journal, live, inventory, report.plan, report.plan.plan_id, observed, log=say,
                                  stop_requested=stop_requested, skip=skip)
    report.energy += report.outcome.energy
    if serving:
        report.pruned = prune_step(journal, inventory, stop_requested, say)
    return report


def settle_step(journal: Journal, services: Services, say: Callable[[str], None], *, tolerant: bool) -> None:
    """`settle_unfinished`, each line said. `tolerant` (`serve`): a failure other than losing the
    lease is said and the epoch goes on, the unsettled migrations keeping their nodes held."""
    try:
        lines = settle_unfinished(journal, services)
    except FencedError:
        raise
    except Exception as exc:
        if not tolerant:
            raise
        say(f"reconcile failed: {type(exc).__name__}: {exc}; unsettled migrations keep their nodes held")
        return
    for line in lines:
        say(f"reconcile: {line}")


def held_lines(observed: ClusterSnapshot) -> list[str]:
    """Why nodes are held as observed (not observed, or a container's name running on two of
    them: which owner started the second copy and what to do), each reason once with its nodes;
    the plan leaves them as they are, so the operator must hear it every epoch until it is fixed."""
    order = [n.name for n in observed.nodes]  # the inventory's
    nodes: dict[str, list[str]] = {}
    for node in sorted(observed.held, key=lambda n: order.index(n) if n in order else len(order)):
        nodes.setdefault(observed.held[node], []).append(node)
    return [f"{', '.join(names)}: {why}" for why, names in nodes.items()]


def prune_step(journal: Journal, inventory: Inventory, stop_requested: Callable[[], bool],
               say: Callable[[str], None]) -> Pruned | None:
    """`[store]` retention, a few batches each epoch; a failure is said, the service goes on (the
    next epoch tries again)."""
    if stop_requested():
        return None
    try:
        pruned = journal.prune(inventory.store, datetime.now(UTC))
    except FencedError:
        raise
    except Exception as exc:  # noqa: BLE001 - retention must never stop the controller
        say(f"retention failed: {type(exc).__name__}: {exc}")
        return None
    if pruned:
        say(f"retention: {pruned.summary()}")
    return pruned
