"""The store's tables (SQLAlchemy 2 declarative). Alembic owns their evolution: a change here
needs a new revision under db/revisions/versions (autogenerate, then review)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


class UtcDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend: SQLite keeps no zone, so store naive UTC and
    put the zone back on the way out."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: object) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use UTC-aware datetimes")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: object) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    pass


class PlanRow(Base):
    __tablename__ = "plans"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    inventory: Mapped[str] = mapped_column(String(200))
    policy: Mapped[str] = mapped_column(String(60))
    dry_run: Mapped[bool] = mapped_column(Boolean)
    based_on_version: Mapped[int] = mapped_column(Integer)
    solver_status: Mapped[str] = mapped_column(String(40))
    solver_seconds: Mapped[float] = mapped_column(Float)
    objective: Mapped[float] = mapped_column(Float)
    bound: Mapped[float] = mapped_column(Float)
    before_json: Mapped[str] = mapped_column(Text)
    after_json: Mapped[str] = mapped_column(Text)
    snapshot_json: Mapped[str] = mapped_column(Text)
    notes: Mapped[str] = mapped_column(Text, default="")
    #: records.PlanStatus: RECOMMENDED until a person (or the auto controller) applies it
    status: Mapped[str] = mapped_column(String(20), index=True, default="RECOMMENDED")
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    #: sha256 of the inventory's canonical form: `apply` refuses a plan made for another one
    inventory_digest: Mapped[str | None] = mapped_column(String(64))
    decided_by: Mapped[str | None] = mapped_column(String(200))
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    #: the effective planner settings the plan was made with (JSON)
    settings_json: Mapped[str | None] = mapped_column(Text)
    #: predicted energy saved and frozen time, in total (JSON); actions carry their own part
    prediction_json: Mapped[str | None] = mapped_column(Text)
    #: one line per container: why it moves or why not (JSON object container -> line)
    explanations_json: Mapped[str | None] = mapped_column(Text)


class ActionRow(Base):
    __tablename__ = "actions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    idx: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    container: Mapped[str | None] = mapped_column(String(200))
    source: Mapped[str | None] = mapped_column(String(200))
    target: Mapped[str | None] = mapped_column(String(200))
    node: Mapped[str | None] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(20), index=True)
    detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    #: predicted energy saved and frozen time of this action (JSON)
    prediction_json: Mapped[str | None] = mapped_column(Text)


class MigrationRow(Base):
    __tablename__ = "migrations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: indexed: removing old plans (retention) sets it NULL without scanning every migration
    action_id: Mapped[int | None] = mapped_column(ForeignKey("actions.id", ondelete="SET NULL"), index=True)
    container: Mapped[str] = mapped_column(String(200), index=True)
    source: Mapped[str] = mapped_column(String(200))
    target: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(20), index=True)
    reason: Mapped[str | None] = mapped_column(Text)
    checkpoint_ms: Mapped[float | None] = mapped_column(Float)
    transfer_ms: Mapped[float | None] = mapped_column(Float)
    restore_ms: Mapped[float | None] = mapped_column(Float)
    frozen_ms: Mapped[float | None] = mapped_column(Float)
    total_ms: Mapped[float | None] = mapped_column(Float)
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    #: indexed: the planner's hysteresis asks every epoch what moved since when
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime, index=True)


class MigrationStepRow(Base):
    __tablename__ = "migration_steps"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    migration_id: Mapped[int] = mapped_column(ForeignKey("migrations.id", ondelete="CASCADE"), index=True)
    step: Mapped[str] = mapped_column(String(40))
    state: Mapped[str] = mapped_column(String(20))
    detail: Mapped[str | None] = mapped_column(Text)
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class PinningRow(Base):
    __tablename__ = "pinnings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(200), index=True)
    container: Mapped[str] = mapped_column(String(200))
    cpuset: Mapped[str] = mapped_column(String(200))
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)


class PowerEventRow(Base):
    __tablename__ = "power_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(200), index=True)
    action: Mapped[str] = mapped_column(String(20))
    #: indexed: reconciliation looks for the ONGOING ones every epoch
    state: Mapped[str] = mapped_column(String(20), index=True)
    reason: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    #: indexed: the power rules ask every epoch which nodes woke since when
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime, index=True)


class NodeStatusRow(Base):
    """Facts about a node the controller must remember across restarts."""

    __tablename__ = "node_status"
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    idle_since: Mapped[datetime | None] = mapped_column(UtcDateTime)
    quarantined_reason: Mapped[str | None] = mapped_column(Text)
    quarantined_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class EnergySampleRow(Base):
    __tablename__ = "energy_samples"
    #: the sampler asks every epoch for each node's latest sample of one source
    __table_args__ = (Index("ix_energy_samples_node_source_at", "node", "source", "at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(200), index=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    source: Mapped[str] = mapped_column(String(10))
    zone: Mapped[str] = mapped_column(String(40), default="")
    energy_uj: Mapped[int | None] = mapped_column(BigInteger)
    max_energy_range_uj: Mapped[int | None] = mapped_column(BigInteger)
    power_w: Mapped[float | None] = mapped_column(Float)
    #: the node's /proc/sys/kernel/random/boot_id when sampled: two samples with different boot
    #: ids straddle a reboot, so their counters are not comparable (reset, not wrapped)
    boot_id: Mapped[str | None] = mapped_column(String(64))
    #: source "busy": the node's CPU time spent not idle (ns), the denominator of Kepler's split;
    #: stored so the first interval after a controller restart still has it
    busy_ns: Mapped[int | None] = mapped_column(BigInteger)


class EnergyRowDb(Base):
    __tablename__ = "energy"
    #: node rows (container NULL) since a time, without scanning the containers' many more rows
    __table_args__ = (Index("ix_energy_container_start", "container", "start"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(200), index=True)
    container: Mapped[str | None] = mapped_column(String(200), index=True)
    start: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    end: Mapped[datetime] = mapped_column(UtcDateTime)
    energy_j: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(10))
    #: indexed: removing old plans (retention) sets it NULL without scanning every energy row
    plan_id: Mapped[int | None] = mapped_column(ForeignKey("plans.id", ondelete="SET NULL"), index=True)
    #: node rows only (Kepler's split): the part drawn at the curve's idle power, and the part of
    #: the active energy no container's CPU time accounts for
    idle_j: Mapped[float | None] = mapped_column(Float)
    residual_j: Mapped[float | None] = mapped_column(Float)


class ContainerDemandRow(Base):
    """One container's demand over one epoch, as observed: CPU in cores from the cgroup's CPU-time
    counter delta (`cpu_time_ns` is the counter, kept for the next delta), memory in MB. The
    planner's forecast is computed from these rows."""

    __tablename__ = "container_demand"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    container: Mapped[str] = mapped_column(String(200), index=True)
    node: Mapped[str] = mapped_column(String(200))
    interval_s: Mapped[float | None] = mapped_column(Float)
    cpu: Mapped[float | None] = mapped_column(Float)
    cpu_time_ns: Mapped[int | None] = mapped_column(BigInteger)
    memory_mb: Mapped[float] = mapped_column(Float)
    #: where the CPU figure came from: "cgroup" (counter delta) or "stats" (one sample); "label" in
    #: rows stored before a `peakpack.cpu` label became only the forecast's fallback
    source: Mapped[str] = mapped_column(String(10))


