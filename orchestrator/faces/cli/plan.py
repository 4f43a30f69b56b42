"""`peakpack plan`: observe (or read a snapshot), solve, store and print a plan; nothing changes."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.table import Table

from ...domain import inputs
from ...domain.errors import PeakpackError
from ...domain.model import Clients, ClusterSnapshot, Inventory
from ...domain.ports import Journal
from .common import DbOpt, InventoryOpt, JsonOpt, PlanIdArg, TimeLimitOpt, checked, err, open_store, out
from .tables import Column, WideOpt, print_table

if TYPE_CHECKING:
    from ...domain.plan import Action, Plan

SnapshotOpt = Annotated[
    Optional[Path],
    typer.Option("--snapshot", "-s", exists=True, dir_okay=False,
                 help="Observed state as JSON; default: observe the nodes "
                 "(or the embedded demo snapshot with the demo inventory)."),
]


def load_inputs(
    inventory_path: Path | None, snapshot_path: Path | None, store: Journal | None = None
) -> tuple[Inventory, ClusterSnapshot]:
    """Inventory and snapshot from files, the live nodes, or the embedded demo (`store`: the nodes
    it switched off are asked to their BMCs first)."""
    # lazy: start-up speed (each command loads only what it uses)
    from ...domain.config import demo_inventory, demo_snapshot, load_inventory, load_snapshot

    if inventory_path is None:
        if snapshot_path is not None:
            raise PeakpackError("--snapshot: give --inventory too (the snapshot names its nodes)")
        inventory = demo_inventory()
        return inventory, demo_snapshot(inventory)
    inventory = load_inventory(inventory_path)
    if snapshot_path is not None:
        return inventory, load_snapshot(snapshot_path, inventory)
    from peakpack.power.ipmi import power_probe  # lazy: start-up speed (each command loads only what it uses)

    from ...observe.cluster import observe_cluster, switched_off  # lazy: start-up speed

    off = switched_off(store, datetime.now(UTC)) if store is not None else frozenset()
    return inventory, observe_cluster(inventory, power_probe(inventory), believed_off=off)


#: The actions of a plan as `print_table` shows them (rows: `{"#", "action", "what"}`).
ACTION_COLUMNS = (
    Column("#", "#", justify="right", priority=0),
    Column("action", "action", priority=0),
    Column("what", "what", priority=0, truncate=True, min_width=24),
)


def clients_of(snapshot: ClusterSnapshot, a: Action) -> Clients | None:
    """What the clients of a migrated container see (None for a power action)."""
    if a.container is None:
        return None
    found = next((c for c in snapshot.containers if c.name == a.container), None)
    return Clients.ELSEWHERE if found is None else found.clients


def print_plan(plan: Plan, snapshot: ClusterSnapshot, wide: bool = False) -> None:
    def what(a: Action) -> str:
        if a.container is None:
            return str(a.node)
        clients = clients_of(snapshot, a)
        return f"{a.container}: {a.source} -> {a.target}" + (f" ({clients.says(str(a.target))})" if clients else "")

    rows = [{"#": i, "action": a.kind.value, "what": what(a)} for i, a in enumerate(plan.actions, 1)]
    if not plan.actions:
        rows = [{"#": "-", "action": "none", "what": "the current placement is already the best found"}]
    print_table(out, ACTION_COLUMNS, rows, wide=wide,
                title=f"Plan {plan.plan_id} ({plan.policy}, {'dry run' if plan.dry_run else 'live'})")
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
        f"solver: {s.status} in {s.seconds:.2f}s after {s.work:.2f} deterministic s of work, "
        f"objective {s.objective:.1f} W, bound {s.bound:.1f} W"
    )
    if s.stopped_by_clock:
        out.print("solver: stopped by its wall-clock safety net (`--time-limit`) before its work limit "
                  "([planner] work_limit): another run may give another plan", markup=False, highlight=False)


def immovable_rows(snapshot: ClusterSnapshot) -> list[dict[str, str]]:
    """Containers every plan leaves where they are, and why (their nodes stay on)."""
    return [{"container": c.name, "node": c.node, "reason": c.immovable}
            for c in sorted(snapshot.containers, key=lambda c: c.name) if c.immovable is not None]


IMMOVABLE_COLUMNS = (Column("container", "container", priority=0), Column("node", "node", priority=0),
                     Column("reason", "reason", priority=0, truncate=True, min_width=24))


def print_immovable(rows: list[dict[str, str]], wide: bool = False) -> None:
    if rows:
        print_table(out, IMMOVABLE_COLUMNS, rows, title="Staying put (cannot be live-migrated)", wide=wide)


def qos_rows(snapshot: ClusterSnapshot, suspects: dict[str, str]) -> list[dict[str, str]]:
    """Containers whose `peakpack.qos` label is wrong (they count as latency-sensitive) and those
    suspected of slowing their neighbours, next to their labels."""
    return [{"container": c.name, "node": c.node, "class": c.cls.value, "qos": c.qos.value,
             "note": "; ".join(n for n in (c.qos_problem, suspects.get(c.name)) if n)}
            for c in sorted(snapshot.containers, key=lambda c: c.name) if c.qos_problem or c.name in suspects]


QOS_COLUMNS = (Column("container", "container", priority=0), Column("node", "node", priority=1),
               Column("peakpack.class", "class", priority=1), Column("peakpack.qos", "qos", priority=1),
               Column("note", "note", priority=0, truncate=True, min_width=24))


def suspected(store: Any, inventory: Inventory, snapshot: ClusterSnapshot) -> dict[str, str]:
    """Suspected devils over the forecast window before the snapshot (`decide/pressure.suspected_devils`)."""
    from ...decide.pressure import suspected_devils  # lazy: start-up speed (each command loads only what it uses)

    since = snapshot.taken_at - timedelta(seconds=inventory.planner.forecast.window_seconds)
    return suspected_devils(store.pressure.history(since=since), store.demand.history(since=since),
                            inventory.planner)


app = typer.Typer(add_completion=False)


@app.callback(invoke_without_command=True)
def plan(
    ctx: typer.Context,
    inventory: InventoryOpt = None,
    snapshot: SnapshotOpt = None,
    policy: Annotated[str, typer.Option(help="peakpack, noop, ffd, bestfit95, spread, dotproduct")] = "peakpack",
    time_limit: TimeLimitOpt = None,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
    explain: Annotated[Optional[str], typer.Option(
        "--explain", metavar="CONTAINER", callback=checked(inputs.container_name),
        help="Also print why CONTAINER moves or stays.")] = None,
    db: DbOpt = None,
) -> None:
    """Compute a plan, store it RECOMMENDED and print it; nothing on the nodes changes.
    `peakpack apply PLAN_ID` runs it; `peakpack plan show PLAN_ID` shows a stored one."""
    if ctx.invoked_subcommand is not None:
        return
    from ...act.epoch import propose_plan  # lazy: start-up speed (each command loads only what it uses)
    from ...domain.states import PlanStatus

    with open_store(db) as store:  # plans as serve plans; remembers nothing (a dry plan changes nothing)
        inv, snap = load_inputs(inventory, snapshot, store)
        if explain is not None and explain not in {c.name for c in snap.containers}:
            raise PeakpackError(f"--explain: no container {explain!r} in the snapshot; name one it lists")
        proposal = propose_plan(store, inv, snap, status=PlanStatus.RECOMMENDED, dry_run=True, remember=False,
                                policy=policy, time_limit_s=time_limit)
        qos = qos_rows(proposal.snapshot, suspected(store, inv, proposal.snapshot))
    result, snap, prediction, until = proposal.plan, proposal.snapshot, proposal.prediction, proposal.expires_at
    plan_id = result.plan_id
    immovable = immovable_rows(snap)
    lowered = {n: {"cap": c.cap, "why": c.why} for n, c in sorted(proposal.lowered.items())}
    for node, why in sorted(snap.held.items()):  # on stderr too, so it is seen with --json
        err.print(f"held: {node}: {why}", markup=False, highlight=False)
    if json_out:
        doc = result.to_json()
        for a, p, action in zip(doc["actions"], prediction.actions, result.actions, strict=True):
            a["prediction"] = p.to_json()
            if (clients := clients_of(snap, action)) is not None:
                a["clients"] = clients.value
        sys.stdout.write(json.dumps({**doc, "immovable": immovable, "held": dict(snap.held), "qos": qos,
                                     "lowered_caps": lowered,
                                     "status": "RECOMMENDED", "expires_at": until.isoformat(),
                                     "prediction": prediction.to_json(),
                                     **({"explanation": {explain: result.explanations[explain]}}
                                        if explain is not None else {})}) + "\n")
    else:
        print_plan(result, snap, wide)
        print_immovable(immovable, wide)
        if qos:
            print_table(out, QOS_COLUMNS, qos, title="QoS: label problems and suspected devils", wide=wide)
        for node, c in lowered.items():
            out.print(f"{node}: {c['why']}", markup=False, highlight=False)
        total = prediction.to_json()
        out.print(f"predicted over {total['horizon_s'] / 3600:g} h (model): {total['energy_saved_j'] / 1000:.1f} kJ "
                  f"saved after {total['migration_j'] / 1000:.1f} kJ of migrations; frozen "
                  f"{total['frozen_ms'] / 1000:.1f} s in total ({total['frozen_source']})",
                  markup=False, highlight=False)
        apply_with = f" --inventory {inventory}" if inventory is not None else " --inventory FILE"
        out.print(f"stored as plan {plan_id}, RECOMMENDED until {until:%Y-%m-%d %H:%M:%S} UTC: "
                  f"peakpack apply {plan_id}{apply_with}", markup=False, highlight=False)
        if explain is not None:
            out.print(f"{explain}: {result.explanations[explain]}", markup=False, highlight=False)


SHOW_COLUMNS = (
    Column("#", "#", justify="right", priority=0),
    Column("action", "action", priority=0),
    Column("what", "what", priority=0, truncate=True, min_width=16),
    Column("state", "state", priority=0),
    Column("saved kJ", "saved_kj", justify="right", priority=1),
    Column("frozen s", "frozen_s", justify="right", priority=2),
    Column("detail", "detail", priority=3, truncate=True),
)


@app.command("show")
def show(
    plan_id: PlanIdArg,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
    explain: Annotated[Optional[str], typer.Option(
        "--explain", metavar="CONTAINER", callback=checked(inputs.container_name),
        help="Also print why the stored plan moves CONTAINER or leaves it (no new solve).")] = None,
    db: DbOpt = None,
) -> None:
    """Print a stored plan: its status, its actions and their journal states, its prediction, its
    notes; `--explain`: the explanation stored with it."""
    with open_store(db) as store:
        store.plans.expire()
        record = store.plans.get(plan_id)
        actions = store.plans.actions(plan_id=plan_id)
        why = store.plans.explanations(plan_id) if explain is not None else {}
    if explain is not None and not why:
        raise PeakpackError(f"--explain: plan {plan_id} was stored without explanations (an older peakpack); "
                            "make a new one with `peakpack plan --explain CONTAINER`")
    if explain is not None and explain not in why:
        raise PeakpackError(f"--explain: plan {plan_id} has no container {explain!r}; name one of its snapshot's")
    if json_out:
        sys.stdout.write(json.dumps({**record.to_json(), "actions": [a.to_json() for a in actions],
                                     **({"explanation": {explain: why[explain]}} if explain is not None else {})})
                         + "\n")
        return

    def num(p: dict | None, key: str, scale: float) -> str:
        return "-" if not p or p.get(key) is None else f"{p[key] / scale:.1f}"

    rows = [{"#": a.index + 1, "action": a.kind, "state": a.state.value, "detail": a.detail or "",
             "what": f"{a.container}: {a.source} -> {a.target}" if a.container else str(a.node),
             "saved_kj": num(a.prediction, "energy_saved_j", 1000), "frozen_s": num(a.prediction, "frozen_ms", 1000)}
            for a in actions]
    decided = f", {record.decided_by} at {record.decided_at:%Y-%m-%d %H:%M:%S}" if record.decided_by else ""
    print_table(out, SHOW_COLUMNS, rows, wide=wide,
                title=f"Plan {plan_id} ({record.inventory}, {record.policy}): {record.status.value}{decided}")
    if record.status.value == "RECOMMENDED" and record.expires_at is not None:
        out.print(f"expires {record.expires_at:%Y-%m-%d %H:%M:%S} UTC; apply it with "
                  f"`peakpack apply {plan_id} --inventory FILE`", markup=False, highlight=False)
    p = record.prediction
    out.print(f"before {record.before['power_w']:.0f} W on {record.before['nodes_on']} node(s), after "
              f"{record.after['power_w']:.0f} W on {record.after['nodes_on']} (model)"
              + (f"; predicted {p['energy_saved_j'] / 1000:.1f} kJ saved over {p['horizon_s'] / 3600:g} h, "
                 f"frozen {p['frozen_ms'] / 1000:.1f} s ({p['frozen_source']})" if p else ""),
              markup=False, highlight=False)
    for note in record.notes:
        out.print(f"note: {note}", markup=False, highlight=False)
    if explain is not None:
        out.print(f"{explain}: {why[explain]}", markup=False, highlight=False)
