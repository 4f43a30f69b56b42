"""`peakpack history`: stored plans, actions, migrations, power events and energy as tables or JSON."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Optional

import typer

from ...domain import inputs
from ...domain.errors import PeakpackError
from .common import DbOpt, JsonOpt, SinceOpt, checked, open_store, out, since_time
from .tables import Column, WideOpt, count, joules, millis, print_table, seconds, share, size_bytes, watts, when


class HistoryKind(StrEnum):
    PLANS = "plans"
    ACTIONS = "actions"
    MIGRATIONS = "migrations"
    POWER = "power"
    ENERGY = "energy"
    DEMAND = "demand"
    TRAFFIC = "traffic"
    SAVINGS = "savings"
    QOS = "qos"
    PRESSURE = "pressure"


class GroupBy(StrEnum):
    NODE = "node"
    CONTAINER = "container"
    DAY = "day"
    PLAN = "plan"


#: which `--by` each kind of history takes (the first: its default)
GROUPINGS = {HistoryKind.ENERGY: (None, GroupBy.NODE, GroupBy.CONTAINER),
             HistoryKind.SAVINGS: ("total", GroupBy.DAY, GroupBy.PLAN),
             HistoryKind.PRESSURE: (None, GroupBy.CONTAINER)}


def rate(value: Any) -> str:
    return "" if value is None else f"{size_bytes(value)}/s"


#: What a person wants to see per kind of history, most important first (priority 0 always
#: shows, higher numbers drop first on a narrow terminal); `--json` has every field.
TABLE_COLUMNS: dict[str, tuple[Column, ...]] = {
    "plans": (
        Column("plan", "plan_id", justify="right", priority=0),
        Column("when", "created_at", when, priority=0),
        Column("policy", "policy", priority=3),
        Column("moves", "migrations", count, justify="right", priority=1),
        Column("actions", "actions", count, justify="right", priority=2),
        Column("on before", "before.nodes_on", count, justify="right", priority=2),
        Column("on after", "after.nodes_on", count, justify="right", priority=1),
        Column("W before", "before.power_w", watts, justify="right", priority=2),
        Column("W after", "after.power_w", watts, justify="right", priority=1),
        Column("status", "status", priority=0),
        Column("J pred", "ledger.predicted_energy_j", joules, justify="right", priority=2),
        Column("J meas", "ledger.measured_energy_j", joules, justify="right", priority=2),
        Column("J model", "ledger.modelled_energy_j", joules, justify="right", priority=3),
        Column("frozen pred", "ledger.predicted_frozen_ms", millis, justify="right", priority=3),
        Column("frozen meas", "ledger.measured_frozen_ms", millis, justify="right", priority=3),
        Column("solver", "solver.status", priority=3),
        Column("solve", "solver.seconds", seconds, justify="right", priority=4),
    ),
    "actions": (
        Column("plan", "plan_id", justify="right", priority=0),
        Column("#", "index", justify="right", priority=0),
        Column("action", "kind", priority=0),
        Column("container", "container", priority=1),
        Column("from", "source", priority=2),
        Column("to", "target", priority=1),
        Column("node", "node", priority=1),
        Column("state", "state", priority=0),
        Column("started", "started_at", when, priority=3),
        Column("detail", "detail", priority=4, truncate=True),
    ),
    "migrations": (
        Column("id", "id", justify="right", priority=0),
        Column("container", "container", priority=0),
        Column("from", "source", priority=1),
        Column("to", "target", priority=1),
        Column("state", "state", priority=0),
        Column("frozen", "frozen_ms", millis, justify="right", priority=1),
        Column("total", "total_ms", millis, justify="right", priority=2),
        Column("data", "bytes", size_bytes, justify="right", priority=3),
        Column("started", "started_at", when, priority=2),
        Column("reason", "reason", priority=4, truncate=True),
    ),
    "power": (
        Column("node", "node", priority=0),
        Column("action", "action", priority=0),
        Column("state", "state", priority=0),
        Column("at", "at", when, priority=1),
        Column("reason", "reason", priority=2, truncate=True),
        Column("detail", "detail", priority=3, truncate=True),
    ),
    "energy": (
        Column("node", "node", priority=0),
        Column("container", "container", priority=0),
        Column("start", "start", when, priority=2),
        Column("end", "end", when, priority=1),
        Column("energy", "energy_j", joules, justify="right", priority=0),
        Column("source", "source", priority=0),
        Column("idle", "idle_j", joules, justify="right", priority=2),
        Column("residual", "residual_j", joules, justify="right", priority=2),
    ),
    "demand": (
        Column("at", "at", when, priority=0),
        Column("container", "container", priority=1),
        Column("node", "node", priority=1),
        Column("cpu", "cpu", lambda v: "" if v is None else f"{v:.3f}", justify="right", priority=0),
        Column("memory", "memory_mb", lambda v: f"{v:,.0f} MB", justify="right", priority=2),
        Column("source", "source", priority=1),
        Column("forecast", "forecast", lambda v: "" if v is None else f"{v:.3f}", justify="right", priority=0),
        Column("plan", "plan_id", justify="right", priority=2),
    ),
    "traffic": (
        Column("client", "client", priority=0),
        Column("server", "server", priority=0),
        Column("from", "client_node", priority=2),
        Column("to", "server_node", priority=2),
        Column("bytes", "bytes", size_bytes, justify="right", priority=0),
        Column("rate", "rate_bps", rate, justify="right", priority=0),
        Column("sent", "c2s_bytes", size_bytes, justify="right", priority=3),
        Column("answered", "s2c_bytes", size_bytes, justify="right", priority=3),
        Column("flows", "flows", count, justify="right", priority=2),
        Column("how", "how", priority=4),
    ),
    "savings": (
        Column("period", "period", priority=0),
        Column("source", "source", priority=0),
        Column("saved", "saved_j", joules, justify="right", priority=0),
        Column("spent", "spent_j", joules, justify="right", priority=1),
        Column("net", "net_j", joules, justify="right", priority=0),
        Column("not measured", "unmeasured_costs", count, justify="right", priority=2),
        Column("model", "model_spent_j", joules, justify="right", priority=3),
    ),
    "qos": (
        Column("at", "at", when, priority=0),
        Column("node", "node", priority=0),
        Column("kind", "kind", priority=0),
        Column("container", "container", priority=1),
        Column("reason", "reason", priority=1, truncate=True, min_width=24),
        Column("log", "log", priority=4),
        Column("seq", "seq", justify="right", priority=4),
    ),
    "pressure": (
        Column("at", "at", when, priority=0),
        Column("container", "container", priority=0),
        Column("node", "node", priority=1),
        Column("qos", "qos", priority=1),
        Column("cpu stall", "cpu_stall", share, justify="right", priority=0),
        Column("rq wait", "wait", share, justify="right", priority=1),
        Column("mem some", "memory_some", share, justify="right", priority=2),
        Column("mem full", "memory_full", share, justify="right", priority=2),
        Column("interval", "interval_s", seconds, justify="right", priority=3),
    ),
    "pressure by container": (
        Column("container", "container", priority=0),
        Column("node", "node", priority=1),
        Column("qos", "qos", priority=1),
        Column("seen", "observations", justify="right", priority=2),
        Column("mean stall", "mean_stall", share, justify="right", priority=0),
        Column("max stall", "max_stall", share, justify="right", priority=1),
        Column("suspected", "suspected", priority=0, truncate=True, min_width=24),
    ),
}


def print_rows(kind: str, rows: list[dict[str, Any]], wide: bool = False) -> None:
    if not rows:
        out.print(f"{kind}: nothing recorded in that period")
        return
    print_table(out, TABLE_COLUMNS[kind], rows, title=f"{kind} ({len(rows)})", wide=wide)


#: the kinds that `--container` narrows to one container
PER_CONTAINER = (HistoryKind.DEMAND, HistoryKind.PRESSURE, HistoryKind.QOS)


def history(
    kind: Annotated[HistoryKind, typer.Argument(help="What to show.")],
    since: SinceOpt = None,
    by: Annotated[Optional[GroupBy], typer.Option(
        help="Energy per node or per container; savings per day or per plan (default: in total); pressure per "
             "container (with suspected devils).")] = None,
    container: Annotated[Optional[str], typer.Option(callback=checked(inputs.container_name),
                                                     help="`history demand|pressure|qos` of this container "
                                                          "only.")] = None,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
    db: DbOpt = None,
) -> None:
    """Show stored plans, actions, migrations, power events, energy, container demand (CPU cores
    from cgroup counters, and the forecast the next plan was given), traffic between containers
    (conntrack byte counters), the energy saved (measured counters only), container pressure (the
    share of each interval it was ready but not running) or what the nodes' QoS guards did."""
    start = since_time(since)
    if by is not None and by not in GROUPINGS.get(kind, ()):
        raise PeakpackError("--by: `history energy` groups by node or container, `history savings` by day or plan, "
                            "`history pressure` by container")
    if container is not None and kind not in PER_CONTAINER:
        raise PeakpackError("--container: only `history demand`, `pressure` and `qos` are per container")
    with open_store(db) as store:
        rows = history_rows(store, kind, start, by, container)
        notes = history_notes(store, kind, start)
    if json_out:
        sys.stdout.write(json.dumps(rows) + "\n")
    else:
        print_rows(f"{kind.value} by container" if by and kind is HistoryKind.PRESSURE else kind.value, rows, wide)
        for line in notes:
            out.print(line, markup=False, highlight=False)


