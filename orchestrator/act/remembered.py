"""What the store remembers that the planner's rules need (planner/rules.py: grace, quarantine,
hysteresis; decide/pressure.py: nodes whose latency-sensitive containers stalled, containers a QoS
guard stopped), read for `serve` and `plan` alike so both plan the same way, and for the executor's
last check before a power-off."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from ..decide.planner.rules import Remembered, idle_updates
from ..decide.pressure import EVICTED, RESTART_FAILED, RESTARTED, guard_stopped, lowered_caps
from ..domain.model import ClusterSnapshot, Inventory
from ..domain.ports import Journal
from ..domain.records import QosEventRecord


def remembered(store: Journal, inventory: Inventory, snapshot: ClusterSnapshot, *, record: bool = True) -> Remembered:
    """What the store remembers for the power rules and hysteresis (planner/rules.py), judged
    at the snapshot's time. Nodes that became empty by themselves are noted first (stored
    unless `record` is False: a dry `peakpack plan` changes nothing)."""
    now = snapshot.taken_at
    idle = {n.name: t for n in inventory.nodes if (t := store.power.idle_since(n.name)) is not None}
    for node, at in idle_updates(snapshot, idle, now).items():
        if record:
            store.power.set_idle_since(node, at)
        if at is None:
            idle.pop(node, None)
        else:
            idle[node] = at
    since = now - timedelta(seconds=max(inventory.planner.grace_seconds, inventory.planner.forecast.window_seconds))
    return Remembered(idle_since=idle, woken_at=store.power.woken_since(since), quarantined=store.power.quarantined(),
                      moved_at=store.migrations.moved_since(since),
                      frozen_history=tuple(store.migrations.frozen_history()),
                      lowered=lowered_caps(store.pressure.history(since=since), inventory.planner),
                      stopped=stopped_by_guards(store, inventory, now, {c.name for c in snapshot.containers}))


def guard_events(store: Journal, inventory: Inventory, now: datetime) -> list[QosEventRecord]:
    """The guards' stops and the controller's restarts that say what is stopped now: those of the
    forecast window (an older stop is not started again, nor kept on for)."""
    since = now - timedelta(seconds=inventory.planner.forecast.window_seconds)
    return store.qos.events(since=since, kinds=(EVICTED, RESTARTED, RESTART_FAILED))


def stopped_by_guards(store: Journal, inventory: Inventory, now: datetime, running: Collection[str]) -> dict[str, str]:
    """Containers a node's QoS guard stopped and nothing started since (`decide/pressure.guard_stopped`)
    -> their node, where they are still hosted."""
    return {name: e.node for name, e in guard_stopped(guard_events(store, inventory, now), running).items()}
