"""The `peakpack` command line. Every failure an operator can cause ends in one line on stderr
and exit status 2; `--json` output goes to stdout and nothing else does."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from .cli_common import DbOpt, InventoryOpt, JsonOpt, err, open_store, out, since_time
from .config import demo_inventory, demo_snapshot, load_inventory, load_snapshot
from .errors import PeakpackError
from .model import ClusterSnapshot, Inventory
from .plan import Plan

app = typer.Typer(
    help="Keep a cluster of Docker hosts packed at peak energy efficiency.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
SnapshotOpt = Annotated[
    Optional[Path],
    typer.Option("--snapshot", "-s", help="Observed state as JSON; default: observe the nodes "
                 "(or the embedded demo snapshot with the demo inventory)."),
]


def load_inputs(
    inventory_path: Path | None, snapshot_path: Path | None
) -> tuple[Inventory, ClusterSnapshot]:
    """Inventory and snapshot from files, the live nodes, or the embedded demo."""
    if inventory_path is None:
        if snapshot_path is not None:
            raise PeakpackError("--snapshot: give --inventory too (the snapshot names its nodes)")
        inventory = demo_inventory()
        return inventory, demo_snapshot(inventory)
    inventory = load_inventory(inventory_path)
    if snapshot_path is not None:
        return inventory, load_snapshot(snapshot_path, inventory)
    from .observe import observe_cluster

    return inventory, observe_cluster(inventory)


def print_plan(plan: Plan) -> None:
    table = Table(title=f"Plan {plan.plan_id} ({plan.policy}, {'dry run' if plan.dry_run else 'live'})")
    table.add_column("#", justify="right")
    table.add_column("action")
    table.add_column("what")
    for i, a in enumerate(plan.actions, 1):
        what = f"{a.container}: {a.source} -> {a.target}" if a.container else str(a.node)
        table.add_row(str(i), a.kind.value, what)
    if not plan.actions:
        table.add_row("-", "none", "the current placement is already the best found")
    out.print(table)
    summary = Table(show_header=True)
    summary.add_column("")
    summary.add_column("nodes on", justify="right")
    summary.add_column("power (W)", justify="right")
    summary.add_column("busiest node", justify="right")
    for label, m in (("before", plan.before), ("after", plan.after)):
        summary.add_row(label, str(m.nodes_on), f"{m.power_w:.1f}", f"{m.max_cpu_util:.0%}")
    out.print(summary)
    s = plan.solver
    out.print(
        f"solver: {s.status} in {s.seconds:.2f}s, objective {s.objective:.1f} W, "
        f"bound {s.bound:.1f} W"
    )


@app.command()
def plan(
    inventory: InventoryOpt = None,
    snapshot: SnapshotOpt = None,
    policy: Annotated[str, typer.Option(help="peakpack, noop, ffd, bestfit95, spread, dotproduct")] = "peakpack",
    time_limit: Annotated[float, typer.Option("--time-limit", min=0.1, help="Solver seconds.")] = 10.0,
    json_out: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Compute a dry-run plan, store it and print it. Nothing on the nodes changes."""
    from dataclasses import replace

    from .planning import make_plan

    inv, snap = load_inputs(inventory, snapshot)
    result = make_plan(inv, snap, policy=policy, time_limit_s=time_limit)
    with open_store(db) as store:
        plan_id = store.save_plan(result, inventory=inv.cluster.name, snapshot=snap)
    result = replace(result, plan_id=plan_id)
    if json_out:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
    else:
        print_plan(result)


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


@app.command()
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


@app.command()
def serve(
    inventory: InventoryOpt = None,
    snapshot: SnapshotOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Store plans, execute nothing.")] = False,
    once: Annotated[bool, typer.Option("--once", help="Run one epoch and exit.")] = False,
    policy: Annotated[str, typer.Option(help="Placement policy.")] = "peakpack",
    time_limit: Annotated[float, typer.Option("--time-limit", min=0.1)] = 10.0,
    epoch_seconds: Annotated[Optional[int], typer.Option("--epoch-seconds", min=1, help="Override the inventory's epoch.")] = None,
    metrics_port: Annotated[Optional[int], typer.Option("--metrics-port", min=1, max=65535, help="Serve Prometheus metrics on this port.")] = None,
    metrics_addr: Annotated[str, typer.Option("--metrics-addr", help="Address for the metrics endpoint.")] = "127.0.0.1",
    db: DbOpt = None,
) -> None:
    """Run the controller: observe -> plan -> execute -> record every epoch until SIGTERM/SIGINT."""
    from .controller import Controller, ControllerSettings

    inv = load_inventory(inventory) if inventory else demo_inventory()
    if inventory is None and snapshot is None:
        dry_run = True  # the embedded demo has no real nodes to act on
    if snapshot is not None and not dry_run:
        raise PeakpackError("--snapshot: a snapshot file can only be planned, not executed; add --dry-run")
    settings = ControllerSettings(
        dry_run=dry_run,
        policy=policy,
        time_limit_s=time_limit,
        epoch_seconds=epoch_seconds or inv.cluster.epoch_seconds,
        snapshot_path=snapshot,
        demo=inventory is None,
        metrics_port=metrics_port,
        metrics_addr=metrics_addr,
    )
    with open_store(db) as store:
        services = None
        if not dry_run:
            from .wiring import live_services

            services = live_services(inv, store, console=err)
        controller = Controller(inv, store, settings, console=err, services=services)
        if once:
            controller.run_once()
        else:
            controller.run_forever()


def _register_optional() -> None:
    """Sub-commands that live in their own modules (lab, migrate, simulate, ...)."""
    import importlib

    for module, attr, name in (
        ("orchestrator.cli_lab", "app", "lab"),
        ("orchestrator.cli_migrate", "migrate", None),
        ("orchestrator.cli_migrate", "pin", None),
        ("orchestrator.cli_simulate", "simulate", None),
        ("orchestrator.cli_report", "report", None),
        ("orchestrator.cli_power", "app", "power"),
    ):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        obj = getattr(mod, attr)
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=name)
        else:
            app.command(name=name)(obj)


_register_optional()


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except PeakpackError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(2)
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        raise SystemExit(130)
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code)
    except typer.TyperException as exc:  # usage errors (typer's own click) with standalone_mode off
        show = getattr(exc, "show", None)
        if show is None:
            raise
        show()
        raise SystemExit(2)
    if isinstance(code, int) and code:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