def history_notes(store: Any, kind: HistoryKind, since: Any) -> list[str]:
    """What a table of traffic or savings leaves out: nodes not measured, and the savings'
    headline (measured and modelled figures named apart)."""
    if kind is HistoryKind.TRAFFIC:
        return sorted({r.note for r in store.traffic.reads(since) if r.note})
    if kind is HistoryKind.SAVINGS:
        from ...domain.savings import headline, ledger  # lazy: start-up speed

        book = ledger(store.savings.history(since), datetime.now(UTC), since)
        return [headline(book), *book.not_measured]
    return []


def plan_ledger(store: Any, since: Any) -> list[dict[str, Any]]:
    """Each plan with its "ledger": measured energy and downtime against its prediction
    (`orchestrator.decide.predict.check_prediction` says what is compared with what)."""
    from ...decide.predict import check_prediction  # lazy: start-up speed (each command loads only what it uses)

    store.plans.expire()
    plans = store.plans.history(since)
    if not plans:
        return []
    first = min(p.created_at for p in plans)
    energy = store.energy.history(first)
    plan_of = {a.id: a.plan_id for a in store.plans.actions(first)}
    frozen: dict[int, list[float]] = {}
    for m in store.migrations.history(first):
        if m.frozen_ms is not None and m.action_id in plan_of:
            frozen.setdefault(plan_of[m.action_id], []).append(m.frozen_ms)
    ran = {"APPLIED", "PARTIAL", "FAILED"}  # a plan nobody applied has nothing to check
    return [{**p.to_json(), "ledger": check_prediction(p.decided_at or p.created_at, p.prediction,
                                                       energy if p.status.value in ran else [],
                                                       frozen.get(p.plan_id, []))}
            for p in plans]


