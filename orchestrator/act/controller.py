"""The epoch loop: observe -> plan -> journal -> execute -> record, driven by APScheduler.

The controller owns no placement or node logic: it wires the observer (or a snapshot file), the
pure planner, the store and, outside dry runs, the executors and the power policy (`Services`).
It acts only while it holds the store's lease (`leadership.Lease`: renewed in the background,
every write fenced with its token); `serve` waits for the lease as a hot standby, reconciles the
journal with the nodes whenever it starts to lead, and stops acting the moment the lease is lost.
On SIGTERM it lets the action in flight finish and skips the rest. A reconciliation that fails is
logged and the epoch goes on: the unsettled migrations keep both their nodes held. A node that
an unsettled migration waits for while its container runs nowhere is woken before planning
(`wakes_for_unsettled`).

Between epochs the leader runs the plans approved on any web page (`apply.run_approvals`: the
pages hand approvals over through the store and execute nothing themselves) and reads the nodes'
conntrack tables every `[cluster] traffic_read_seconds` (their bytes join the next epoch's
traffic rows: flows that close between epochs are counted too), and after each
epoch it applies `[store]` retention (`Journal.prune`, a few batches at a time). Everything that
acts (reconciling, an epoch, an approved plan) holds `_acting`, so no two of them overlap.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler
from rich.console import Console

from ..domain.config import demo_snapshot, load_snapshot
from ..domain.errors import FencedError, PeakpackError
from ..domain.model import Inventory
from ..domain.plan import ActionKind, Plan
from ..domain.ports import Journal, Observation, Services
from ..domain.records import EnergyRow
from ..domain.savings import ledger
from .apply import run_approvals
from .epoch import EpochReport, EpochSettings, run_epoch, settle_step
from .executor import ExecutionReport
from .leadership import Lease, lease_ttl
from .metrics import ControllerMetrics

#: how often a leader between epochs looks for plans approved on a web page
APPROVAL_POLL_S = 0.5


@dataclass(frozen=True)
class ControllerSettings:
    dry_run: bool = True
    policy: str = "peakpack"
    time_limit_s: float | None = None  # None: the inventory's `[planner].time_limit_s`
    epoch_seconds: int = 600
    snapshot_path: Path | None = None
    demo: bool = False
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    #: seconds a dead leader's lease keeps a standby waiting; None: `leadership.lease_ttl(epoch)`
    lease_ttl_s: float | None = None
    #: `serve --approve`: store each epoch's plan RECOMMENDED for a person; execute nothing unasked
    approve: bool = False


class Controller:
    def __init__(
        self,
        inventory: Inventory,
        store: Journal,
        settings: ControllerSettings,
        console: Console | None = None,
        services: Services | None = None,
        observe: Callable[[], Observation] | None = None,
        sample_traffic: Callable[[], None] | None = None,
    ) -> None:
        """`services`: what a live controller acts through (None: it only plans); `observe`: how a
        controller without services sees the live cluster (`serve --dry-run`), when there is
        neither a snapshot file nor the demo."""
        self.inventory = inventory
        self.store = store
        self.settings = settings
        self._observer = observe
        self.console = console or Console(stderr=True)
        self.services = services
        self.metrics = ControllerMetrics()
        ttl = settings.lease_ttl_s if settings.lease_ttl_s is not None else lease_ttl(settings.epoch_seconds)
        self.lease = Lease(store, ttl, role="serve", log=self.log)
        self.owner = self.lease.owner
        self._stop = threading.Event()
        # reconciling, an epoch and an approved plan never run at once (re-entered: an epoch may
        # take office first)
        self._acting = threading.RLock()
        self._started = False
        self._reconciled = False
        self._metrics_served = False
        self._qos_counted: int | None = None  # the newest QoS event row counted in the metrics
        #: between epochs, the conntrack tables are read (`read_traffic`) by the services or, in a
        #: dry run, beside the observer; when they were last read (an observation reads them too)
        self._sample = services.sample_traffic if services is not None else sample_traffic
        self._traffic_at = time.monotonic()
        if not settings.dry_run and services is None:
            raise ValueError("a live controller needs Services")

    def log(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    # -- one epoch ------------------------------------------------------------------------------

    def _observe(self) -> Observation:
        """What the cluster looks like now. A snapshot file is re-read every epoch, so an operator
        can update it in place."""
        if self.settings.snapshot_path is not None:
            return Observation(load_snapshot(self.settings.snapshot_path, self.inventory))
        if self.settings.demo:
            return Observation(demo_snapshot(self.inventory))
        observe = self.services.observe if self.services is not None else self._observer
        if observe is None:
            raise ValueError("a controller needs a snapshot, the demo, Services or an observer")
        try:
            return observe()
        finally:
            self._traffic_at = time.monotonic()

    def read_traffic(self) -> None:
        """Between epochs, the nodes' conntrack tables once `[cluster] traffic_read_seconds` have
        passed since they were last read (a flow closed with a FIN leaves a table ~120 s later:
        longer gaps miss connection-per-request traffic); their bytes join the next epoch's rows.
        Never during an epoch or an approved plan; a failed read is logged and the next one comes."""
        every = self.inventory.cluster.traffic_read_seconds
        if self._sample is None or not every or time.monotonic() - self._traffic_at < every:
            return
        if not self._acting.acquire(blocking=False):
            return
        try:
            self._sample()
        except Exception as exc:  # noqa: BLE001 - the next read (or the epoch's) measures the interval
            self.log(f"traffic read failed: {type(exc).__name__}: {exc}")
        finally:
            self._traffic_at = time.monotonic()
            self._acting.release()

    def settle(self) -> None:
        """Settle what is unfinished (crashes, IN_DOUBT migrations) from what the nodes show: at
        start and at every epoch (the epoch's own first step), so a running controller never
        plans around stale facts. A failure is logged and the controller goes on."""
        if self.settings.dry_run or self.services is None:
            return
        settle_step(self.store, self.services, self.log, tolerant=True)

    def start(self) -> None:
        """Take the lease now or fail with one line naming its holder, then take office."""
        if self._started:
            return
        self.lease.acquire()
        self._take_office()

    def _take_office(self) -> None:
        """Before acting, a new leader repairs what its predecessor (or its own crash) left
        ONGOING: the journal says what was in flight, the nodes say how it ended."""
        self._started = True
        if self.metrics_port is not None and not self._metrics_served:
            self.metrics.serve(self.metrics_port, self.settings.metrics_addr)
            self._metrics_served = True
        with self._acting:
            self.settle()
        self._reconciled = True  # the first epoch need not do it again

    @property
    def metrics_port(self) -> int | None:
        return self.settings.metrics_port

    def _stopping(self) -> bool:
        """The executor starts no new action once we stop or may no longer lead."""
        return self._stop.is_set() or self.lease.lost.is_set()

    def finish(self) -> None:
        self.lease.release()
        self._started = False
        if self.services is not None:
            self.services.close()

    def run_epoch(self) -> Plan:
        """One epoch (`epoch.run_epoch`) under the lease; the metrics are read off its report."""
        self.start()
        self.lease.check()
        if self._qos_counted is None:
            self._qos_counted = self.store.qos.newest_id()
        report = run_epoch(
            self.store, self.inventory,
            EpochSettings(act=not self.settings.dry_run, approve=self.settings.approve, policy=self.settings.policy,
                          time_limit_s=self.settings.time_limit_s, settle=not self._reconciled),
            observe=self._observe, services=self.services, stop_requested=self._stopping,
            check_lease=self.lease.check, log=self.log)
        self._reconciled = False  # taking office has just reconciled: the next epoch does it itself
        self._count(report)
        assert report.plan is not None
        return report.plan

    def _count(self, report: EpochReport, *, epoch: bool = True) -> None:
        """The metrics of one epoch (`epoch`) or an approved plan's (its energy only), off its report."""
        self._count_qos_events()
        self._count_energy(report.energy)
        if report.energy:
            self.metrics.observe_ledger(ledger(self.store.savings.history(), datetime.now(UTC)))
        if report.proposal is not None:
            self.metrics.observe_plan(report.proposal.plan)
        if epoch and report.outcome is not None and report.plan is not None:
            self._record(report.plan, report.outcome.report)

    def _count_qos_events(self) -> None:
        """The QoS events journaled since the last count (by this epoch's observation, restarts):
        counted in the metrics, and logged per node."""
        per_node: Counter[str] = Counter()
        for e in self.store.qos.events(after_id=self._qos_counted):
            self.metrics.qos_events.labels(e.node, e.kind).inc()
            self._qos_counted = max(self._qos_counted or 0, e.id or 0)
            per_node[e.node] += 1
        for node, n in sorted(per_node.items()):
            self.log(f"qos: {node}: {n} guard event(s)")

    def _count_energy(self, rows: list[EnergyRow]) -> None:
        """Each node's row into the energy counter (per-container rows split the node's energy:
        not counted twice)."""
        for row in rows:
            if row.container is None:
                self.metrics.energy_j.labels(row.node, row.source).inc(row.energy_j)

    def _record(self, plan: Plan, report: ExecutionReport) -> None:
        ids = self.store.plans.action_ids(report.plan_id)
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

    def run_approved(self) -> None:
        """Plans approved on a web page (any process's), run here under this leader's lease and
        never during an epoch: when an epoch is running they wait for the next look."""
        if not self._acting.acquire(blocking=False):
            return
        try:
            self.lease.check()
            for result in run_approvals(self.store, self.inventory, self.services, leader=self.owner, log=self.log,
                                        stop_requested=self._stopping):
                self._count(result.epoch, epoch=False)
        except FencedError as exc:
            self.lease.lose(exc.reason)
        except Exception as exc:  # noqa: BLE001 - the service goes on; the approval stays to be retried
            self.log(f"approved plans: {type(exc).__name__}: {exc}")
        finally:
            self._acting.release()

    def _epoch_job(self) -> None:
        try:
            with self._acting:
                self.run_epoch()
        except FencedError as exc:  # another controller leads: act no more, stand by again
            self.lease.lose(exc.reason)
            self.log(f"epoch stopped: {exc}")
        except PeakpackError as exc:  # one bad epoch must not kill the service
            self.log(f"epoch failed: {exc}")
            self.metrics.epochs.labels("failed").inc()
        except Exception as exc:  # noqa: BLE001 - an unexpected bug is logged with its type, then the next epoch
            self.log(f"epoch failed with an internal error: {type(exc).__name__}: {exc}")
            self.metrics.epochs.labels("failed").inc()

    def stop(self, *_: object) -> None:
        self._stop.set()

    def stopped(self) -> bool:
        """Whether this controller was asked to stop (SIGTERM/SIGINT)."""
        return self._stop.is_set()

    @contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGTERM/SIGINT stop this controller while it runs (signals reach the main thread only:
        elsewhere, e.g. a second controller in a test, `stop()` is called instead)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.signal(s, self.stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def run_once(self) -> Plan:
        with self._signals():
            try:
                return self.run_epoch()
            finally:
                self.finish()

    def run_forever(self) -> None:
        """Lead (or stand by until this process may) until SIGTERM/SIGINT; a leader that loses
        the lease stops acting and stands by again. The action in flight finishes, the rest are
        skipped."""
        with self._signals():
            self._serve()

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                if not self.lease.wait(self._stop):
                    break
                self.log(f"leading {self.inventory.cluster.name} as {self.owner} (lease token {self.lease.token}, "
                         f"renewed every {self.lease.ttl_s / 3:.3g}s)")
                try:
                    self._take_office()
                    self._lead()
                except FencedError as exc:  # taken over while reconciling
                    self.lease.lose(exc.reason)
                if self.lease.lost.is_set() and not self._stop.is_set():
                    self.lease.release()
                    self._started = False
                    self.log("standing by again")
        finally:
            self.finish()
            self.log("stopped")

    def _lead(self) -> None:
        """Epochs on a scheduler until we stop or lose the lease."""
        scheduler = BackgroundScheduler()
        scheduler.add_job(
            self._epoch_job,
            "interval",
            seconds=self.settings.epoch_seconds,
            max_instances=1,
            coalesce=True,
            next_run_time=datetime.now(UTC),
        )
        scheduler.start()
        self.log(f"serving {self.inventory.cluster.name}: one epoch every {self.settings.epoch_seconds}s")
        try:
            while not self._stop.wait(APPROVAL_POLL_S) and not self.lease.lost.is_set():
                self.run_approved()
                self.read_traffic()
        finally:
            self.log(("lease lost" if self.lease.lost.is_set() else "stopping") + ": waiting for the action in flight")
            scheduler.shutdown(wait=True)
