"""What the store hands out: frozen records with a `to_json` for `--json` and the report (the
states they carry are in `states`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from .model import MEASURED_SOURCES
from .states import ActionState, MigrationState, PlanStatus


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


class JsonRecord:
    """`to_json`: every field, times as ISO 8601 strings, states as their names."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            out[f.name] = iso(v) if isinstance(v, datetime) else v.value if isinstance(v, StrEnum) else v
        return out


@dataclass(frozen=True)
class PlanRecord(JsonRecord):
    plan_id: int
    created_at: datetime
    inventory: str
    policy: str
    dry_run: bool
    actions: int
    migrations: int
    before: dict[str, Any]
    after: dict[str, Any]
    solver: dict[str, Any]
    #: review then apply: where the plan is in its life, until when it may be applied, the
    #: inventory it was made for, and who applied or rejected it
    status: PlanStatus
    expires_at: datetime | None = None
    inventory_digest: str | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    #: predicted energy saved and frozen time, in total (orchestrator.decide.predict); None: not predicted
    prediction: dict[str, Any] | None = None
    #: the planner settings it was made with, by inventory key; None: not recorded
    settings: dict[str, Any] | None = None
    #: what the planner noted on it (staging, nodes kept on, the safety net stopping its solve)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ActionRecord(JsonRecord):
    id: int
    plan_id: int
    index: int
    kind: str
    container: str | None
    source: str | None
    target: str | None
    node: str | None
    state: ActionState
    detail: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    prediction: dict[str, Any] | None = None  # this action's part of the plan's prediction


@dataclass(frozen=True)
class MigrationRecord(JsonRecord):
    id: int
    action_id: int | None
    container: str
    source: str
    target: str
    state: MigrationState
    reason: str | None
    checkpoint_ms: float | None
    transfer_ms: float | None
    restore_ms: float | None
    frozen_ms: float | None
    total_ms: float | None
    bytes: int | None
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class FrozenSample:
    """One SUCCEEDED migration as the frozen-time fit reads it: the node pair it crossed, the
    container's memory as its plan's snapshot saw it, and the frozen ms it measured."""

    source: str
    target: str
    memory_mb: float
    frozen_ms: float


@dataclass(frozen=True)
class StepRecord(JsonRecord):
    id: int
    migration_id: int
    step: str
    state: str  # STARTED, DONE, FAILED
    detail: str | None
    bytes: int | None
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class PowerEventRecord(JsonRecord):
    id: int
    node: str
    action: str
    state: str  # ONGOING, SUCCEEDED, FAILED
    reason: str | None
    detail: str | None
    at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class EnergySample:
    """One reading: a cumulative counter (RAPL, microjoules) or an instant power (DCMI, watts)."""

    node: str
    at: datetime
    source: str  # rapl, dcmi, busy (the node's busy CPU time, for Kepler's split)
    energy_uj: int | None = None
    power_w: float | None = None
    zone: str = ""                       # RAPL zone (intel-rapl:0, ...): each wraps on its own
    max_energy_range_uj: int | None = None
    boot_id: str | None = None           # the node's boot id: a change means its counters restarted
    busy_ns: int | None = None           # source busy: CPU time the node spent not idle


@dataclass(frozen=True)
class EnergyRow:
    """Energy over an interval, for a node or (with `container`) attributed to a container."""

    node: str
    start: datetime
    end: datetime
    energy_j: float
    source: str  # rapl, dcmi, model
    container: str | None = None
    plan_id: int | None = None
    #: node rows (Kepler's split): energy at the node's idle power in the row's own domain (learned
    #: from the counter for rapl/dcmi rows, the curve's for model rows; power/accounting.py), and
    #: active energy that no container's CPU time accounts for; None where not split
    idle_j: float | None = None
    residual_j: float | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "node": self.node,
            "start": iso(self.start),
            "end": iso(self.end),
            "energy_j": self.energy_j,
            "source": self.source,
            "measured": self.source in MEASURED_SOURCES,
        }
        if self.container is not None:
            d["container"] = self.container
        if self.idle_j is not None:
            d["idle_j"] = self.idle_j
        if self.residual_j is not None:
            d["residual_j"] = self.residual_j
        return d


@dataclass(frozen=True)
class DemandRecord(JsonRecord):
    """One container's demand over the interval ending at `at` (table container_demand): `cpu` in
    cores from its cgroup CPU-time counter delta (source "cgroup"), or from a one-second sample
    when there is no earlier counter to subtract (source "stats"); None when neither is known."""

    at: datetime
    container: str
    node: str
    interval_s: float | None
    cpu: float | None
    cpu_time_ns: int | None
    memory_mb: float
    source: str


@dataclass(frozen=True)
class LeaseRecord(JsonRecord):
    """Who leads the store now: the holder of an unexpired lease and its fencing token."""

    holder: str
    token: int
    acquired_at: datetime
    expires_at: datetime