def history_rows(store: Any, kind: HistoryKind, since: Any, by: GroupBy | None,
                 container: str | None = None) -> list[dict[str, Any]]:
    if kind is HistoryKind.TRAFFIC:
        from ...decide.traffic import pair_totals  # lazy: start-up speed (each command loads only what it uses)

        return [t.to_json() for t in pair_totals(store.traffic.pairs(since), store.traffic.reads(since))]
    if kind is HistoryKind.SAVINGS:
        from ...domain.savings import ledger  # lazy: start-up speed (each command loads only what it uses)

        return ledger(store.savings.history(since), datetime.now(UTC), since).rows(by.value if by else "total")
    if kind is HistoryKind.DEMAND:
        from ...decide.demand import with_forecasts  # lazy: start-up speed (each command loads only what it uses)

        return with_forecasts(store.demand.history(container, since), store.plans.cpus(since))
    if kind is HistoryKind.PRESSURE:
        rows = store.pressure.history(container, since)
        return pressure_by_container(store, rows, since) if by else [r.to_json() for r in rows]
    if kind is HistoryKind.QOS:
        return [e.to_json() for e in store.qos.events(since) if container is None or e.container == container]
    if kind is HistoryKind.PLANS:
        return plan_ledger(store, since)
    if kind is HistoryKind.ACTIONS:
        records = store.plans.actions(since)
    elif kind is HistoryKind.MIGRATIONS:
        records = store.migrations.history(since)
    elif kind is HistoryKind.POWER:
        records = store.power.events(since)
    else:
        records = store.energy.history(since, by=by.value if by else None)
    return [r.to_json() for r in records]




def pressure_by_container(store: Any, rows: list[Any], since: Any) -> list[dict[str, Any]]:
    """Each container's stall over the period, and whether it is a suspected devil (its co-runners
    stall when it is busy: `decide/pressure.suspected_devils`, at the default `[planner.qos] stall_share`)."""
    from ...decide.pressure import suspected_devils  # lazy: start-up speed (each command loads only what it uses)
    from ...domain.settings import PlannerSettings

    suspects = suspected_devils(store.pressure.history(since=since), store.demand.history(since=since),
                                PlannerSettings())
    by_name: dict[str, list[Any]] = {}
    for r in rows:
        by_name.setdefault(r.container, []).append(r)
    out = []
    for name, mine in sorted(by_name.items()):
        stalls = [r.stall for r in mine if r.stall is not None]
        out.append({"container": name, "node": mine[-1].node, "qos": mine[-1].qos, "observations": len(mine),
                    "mean_stall": sum(stalls) / len(stalls) if stalls else None,
                    "max_stall": max(stalls) if stalls else None, "suspected": suspects.get(name)})
    return out
