"""What the page shows, read from the store: one JSON-able dict that the server renders as HTML
tables and `/api/state` hands to the page's script for the charts and the live refresh.

Nodes are the latest plan's observed snapshot with the power events and migrations that
succeeded after it applied, so the table does not lag an epoch behind what was done.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from peakpack.db.store import Store

from ...domain.capacity import node_capacity
from ...domain.model import Inventory
from ...domain.records import EnergyRow
from ...domain.savings import headline, ledger
from ...domain.states import PlanStatus


@dataclass(frozen=True)
class View:
    """How much history the page shows."""

    since: timedelta = timedelta(hours=24)
    plans: int = 20
    qos_events: int = 100  # the newest QoS guard events shown


def page_state(store: Store, inventory: Inventory | None, view: View = View()) -> dict[str, Any]:
    now = datetime.now(UTC)
    start = now - view.since
    plans = store.plans.recent(view.plans)
    migrations = store.migrations.history(start)
    power = store.power.events(start)
    qos = store.qos.events(start)[-view.qos_events:]
    node_energy = store.energy.history(start)
    actions: dict[int, list[dict[str, Any]]] = {p.plan_id: [] for p in plans}
    if plans:
        for a in store.plans.actions(plans[0].created_at):
            if a.plan_id in actions:
                actions[a.plan_id].append(a.to_json())
    snapshot = store.plans.snapshot(plans[-1].plan_id) if plans else None
    savings = ledger(store.savings.history(), now)
    return finite({
        "generated_at": now.isoformat(),
        "savings": {"headline": headline(savings), "by_source": savings.rows("total")},
        "since_hours": view.since.total_seconds() / 3600,
        "nodes": node_rows(snapshot, inventory, migrations, power, node_energy),
        # what the latest plan left where it is and why (a bad label says which and how to fix it)
        "staying": [{"container": c["name"], "node": c["node"], "reason": c["immovable"]}
                    for c in (snapshot or {}).get("containers", []) if c.get("immovable")],
        "plans": [{**p.to_json(), "actions_list": actions[p.plan_id],
                   "recommended": p.status == PlanStatus.RECOMMENDED and not expired(p.expires_at, now)}
                  for p in reversed(plans)],
        "migrations": [m.to_json() for m in reversed(migrations)],
        "power": [e.to_json() for e in reversed(power)],
        "qos": [e.to_json() for e in reversed(qos)],
        "energy": {"nodes": cumulative_series(node_energy, lambda r: r.node),
                   "containers": cumulative_series(store.energy.of_containers(start), lambda r: r.container or "")},
    })


def finite(value: Any) -> Any:
    """`value` with every infinite or NaN number as None: JSON has no such numbers, and a store
    may hold one (a plan made by an older peakpack, an overflowing prediction); the page shows a
    gap rather than failing."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def expired(expires_at: datetime | None, now: datetime) -> bool:
    """A RECOMMENDED plan past its age gets no buttons, even before the store marks it EXPIRED."""
    return expires_at is not None and expires_at <= now


def node_rows(snapshot: dict[str, Any] | None, inventory: Inventory | None, migrations: list[Any],
              power: list[Any], energy: list[EnergyRow]) -> list[dict[str, Any]]:
    """One row per node: on/off, CPU load against the cap, last measured power and its source."""
    if snapshot is None and inventory is None:
        return []
    taken = datetime.fromisoformat(snapshot["taken_at"]) if snapshot else None
    powered = {n["name"]: n["powered"] for n in snapshot["nodes"]} if snapshot else {}
    where = {c["name"]: c["node"] for c in snapshot["containers"]} if snapshot else {}
    cpu = {c["name"]: c["cpu"] for c in snapshot["containers"]} if snapshot else {}

    def later(t: datetime | None) -> bool:
        return taken is None or (t is not None and t > taken)

    for e in power:
        if e.state == "SUCCEEDED" and later(e.finished_at):
            powered[e.node] = e.action == "power_on"
    for m in migrations:
        if m.state == "SUCCEEDED" and later(m.finished_at) and m.container in where:
            where[m.container] = m.target
    last_power: dict[str, EnergyRow] = {}
    for row in energy:
        last_power[row.node] = row
    specs = inventory.nodes_by_name if inventory else {}
    names = list(specs) + [n for n in powered if n not in specs]
    rows = []
    for name in names:
        load = sum(cpu[c] for c, n in where.items() if n == name)
        cap = node_capacity(specs[name], inventory.cluster)[0] if name in specs and inventory else None
        r = last_power.get(name)
        seconds = (r.end - r.start).total_seconds() if r else 0.0
        rows.append({
            "name": name,
            "powered": powered.get(name, True) if snapshot else None,  # unlisted: on (see config)
            "containers": sorted(c for c, n in where.items() if n == name),
            "cpu": round(load, 3),
            "cap_cpu": cap,
            "load_of_cap": round(load / cap, 3) if cap else None,
            "power_w": round(r.energy_j / seconds, 1) if r and seconds > 0 else None,
            "power_source": r.source if r else None,
            "power_at": r.end.isoformat() if r else None,
            "held": (snapshot or {}).get("held", {}).get(name),
        })
    return rows


def cumulative_series(rows: list[EnergyRow], key: Any) -> dict[str, Any]:
    """Energy accumulated per series over time, in Wh (0 where its first interval starts), on one
    shared time axis (seconds) as uPlot wants it: `{"t": [...], "series": {label: [Wh or None, ...]}}`.
    A label carries the sources of its numbers (rapl, dcmi, model)."""
    firsts: dict[str, datetime] = {}
    for r in rows:  # in time order
        firsts.setdefault(key(r), r.start)
    times = sorted({r.end.timestamp() for r in rows} | {t.timestamp() for t in firsts.values()})
    index = {t: i for i, t in enumerate(times)}
    totals: dict[str, float] = {}
    sources: dict[str, set[str]] = {}
    values: dict[str, list[float | None]] = {}
    for name, start in firsts.items():  # each series starts at 0 Wh where its first interval starts
        values[name] = [None] * len(times)
        values[name][index[start.timestamp()]] = 0.0
    for r in rows:
        name = key(r)
        totals[name] = totals.get(name, 0.0) + r.energy_j / 3600
        sources.setdefault(name, set()).add(r.source)
        values[name][index[r.end.timestamp()]] = round(totals[name], 4)
    return {"t": times,
            "series": {f"{name} ({'+'.join(sorted(sources[name]))})": v for name, v in sorted(values.items())}}
