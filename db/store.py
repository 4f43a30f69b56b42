"""The state store: one facade that opens the database and hands out its repositories, one per
aggregate (`domain.ports.Journal` is the protocol the other stages depend on):

    plans       plans and their action journal          repos/plans.py
    migrations  migrations step by step                 repos/migrations.py
    pinning     cpusets given to containers             repos/pinning.py
    power       power events, quarantine, idle nodes    repos/power.py
    energy      counter samples and energy rows         repos/energy.py
    demand      container demand per observation        repos/demand.py
    traffic     bytes per container pair per read       repos/traffic.py
    savings     the energy saved, measured              repos/savings.py
    pressure    container stall per observation         repos/pressure.py
    qos         what the nodes' QoS guards did          repos/qos.py
    lease       the controller lease                    repos/lease.py
    approvals   plans approved on a page, for the leader repos/approvals.py

`prune` applies `[store]` retention (repos/retention.py); `check_fence` proves, before an action
on a node, that this handle's lease token is still the store's.

SQLite (default, WAL, busy_timeout, foreign keys) or any SQLAlchemy URL (PostgreSQL works
unchanged); the schema is brought to Alembic's head on open (`connect.py`). Every write is its
own short transaction, fenced with the lease token once `fence` is called (`base.py`).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import DBAPIError

from peakpack.orchestrator.domain.errors import FencedError, StoreError
from peakpack.orchestrator.domain.inputs import one_line
from peakpack.orchestrator.domain.model import StoreConfig
from peakpack.orchestrator.domain.records import Pruned

from .base import Database, Repo
from .connect import default_url, engine_for, upgrade
from .repos.approvals import ApprovalRepo
from .repos.demand import DemandRepo
from .repos.energy import EnergyRepo
from .repos.lease import LeaseRepo
from .repos.migrations import MigrationRepo
from .repos.pinning import PinningRepo
from .repos.plans import PlanRepo
from .repos.power import PowerRepo
from .repos.pressure import PressureRepo
from .repos.qos import QosRepo
from .repos.retention import RetentionRepo
from .repos.savings import SavingsRepo
from .repos.traffic import TrafficRepo
from .schema import MigrationRow, PowerEventRow

__all__ = ["Store", "default_url"]


class _Disruption(Repo):
    """What the disruption budgets count: it spans two aggregates, so it is the facade's."""

    def since(self, since: datetime) -> tuple[int, int]:
        with self._tx() as s:
            migrations = s.scalar(select(func.count()).select_from(MigrationRow)
                                  .where(MigrationRow.started_at >= since)) or 0
            offs = s.scalar(select(func.count()).select_from(PowerEventRow).where(
                PowerEventRow.at >= since, PowerEventRow.action == "power_off",
                PowerEventRow.state != "FAILED")) or 0
        return int(migrations), int(offs)


class Store:
    """One handle on the database; cheap to open, use as a context manager."""

    def __init__(self, engine: Engine) -> None:
        self._db = Database(engine)
        self.plans = PlanRepo(self._db)
        self.migrations = MigrationRepo(self._db)
        self.pinning = PinningRepo(self._db)
        self.power = PowerRepo(self._db)
        self.energy = EnergyRepo(self._db)
        self.demand = DemandRepo(self._db)
        self.traffic = TrafficRepo(self._db)
        self.savings = SavingsRepo(self._db)
        self.pressure = PressureRepo(self._db)
        self.qos = QosRepo(self._db)
        self.lease = LeaseRepo(self._db)
        self.approvals = ApprovalRepo(self._db)
        self._retention = RetentionRepo(self._db)
        self._disruption = _Disruption(self._db)

    @property
    def engine(self) -> Engine:
        return self._db.engine

    @classmethod
    def open(cls, url: str | None = None) -> Store:
        engine = engine_for(default_url() if url is None else url)
        try:
            upgrade(engine)
        except DBAPIError as exc:  # unreachable, refused, not a database, not ours
            engine.dispose()
            raise StoreError(f"--db: cannot open {engine.url!r}: {one_line(' '.join(str(exc.orig).split()))}") from None
        return cls(engine)

    def close(self) -> None:
        self._db.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def fence(self, token: int | None) -> None:
        """Bind every later write of this handle to lease `token` (None: unfenced, writes as before)."""
        self._db.fence(token)

    @property
    def fencing_token(self) -> int | None:
        return self._db.token

    def check_fence(self) -> None:
        """Raise FencedError when this handle is fenced and another controller has taken the lease
        since: called right before an action on a node that no journal write precedes (settling a
        migration acts in rounds), so a fenced process stops touching nodes at once. Unfenced: a
        no-op."""
        ours = self._db.token
        if ours is None:
            return
        now = self.lease.token()
        if now != ours:
            holder = self.lease.holder()
            who = f"controller {holder.holder}" if holder is not None else "another controller"
            raise FencedError(f"{who} took over (lease token {now} > {ours})")

    def prune(self, retention: StoreConfig, now: datetime) -> Pruned:
        """One round of `[store]` retention (repos/retention.py); what it summed and removed."""
        return self._retention.prune(retention, now)

    def disruption_since(self, since: datetime) -> tuple[int, int]:
        """Migrations started and power-offs attempted (not failed) since `since`: what the
        disruption budgets (`domain/budgets.py`) count."""
        return self._disruption.since(since)
