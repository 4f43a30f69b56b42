"""What the store remembers that the planner's rules need (planner/rules.py: grace, quarantine,
hysteresis; decide/qos.py: nodes whose latency-sensitive containers stalled), read for `serve`
and `plan` alike so both plan the same way."""

from __future__ import annotations

from datetime import timedelta

from ..decide.planner.rules import Remembered, idle_updates
from ..decide.qos import lowered_caps
from ..domain.model import ClusterSnapshot, Inventory
from ..domain.ports import Journal


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
                      lowered=lowered_caps(store.pressure.history(since=since), inventory.planner))
