"""`peakpack power status|clear`: the nodes the power policy will not wake, and the operator's
way to hand one back after fixing it (a node that failed to wake is quarantined)."""

from __future__ import annotations

import json
import sys

import typer
from rich.table import Table
from rich.text import Text

from ...domain.errors import PeakpackError
from .common import DbOpt, JsonOpt, NodeArg, open_store, out

app = typer.Typer(help="Quarantined nodes: list them, clear one after fixing it.", no_args_is_help=True)


@app.command()
def status(db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """Nodes in quarantine (they failed to wake) and why."""
    with open_store(db) as store:
        quarantined = store.power.quarantined()
    if json_out:
        sys.stdout.write(json.dumps(quarantined) + "\n")
        return
    if not quarantined:
        out.print("no node is quarantined")
        return
    table = Table("node", "reason")
    for node, reason in sorted(quarantined.items()):
        table.add_row(Text(node), Text(reason))  # the BMC's words, shown as they are
    out.print(table)


@app.command()
def clear(node: NodeArg, db: DbOpt = None) -> None:
    """Take a node out of quarantine, so the controller may wake it again."""
    with open_store(db) as store:
        quarantined = store.power.quarantined()
        if node not in quarantined:
            listed = ", ".join(sorted(quarantined)) or "none"
            raise PeakpackError(f"NODE: {node} is not quarantined (quarantined: {listed}); see `peakpack power status`")
        store.power.clear_quarantine(node)
    out.print(f"{node}: cleared (was: {quarantined[node]})", markup=False, highlight=False)