class PeerKind(StrEnum):
    """What one end of a measured flow is: a container (by name), a node's own host network
    (a process or a `--network host` container: nothing names it), or an address outside the
    inventory. Only container pairs become the planner's traffic graph."""

    CONTAINER = "container"
    HOST = "host"
    EXTERNAL = "external"


@dataclass(frozen=True)
class Peer:
    kind: PeerKind
    name: str  # container name, node name (host) or IP address (external)

    def __str__(self) -> str:
        return self.name if self.kind is PeerKind.CONTAINER else f"{self.kind.value}:{self.name}"


@dataclass(frozen=True)
class TrafficRecord(JsonRecord):
    """Bytes one client sent to one server (c2s) and back (s2c) over the interval ending at `at`
    (table traffic), measured by the conntrack byte counters of `counted_on`: the server's node
    when it was read, else the client's. Client and server are named by kind (`PeerKind`);
    `client_node`/`server_node` say where each end was (None for an external address). `how`:
    "local" (both ends on one node), "joined" (client named by its node's table, bytes counted on
    the server's), "server-only" (no node's table names the client), "client-only" (the server's
    node was not read)."""

    at: datetime
    interval_s: float
    counted_on: str
    client_kind: PeerKind
    client: str
    client_node: str | None
    server_kind: PeerKind
    server: str
    server_node: str | None
    c2s_bytes: int
    s2c_bytes: int
    flows: int
    how: str

    @property
    def bytes(self) -> int:
        return self.c2s_bytes + self.s2c_bytes


@dataclass(frozen=True)
class TrafficRead(JsonRecord):
    """One node's conntrack read (table traffic_reads): `interval_s` since its previous read
    (None: a baseline, whose bytes count nothing), how many flows it held and how many had no
    byte counters (made before accounting was switched on); `note` says why the node's traffic
    is not measured (`measured` False) or what it may miss."""

    at: datetime
    node: str
    interval_s: float | None
    flows: int
    unaccounted: int
    measured: bool
    note: str | None = None


class ApprovalState(StrEnum):
    """A plan approved on a web page: PENDING until the controller that leads took it, then
    APPLIED (it ran: the plan has its final status) or REFUSED (the outcome says why)."""

    PENDING = "PENDING"
    APPLIED = "APPLIED"
    REFUSED = "REFUSED"


@dataclass(frozen=True)
class ApprovalRecord(JsonRecord):
    """One approval handed to the leader through the store (`PlanRepo.request_approval`)."""

    id: int
    plan_id: int
    partial: bool
    requested_by: str
    requested_at: datetime
    state: ApprovalState
    outcome: str | None = None
    applied_by: str | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True)
class Pruned(JsonRecord):
    """What one round of retention did (`Journal.prune`): rows summed into hourly aggregates, and
    rows removed, per table."""

    aggregated: dict[str, int]
    removed: dict[str, int]

    def __bool__(self) -> bool:
        return any(self.aggregated.values()) or any(self.removed.values())

    def summary(self) -> str:
        parts = [f"{n:,} {t} rows into hours" for t, n in self.aggregated.items() if n]
        parts += [f"{n:,} {t} rows removed" for t, n in self.removed.items() if n]
        return ", ".join(parts)


@dataclass(frozen=True)
class QosEventRecord(JsonRecord):
    """One thing a node's QoS guard did or saw (table qos_events), or the controller did about it
    (`log` "controller": a restart of a container the guard stopped). (`node`, `log`, `seq`) is
    unique: the guard numbers its events per log, so reading them twice stores them once."""

    node: str
    log: str
    seq: int
    at: datetime
    kind: str       # cpu_suppress, cpu_adjust, cpu_restore, mem_evict, be_weight, bad_label, ...
    container: str | None = None
    reason: str | None = None
    #: the event's other facts (quotas written, cores, memory), as the guard wrote them
    detail: dict[str, Any] | None = None
    id: int | None = None


@dataclass(frozen=True)
class PressureRecord(JsonRecord):
    """How much one container waited over the interval ending at `at` (table container_pressure):
    the shares of the interval it was ready but not running (`cpu_stall`: PSI cpu `some`, else
    `wait`: run-queue wait of its threads) or stalled on memory (PSI memory `some`/`full`); None
    where not measured. The cumulative counters are kept for the next interval's deltas."""

    at: datetime
    container: str
    node: str
    qos: str                       # ls or be
    interval_s: float | None
    cpu_stall: float | None
    memory_some: float | None
    memory_full: float | None
    wait: float | None
    cpu_some_us: int | None = None
    memory_some_us: int | None = None
    memory_full_us: int | None = None
    wait_ns: int | None = None

    @property
    def stall(self) -> float | None:
        """The share of the interval it was ready but not running: PSI when there is, else its
        run-queue wait."""
        return self.cpu_stall if self.cpu_stall is not None else self.wait
