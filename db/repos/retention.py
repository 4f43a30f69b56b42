"""Retention: a store that lives for years. Raw demand and energy rows older than `raw_days` are
summed per hour (`container_demand_hourly`, `energy_hourly`: history still reads them), raw energy
samples are dropped (the energy rows hold what they measured), and so are raw traffic rows,
conntrack reads and container pressure rows (the planner reads only the forecast's window, which
`raw_days` covers), hourly rows older than `hourly_days` go, and so do plans (with their actions
and approvals), migrations (with their steps), power events, pinnings, QoS events and closed
savings-ledger rows older than `history_days`. Nothing unfinished is ever removed: an open
migration, an ONGOING power event, a plan still RECOMMENDED or APPLYING, a node still off in the
savings ledger stay.

Each call does at most `prune_rows` rows per table, in short transactions (an hour of rows is
summed and removed in one, so a crash never counts it twice or loses it): the controller calls it
every epoch, and a store that has fallen behind catches up over a few epochs instead of stalling
one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, delete, func, insert, literal, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from peakpack.orchestrator.domain.model import StoreConfig
from peakpack.orchestrator.domain.records import Pruned
from peakpack.orchestrator.domain.states import TERMINAL_MIGRATION_STATES, PlanStatus

from ..base import Repo, rowcount
from ..schema import (
    ContainerDemandRow,
    ContainerPressureRow,
    DemandHourlyRow,
    EnergyHourlyRow,
    EnergyRowDb,
    EnergySampleRow,
    MigrationRow,
    PinningRow,
    PlanRow,
    PowerEventRow,
    QosEventRow,
    SavingRow,
    TrafficReadRow,
    TrafficRow,
    UtcDateTime,
)

HOUR = timedelta(hours=1)
#: rows one transaction of retention touches, at most (whole hours: at least one)
TX_ROWS = 5000
#: plans in these states are still to be decided or running: never removed
OPEN_PLANS = (PlanStatus.RECOMMENDED.value, PlanStatus.APPLYING.value)


def hour_of(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _demand_hour(s: Session, hour: datetime) -> int:
    """Sum one hour of demand rows into hourly rows and remove them, in the database (no row
    comes to Python); how many were summed. The CPU is core-seconds over seconds where the rows
    have intervals (counter deltas), else the mean of their samples."""
    C = ContainerDemandRow
    inside = (C.at >= hour, C.at < hour + HOUR)
    seconds = func.sum(C.interval_s)
    summed = (select(literal(hour, UtcDateTime()), C.container, C.node, func.count(), seconds,
                     case((seconds > 0, func.sum(C.cpu * C.interval_s) / seconds), else_=func.avg(C.cpu)),
                     func.max(C.cpu), func.coalesce(func.max(C.memory_mb), 0.0))
              .where(*inside).group_by(C.container, C.node))
    s.execute(insert(DemandHourlyRow).from_select(
        ["hour", "container", "node", "rows", "seconds", "cpu", "cpu_max", "memory_mb"], summed))
    return rowcount(s.execute(delete(C).where(*inside).execution_options(synchronize_session=False)))


def _energy_hour(s: Session, hour: datetime) -> int:
    """Sum one hour of energy rows (by their start) per node, container and source, and remove
    them, in the database; how many were summed."""
    E = EnergyRowDb
    inside = (E.start >= hour, E.start < hour + HOUR)
    summed = (select(literal(hour, UtcDateTime()), E.node, E.container, E.source, func.count(), func.min(E.start),
                     func.max(E.end), func.sum(E.energy_j), func.sum(E.idle_j), func.sum(E.residual_j))
              .where(*inside).group_by(E.node, E.container, E.source))
    s.execute(insert(EnergyHourlyRow).from_select(
        ["hour", "node", "container", "source", "rows", "start", "end", "energy_j", "idle_j", "residual_j"], summed))
    return rowcount(s.execute(delete(E).where(*inside).execution_options(synchronize_session=False)))


class RetentionRepo(Repo):
    def prune(self, config: StoreConfig, now: datetime) -> Pruned:
        """One round of retention at `now` (see the module): what was summed and removed."""
        raw = now - timedelta(days=config.raw_days)
        hours = now - timedelta(days=config.hourly_days)
        history = now - timedelta(days=config.history_days)
        budget = config.prune_rows
        aggregated = {
            "demand": self._sum_hours(ContainerDemandRow.at, raw, budget, _demand_hour),
            "energy": self._sum_hours(EnergyRowDb.start, raw, budget, _energy_hour),
        }
        removed = {
            "energy sample": self._remove(EnergySampleRow, EnergySampleRow.at < raw, budget),
            "traffic": self._remove(TrafficRow, TrafficRow.at < raw, budget),
            "traffic read": self._remove(TrafficReadRow, TrafficReadRow.at < raw, budget),
            "pressure": self._remove(ContainerPressureRow, ContainerPressureRow.at < raw, budget),
            "hourly demand": self._remove(DemandHourlyRow, DemandHourlyRow.hour < hours, budget),
            "hourly energy": self._remove(EnergyHourlyRow, EnergyHourlyRow.hour < hours, budget),
            "plan": self._remove(PlanRow, (PlanRow.created_at < history) & PlanRow.status.not_in(OPEN_PLANS),
                                 budget),
            "migration": self._remove(MigrationRow, (MigrationRow.started_at < history) & MigrationRow.state.in_(
                [m.value for m in TERMINAL_MIGRATION_STATES]), budget),
            "power event": self._remove(PowerEventRow, (PowerEventRow.at < history)
                                        & (PowerEventRow.state != "ONGOING"), budget),
            "pinning": self._remove(PinningRow, PinningRow.at < history, budget),
            "qos event": self._remove(QosEventRow, QosEventRow.at < history, budget),
            "saving": self._remove(SavingRow, (SavingRow.start < history) & SavingRow.end.is_not(None), budget),
        }
        return Pruned(aggregated, removed)

    def _sum_hours(self, at: InstrumentedAttribute[datetime], cut: datetime, budget: int,
                   one_hour: Callable[[Session, datetime], int]) -> int:
        """Whole hours before `cut`, oldest first, until `budget` rows were summed (at least one
        hour, however many rows it holds); a transaction takes hours until it holds TX_ROWS rows,
        so it stays short (another writer, the lease's renewal, waits for it) and a small store
        is not one commit per hour."""
        done = 0
        while done < budget:
            with self._write() as s:
                in_tx = 0
                while in_tx < min(TX_ROWS, budget - done):
                    first = s.scalar(select(func.min(at)))
                    if first is None or hour_of(first) + HOUR > cut:  # a partial hour waits until it is all past
                        return done + in_tx
                    in_tx += one_hour(s, hour_of(first))
            done += in_tx
        return done

    def _remove(self, table: Any, older: Any, budget: int) -> int:
        """Up to `budget` rows of `table` matching `older`, oldest ids first (cascades follow)."""
        ids = select(table.id).where(older).order_by(table.id).limit(budget).scalar_subquery()
        gone = delete(table).where(table.id.in_(ids)).execution_options(synchronize_session=False)
        with self._write() as s:
            return rowcount(s.execute(gone))
