"""The epoch loop: observe -> plan -> journal -> execute -> record, driven by APScheduler.

The controller owns no placement or node logic: it wires the observer (or a snapshot file), the
pure planner, the store and, outside dry runs, the executors and the power policy (`Services`).
It holds the store's controller lock while it runs, reconciles the journal with the nodes before
its first epoch, and on SIGTERM lets the action in flight finish and skips the rest.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler
from rich.console import Console

from db.records import EnergyRow
from db.store import Store

from .config import demo_snapshot, load_snapshot
from .errors import PeakpackError, StoreError
from .plan_executor import ExecutionReport, NodeOps, PlanExecutor
from .metrics import ControllerMetrics
from .model import ClusterSnapshot, Inventory
from .plan import ActionKind, Plan
from .planning import make_plan


@dataclass(frozen=True)
class ControllerSettings:
    dry_run: bool = True
    policy: str = "peakpack"
    time_limit_s: float = 10.0
    epoch_seconds: int = 600
    snapshot_path: Path | None = None
    demo: bool = False
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"


@dataclass
class Services:
    """What a live controller does to the world; `orchestrator.wiring.live_services` builds the
    real ones (SSH, docker/CRIU, IPMI), tests build fakes."""

    observe: Callable[[], ClusterSnapshot]
    ops: NodeOps
    reconcile: Callable[[], list[str]]
    adjust_plan: Callable[[Plan, ClusterSnapshot], Plan]
    #: samples the nodes' energy counters, stores the rows of the interval that ends now, returns them
    account_energy: Callable[[ClusterSnapshot, int | None], list[EnergyRow]]
    close: Callable[[], None] = lambda: None


class Controller:
    def __init__(
        self,
        inventory: Inventory,
        store: Store,
        settings: ControllerSettings,
        console: Console | None = None,
        services: Services | None = None,
    ) -> None:
        self.inventory = inventory
        self.store = store
        self.settings = settings
        self.console = console or Console(stderr=True)
        self.services = services
        self.metrics = ControllerMetrics()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._started = False
        if not settings.dry_run and services is None:
            raise ValueError("a live controller needs Services")

    def log(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    # -- one epoch ------------------------------------------------------------------------------

    def observe(self) -> ClusterSnapshot:
        """The snapshot file is re-read every epoch, so an operator can update it in place."""
        if self.settings.snapshot_path is not None:
            return load_snapshot(self.settings.snapshot_path, self.inventory)
        if self.settings.demo:
            return demo_snapshot(self.inventory)
        if self.services is not None:
            return self.services.observe()
        from .observe import observe_cluster

        return observe_cluster(self.inventory)

    def start(self) -> None:
        """Take the store's lock and, for a live controller, reconcile what a crash left behind."""
        if self._started:
            return
        self._take_over_from_dead_local_holder()
        if not self.store.acquire_lock(self.owner, stale_after_s=max(120.0, 3.0 * self.settings.epoch_seconds)):
            holder = self.store.lock_holder()
            who = f"{holder[0]} (last seen {holder[1]:%Y-%m-%d %H:%M:%S} UTC)" if holder else "another controller"
            raise StoreError(f"--db: this store is locked by controller {who}; stop it first or use another --db")
        self._started = True
        if self.metrics_port is not None:
            self.metrics.serve(self.metrics_port, self.settings.metrics_addr)
        if not self.settings.dry_run and self.services is not None:
            for line in self.services.reconcile():
                self.log(f"reconcile: {line}")

    def _take_over_from_dead_local_holder(self) -> None:
        """A controller on this host that died (kill -9, crash) leaves the lock behind; its process
        is gone, so the lock can be released at once instead of waiting for it to go stale."""
        holder = self.store.lock_holder()
        if holder is None:
            return
        host, _, rest = holder[0].partition(":")
        pid = rest.partition(":")[0]
        if host != socket.gethostname() or not pid.isdigit():
            return
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            self.log(f"taking over the store lock of controller {holder[0]}, which is no longer running")
            self.store.release_lock(holder[0])
        except PermissionError:
            pass

    @property
    def metrics_port(self) -> int | None:
        return self.settings.metrics_port

    def finish(self) -> None:
        if self._started:
            self.store.release_lock(self.owner)
            self._started = False
        if self.services is not None:
            self.services.close()

    def run_epoch(self) -> Plan:
        self.start()
        self.store.refresh_lock(self.owner)
        snapshot = self.observe()
        if not self.settings.dry_run and self.services is not None:
            self._count_energy(self.services.account_energy(snapshot, None))  # closes the interval since the last epoch
        plan = make_plan(
            self.inventory,
            snapshot,
            policy=self.settings.policy,
            time_limit_s=self.settings.time_limit_s,
            dry_run=self.settings.dry_run,
        )
        if not self.settings.dry_run and self.services is not None:
            plan = self.services.adjust_plan(plan, snapshot)
        plan_id = self.store.save_plan(plan, inventory=self.inventory.cluster.name, snapshot=snapshot)
        plan = replace(plan, plan_id=plan_id)
        self.metrics.observe_plan(plan)
        self.log(
            f"epoch: plan {plan_id} with {len(plan.actions)} action(s), "
            f"{plan.before.power_w:.0f} W -> {plan.after.power_w:.0f} W"
            + (" (dry run)" if plan.dry_run else "")
        )
        if self.settings.dry_run or self.services is None:
            return plan
        report = PlanExecutor(self.store, self.services.ops, self.log, self._stop.is_set).execute(plan, plan_id)
        self._record(plan, report)
        self._count_energy(self.services.account_energy(self.observe(), plan_id))
        return plan

    def _count_energy(self, rows: list[EnergyRow]) -> None:
        for row in rows:
            if row.container is None:  # per-container rows split the node's energy: not counted twice
                self.metrics.energy_j.labels(row.node, row.source).inc(row.energy_j)

    def _record(self, plan: Plan, report: ExecutionReport) -> None:
        ids = self.store.plan_action_ids(report.plan_id)
        for aid, action in zip(ids, plan.actions, strict=True):
            state = report.states.get(aid)
            if state is None:
                continue
            if action.kind is ActionKind.MIGRATE:
                self.metrics.migrations.labels(state.value).inc()
            else:
                self.metrics.power_actions.labels(action.kind.value, state.value).inc()
        done = {state.value: report.count(state) for state in set(report.states.values())}
        if done:
            self.log("executed: " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(done.items())))
        self.metrics.epochs.labels("with_errors" if report.errors else "ok").inc()

    # -- the service ----------------------------------------------------------------------------

    def _epoch_job(self) -> None:
        try:
            self.run_epoch()
        except PeakpackError as exc:  # one bad epoch must not kill the service
            self.log(f"epoch failed: {exc}")
            self.metrics.epochs.labels("failed").inc()
        except Exception as exc:  # noqa: BLE001 - an unexpected bug is logged with its type, then the next epoch
            self.log(f"epoch failed with an internal error: {type(exc).__name__}: {exc}")
            self.metrics.epochs.labels("failed").inc()

    def stop(self, *_: object) -> None:
        self._stop.set()

    def run_once(self) -> Plan:
        previous = {s: signal.signal(s, self.stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self.run_epoch()
        finally:
            self.finish()
            for s, handler in previous.items():
                signal.signal(s, handler)

    def run_forever(self) -> None:
        """Epochs until SIGTERM/SIGINT; the action in flight finishes, the rest are skipped."""
        self.start()
        scheduler = BackgroundScheduler()
        scheduler.add_job(
            self._epoch_job,
            "interval",
            seconds=self.settings.epoch_seconds,
            max_instances=1,
            coalesce=True,
            next_run_time=datetime.now(timezone.utc),
        )
        previous = {s: signal.signal(s, self.stop) for s in (signal.SIGTERM, signal.SIGINT)}
        scheduler.start()
        self.log(f"serving {self.inventory.cluster.name}: one epoch every {self.settings.epoch_seconds}s")
        try:
            self._stop.wait()
        finally:
            self.log("stopping: waiting for the action in flight")
            scheduler.shutdown(wait=True)
            self.finish()
            for s, handler in previous.items():
                signal.signal(s, handler)
            self.log("stopped")
