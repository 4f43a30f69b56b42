"""The ports: what the stages that act (the controller, apply, the web page, migrations, power)
need from the world, as protocols and plain records of callables. The composition root
(`faces/wiring.py`) builds the live ones (SSH, docker/CRIU, IPMI, the store: `db.store.Store`
implements `Journal`); tests build fakes (`tests/support/fakes.py`). A stage depends on these,
never on the adapter behind them.

The store's repositories, one per aggregate (each write journaled in its own short transaction,
fenced with the lease token of the process that holds it):

    Journal.plans       PlanRepo        plans and their action journal
    Journal.migrations  MigrationRepo   migrations step by step
    Journal.pinning     PinningRepo     cpusets given to containers
    Journal.power       PowerRepo       power events, quarantine, nodes idle since when
    Journal.energy      EnergyRepo      counter samples and energy rows
    Journal.demand      DemandRepo      container demand per observation
    Journal.traffic     TrafficRepo     bytes per container pair per conntrack read
    Journal.savings     SavingsRepo     the energy saved: time off, migrations and wakes measured
    Journal.pressure    PressureRepo    container stall (PSI, run-queue wait) per observation
    Journal.qos         QosRepo         what the nodes' QoS guards did, and the restarts after
    Journal.lease       LeaseRepo       the controller lease
    Journal.approvals   ApprovalRepo    plans approved on a web page, for the leader to run
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from .model import ClusterSnapshot, StoreConfig
from .plan import Action, Plan
from .records import (
    ActionRecord,
    ApprovalRecord,
    ApprovalState,
    DemandRecord,
    EnergyRow,
    EnergySample,
    FrozenSample,
    LeaseRecord,
    MigrationRecord,
    PlanRecord,
    PowerEventRecord,
    PressureRecord,
    Pruned,
    QosEventRecord,
    StepRecord,
    TrafficRead,
    TrafficRecord,
)
from .savings import SavingRecord
from .states import ActionState, MigrationState, PlanStatus, Step


class NodeOps(Protocol):
    """The side effects on nodes, implemented over migrate/ and power/ (and by fakes)."""

    def power_on(self, node: str, reason: str) -> None: ...

    def power_off(self, node: str, reason: str) -> None: ...

    def migrate(self, actions: Sequence[tuple[int, Action]],
                stop_requested: Callable[[], bool]) -> dict[int, ActionState]:
        """Run the migrations (journaling each under its action id); final state per action id.
        Once `stop_requested()` is true no new migration starts and those in flight settle."""
        ...

    def pin(self, node: str) -> None: ...

    def hosts_nothing(self, node: str, stopped: Collection[str] = ()) -> bool:
        """Whether nothing runs on `node` and none of `stopped` (containers its QoS guard stopped
        there) is still there: what may be switched off. Other stopped containers do not count."""
        ...

    def start(self, node: str, container: str) -> None:
        """Start a stopped container where it is (one its node's QoS guard stopped)."""
        ...


class PowerOps(Protocol):
    """Switching nodes (power/: IPMI, journaled as power events, measured for the savings)."""

    def power_on(self, node: str, reason: str) -> None: ...
    def power_off(self, node: str, reason: str) -> None: ...


class ContainerOps(Protocol):
    """Containers on nodes (migrate/: migrations, pinning, docker): the rest of `NodeOps`."""

    def migrate(self, actions: Sequence[tuple[int, Action]],
                stop_requested: Callable[[], bool]) -> dict[int, ActionState]: ...
    def pin(self, node: str) -> None: ...
    def hosts_nothing(self, node: str, stopped: Collection[str] = ()) -> bool: ...
    def start(self, node: str, container: str) -> None: ...


@dataclass(frozen=True)
class JoinedOps:
    """`NodeOps` from its two adapters, which never import each other: each call is handed on."""

    power: PowerOps
    containers: ContainerOps

    def power_on(self, node: str, reason: str) -> None:
        self.power.power_on(node, reason)

    def power_off(self, node: str, reason: str) -> None:
        self.power.power_off(node, reason)

    def migrate(self, actions: Sequence[tuple[int, Action]],
                stop_requested: Callable[[], bool]) -> dict[int, ActionState]:
        return self.containers.migrate(actions, stop_requested)

    def pin(self, node: str) -> None:
        self.containers.pin(node)

    def hosts_nothing(self, node: str, stopped: Collection[str] = ()) -> bool:
        return self.containers.hosts_nothing(node, stopped)

    def start(self, node: str, container: str) -> None:
        self.containers.start(node, container)


@dataclass(frozen=True)
class Observation:
    """What one observation read, and nothing it wrote: the snapshot, and the rows the epoch's
    `record` step stores (demand since each container's previous row, traffic since the previous
    conntrack read, stall, the guards' new events), the nodes whose guard is not what peakpack
    would install (node, why), and what could not be read (one line each)."""

    snapshot: ClusterSnapshot
    demand: tuple[DemandRecord, ...] = ()
    traffic_reads: tuple[TrafficRead, ...] = ()
    traffic_pairs: tuple[TrafficRecord, ...] = ()
    pressure: tuple[PressureRecord, ...] = ()
    guard_events: tuple[QosEventRecord, ...] = ()
    events_lost: tuple[str, ...] = ()  # nodes whose guard log rotated past events not yet read
    outdated_guards: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()


def in_turn(*steps: Callable[[], list[str]]) -> Callable[[], list[str]]:
    """One step made of `steps`, run in their order, their lines joined (how the composition root
    builds `Services.settle` from the adapters' own settling)."""
    return lambda: [line for step in steps for line in step()]


@dataclass
class Services:
    """What a live controller does to the world: observe the nodes (reading only), act on them
    (`ops`), install a node's QoS guard (one line saying how), settle what a crash left
    unfinished, give a plan its last power check, and account energy (store the rows of the
    interval that ends with the snapshot given and return them)."""

    observe: Callable[[], Observation]
    ops: NodeOps
    settle: Callable[[], list[str]]
    adjust_plan: Callable[[Plan, ClusterSnapshot], Plan]
    account_energy: Callable[[ClusterSnapshot, int | None], list[EnergyRow]]
    install_guard: Callable[[str], str] = lambda node: f"{node}: no guard to install here"
    close: Callable[[], None] = lambda: None
    #: between observations, read the nodes' conntrack tables into the next observation's traffic
    sample_traffic: Callable[[], None] = lambda: None


class PlanRepo(Protocol):
    def save(self, plan: Plan, inventory: str, snapshot: ClusterSnapshot, *,
             status: PlanStatus = PlanStatus.RECOMMENDED, expires_at: datetime | None = None,
             inventory_digest: str | None = None, prediction: dict[str, Any] | None = None,
             action_predictions: Sequence[dict[str, Any] | None] = ()) -> int:
        """The plan and every action (PENDING) in one transaction, before anything runs; its id."""
        ...

    def explanations(self, plan_id: int) -> dict[str, str]: ...
    def history(self, since: datetime | None = None, status: PlanStatus | None = None) -> list[PlanRecord]: ...
    def get(self, plan_id: int) -> PlanRecord: ...

    def set_status(self, plan_id: int, to: PlanStatus, *, only_from: Sequence[PlanStatus],
                   decided_by: str | None = None) -> bool:
        """Move a plan to `to` only from one of `only_from` (one conditional UPDATE): of two
        concurrent appliers exactly one sees True."""
        ...

    def expire(self, at: datetime | None = None) -> int: ...
    def snapshot(self, plan_id: int) -> dict[str, Any]: ...
    def cpus(self, since: datetime | None = None) -> list[tuple[int, datetime, dict[str, float]]]: ...
    def action_ids(self, plan_id: int) -> list[int]: ...
    def set_action_state(self, action_id: int, state: ActionState, detail: str | None = None) -> None: ...
    def actions(self, since: datetime | None = None, plan_id: int | None = None) -> list[ActionRecord]: ...
    def unfinished_actions(self) -> list[ActionRecord]: ...
    def recent(self, limit: int) -> list[PlanRecord]: ...


class MigrationRepo(Protocol):
    def begin(self, container: str, source: str, target: str, action_id: int | None = None) -> int: ...

    def step_started(self, migration_id: int, step: Step) -> int:
        """Journal a step before it runs; the migration's state names the step in flight."""
        ...

    def step_finished(self, step_id: int, ok: bool, detail: str | None = None, bytes: int | None = None) -> None: ...

    def finish(self, migration_id: int, state: MigrationState, reason: str | None = None, *,
               checkpoint_ms: float | None = None, transfer_ms: float | None = None,
               restore_ms: float | None = None, frozen_ms: float | None = None, total_ms: float | None = None,
               bytes: int | None = None) -> None: ...

    def history(self, since: datetime | None = None) -> list[MigrationRecord]: ...
    def unfinished(self) -> list[MigrationRecord]: ...
    def moved_since(self, since: datetime) -> dict[str, datetime]: ...
    def steps(self, migration_id: int) -> list[StepRecord]: ...
    def frozen_history(self, limit: int = 200) -> list[FrozenSample]: ...


class PinningRepo(Protocol):
    def record(self, node: str, container: str, cpuset: str) -> None: ...
    def history(self, node: str | None = None) -> list[dict[str, Any]]: ...


class PowerRepo(Protocol):
    def begin(self, node: str, action: str, reason: str | None = None) -> int: ...
    def finish(self, event_id: int, state: str, detail: str | None = None) -> None: ...
    def events(self, since: datetime | None = None, state: str | None = None) -> list[PowerEventRecord]: ...
    def woken_since(self, since: datetime) -> dict[str, datetime]: ...
    def quarantine(self, node: str, reason: str) -> None: ...
    def clear_quarantine(self, node: str) -> None: ...
    def quarantined(self) -> dict[str, str]: ...
    def set_idle_since(self, node: str, at: datetime | None) -> None: ...
    def idle_since(self, node: str) -> datetime | None: ...


class EnergyRepo(Protocol):
    def add_samples(self, samples: Sequence[EnergySample]) -> None: ...
    def samples(self, node: str, source: str, since: datetime | None = None) -> list[EnergySample]: ...
    def add(self, rows: Sequence[EnergyRow]) -> None: ...
    def history(self, since: datetime | None = None, by: str | None = None) -> list[EnergyRow]: ...
    def of_containers(self, since: datetime | None = None) -> list[EnergyRow]: ...


class DemandRepo(Protocol):
    def add(self, rows: Sequence[DemandRecord]) -> None: ...
    def history(self, container: str | None = None, since: datetime | None = None) -> list[DemandRecord]: ...
    def latest(self, since: datetime | None = None) -> dict[str, DemandRecord]: ...


class TrafficRepo(Protocol):
    def add(self, reads: Sequence[TrafficRead], pairs: Sequence[TrafficRecord]) -> None: ...
    def pairs(self, since: datetime | None = None) -> list[TrafficRecord]: ...
    def reads(self, since: datetime | None = None) -> list[TrafficRead]: ...


class SavingsRepo(Protocol):
    def add(self, row: SavingRecord) -> int: ...
    def close(self, row_id: int, end: datetime) -> None: ...
    def open_off(self, node: str) -> SavingRecord | None: ...
    def history(self, since: datetime | None = None) -> list[SavingRecord]: ...


class PressureRepo(Protocol):
    def add(self, rows: Sequence[PressureRecord]) -> None: ...
    def history(self, container: str | None = None, since: datetime | None = None) -> list[PressureRecord]: ...
    def latest(self, since: datetime | None = None) -> dict[str, PressureRecord]: ...


class QosRepo(Protocol):
    def add(self, events: Sequence[QosEventRecord]) -> int:
        """Store events not stored yet (by node, log and seq); how many were new."""
        ...

    def record(self, node: str, kind: str, container: str | None, reason: str) -> None:
        """An event of the controller's own (log "controller") about a node's guard or container."""
        ...

    def last_seq(self) -> dict[str, tuple[str, int]]:
        """node -> (the guard log read last, the newest seq stored of it)."""
        ...

    def newest_id(self) -> int: ...

    def events(self, since: datetime | None = None, *, after_id: int | None = None,
               kinds: Sequence[str] = ()) -> list[QosEventRecord]: ...


class LeaseRepo(Protocol):
    def acquire(self, owner: str, ttl_s: float, *, replacing: str | None = None) -> int | None: ...
    def renew(self, owner: str, token: int, ttl_s: float) -> bool: ...
    def release(self, owner: str, token: int) -> None: ...
    def holder(self) -> LeaseRecord | None: ...
    def token(self) -> int | None: ...


class ApprovalRepo(Protocol):
    def request(self, plan_id: int, partial: bool, requested_by: str) -> int: ...
    def pending(self) -> list[ApprovalRecord]: ...
    def get(self, approval_id: int) -> ApprovalRecord: ...

    def finish(self, approval_id: int, state: ApprovalState, outcome: str | None, applied_by: str) -> bool:
        """PENDING -> APPLIED or REFUSED, once (False when another already finished it)."""
        ...


class Journal(Protocol):
    """The store as the other stages see it: its repositories, the fence, and the one query that
    spans two of them (what the disruption budgets count)."""

    # read-only: a repository is handed out, never replaced (so a subtype's own repositories fit)
    @property
    def plans(self) -> PlanRepo: ...
    @property
    def migrations(self) -> MigrationRepo: ...
    @property
    def pinning(self) -> PinningRepo: ...
    @property
    def power(self) -> PowerRepo: ...
    @property
    def energy(self) -> EnergyRepo: ...
    @property
    def demand(self) -> DemandRepo: ...
    @property
    def traffic(self) -> TrafficRepo: ...
    @property
    def savings(self) -> SavingsRepo: ...
    @property
    def pressure(self) -> PressureRepo: ...
    @property
    def qos(self) -> QosRepo: ...
    @property
    def lease(self) -> LeaseRepo: ...
    @property
    def approvals(self) -> ApprovalRepo: ...

    def fence(self, token: int | None) -> None: ...

    @property
    def fencing_token(self) -> int | None:
        """The lease token this handle's writes are fenced with (None: unfenced): node-side steps
        carry it too, so a node refuses a controller that another has replaced."""
        ...

    def check_fence(self) -> None:
        """FencedError once another controller took the lease of a fenced handle: before an
        action on a node that no journal write precedes."""
        ...

    def prune(self, retention: StoreConfig, now: datetime) -> Pruned: ...
    def disruption_since(self, since: datetime) -> tuple[int, int]: ...
