"""The life of a plan, an action and a migration: the states every writer of the journal shares,
and that the executor, apply and the web page read without importing the database."""

from __future__ import annotations

from enum import StrEnum


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
    PRECOPY = "PRECOPY"
    ARMING = "ARMING"
    CHECKPOINTING = "CHECKPOINTING"
    TRANSFERRING = "TRANSFERRING"
    RESTORING = "RESTORING"
    VERIFYING = "VERIFYING"
    CLEANING_UP = "CLEANING_UP"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"                    # failed before the source was touched
    ROLLED_BACK = "ROLLED_BACK"          # restored on the source from the same checkpoint
    ROLLBACK_FAILED = "ROLLBACK_FAILED"  # an operator must look: the record says where state is
    IN_DOUBT = "IN_DOUBT"                # unresolved: a node that matters does not answer (yet)

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_MIGRATION_STATES


class Step(StrEnum):
    """The steps a migration journals (`migrations.steps`), in the order they run; those that move it
    on name the state it is in meanwhile (`state`)."""

    PREFLIGHT = "preflight"
    CREATING = "creating"
    PRECOPY = "precopy"
    ARMING = "arming"
    CHECKPOINTING = "checkpointing"  # journaled before the freeze: a migration with it was frozen
    TRANSFERRING = "transferring"
    RESTORING = "restoring"
    VERIFYING = "verifying"
    CLEANING_UP = "cleaning_up"      # settling after every step went through
    ROLLBACK = "rollback"            # settling after a step failed
    IN_DOUBT = "in_doubt"            # settling could not end it: a fact that matters is unknown
    ON_MOVED = "on_moved"            # the operator's hook ran (`[migration] on_moved`)

    @property
    def state(self) -> MigrationState | None:
        """The migration's state while this step runs (None: the step does not change it)."""
        return _STEP_STATES.get(self)


_STEP_STATES = {Step.PREFLIGHT: MigrationState.PREFLIGHT, Step.CREATING: MigrationState.CREATING,
                Step.PRECOPY: MigrationState.PRECOPY, Step.ARMING: MigrationState.ARMING,
                Step.CHECKPOINTING: MigrationState.CHECKPOINTING, Step.TRANSFERRING: MigrationState.TRANSFERRING,
                Step.RESTORING: MigrationState.RESTORING, Step.VERIFYING: MigrationState.VERIFYING,
                Step.CLEANING_UP: MigrationState.CLEANING_UP, Step.IN_DOUBT: MigrationState.IN_DOUBT}

TERMINAL_MIGRATION_STATES = frozenset(
    {MigrationState.SUCCEEDED, MigrationState.FAILED, MigrationState.ROLLED_BACK,
     MigrationState.ROLLBACK_FAILED}
)
TERMINAL_ACTION_STATES = frozenset(
    {ActionState.SUCCEEDED, ActionState.FAILED, ActionState.SKIPPED, ActionState.ROLLED_BACK}
)


class PlanStatus(StrEnum):
    """A plan's life: made RECOMMENDED; applied (by `peakpack apply`, an approval on the web page,
    or the controller in auto mode) through APPLYING to APPLIED, PARTIAL (some actions skipped) or
    FAILED; or REJECTED by a person, or EXPIRED once older than the configured age."""

    RECOMMENDED = "RECOMMENDED"
    APPLYING = "APPLYING"
    APPLIED = "APPLIED"
    PARTIAL = "PARTIAL"
    FAILED = "FAILED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
