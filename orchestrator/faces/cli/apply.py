"""`peakpack apply PLAN_ID`: run exactly a stored plan after re-checking it on the live cluster;
`peakpack reject PLAN_ID`: decide not to."""

from __future__ import annotations

import getpass
import json
import sys
from typing import Annotated

import typer

from .common import (
    DbOpt,
    InventoryOpt,
    JsonOpt,
    PlanIdArg,
    RequiredInventory,
    err,
    interruptible,
    load_inventory,
    open_store,
    out,
)
from .tables import Column, WideOpt, print_table

COLUMNS = (Column("#", "#", justify="right", priority=0), Column("action", "action", priority=0),
           Column("state", "state", priority=0), Column("why skipped", "reason", priority=1, truncate=True))


def apply(
    plan_id: PlanIdArg,
    inventory: RequiredInventory,
    partial: Annotated[bool, typer.Option("--partial", help="Run the actions that still hold; skip (and list) "
                                          "those whose preconditions fail on the fresh cluster.")] = False,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
    db: DbOpt = None,
) -> None:
    """Re-observe the cluster and apply stored plan PLAN_ID exactly, if it still holds there.
    Ctrl-C or SIGTERM lets the action in flight end and starts no other; the plan is then PARTIAL."""
    from ...act.apply import apply_plan  # lazy: start-up speed
    from ..wiring import live_services

    inv = load_inventory(inventory)
    log = lambda text: err.print(text, markup=False, highlight=False)  # noqa: E731
    with open_store(db) as store, interruptible() as stop:
        services = live_services(inv, store, err)
        try:
            result = apply_plan(store, inv, plan_id, partial=partial, decided_by=f"cli:{getpass.getuser()}",
                                services=services, log=log, stop_requested=stop)
        finally:
            services.close()
    if json_out:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
        stop.exit_if_asked()
        return
    rows = [{"#": a["index"] + 1, "action": a["action"], "state": a["state"] or "-", "reason": a["reason"] or ""}
            for a in result.to_json()["actions"]]
    print_table(out, COLUMNS, rows, wide=wide, title=f"Plan {plan_id}: {result.status.value}")
    for line in result.errors:
        out.print(f"error: {line}", markup=False, highlight=False)
    stop.exit_if_asked()
    if result.status.value == "FAILED":
        raise typer.Exit(1)


def reject(
    plan_id: PlanIdArg,
    inventory: InventoryOpt = None,
    db: DbOpt = None,
) -> None:
    """Mark RECOMMENDED plan PLAN_ID as REJECTED: it will never run."""
    from ...act.apply import reject_plan  # lazy: start-up speed (each command loads only what it uses)

    inv = load_inventory(inventory) if inventory is not None else None
    with open_store(db) as store:
        reject_plan(store, plan_id, f"cli:{getpass.getuser()}", inv)
    out.print(f"plan {plan_id}: REJECTED", markup=False, highlight=False)
