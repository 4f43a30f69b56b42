"""`peakpack qos install|status`: the QoS guard of every node, installed or updated over SSH, and
what each one is doing now. `serve` installs and updates the guards itself (`[qos] install`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ...domain.errors import PeakpackError
from .common import JsonOpt, err, load_inventory, out
from .tables import Column, WideOpt, print_table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="The QoS guard on every node: best-effort CPU capped, memory evictions (docs/qos.md).")
InventoryArg = Annotated[Path, typer.Option("--inventory", "-i", help="Inventory TOML naming the nodes.")]
NodesArg = Annotated[Optional[list[str]], typer.Argument(metavar="[NODE]...", help="Only these nodes.")]


def _nodes(inv: Any, names: list[str] | None) -> list[str]:
    known = list(inv.node_names)
    for name in names or ():
        if name not in known:
            raise PeakpackError(f"NODE: {name!r} is not in the inventory; use one of {', '.join(known)}")
    return list(names or known)


@app.command()
def install(inventory: InventoryArg, nodes: NodesArg = None) -> None:
    """Copy the guard and its settings (the inventory's \\[qos]) to each node and (re)start it: a
    systemd unit peakpack-guard.service, or on a lab node its boot hook. Safe to repeat."""
    from peakpack.qos import deploy  # lazy: start-up speed (each command loads only what it uses)

    from ...remote.shell import RemoteShell

    inv = load_inventory(inventory)
    names = _nodes(inv, nodes)
    failed = 0
    with RemoteShell(inv) as shell:
        results = shell.gather([deploy.install(shell.pool, inv.node(n), inv.qos.guard) for n in names])
    for name, result in zip(names, results, strict=True):
        if isinstance(result, BaseException):
            failed += 1
            err.print(f"{name}: {result}", markup=False, highlight=False)
        else:
            out.print(f"{name}: {result}", markup=False, highlight=False)
    if failed:
        raise typer.Exit(1)


STATUS_COLUMNS = (
    Column("node", "node", priority=0), Column("guard", "guard", priority=0),
    Column("build", "build", priority=1), Column("BE cap", "be_allowed_cores", justify="right", priority=0),
    Column("node CPU", "node_cores", justify="right", priority=1),
    Column("mem free", "available_mb", lambda v: "" if v is None else f"{v:,} MB", justify="right", priority=1),
    Column("events", "events", justify="right", priority=2),
    Column("problem", "problem", priority=0, truncate=True),
)


@app.command()
def status(inventory: InventoryArg, nodes: NodesArg = None, json_out: JsonOpt = False, wide: WideOpt = False) -> None:
    """Per node: whether its guard runs the build and settings peakpack would install, the
    best-effort CPU it allows now, the node's CPU use and free memory."""
    from peakpack.qos import report as guard_report  # lazy: start-up speed (each command loads only what it uses)

    from ...remote.shell import RemoteShell

    inv = load_inventory(inventory)
    names = _nodes(inv, nodes)
    with RemoteShell(inv) as shell:
        answers = shell.gather([shell.pool.run(n, guard_report.report_argv(("*", 2**62)), timeout=60) for n in names])
    rows = []
    for name, answer in zip(names, answers, strict=True):
        row: dict[str, Any] = {"node": name}
        try:
            if isinstance(answer, BaseException):
                raise answer
            report = guard_report.GuardReport.parse(name, answer.stdout)
        except PeakpackError as exc:
            rows.append({**row, "guard": "unknown", "problem": f"the guard fails to report ({exc}): "
                                                              f"`peakpack qos install -i {inventory} {name}`"})
            continue
        state = report.state or {}
        outdated = report.outdated(inv.node(name), inv.qos.guard)
        rows.append({**row, "guard": "running" if report.running else "installed" if report.installed else "absent",
                     "build": report.running_version or report.version, "events": state.get("seq"),
                     "be_allowed_cores": state.get("be_allowed_cores"), "node_cores": state.get("node_cores"),
                     "available_mb": (state.get("memory") or {}).get("available_mb"),
                     "problem": outdated and f"{outdated}: `peakpack qos install -i {inventory} {name}`"})
    if json_out:
        sys.stdout.write(json.dumps(rows) + "\n")
        return
    print_table(out, STATUS_COLUMNS, rows, title="QoS guards", wide=wide)
