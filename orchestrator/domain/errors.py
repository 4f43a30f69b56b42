"""Errors peakpack reports to operators.

PeakpackError            one line, names the field or node and the fix; the CLI prints it and exits 2
├── InventoryError       the inventory file is malformed or unsafe
├── SnapshotError        a snapshot file is malformed or contradicts the inventory
├── PlanError            a plan does not replay on its snapshot (cap, memory, power order)
├── NodeError            a node could not be reached or answered garbage (names the node)
│   ├── HostKeyError     a node's host key does not match the pinned known_hosts
│   └── OutcomeUnknown   a command may or may not have run (connection lost, timeout): check, don't retry
├── MigrationError       a migration failed (after rollback, if one was needed)
├── PowerError           a BMC action was refused or not confirmed
└── StoreError           the database could not be opened or is locked by another controller
    └── FencedError      a write by a controller whose lease another one took over
"""

from __future__ import annotations


class PeakpackError(Exception):
    """Base: its message is what the operator sees, on one line."""


class InventoryError(PeakpackError):
    pass


class SnapshotError(PeakpackError):
    pass


class PlanError(PeakpackError):
    pass


class NodeError(PeakpackError):
    def __init__(self, node: str, message: str) -> None:
        super().__init__(f"node {node}: {message}")
        self.node = node


class HostKeyError(NodeError):
    pass


class OutcomeUnknown(NodeError):
    """The command was sent but its result never came back: its effect must be checked."""


class MigrationError(PeakpackError):
    pass


class TargetRefused(MigrationError):
    """Preflight refuses the target node (nothing changed); the command line names it `--to`."""


class PowerError(PeakpackError):
    pass


class StoreError(PeakpackError):
    pass


class FencedError(StoreError):
    """A write by a controller whose lease token is no longer the store's: another one took over.
    `reason` is what happened, for the lease's own log line; the message adds the field and
    that this process stops."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"--db: {reason}; this one stops")