class DemandHourlyRow(Base):
    """`container_demand` rows older than `[store] raw_days`, one row per container, node and hour:
    the CPU averaged over the hour's intervals (core-seconds / seconds), its highest sample, the
    largest memory. The store keeps these `hourly_days`; history reads them where raw rows are gone."""

    __tablename__ = "container_demand_hourly"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hour: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    container: Mapped[str] = mapped_column(String(200), index=True)
    node: Mapped[str] = mapped_column(String(200))
    rows: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float | None] = mapped_column(Float)
    cpu: Mapped[float | None] = mapped_column(Float)
    cpu_max: Mapped[float | None] = mapped_column(Float)
    memory_mb: Mapped[float] = mapped_column(Float)


class EnergyHourlyRow(Base):
    """`energy` rows older than `[store] raw_days`, summed per node (or container), source and hour
    of their start: the energy and its idle and residual parts, the first start and last end."""

    __tablename__ = "energy_hourly"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hour: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    node: Mapped[str] = mapped_column(String(200), index=True)
    container: Mapped[str | None] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(String(10))
    rows: Mapped[int] = mapped_column(Integer)
    start: Mapped[datetime] = mapped_column(UtcDateTime)
    end: Mapped[datetime] = mapped_column(UtcDateTime)
    energy_j: Mapped[float] = mapped_column(Float)
    idle_j: Mapped[float | None] = mapped_column(Float)
    residual_j: Mapped[float | None] = mapped_column(Float)


