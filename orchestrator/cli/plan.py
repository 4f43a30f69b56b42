"""`peakpack plan`: observe (or read a snapshot), solve, store and print a plan; nothing changes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from ..config import demo_inventory, demo_snapshot, load_inventory, load_snapshot
from ..errors import PeakpackError
from ..model import ClusterSnapshot, Inventory
from ..plan import Plan
from .common import DbOpt, InventoryOpt, JsonOpt, err, open_store, out

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
    from ..observe import observe_cluster

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


def immovable_rows(snapshot: ClusterSnapshot) -> list[dict[str, str]]:
    """Containers every plan leaves where they are, and why (their nodes stay on)."""
    return [{"container": c.name, "node": c.node, "reason": c.immovable}
            for c in sorted(snapshot.containers, key=lambda c: c.name) if c.immovable is not None]


def print_immovable(rows: list[dict[str, str]]) -> None:
    if not rows:
        return
    table = Table(title="Staying put (cannot be live-migrated)")
    for col in ("container", "node", "reason"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["container"], r["node"], r["reason"])
    out.print(table)


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

    from ..planning import make_plan

    inv, snap = load_inputs(inventory, snapshot)
    result = make_plan(inv, snap, policy=policy, time_limit_s=time_limit)
    with open_store(db) as store:
        plan_id = store.save_plan(result, inventory=inv.cluster.name, snapshot=snap)
    result = replace(result, plan_id=plan_id)
    immovable = immovable_rows(snap)
    for node, why in sorted(snap.held.items()):  # on stderr too, so it is seen with --json
        err.print(f"held: {node}: {why}", markup=False, highlight=False)
    if json_out:
        sys.stdout.write(json.dumps({**result.to_json(), "immovable": immovable, "held": dict(snap.held)}) + "\n")
    else:
        print_plan(result)
        print_immovable(immovable)


