"""`peakpack lab up|status|exec|down`: a real cluster of network-namespace nodes on this host."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from .common import JsonOpt, err, out

app = typer.Typer(help="A real local lab: nodes with their own sshd, dockerd, CRIU and IPMI BMC.",
                  no_args_is_help=True)
DirOpt = Annotated[Optional[Path], typer.Option("--dir", help="Lab folder (default $PEAKPACK_LAB_DIR or /var/lib/peakpack/lab).")]


def _lab(folder: Path | None):  # type: ignore[no-untyped-def]
    from lab import Lab

    return Lab(folder)


@app.command()
def up(
    nodes: Annotated[int, typer.Option("--nodes", "-n", help="How many nodes.")] = 3,
    cpus: Annotated[int, typer.Option("--cpus", help="CPUs each node declares in the inventory.")] = 2,
    folder: DirOpt = None,
) -> None:
    """Create the nodes, start their services, write DIR/inventory.toml."""
    lab = _lab(folder)
    with err.status("bringing the lab up") as status:
        lab.up(nodes=nodes, cpus=cpus, log=lambda text: status.update(text))
    out.print(f"lab up: {nodes} nodes in {lab.dir}; inventory: {lab.inventory_path}")


@app.command()
def status(folder: DirOpt = None, json_out: JsonOpt = False) -> None:
    """Power, daemons, containers and energy counter of every node."""
    rows = _lab(folder).status()
    if json_out:
        sys.stdout.write(json.dumps([r.to_json() for r in rows]) + "\n")
        return
    table = Table(title="lab")
    for col in ("node", "address", "power", "sshd", "dockerd", "containers", "BMC", "energy (J)"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.name, r.address, "on" if r.powered else "off", "up" if r.sshd else "down",
                      "up" if r.dockerd else "down", "" if r.containers is None else str(r.containers), r.bmc,
                      "" if r.energy_uj is None else f"{r.energy_uj / 1e6:,.1f}")
    out.print(table)


@app.command(name="exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    node: Annotated[str, typer.Argument(help="node-1 .. node-N")],
    command: Annotated[list[str], typer.Argument(help="COMMAND... (after --)")],
    folder: DirOpt = None,
) -> None:
    """Run COMMAND on NODE over its SSH; `docker` there talks to that node's engine."""
    proc = _lab(folder).exec(node, command, timeout=None)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    raise typer.Exit(proc.returncode)


@app.command()
def down(folder: DirOpt = None) -> None:
    """Stop and remove everything of the lab; safe to repeat."""
    _lab(folder).down(log=out.print)