class ApprovalRow(Base):
    """A plan approved on a web page, for the controller that leads to run between epochs (the
    page never executes anything itself): PENDING until the leader took it, then APPLIED (the plan
    has its final status) or REFUSED (`outcome` says why, one line), with who ran it."""

    __tablename__ = "approvals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    partial: Mapped[bool] = mapped_column(Boolean)
    requested_by: Mapped[str] = mapped_column(String(200))
    requested_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    state: Mapped[str] = mapped_column(String(20), index=True)
    outcome: Mapped[str | None] = mapped_column(Text)
    applied_by: Mapped[str | None] = mapped_column(String(200))
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class ContainerPressureRow(Base):
    """One container's stall over one observed interval: the shares of it the container was ready
    but not running (PSI cpu `some`, run-queue wait) or stalled on memory (PSI memory), and the
    cumulative counters they are deltas of (kept for the next interval, as `container_demand`
    keeps the CPU counter). The planner lowers a node's cap from these rows."""

    __tablename__ = "container_pressure"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    container: Mapped[str] = mapped_column(String(200), index=True)
    node: Mapped[str] = mapped_column(String(200))
    qos: Mapped[str] = mapped_column(String(4))
    interval_s: Mapped[float | None] = mapped_column(Float)
    cpu_stall: Mapped[float | None] = mapped_column(Float)
    memory_some: Mapped[float | None] = mapped_column(Float)
    memory_full: Mapped[float | None] = mapped_column(Float)
    wait: Mapped[float | None] = mapped_column(Float)
    cpu_some_us: Mapped[int | None] = mapped_column(BigInteger)
    memory_some_us: Mapped[int | None] = mapped_column(BigInteger)
    memory_full_us: Mapped[int | None] = mapped_column(BigInteger)
    wait_ns: Mapped[int | None] = mapped_column(BigInteger)


class QosEventRow(Base):
    """What a node's QoS guard did (from its events.jsonl, read at each observation), or what the
    controller did about it (log "controller"). (node, log, seq) is unique: reading an event
    twice stores it once."""

    __tablename__ = "qos_events"
    __table_args__ = (UniqueConstraint("node", "log", "seq", name="uq_qos_events_node_log_seq"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(200), index=True)
    log: Mapped[str] = mapped_column(String(40))
    seq: Mapped[int] = mapped_column(BigInteger)
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    kind: Mapped[str] = mapped_column(String(40), index=True)
    container: Mapped[str | None] = mapped_column(String(200))
    reason: Mapped[str | None] = mapped_column(Text)
    detail_json: Mapped[str | None] = mapped_column(Text)


class ControllerLeaseRow(Base):
    """Exactly one row (id 1, created by the revision and never deleted): who may act on this
    store, until when, and the fencing token. The token only grows, +1 for every new holder, so
    a writer can prove it still leads by finding its own token here."""

    __tablename__ = "controller_lease"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger)
    holder: Mapped[str | None] = mapped_column(String(200))
    acquired_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)


class TrafficRow(Base):
    """Bytes one client sent to one server and back over the interval ending at `at`, as the
    conntrack counters of `counted_on` measured them (orchestrator/observe/traffic.py)."""

    __tablename__ = "traffic"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    interval_s: Mapped[float] = mapped_column(Float)
    counted_on: Mapped[str] = mapped_column(String(200))
    client_kind: Mapped[str] = mapped_column(String(10))
    client: Mapped[str] = mapped_column(String(200), index=True)
    client_node: Mapped[str | None] = mapped_column(String(200))
    server_kind: Mapped[str] = mapped_column(String(10))
    server: Mapped[str] = mapped_column(String(200), index=True)
    server_node: Mapped[str | None] = mapped_column(String(200))
    c2s_bytes: Mapped[int] = mapped_column(BigInteger)
    s2c_bytes: Mapped[int] = mapped_column(BigInteger)
    flows: Mapped[int] = mapped_column(Integer)
    how: Mapped[str] = mapped_column(String(20))


class TrafficReadRow(Base):
    """One node's conntrack read: which intervals were measured (a pair without bytes in a
    measured interval sent nothing) and why a node was not."""

    __tablename__ = "traffic_reads"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    node: Mapped[str] = mapped_column(String(200))
    interval_s: Mapped[float | None] = mapped_column(Float)
    flows: Mapped[int] = mapped_column(Integer)
    unaccounted: Mapped[int] = mapped_column(Integer)
    measured: Mapped[bool] = mapped_column(Boolean)
    note: Mapped[str | None] = mapped_column(Text)


class SavingRow(Base):
    """The savings ledger (orchestrator/domain/savings.py): a node's time off with its idle power
    measured before it went off, and the measured energy of the migrations and wakes that cost."""

    __tablename__ = "savings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(10), index=True)
    node: Mapped[str | None] = mapped_column(String(200), index=True)
    plan_id: Mapped[int | None] = mapped_column(ForeignKey("plans.id", ondelete="SET NULL"))
    start: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    end: Mapped[datetime | None] = mapped_column(UtcDateTime)
    source: Mapped[str | None] = mapped_column(String(10))
    idle_w: Mapped[float | None] = mapped_column(Float)
    energy_j: Mapped[float | None] = mapped_column(Float)
    model_j: Mapped[float | None] = mapped_column(Float)
    note: Mapped[str | None] = mapped_column(Text)
