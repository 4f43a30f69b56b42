"""The state store: one facade that opens the database and hands out its repositories, one per
aggregate (`domain.ports.Journal` is the protocol the other stages depend on):

    plans       plans and their action journal          repos/plans.py
    migrations  migrations step by step                 repos/migrations.py
    pinning     cpusets given to containers             repos/pinning.py
    power       power events, quarantine, idle nodes    repos/power.py
    energy      counter samples and energy rows         repos/energy.py
    demand      container demand per observation        repos/demand.py
    pressure    container stall per observation         repos/pressure.py
    qos         what the nodes' QoS guards did          repos/qos.py
    lease       the controller lease                    repos/lease.py

SQLite (default, WAL, busy_timeout, foreign keys) or any SQLAlchemy URL (PostgreSQL works
unchanged); the schema is brought to Alembic's head on open (`connect.py`). Every write is its
own short transaction, fenced with the lease token once `fence` is called (`base.py`).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import OperationalError

from peakpack.orchestrator.domain.errors import StoreError

from .base import Database, Repo
from .connect import default_url, engine_for, upgrade
from .repos.demand import DemandRepo
from .repos.energy import EnergyRepo
from .repos.lease import LeaseRepo
from .repos.migrations import MigrationRepo
from .repos.pinning import PinningRepo
from .repos.plans import PlanRepo
from .repos.power import PowerRepo
from .repos.pressure import PressureRepo
from .repos.qos import QosRepo
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
        self.pressure = PressureRepo(self._db)
        self.qos = QosRepo(self._db)
        self.lease = LeaseRepo(self._db)
        self._disruption = _Disruption(self._db)

    @property
    def engine(self) -> Engine:
        return self._db.engine

    @classmethod
    def open(cls, url: str | None = None) -> Store:
        engine = engine_for(url or default_url())
        try:
            upgrade(engine)
        except OperationalError as exc:
            engine.dispose()
            raise StoreError(f"--db: cannot open {engine.url!r}: {exc.orig}") from None
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

    def disruption_since(self, since: datetime) -> tuple[int, int]:
        """Migrations started and power-offs attempted (not failed) since `since`: what the
        disruption budgets (`domain/budgets.py`) count."""
        return self._disruption.since(since)
