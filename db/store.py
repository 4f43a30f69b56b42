"""The state store: plans and their action journal, migrations step by step, power events,
energy, pinning, node facts and the controller lease.

SQLite (default, WAL, busy_timeout, foreign keys) or any SQLAlchemy URL (PostgreSQL works
unchanged). The schema is brought to Alembic's head on open, so an upgraded peakpack migrates
an old store in place. Every write is its own short transaction: the journal must be on disk
before the action it describes runs. A handle fenced with a lease token (`fence`) refuses every
write once another controller has taken the lease (FencedError), in the write's own transaction.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, func, or_, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.errors import PeakpackError, StoreError
from orchestrator.model import ClusterSnapshot
from orchestrator.plan import ActionKind, Plan

from .records import (
    TERMINAL_MIGRATION_STATES,
    ActionRecord,
    ActionState,
    DemandRecord,
    EnergyRow,
    EnergySample,
    LeaseRecord,
    MigrationRecord,
    MigrationState,
    PlanRecord,
    PlanStatus,
    PowerEventRecord,
    StepRecord,
)
from .schema import (
    ActionRow,
    ContainerDemandRow,
    ControllerLeaseRow,
    EnergyRowDb,
    EnergySampleRow,
    MigrationRow,
    MigrationStepRow,
    NodeStatusRow,
    PinningRow,
    PlanRow,
    PowerEventRow,
)

__all__ = [
    "ActionState", "EnergyRow", "EnergySample", "FencedError", "LeaseRecord", "MigrationState", "Store",
    "default_url", "parse_duration",
]


class FencedError(StoreError):
    """A write by a controller whose lease token is no longer the store's: another one took over."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, flag: str = "duration") -> timedelta:
    """'30m', '2h', '7d' -> timedelta; anything else is a one-line error naming the flag."""
    m = _DURATION.match(text)
    if not m:
        raise PeakpackError(f"{flag}: {text!r} is not a duration; use a number and a unit, e.g. 30m, 2h, 7d")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def now() -> datetime:
    return datetime.now(timezone.utc)


def default_url() -> str:
    from platformdirs import user_data_dir

    folder = Path(user_data_dir("peakpack"))
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'peakpack.db'}"


