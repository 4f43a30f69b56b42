"""What the store hands out: frozen records with a `to_json` for `--json` and the report, and
the state enums that every writer of the journal shares."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class ActionState(StrEnum):
    PENDING = "PENDING"          # journaled with its plan, not started
    ONGOING = "ONGOING"          # started; after a crash the controller must reconcile it
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"            # nothing changed, or the change was undone
    SKIPPED = "SKIPPED"          # its precondition no longer held (the world moved on)
    ROLLED_BACK = "ROLLED_BACK"


class MigrationState(StrEnum):
    PENDING = "PENDING"
    PREFLIGHT = "PREFLIGHT"
    CREATING = "CREATING"
    CHECKPOINTING = "CHECKPOINTING"
    TRANSFERRING = "TRANSFERRING"
    RESTORING = "RESTORING"
    VERIFYING = "VERIFYING"
    CLEANING_UP = "CLEANING_UP"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"                    # failed before the source was touched
    ROLLED_BACK = "ROLLED_BACK"          # restored on the source from the same checkpoint
    ROLLBACK_FAILED = "ROLLBACK_FAILED"  # an operator must look: the record says where state is

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_MIGRATION_STATES


TERMINAL_MIGRATION_STATES = frozenset(
    {MigrationState.SUCCEEDED, MigrationState.FAILED, MigrationState.ROLLED_BACK,
     MigrationState.ROLLBACK_FAILED}
)
TERMINAL_ACTION_STATES = frozenset(
    {ActionState.SUCCEEDED, ActionState.FAILED, ActionState.SKIPPED, ActionState.ROLLED_BACK}
)


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


@dataclass(frozen=True)
class PlanRecord:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id,
            "created_at": iso(self.created_at),
            "inventory": self.inventory,
            "policy": self.policy,
            "dry_run": self.dry_run,
            "actions": self.actions,
            "migrations": self.migrations,
            "before": self.before,
            "after": self.after,
            "solver": self.solver,
        }


@dataclass(frozen=True)
class ActionRecord:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "plan_id": self.plan_id,
            "index": self.index,
            "kind": self.kind,
            "container": self.container,
            "source": self.source,
            "target": self.target,
            "node": self.node,
            "state": self.state.value,
            "detail": self.detail,
            "created_at": iso(self.created_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
        }


@dataclass(frozen=True)
class MigrationRecord:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "container": self.container,
            "source": self.source,
            "target": self.target,
            "state": self.state.value,
            "reason": self.reason,
            "frozen_ms": self.frozen_ms,
            "checkpoint_ms": self.checkpoint_ms,
            "transfer_ms": self.transfer_ms,
            "restore_ms": self.restore_ms,
            "total_ms": self.total_ms,
            "bytes": self.bytes,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
        }


@dataclass(frozen=True)
class StepRecord:
    id: int
    migration_id: int
    step: str
    state: str  # STARTED, DONE, FAILED
    detail: str | None
    bytes: int | None
    started_at: datetime
    finished_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "migration_id": self.migration_id,
            "step": self.step,
            "state": self.state,
            "detail": self.detail,
            "bytes": self.bytes,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
        }


@dataclass(frozen=True)
class PowerEventRecord:
    id: int
    node: str
    action: str
    state: str  # ONGOING, SUCCEEDED, FAILED
    reason: str | None
    detail: str | None
    at: datetime
    finished_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "node": self.node,
            "action": self.action,
            "state": self.state,
            "reason": self.reason,
            "detail": self.detail,
            "at": iso(self.at),
            "finished_at": iso(self.finished_at),
        }


@dataclass(frozen=True)
class EnergySample:
    """One reading: a cumulative counter (RAPL, microjoules) or an instant power (DCMI, watts)."""

    node: str
    at: datetime
    source: str  # rapl, dcmi
    energy_uj: int | None = None
    power_w: float | None = None
    zone: str = ""                       # RAPL zone (intel-rapl:0, ...): each wraps on its own
    max_energy_range_uj: int | None = None


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

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "node": self.node,
            "start": iso(self.start),
            "end": iso(self.end),
            "energy_j": self.energy_j,
            "source": self.source,
        }
        if self.container is not None:
            d["container"] = self.container
        return d
