"""`peakpack migrate CONTAINER --to NODE` and `peakpack pin NODE`: one live migration or one
node's pinning, by hand, journaled in the store like the controller's. Both take the store's
controller lease for their duration (failing at once while a controller leads), so they never
act beside a controller, and their writes are fenced like its. Both refuse a container or node
that an unsettled migration holds, as the planner does: settling it may resume or restore that
migration's copy, and a copy moved on meanwhile would run beside it."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ...domain import inputs
from ...domain.errors import PeakpackError
from .common import (
    ContainerArg,
    DbOpt,
    JsonOpt,
    NodeArg,
    RequiredInventory,
    checked,
    err,
    interruptible,
    load_inventory,
    manual_lease,
    open_store,
    out,
    refuse_unsettled,
)


def migrate(
    container: ContainerArg,
    to: Annotated[str, typer.Option("--to", callback=checked(inputs.node_name), help="Target node.")],
    inventory: RequiredInventory,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Live-migrate a container (CRIU checkpoint -> rsync -> restore); rolls back on failure.
    Ctrl-C or SIGTERM (or losing the store's lease) settles the migration in flight, which then
    either finishes or is rolled back, and the command says which."""
    from peakpack.migrate.transaction import Migration  # lazy: start-up speed (each command loads only what it uses)
    from peakpack.power.ipmi import power_probe

    from ...observe.cluster import observe_cluster  # lazy: start-up speed (each command loads only what it uses)
    from ...remote.shell import RemoteShell

    inv = load_inventory(inventory)
    if to not in inv.nodes_by_name:
        raise PeakpackError(f"--to: {to} is not in {inventory}; use one of {', '.join(inv.node_names)}")
    with (open_store(db) as store, manual_lease(store, "migrate") as lease, interruptible(lease) as stop,
          RemoteShell(inv) as shell):
        refuse_unsettled(store, "CONTAINER", container=container)
        refuse_unsettled(store, "--to", node=to)
        snap = observe_cluster(inv, power_probe(inv), shell)
        where = {c.name: c.node for c in snap.containers}
        if container not in where:
            unseen = f" ({', '.join(sorted(snap.held))} could not be observed)" if snap.held else ""
            raise PeakpackError(f"CONTAINER: {container} runs on no node of {inv.cluster.name}{unseen}; check the "
                                "name with `docker ps` on the nodes (only a running container can move)")
        refuse_unsettled(store, "CONTAINER", node=where[container], subject=f"its node {where[container]}")
        with err.status(f"{container}: {where[container]} -> {to}") as status:
            result = shell.call(Migration(shell.pool, shell.engines, store, inv, container, where[container], to,
                                          progress=lambda step: status.update(f"{container}: {step}"),
                                          bmc_power=power_probe(inv), stop_requested=stop).run())
    if result.refused:  # preflight said no: nothing changed on either node
        reason = result.reason or f"{container}: refused"
        raise PeakpackError(f"--to: {reason}" if result.refused_target else reason)
    if result.told:
        err.print(result.told, markup=False, highlight=False)
    if json_out:
        sys.stdout.write(json.dumps({"migration_id": result.migration_id, "container": result.container,
                                     "source": result.source, "target": result.target, "state": result.state.value,
                                     "reason": result.reason, "frozen_ms": result.frozen_ms,
                                     "total_ms": result.total_ms, "on_moved": result.told}) + "\n")
    else:
        frozen = f", frozen {result.frozen_ms:.0f} ms" if result.frozen_ms else ""
        out.print(f"{container}: {result.source} -> {result.target}: {result.state.value}{frozen}"
                  + (f" ({result.reason})" if result.reason else ""), markup=False, highlight=False)
    stop.exit_if_asked()
    if result.state.value != "SUCCEEDED":
        raise typer.Exit(1)


def pin(
    node: NodeArg,
    inventory: RequiredInventory,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Give devils cores (and caches) of their own and pack turtles together, on one node.
    Ctrl-C or SIGTERM lets the node's cpusets be written (seconds), then stops."""
    from peakpack.migrate.pinning import apply_pinning

    from ...observe.cluster import observe_node  # lazy: start-up speed (each command loads only what it uses)
    from ...remote.shell import RemoteShell

    inv = load_inventory(inventory)
    if node not in inv.nodes_by_name:
        raise PeakpackError(f"NODE: {node} is not in {inventory}; use one of {', '.join(inv.node_names)}")
    with (open_store(db) as store, manual_lease(store, "pin") as lease, interruptible(lease) as stop,
          RemoteShell(inv) as shell):
        refuse_unsettled(store, "NODE", node=node)
        from peakpack.power.ipmi import power_probe  # lazy: start-up speed (each command loads only what it uses)

        view = shell.call(observe_node(shell.pool, node, power_probe(inv)))
        if view.unknown is not None:
            raise PeakpackError(view.unknown)
        if not view.state.powered:
            raise PeakpackError(f"NODE: {node} is powered off")
        changed = shell.call(apply_pinning(shell.pool, shell.engines, store, node, view.containers))
    if json_out:
        sys.stdout.write(json.dumps({"node": node, "changed": changed}) + "\n")
    elif changed:
        for name, cpus in changed.items():
            out.print(f"{node}: {name} -> cpus {cpus}", markup=False, highlight=False)
    else:
        out.print(f"{node}: every container already has its cpuset", markup=False, highlight=False)
    stop.exit_if_asked()
