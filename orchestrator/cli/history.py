"""`peakpack history`: stored plans, actions, migrations, power events and energy as tables or JSON."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from ..errors import PeakpackError
from .common import DbOpt, JsonOpt, open_store, out, since_time

class HistoryKind(StrEnum):
    PLANS = "plans"
    ACTIONS = "actions"
    MIGRATIONS = "migrations"
    POWER = "power"
    ENERGY = "energy"


class GroupBy(StrEnum):
    NODE = "node"
    CONTAINER = "container"


#: What a person wants to see per kind of history; `--json` has every field.
TABLE_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "plans": (("plan_id", "plan"), ("created_at", "when"), ("policy", "policy"), ("dry_run", "dry run"),
              ("migrations", "moves"), ("actions", "actions"), ("before.nodes_on", "on before"),
              ("after.nodes_on", "on after"), ("before.power_w", "W before"), ("after.power_w", "W after"),
              ("solver.status", "solver"), ("solver.seconds", "s")),
    "actions": (("plan_id", "plan"), ("index", "#"), ("kind", "action"), ("container", "container"),
                ("source", "from"), ("target", "to"), ("node", "node"), ("state", "state"),
                ("started_at", "started"), ("detail", "detail")),
    "migrations": (("id", "id"), ("container", "container"), ("source", "from"), ("target", "to"),
                   ("state", "state"), ("frozen_ms", "frozen ms"), ("total_ms", "total ms"),
                   ("bytes", "bytes"), ("started_at", "started"), ("reason", "reason")),
    "power": (("node", "node"), ("action", "action"), ("state", "state"), ("at", "at"),
              ("reason", "reason"), ("detail", "detail")),
    "energy": (("node", "node"), ("container", "container"), ("start", "start"), ("end", "end"),
               ("energy_j", "energy (J)"), ("source", "source")),
}


def _cell(row: dict[str, Any], path: str) -> str:
    value: Any = row
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1 else f"{value:,.1f}"
    if isinstance(value, str) and len(value) > 19 and value[10:11] == "T":  # ISO time: drop zone and fraction
        return value[:19].replace("T", " ")
    return str(value)


def print_rows(kind: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        out.print(f"{kind}: nothing recorded in that period")
        return
    columns = [(k, title) for k, title in TABLE_COLUMNS[kind] if any(_cell(r, k) for r in rows)]
    table = Table(title=f"{kind} ({len(rows)})")
    for _, title in columns:
        table.add_column(title, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row, k) for k, _ in columns))
    out.print(table)



def history(
    kind: Annotated[HistoryKind, typer.Argument(help="What to show.")],
    since: Annotated[Optional[str], typer.Option(help="Only the last DURATION, e.g. 30m, 2h, 7d.")] = None,
    by: Annotated[Optional[GroupBy], typer.Option(help="Energy per node or per container.")] = None,
    json_out: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Show stored plans, actions, migrations, power events or energy."""
    start = since_time(since)
    if by is not None and kind is not HistoryKind.ENERGY:
        raise PeakpackError("--by: only `history energy` can be grouped by node or container")
    with open_store(db) as store:
        rows = history_rows(store, kind, start, by)
    if json_out:
        sys.stdout.write(json.dumps(rows) + "\n")
    else:
        print_rows(kind.value, rows)


def history_rows(store: Any, kind: HistoryKind, since: Any, by: GroupBy | None) -> list[dict[str, Any]]:
    if kind is HistoryKind.PLANS:
        records = store.list_plans(since)
    elif kind is HistoryKind.ACTIONS:
        records = store.list_actions(since)
    elif kind is HistoryKind.MIGRATIONS:
        records = store.list_migrations(since)
    elif kind is HistoryKind.POWER:
        records = store.list_power_events(since)
    else:
        records = store.list_energy(since, by=by.value if by else None)
    return [r.to_json() for r in records]


