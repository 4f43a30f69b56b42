"""`peakpack compose up`: deploy a docker compose project where its containers run now (each node
runs `up -d --no-deps` for its own services), so a container peakpack moved is updated where it is
instead of started again on the node it left (`migrate/compose.py`). It changes nothing while a
migration of one of the project's containers is unsettled."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Optional

import typer

from ...domain import inputs
from ...domain.errors import PeakpackError
from .common import DbOpt, JsonOpt, RequiredInventory, checked, err, field_of, load_inventory, open_store, out

app = typer.Typer(add_completion=False, help="Deploy docker compose projects where their containers run now.")


def each(rule: Any) -> Any:
    """A typer callback applying a rule of `inputs` to every value of a repeated parameter."""

    def check(param: typer.CallbackParam, values: list[str] | None) -> list[str] | None:
        return values if values is None else [rule(v, field_of(param)) for v in values]

    return check


@app.command("up")
def up(
    project: Annotated[str, typer.Option("--project-name", "-p", callback=checked(inputs.compose_project),
                                         help="The compose project (its containers' com.docker.compose.project).")],
    inventory: RequiredInventory,
    services: Annotated[Optional[list[str]], typer.Argument(
        metavar="SERVICE", callback=each(inputs.compose_service),
        help="Only these services; default: every service the project's files define.")] = None,
    files: Annotated[Optional[list[str]], typer.Option(
        "--file", "-f", callback=each(inputs.node_path),
        help="A project file, as its path is on every node; default: the files compose recorded on the "
             "project's containers, else docker-compose.yml in --project-directory.")] = None,
    project_directory: Annotated[Optional[str], typer.Option(
        "--project-directory", callback=checked(inputs.node_path),
        help="The project's folder, the same path on every node; default: the one compose recorded on its "
             "containers.")] = None,
    node: Annotated[Optional[str], typer.Option(
        "--node", callback=checked(inputs.node_name),
        help="Where services that run nowhere yet are created; default: the one node the project runs on.")] = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run `docker-compose up -d --no-deps` on each node for the project's services whose containers
    are there now, one node after the other; refuses, before anything runs, project files that are
    missing or differ between those nodes, a service with containers on two nodes, and a project
    with a migration unsettled."""
    from peakpack.migrate import compose  # lazy: start-up speed (each command loads only what it uses)
    from peakpack.power.ipmi import power_probe

    from ...decide.solve import held_by_unsettled  # lazy: start-up speed (each command loads only what it uses)
    from ...remote.shell import RemoteShell

    inv = load_inventory(inventory)
    if node is not None and node not in inv.nodes_by_name:
        raise PeakpackError(f"--node: {node} is not in {inventory}; use one of {', '.join(inv.node_names)}")
    with open_store(db) as store, RemoteShell(inv) as shell:
        found = shell.call(compose.read_project(shell.pool, inv.node_names, project, power_probe(inv)))
        unsettled = held_by_unsettled(store.migrations.unfinished(), containers={m.name for m in found.members})
        if unsettled is not None:
            raise PeakpackError(f"--project-name: {project}: {unsettled}; deploy once `peakpack reconcile` has "
                                "settled it")
        directory, paths = compose.project_files(project, found.members, project_directory, files or [])
        nodes = compose.candidates(project, found.members, node)
        shell.call(compose.check_files(shell.pool, nodes, paths))
        defined = shell.call(compose.services_of(shell.pool, nodes[0], project, directory, paths))
        where = compose.placement(project, found.members, compose.chosen(project, defined, services or []), node)
        with err.status(f"{project}: up on {', '.join(where)}"):
            done = shell.call(compose.deploy(shell.pool, project, directory, paths, where))
    report(project, directory, paths, where, done, found.off, json_out)
    if not all(d.ok for d in done):
        raise typer.Exit(1)


def report(project: str, directory: str, paths: tuple[str, ...], where: dict[str, list[str]], done: list[Any],
           off: tuple[str, ...], json_out: bool) -> None:
    """Each node's outcome (compose's own lines on stderr, prefixed with the node), and the nodes
    that did not run because one before them failed."""
    ran = {d.node for d in done}
    if json_out:
        sys.stdout.write(json.dumps({
            "project": project, "directory": directory, "files": list(paths), "off": list(off),
            "nodes": [{"node": d.node, "services": list(d.services), "ok": d.ok, "output": d.output} for d in done]
            + [{"node": n, "services": s, "ok": None, "output": ""} for n, s in where.items() if n not in ran],
        }) + "\n")
        return
    for d in done:
        for line in d.output.splitlines():
            err.print(f"{d.node}| {line}", markup=False, highlight=False)
        out.print(f"{d.node}: up -d --no-deps {' '.join(d.services)}: {'done' if d.ok else 'FAILED'}",
                  markup=False, highlight=False)
    for n, s in where.items():
        if n not in ran:
            out.print(f"{n}: up -d --no-deps {' '.join(s)}: not run (a node before it failed)", markup=False,
                      highlight=False)
    for n in off:
        out.print(f"{n}: off (its BMC says so): not read", markup=False, highlight=False)