#: PostgreSQL advisory lock key that serialises schema upgrades ("peak")
_SCHEMA_LOCK = 0x7065616B


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(f"--db: {url!r} is not a database URL; use sqlite:///FILE or postgresql://USER@HOST/DB") from None
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            folder = Path(parsed.database).expanduser().resolve().parent
            if not folder.is_dir():
                raise StoreError(f"--db: folder {folder} does not exist; create it or choose another path")
        engine = create_engine(url, connect_args={"timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    try:
        return create_engine(url, pool_pre_ping=True)
    except ModuleNotFoundError as exc:
        raise StoreError(f"--db: the driver for {parsed.drivername} is missing ({exc.name}); "
                         "install peakpack[postgres]") from None


def _head_revision() -> str:
    """The newest revision of db/migrations, read from the scripts without importing alembic
    (the revision no other one names as its down_revision)."""
    revisions: dict[str, str | None] = {}
    for script in Path(__file__).with_name("migrations").joinpath("versions").glob("*.py"):
        found = dict(re.findall(r"^(revision|down_revision)\s*=\s*['\"]?(\w+)['\"]?", script.read_text(), re.M))
        revisions[found["revision"]] = None if found.get("down_revision") == "None" else found.get("down_revision")
    heads = set(revisions) - set(revisions.values())
    if len(heads) != 1:
        raise StoreError(f"db/migrations: {len(heads)} heads ({sorted(heads)}); merge them into one")
    return heads.pop()


def _at_head(engine: Engine) -> bool:
    """Whether the database is already at the newest revision: then opening it skips alembic
    (half a second of imports on every CLI command)."""
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == _head_revision()
    except (OperationalError, ProgrammingError):  # no version table yet (postgres: Programming)
        return False


def _upgrade(engine: Engine) -> None:
    """Bring the schema to head, one process at a time: two controllers started together on a
    new database would otherwise both create the tables, and one would fail."""
    if _at_head(engine):
        return
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":  # the write lock before alembic reads the version
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif engine.dialect.name == "postgresql":  # released when this transaction ends
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def _no_write_in_a_read(session: Session, *_: Any) -> None:
    """Every write must go through Store._write, the one place the fence is checked."""
    if session.new or session.dirty or session.deleted:
        raise RuntimeError("a write inside Store._tx: use Store._write so that it is fenced")


def _no_statement_write_in_a_read(state: Any) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        raise RuntimeError("a write inside Store._tx: use Store._write so that it is fenced")


class Store:
    """One handle on the database; cheap to open, use as a context manager."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._reads = sessionmaker(engine, expire_on_commit=False)
        event.listen(self._reads, "before_flush", _no_write_in_a_read)
        event.listen(self._reads, "do_orm_execute", _no_statement_write_in_a_read)
        self._token: int | None = None

    @classmethod
    def open(cls, url: str | None = None) -> "Store":
        engine = _engine(url or default_url())
        try:
            _upgrade(engine)
        except OperationalError as exc:
            engine.dispose()
            raise StoreError(f"--db: cannot open {engine.url!r}: {exc.orig}") from None
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        """A read: never fenced (a standby or `peakpack history` reads while another leads)."""
        with self._reads.begin() as session:
            yield session

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """A write transaction; on a fenced handle its first statement proves the lease is ours.

        The proof is a no-op UPDATE of the lease row that matches only while the row carries our
        token. Being a write, it takes the row's lock until commit (PostgreSQL: the row lock;
        SQLite: the database's write lock, and pysqlite's BEGIN comes right before it), and a
        take-over is an UPDATE of the same row: it cannot commit between this check and our write.
        """
        with self._sessions.begin() as session:
            token = self._token
            if token is not None:
                L = ControllerLeaseRow
                ours = update(L).where(L.id == 1, L.token == token).values(token=L.token)
                if session.execute(ours).rowcount != 1:
                    row = session.get(L, 1)
                    who = f"controller {row.holder}" if row is not None and row.holder else "another controller"
                    raise FencedError(f"--db: {who} took over (lease token {row.token if row else '?'} > {token}); "
                                      "this one stops")
            yield session

    def fence(self, token: int | None) -> None:
        """Bind every later write of this handle to lease `token` (None: unfenced, writes as before)."""
        self._token = token

    # -- plans and the action journal -------------------------------------------------------

    def save_plan(self, plan: Plan, inventory: str, snapshot: ClusterSnapshot, *,
                  status: PlanStatus = PlanStatus.RECOMMENDED, expires_at: datetime | None = None,
                  inventory_digest: str | None = None, prediction: dict[str, Any] | None = None,
                  action_predictions: Sequence[dict[str, Any] | None] = ()) -> int:
        """The plan and every action (PENDING) in one transaction, before anything runs.
        `action_predictions[i]` is action i's part of `prediction` (orchestrator.predict)."""
        t = now()
        with self._write() as s:
            row = PlanRow(
                created_at=t,
                inventory=inventory,
                policy=plan.policy,
                dry_run=plan.dry_run,
                based_on_version=plan.based_on_version,
                solver_status=plan.solver.status,
                solver_seconds=plan.solver.seconds,
                objective=plan.solver.objective,
                bound=plan.solver.bound,
                before_json=json.dumps(plan.before.to_json()),
                after_json=json.dumps(plan.after.to_json()),
                snapshot_json=json.dumps(snapshot.to_json()),
                notes="\n".join(plan.notes),
                status=PlanStatus(status).value,
                expires_at=expires_at,
                inventory_digest=inventory_digest,
                prediction_json=None if prediction is None else json.dumps(prediction),
                explanations_json=json.dumps(dict(plan.explanations)) if plan.explanations else None,
                settings_json=json.dumps(dict(plan.settings)) if plan.settings else None,
            )
            s.add(row)
            s.flush()
            predicted = list(action_predictions) or [None] * len(plan.actions)
            for i, (a, p) in enumerate(zip(plan.actions, predicted, strict=True)):
                s.add(ActionRow(
                    plan_id=row.id, idx=i, kind=a.kind.value, container=a.container,
                    source=a.source, target=a.target, node=a.node,
                    state=ActionState.PENDING.value, created_at=t,
                    prediction_json=None if p is None else json.dumps(p),
                ))
            return row.id

    def plan_explanations(self, plan_id: int) -> dict[str, str]:
        """Container -> why the plan moves it or leaves it (orchestrator.planner.explain)."""
        with self._tx() as s:
            row = s.get(PlanRow, plan_id)
            if row is None:
                raise StoreError(f"plan {plan_id}: no such plan; see `peakpack history plans`")
            return {} if row.explanations_json is None else json.loads(row.explanations_json)

    def list_plans(self, since: datetime | None = None, status: PlanStatus | None = None) -> list[PlanRecord]:
        with self._tx() as s:
            q = select(PlanRow).order_by(PlanRow.id)
            if since is not None:
                q = q.where(PlanRow.created_at >= since)
            if status is not None:
                q = q.where(PlanRow.status == PlanStatus(status).value)
            plans = s.scalars(q).all()
            counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
            ids = [p.id for p in plans]
            if ids:
                for plan_id, kind, n in s.execute(
                    select(ActionRow.plan_id, ActionRow.kind, func.count())
                    .where(ActionRow.plan_id.in_(ids)).group_by(ActionRow.plan_id, ActionRow.kind)
                ):
                    counts[plan_id][kind] = n
            return [
                PlanRecord(
                    plan_id=p.id, created_at=p.created_at, inventory=p.inventory, policy=p.policy,
                    dry_run=p.dry_run, actions=sum(counts[p.id].values()),
                    migrations=counts[p.id][ActionKind.MIGRATE.value],
                    before=json.loads(p.before_json), after=json.loads(p.after_json),
                    solver={"status": p.solver_status, "seconds": p.solver_seconds,
                            "objective": p.objective, "bound": p.bound},
                    status=PlanStatus(p.status), expires_at=p.expires_at, inventory_digest=p.inventory_digest,
                    decided_by=p.decided_by, decided_at=p.decided_at,
                    prediction=None if p.prediction_json is None else json.loads(p.prediction_json),
                    settings=None if p.settings_json is None else json.loads(p.settings_json),
                )
                for p in plans
            ]

    # -- review then apply ------------------------------------------------------------------

    def get_plan(self, plan_id: int) -> PlanRecord:
        """One stored plan; an unknown id is the operator's typo, said on one line."""
        with self._tx() as s:
            created = s.scalar(select(PlanRow.created_at).where(PlanRow.id == plan_id))
        if created is None:
            raise StoreError(f"PLAN_ID: no plan {plan_id} in this store; `peakpack history plans` lists them")
        return next(p for p in self.list_plans(created) if p.plan_id == plan_id)

    def set_plan_status(self, plan_id: int, to: PlanStatus, *, only_from: Sequence[PlanStatus],
                        decided_by: str | None = None) -> bool:
        """Move a plan to `to` only if it is in one of `only_from`, in one conditional UPDATE:
        of two concurrent appliers exactly one sees True. `decided_by` records who decided."""
        values: dict[str, Any] = {"status": PlanStatus(to).value}
        if decided_by is not None:
            values.update(decided_by=decided_by, decided_at=now())
        q = (update(PlanRow).where(PlanRow.id == plan_id, PlanRow.status.in_([PlanStatus(f).value for f in only_from]))
             .values(**values))
        with self._write() as s:
            return s.execute(q).rowcount == 1

    def expire_plans(self, at: datetime | None = None) -> int:
        """RECOMMENDED plans past their `expires_at` become EXPIRED; how many did."""
        q = (update(PlanRow).where(PlanRow.status == PlanStatus.RECOMMENDED.value,
                                   PlanRow.expires_at.is_not(None), PlanRow.expires_at <= (at or now()))
             .values(status=PlanStatus.EXPIRED.value))
        with self._write() as s:
            return s.execute(q).rowcount

    def frozen_history(self, limit: int = 200) -> list[tuple[float, float]]:
        """(memory MB, frozen ms) of the newest SUCCEEDED migrations that a plan journaled: the
        container's memory as its plan's snapshot saw it, the frame a prediction starts from."""
        q = (select(MigrationRow.container, MigrationRow.frozen_ms, ActionRow.plan_id)
             .join(ActionRow, ActionRow.id == MigrationRow.action_id)
             .where(MigrationRow.state == MigrationState.SUCCEEDED.value, MigrationRow.frozen_ms.is_not(None))
             .order_by(MigrationRow.id.desc()).limit(limit))
        with self._tx() as s:
            rows = s.execute(q).all()
            memory: dict[int, dict[str, float]] = {}
            for plan_id in {r.plan_id for r in rows}:
                snap = json.loads(s.scalar(select(PlanRow.snapshot_json).where(PlanRow.id == plan_id)) or "{}")
                memory[plan_id] = {c["name"]: float(c["memory_mb"]) for c in snap.get("containers", [])}
        return [(memory[r.plan_id][r.container], float(r.frozen_ms)) for r in rows
                if r.container in memory[r.plan_id]]

    def plan_snapshot(self, plan_id: int) -> dict[str, Any]:
        with self._tx() as s:
            row = s.get(PlanRow, plan_id)
            if row is None:
                raise StoreError(f"plan {plan_id}: no such plan in this store")
            return json.loads(row.snapshot_json)

    def plan_cpus(self, since: datetime | None = None) -> list[tuple[int, datetime, dict[str, float]]]:
        """Per plan: when it was made and the CPU its snapshot gave each container (the forecast)."""
        q = select(PlanRow.id, PlanRow.created_at, PlanRow.snapshot_json).order_by(PlanRow.id)
        if since is not None:
            q = q.where(PlanRow.created_at >= since)
        with self._tx() as s:
            return [(i, t, {c["name"]: c["cpu"] for c in json.loads(snap).get("containers", [])})
                    for i, t, snap in s.execute(q)]

    def plan_action_ids(self, plan_id: int) -> list[int]:
        with self._tx() as s:
            return list(s.scalars(select(ActionRow.id).where(ActionRow.plan_id == plan_id).order_by(ActionRow.idx)))

    def set_action_state(self, action_id: int, state: ActionState, detail: str | None = None) -> None:
        t = now()
        values: dict[str, Any] = {"state": ActionState(state).value}
        if detail is not None:
            values["detail"] = detail
        if state is ActionState.ONGOING:
            values["started_at"] = t
        elif state is not ActionState.PENDING:
            values["finished_at"] = t
        with self._write() as s:
            if s.execute(update(ActionRow).where(ActionRow.id == action_id).values(**values)).rowcount != 1:
                raise StoreError(f"action {action_id}: no such action in the journal")

    def list_actions(self, since: datetime | None = None, plan_id: int | None = None) -> list[ActionRecord]:
        q = select(ActionRow).order_by(ActionRow.id)
        if since is not None:
            q = q.where(ActionRow.created_at >= since)
        if plan_id is not None:
            q = q.where(ActionRow.plan_id == plan_id)
        with self._tx() as s:
            return [_action(r) for r in s.scalars(q)]

    def unfinished_actions(self) -> list[ActionRecord]:
        with self._tx() as s:
            q = select(ActionRow).where(ActionRow.state == ActionState.ONGOING.value).order_by(ActionRow.id)
            return [_action(r) for r in s.scalars(q)]

    # -- migrations ---------------------------------------------------------------------------

    def begin_migration(self, container: str, source: str, target: str, action_id: int | None = None) -> int:
        with self._write() as s:
            row = MigrationRow(container=container, source=source, target=target, action_id=action_id,
                               state=MigrationState.PENDING.value, started_at=now())
            s.add(row)
            s.flush()
            return row.id

    def step_started(self, migration_id: int, step: str) -> int:
        """Journal a step before it runs; the migration's state names the step in flight."""
        with self._write() as s:
            mig = s.get(MigrationRow, migration_id)
            if mig is None:
                raise StoreError(f"migration {migration_id}: no such migration")
            if step.upper() in MigrationState.__members__:
                mig.state = MigrationState[step.upper()].value
            row = MigrationStepRow(migration_id=migration_id, step=step, state="STARTED", started_at=now())
            s.add(row)
            s.flush()
            return row.id

    def step_finished(self, step_id: int, ok: bool, detail: str | None = None, bytes: int | None = None) -> None:
        with self._write() as s:
            s.execute(update(MigrationStepRow).where(MigrationStepRow.id == step_id).values(
                state="DONE" if ok else "FAILED", detail=detail, bytes=bytes, finished_at=now()))

    def finish_migration(
        self,
        migration_id: int,
        state: MigrationState,
        reason: str | None = None,
        *,
        checkpoint_ms: float | None = None,
        transfer_ms: float | None = None,
        restore_ms: float | None = None,
        frozen_ms: float | None = None,
        total_ms: float | None = None,
        bytes: int | None = None,
    ) -> None:
        state = MigrationState(state)
        if state not in TERMINAL_MIGRATION_STATES:
            raise ValueError(f"finish_migration needs a terminal state, not {state}")
        with self._write() as s:
            s.execute(update(MigrationRow).where(MigrationRow.id == migration_id).values(
                state=state.value, reason=reason, checkpoint_ms=checkpoint_ms, transfer_ms=transfer_ms,
                restore_ms=restore_ms, frozen_ms=frozen_ms, total_ms=total_ms, bytes=bytes,
                finished_at=now()))

    def list_migrations(self, since: datetime | None = None) -> list[MigrationRecord]:
        q = select(MigrationRow).order_by(MigrationRow.id)
        if since is not None:
            q = q.where(MigrationRow.started_at >= since)
        with self._tx() as s:
            return [_migration(r) for r in s.scalars(q)]

    def unfinished_migrations(self) -> list[MigrationRecord]:
        terminal = [m.value for m in TERMINAL_MIGRATION_STATES]
        q = select(MigrationRow).where(MigrationRow.state.not_in(terminal)).order_by(MigrationRow.id)
        with self._tx() as s:
            return [_migration(r) for r in s.scalars(q)]

    def moved_since(self, since: datetime) -> dict[str, datetime]:
        """Containers whose migration succeeded at or after `since` -> the latest such time: the
        planner's hysteresis keeps them where they are."""
        q = (select(MigrationRow.container, func.max(MigrationRow.finished_at))
             .where(MigrationRow.state == MigrationState.SUCCEEDED.value, MigrationRow.finished_at >= since)
             .group_by(MigrationRow.container))
        with self._tx() as s:
            return {c: at for c, at in s.execute(q)}

    def migration_steps(self, migration_id: int) -> list[StepRecord]:
        q = select(MigrationStepRow).where(MigrationStepRow.migration_id == migration_id).order_by(MigrationStepRow.id)
        with self._tx() as s:
            return [
                StepRecord(id=r.id, migration_id=r.migration_id, step=r.step, state=r.state, detail=r.detail,
                           bytes=r.bytes, started_at=r.started_at, finished_at=r.finished_at)
                for r in s.scalars(q)
            ]

    # -- pinning --------------------------------------------------------------------------------

    def record_pinning(self, node: str, container: str, cpuset: str) -> None:
        with self._write() as s:
            s.add(PinningRow(node=node, container=container, cpuset=cpuset, at=now()))

    def list_pinnings(self, node: str | None = None) -> list[dict[str, Any]]:
        q = select(PinningRow).order_by(PinningRow.id)
        if node is not None:
            q = q.where(PinningRow.node == node)
        with self._tx() as s:
            return [{"node": r.node, "container": r.container, "cpuset": r.cpuset, "at": r.at.isoformat()}
                    for r in s.scalars(q)]

    # -- power ----------------------------------------------------------------------------------

    def begin_power_event(self, node: str, action: str, reason: str | None = None) -> int:
        if action not in (ActionKind.POWER_ON.value, ActionKind.POWER_OFF.value):
            raise ValueError(f"power action must be power_on or power_off, not {action!r}")
        with self._write() as s:
            row = PowerEventRow(node=node, action=action, state="ONGOING", reason=reason, at=now())
            s.add(row)
            s.flush()
            return row.id

    def finish_power_event(self, event_id: int, state: str, detail: str | None = None) -> None:
        if state not in ("SUCCEEDED", "FAILED"):
            raise ValueError(f"power event state must be SUCCEEDED or FAILED, not {state!r}")
        with self._write() as s:
            s.execute(update(PowerEventRow).where(PowerEventRow.id == event_id).values(
                state=state, detail=detail, finished_at=now()))

    def list_power_events(self, since: datetime | None = None) -> list[PowerEventRecord]:
        q = select(PowerEventRow).order_by(PowerEventRow.id)
        if since is not None:
            q = q.where(PowerEventRow.at >= since)
        with self._tx() as s:
            return [
                PowerEventRecord(id=r.id, node=r.node, action=r.action, state=r.state, reason=r.reason,
                                 detail=r.detail, at=r.at, finished_at=r.finished_at)
                for r in s.scalars(q)
            ]

    def woken_since(self, since: datetime) -> dict[str, datetime]:
        """Nodes switched on successfully at or after `since` -> when: the power rules' grace."""
        q = (select(PowerEventRow.node, func.max(PowerEventRow.finished_at))
             .where(PowerEventRow.action == ActionKind.POWER_ON.value, PowerEventRow.state == "SUCCEEDED",
                    PowerEventRow.finished_at >= since)
             .group_by(PowerEventRow.node))
        with self._tx() as s:
            return {n: at for n, at in s.execute(q)}

    def disruption_since(self, since: datetime) -> tuple[int, int]:
        """Migrations started and power-offs attempted (not failed) since `since`: what the
        disruption budgets (orchestrator/budgets.py) count."""
        with self._tx() as s:
            migrations = s.scalar(select(func.count()).select_from(MigrationRow)
                                  .where(MigrationRow.started_at >= since)) or 0
            offs = s.scalar(select(func.count()).select_from(PowerEventRow).where(
                PowerEventRow.at >= since, PowerEventRow.action == "power_off",
                PowerEventRow.state != "FAILED")) or 0
        return int(migrations), int(offs)

    def _node_status(self, s: Session, node: str) -> NodeStatusRow:
        row = s.get(NodeStatusRow, node)
        if row is None:
            row = NodeStatusRow(node=node)
            s.add(row)
        return row

    def quarantine(self, node: str, reason: str) -> None:
        with self._write() as s:
            row = self._node_status(s, node)
            row.quarantined_reason, row.quarantined_at = reason, now()

    def clear_quarantine(self, node: str) -> None:
        with self._write() as s:
            row = self._node_status(s, node)
            row.quarantined_reason, row.quarantined_at = None, None

    def quarantined(self) -> dict[str, str]:
        q = select(NodeStatusRow).where(NodeStatusRow.quarantined_reason.is_not(None))
        with self._tx() as s:
            return {r.node: r.quarantined_reason or "" for r in s.scalars(q)}

    def set_idle_since(self, node: str, at: datetime | None) -> None:
        with self._write() as s:
            self._node_status(s, node).idle_since = at

    def idle_since(self, node: str) -> datetime | None:
        with self._tx() as s:
            row = s.get(NodeStatusRow, node)
            return None if row is None else row.idle_since

    # -- energy ---------------------------------------------------------------------------------

    def add_energy_samples(self, samples: Sequence[EnergySample]) -> None:
        with self._write() as s:
            s.add_all(EnergySampleRow(node=x.node, at=x.at, source=x.source, zone=x.zone, energy_uj=x.energy_uj,
                                      max_energy_range_uj=x.max_energy_range_uj, power_w=x.power_w,
                                      boot_id=x.boot_id, busy_ns=x.busy_ns)
                      for x in samples)

    def energy_samples(self, node: str, source: str, since: datetime | None = None) -> list[EnergySample]:
        q = (select(EnergySampleRow).where(EnergySampleRow.node == node, EnergySampleRow.source == source)
             .order_by(EnergySampleRow.at, EnergySampleRow.id))
        if since is not None:
            q = q.where(EnergySampleRow.at >= since)
        with self._tx() as s:
            return [EnergySample(node=r.node, at=r.at, source=r.source, energy_uj=r.energy_uj, power_w=r.power_w,
                                 zone=r.zone, max_energy_range_uj=r.max_energy_range_uj, boot_id=r.boot_id,
                                 busy_ns=r.busy_ns)
                    for r in s.scalars(q)]

    def add_energy(self, rows: Sequence[EnergyRow]) -> None:
        for r in rows:
            if r.energy_j < 0 or r.end < r.start:
                raise ValueError(f"energy row for {r.node} is negative or ends before it starts: {r}")
        with self._write() as s:
            s.add_all(EnergyRowDb(node=r.node, container=r.container, start=r.start, end=r.end,
                                  energy_j=r.energy_j, source=r.source, plan_id=r.plan_id, idle_j=r.idle_j,
                                  residual_j=r.residual_j) for r in rows)

    def list_energy(self, since: datetime | None = None, by: str | None = None) -> list[EnergyRow]:
        """Node intervals (by=None), totals per node, or totals per container; a total never
        mixes sources (measured and modelled energy are summed apart)."""
        rows = self._energy_rows(since, containers=by == "container")
        if by is None:
            return rows
        if by not in ("node", "container"):
            raise PeakpackError(f"--by: {by!r} is not node or container")
        groups: dict[tuple[str, str | None, str], list[EnergyRow]] = defaultdict(list)
        for r in rows:
            groups[(r.node, r.container, r.source)].append(r)

        def total(g: list[EnergyRow], part: str) -> float | None:
            parts = [getattr(r, part) for r in g if getattr(r, part) is not None]
            return sum(parts) if parts else None

        return [
            EnergyRow(
                node=node, container=container,
                start=min(r.start for r in g), end=max(r.end for r in g),
                energy_j=sum(r.energy_j for r in g), source=source,
                idle_j=total(g, "idle_j"), residual_j=total(g, "residual_j"),
            )
            for (node, container, source), g in sorted(groups.items(),
                                                       key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2]))
        ]

    # -- container demand -----------------------------------------------------------------------

    def add_demand(self, rows: Sequence[DemandRecord]) -> None:
        with self._write() as s:
            s.add_all(ContainerDemandRow(at=r.at, container=r.container, node=r.node, interval_s=r.interval_s,
                                         cpu=r.cpu, cpu_time_ns=r.cpu_time_ns, memory_mb=r.memory_mb,
                                         source=r.source) for r in rows)

    def demand_history(self, container: str | None = None, since: datetime | None = None) -> list[DemandRecord]:
        """Demand rows oldest first, of one container or all."""
        q = select(ContainerDemandRow).order_by(ContainerDemandRow.at, ContainerDemandRow.id)
        if container is not None:
            q = q.where(ContainerDemandRow.container == container)
        if since is not None:
            q = q.where(ContainerDemandRow.at >= since)
        with self._tx() as s:
            return [DemandRecord(at=r.at, container=r.container, node=r.node, interval_s=r.interval_s, cpu=r.cpu,
                                 cpu_time_ns=r.cpu_time_ns, memory_mb=r.memory_mb, source=r.source)
                    for r in s.scalars(q)]

    def latest_demand(self) -> dict[str, DemandRecord]:
        """Each container's newest demand row: the counter the next one is a delta against."""
        C = ContainerDemandRow
        newest = select(C.container, func.max(C.id).label("id")).group_by(C.container).subquery()
        q = select(C).join(newest, C.id == newest.c.id)
        with self._tx() as s:
            return {r.container: DemandRecord(at=r.at, container=r.container, node=r.node, interval_s=r.interval_s,
                                              cpu=r.cpu, cpu_time_ns=r.cpu_time_ns, memory_mb=r.memory_mb,
                                              source=r.source)
                    for r in s.scalars(q)}

    def _energy_rows(self, since: datetime | None, *, containers: bool) -> list[EnergyRow]:
        """Energy intervals in time order: the nodes' own, or those attributed to containers."""
        q = select(EnergyRowDb).order_by(EnergyRowDb.start, EnergyRowDb.id)
        if since is not None:
            q = q.where(EnergyRowDb.start >= since)
        q = q.where(EnergyRowDb.container.is_not(None) if containers else EnergyRowDb.container.is_(None))
        with self._tx() as s:
            return [EnergyRow(node=r.node, start=r.start, end=r.end, energy_j=r.energy_j, source=r.source,
                              container=r.container, plan_id=r.plan_id, idle_j=r.idle_j, residual_j=r.residual_j)
                    for r in s.scalars(q)]

    # -- the web page's reads --------------------------------------------------------------------

    def recent_plans(self, limit: int) -> list[PlanRecord]:
        """The `limit` newest plans, oldest first: the page shows the recent ones, not a week's."""
        with self._tx() as s:
            oldest = s.scalar(select(PlanRow.created_at).order_by(PlanRow.id.desc()).offset(limit - 1).limit(1))
        return self.list_plans(oldest)

    def container_energy(self, since: datetime | None = None) -> list[EnergyRow]:
        """Energy intervals attributed to containers, in time order (`list_energy` sums them)."""
        return self._energy_rows(since, containers=True)

    # -- the controller lease -------------------------------------------------------------------

    def _clock(self, s: Session) -> datetime:
        """Lease times come from one clock: the server's on PostgreSQL (the hosts' clocks may
        disagree), this host's on SQLite (every user of the file is on this host)."""
        server = s.scalar(select(func.now())) if self.engine.dialect.name == "postgresql" else None
        return now() if server is None else server.astimezone(timezone.utc)

    @contextmanager
    def _lease_tx(self) -> Iterator[Session]:
        """Lease statements: a busy or unreachable database is a one-line StoreError."""
        try:
            with self._sessions.begin() as session:
                yield session
        except OperationalError as exc:
            raise StoreError(f"--db: the controller lease is unreachable: {' '.join(str(exc.orig).split())}") from None

    def acquire_lease(self, owner: str, ttl_s: float, *, replacing: str | None = None) -> int | None:
        """Take the lease for `ttl_s` seconds: the new fencing token, or None while another
        holder's lease runs (`replacing`: a holder known to be dead, taken over at once).

        One conditional UPDATE decides: of two racing callers the database lets one update the
        row and makes the other re-read it (PostgreSQL re-checks the WHERE on the new row, SQLite
        serialises writers), so exactly one wins and the other gets None."""
        L = ControllerLeaseRow
        with self._lease_tx() as s:
            t = self._clock(s)
            free = or_(L.holder.is_(None), L.holder == owner, L.expires_at <= t)
            if replacing is not None:
                free = or_(free, L.holder == replacing)
            taken = update(L).where(L.id == 1, free).values(
                token=L.token + 1, holder=owner, acquired_at=t, expires_at=t + timedelta(seconds=ttl_s))
            if s.execute(taken).rowcount != 1:
                return None
            return s.scalar(select(L.token).where(L.id == 1))

    def renew_lease(self, owner: str, token: int, ttl_s: float) -> bool:
        """Extend our lease to now + `ttl_s`; False when another holder has taken it since."""
        L = ControllerLeaseRow
        with self._lease_tx() as s:
            t = self._clock(s)
            mine = update(L).where(L.id == 1, L.token == token, L.holder == owner)
            return s.execute(mine.values(expires_at=t + timedelta(seconds=ttl_s))).rowcount == 1

    def release_lease(self, owner: str, token: int) -> None:
        """Free the lease now (a standby takes it at its next poll); the token stays as it is."""
        L = ControllerLeaseRow
        with self._lease_tx() as s:
            t = self._clock(s)
            s.execute(update(L).where(L.id == 1, L.token == token, L.holder == owner)
                      .values(holder=None, expires_at=t))

    def lease_holder(self) -> LeaseRecord | None:
        """The holder of an unexpired lease, or None when the store is free to take."""
        with self._lease_tx() as s:
            t = self._clock(s)
            row = s.get(ControllerLeaseRow, 1)
            if row is None or row.holder is None or row.acquired_at is None or row.expires_at <= t:
                return None
            return LeaseRecord(holder=row.holder, token=row.token, acquired_at=row.acquired_at,
                               expires_at=row.expires_at)


def _action(r: ActionRow) -> ActionRecord:
    return ActionRecord(
        id=r.id, plan_id=r.plan_id, index=r.idx, kind=r.kind, container=r.container, source=r.source,
        target=r.target, node=r.node, state=ActionState(r.state), detail=r.detail, created_at=r.created_at,
        started_at=r.started_at, finished_at=r.finished_at,
        prediction=None if r.prediction_json is None else json.loads(r.prediction_json),
    )


def _migration(r: MigrationRow) -> MigrationRecord:
    return MigrationRecord(
        id=r.id, action_id=r.action_id, container=r.container, source=r.source, target=r.target,
        state=MigrationState(r.state), reason=r.reason, checkpoint_ms=r.checkpoint_ms,
        transfer_ms=r.transfer_ms, restore_ms=r.restore_ms, frozen_ms=r.frozen_ms, total_ms=r.total_ms,
        bytes=r.bytes, started_at=r.started_at, finished_at=r.finished_at,
    )
