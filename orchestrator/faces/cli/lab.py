"""`peakpack lab up|status|exec|fault|down`: a real cluster of network-namespace nodes on this host."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ...domain import inputs
from .common import JsonOpt, NodeArg, bounded, checked, err, out
from .tables import Column, WideOpt, joules, print_table, size_bytes

if TYPE_CHECKING:
    from peakpack.lab import Lab

app = typer.Typer(help="A real local lab: nodes with their own sshd, dockerd, CRIU and IPMI BMC.",
                  no_args_is_help=True)
DirOpt = Annotated[
    Optional[Path], typer.Option("--dir", file_okay=False, callback=checked(inputs.folder),
                                 help="Lab folder (default $PEAKPACK_LAB_DIR or /var/lib/peakpack/lab).")
]


def _lab(folder: Path | None) -> Lab:
    from peakpack.lab import Lab  # lazy: start-up speed (each command loads only what it uses)

    return Lab(folder)


@app.command()
def up(
    nodes: Annotated[int, typer.Option("--nodes", "-n", callback=bounded(inputs.LAB_NODES),
                                       help="How many nodes.")] = 3,
    cpus: Annotated[int, typer.Option("--cpus", callback=bounded(inputs.NODE_CPUS),
                                      help="CPUs each node declares in the inventory.")] = 2,
    disk_gb: Annotated[Optional[int], typer.Option("--disk-gb", callback=bounded(inputs.LAB_DISK_GB),
                                                   help="GiB of each node's own filesystem (a sparse "
                                                   "image under DIR holding its docker data-root); default 8.")] = None,
    memory_mb: Annotated[int, typer.Option("--memory-mb", callback=bounded(inputs.LAB_MEMORY_MB),
                                           help="Memory each node declares; its containers "
                                           "together are limited to it (as to its CPUs).")] = 4096,
    folder: DirOpt = None,
) -> None:
    """Create the nodes, start their services, write DIR/inventory.toml."""
    lab = _lab(folder)
    with err.status("bringing the lab up") as status:
        lab.up(nodes=nodes, cpus=cpus, log=lambda text: status.update(text), disk_gb=disk_gb, memory_mb=memory_mb)
    out.print(f"lab up: {nodes} nodes in {lab.dir}; inventory: {lab.inventory_path}", markup=False, highlight=False)


STATUS_COLUMNS = (
    Column("node", "node", priority=0), Column("address", "address", priority=3),
    Column("power", "power", priority=0), Column("network", "network", priority=1),
    Column("sshd", "sshd", priority=2), Column("dockerd", "dockerd", priority=1),
    Column("disk", "disk", priority=2), Column("containers", "containers", justify="right", priority=0),
    Column("BMC", "bmc", priority=3), Column("energy", "energy_j", joules, justify="right", priority=1),
)


@app.command()
def status(folder: DirOpt = None, json_out: JsonOpt = False, wide: WideOpt = False) -> None:
    """Power, network, daemons, disk, containers and energy counter of every node."""
    rows = _lab(folder).status()
    if json_out:
        sys.stdout.write(json.dumps([r.to_json() for r in rows]) + "\n")
        return
    table = [{"node": r.name, "address": r.address, "power": "on" if r.powered else "off",
              "network": "partitioned" if r.partitioned else "ok", "sshd": "up" if r.sshd else "down",
              "dockerd": "up" if r.dockerd else "down",
              "disk": "full" if r.disk_full else
              None if r.disk_free_bytes is None else size_bytes(r.disk_free_bytes) + " free",
              "containers": r.containers, "bmc": r.bmc,
              "energy_j": None if r.energy_uj is None else r.energy_uj / 1e6} for r in rows]
    print_table(out, STATUS_COLUMNS, table, title="lab", wide=wide)


@app.command(name="exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    node: NodeArg,
    command: Annotated[list[str], typer.Argument(help="COMMAND... (after --)")],
    folder: DirOpt = None,
) -> None:
    """Run COMMAND on NODE over its SSH; `docker` there talks to that node's engine."""
    proc = _lab(folder).exec(node, command, timeout=None)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    raise typer.Exit(proc.returncode)


@app.command()
def fault(
    node: NodeArg,
    partition: Annotated[bool, typer.Option(
        "--partition", help="Cut the node off the network: its link down (its BMC still answers).")] = False,
    heal: Annotated[bool, typer.Option(
        "--heal", help="Bring the node's link back up.")] = False,
    kill_dockerd: Annotated[bool, typer.Option(
        "--kill-dockerd", help="SIGKILL the node's dockerd (containers run on, orphaned).")] = False,
    start_dockerd: Annotated[bool, typer.Option(
        "--start-dockerd", help="Start the node's dockerd and wait until it answers.")] = False,
    fill_disk: Annotated[bool, typer.Option(
        "--fill-disk", help="Allocate all free space of the node's own filesystem (its docker root).")] = False,
    free_disk: Annotated[bool, typer.Option(
        "--free-disk", help="Remove what --fill-disk allocated.")] = False,
    folder: DirOpt = None,
) -> None:
    """Inject a real fault into NODE, or undo one; exactly one flag; repeating one is harmless."""
    from peakpack.lab import Fault  # lazy: start-up speed (each command loads only what it uses)
    from peakpack.lab.node import LabError

    flags = {Fault.PARTITION: partition, Fault.HEAL: heal, Fault.KILL_DOCKERD: kill_dockerd,
             Fault.START_DOCKERD: start_dockerd, Fault.FILL_DISK: fill_disk, Fault.FREE_DISK: free_disk}
    chosen = [f for f, on in flags.items() if on]
    if len(chosen) != 1:
        raise LabError(f"lab fault: give exactly one of {', '.join(f.flag for f in Fault)}"
                       + (f" (got {', '.join(f.flag for f in chosen)})" if chosen else ""))
    out.print(_lab(folder).fault(node, chosen[0]), markup=False, highlight=False)


@app.command()
def down(folder: DirOpt = None) -> None:
    """Stop and remove everything of the lab; safe to repeat."""
    _lab(folder).down(log=out.print)
