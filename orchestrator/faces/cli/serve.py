"""`peakpack serve`: the controller loop (observe -> plan -> execute -> record) every epoch."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from typing import Annotated, Optional

import typer

from ...domain import inputs
from ...domain.errors import PeakpackError
from .common import DbOpt, InventoryOpt, TimeLimitOpt, bounded, demo_inventory, err, load_inventory, open_store
from .plan import SnapshotOpt
from .web import APPROVAL_WAIT_S, HttpAddrOpt, MetricsAddrOpt, MetricsPortOpt


def serve(
    inventory: InventoryOpt = None,
    snapshot: SnapshotOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Store plans, execute nothing.")] = False,
    approve: Annotated[
        bool,
        typer.Option(
            "--approve",
            help="Leave each epoch's plan RECOMMENDED for a person "
            "to apply (web page) or reject; default: apply it at once.",
        ),
    ] = False,
    once: Annotated[bool, typer.Option("--once", help="Run one epoch and exit.")] = False,
    policy: Annotated[str, typer.Option(help="Placement policy.")] = "peakpack",
    time_limit: TimeLimitOpt = None,
    epoch_seconds: Annotated[
        Optional[int],
        typer.Option(
            "--epoch-seconds",
            callback=bounded(inputs.EPOCH_SECONDS),
            help="Override the inventory's \\[cluster].epoch_seconds (the loop, the forecast, "
            "the migration weights and the power rules all use it).",
        ),
    ] = None,
    metrics_port: MetricsPortOpt = None,
    metrics_addr: MetricsAddrOpt = "127.0.0.1",
    lease_ttl: Annotated[
        Optional[float],
        typer.Option(
            "--lease-ttl",
            callback=bounded(inputs.LEASE_SECONDS),
            help="Seconds a dead controller's lease keeps a standby waiting; default: one epoch, 10-120 s.",
        ),
    ] = None,
    http_port: Annotated[
        Optional[int], typer.Option("--http-port", callback=bounded(inputs.ANY_PORT),
                                    help="Serve the web page on this port (0: any free port).")
    ] = None,
    http_addr: HttpAddrOpt = "127.0.0.1",
    db: DbOpt = None,
) -> None:
    """Run the controller: observe -> plan -> execute -> record every epoch until SIGTERM/SIGINT.

    One controller leads a store at a time; another `serve` on the same store waits as a hot
    standby and takes over when the leader's lease expires. `--once` fails at once instead."""
    # lazy: start-up speed (each command loads only what it uses)
    from ...act.controller import Controller, ControllerSettings
    from ...decide.planner.registry import get_policy

    get_policy(policy)  # an unknown name is refused now, not at every epoch
    inv = load_inventory(inventory) if inventory else demo_inventory()
    if epoch_seconds is not None:  # one epoch everywhere: everything downstream reads the inventory's
        inv = replace(inv, cluster=replace(inv.cluster, epoch_seconds=epoch_seconds))
    if inventory is None and snapshot is None:
        dry_run = True  # the embedded demo has no real nodes to act on
    if snapshot is not None and not dry_run:
        raise PeakpackError("--snapshot: a snapshot file can only be planned, not executed; add --dry-run")
    if snapshot is not None:  # re-read every epoch; a bad one is refused now, not logged forever
        from ...domain.config import load_snapshot  # lazy: start-up speed (each command loads only what it uses)

        load_snapshot(snapshot, inv)
    settings = ControllerSettings(
        dry_run=dry_run,
        approve=approve,
        policy=policy,
        time_limit_s=time_limit,
        epoch_seconds=inv.cluster.epoch_seconds,
        snapshot_path=snapshot,
        demo=inventory is None,
        metrics_port=metrics_port,
        metrics_addr=metrics_addr,
        lease_ttl_s=lease_ttl,
    )
    with open_store(db) as store:
        services = observer = sampler = None
        if inventory is not None and snapshot is None:
            from ..wiring import live_observer, live_services  # lazy: start-up speed

            if dry_run:
                observer = live_observer(inv, store, err)
                sampler = observer.sample_traffic
            else:
                services = live_services(inv, store, console=err)
        controller = Controller(inv, store, settings, console=err, services=services, observe=observer,
                                sample_traffic=sampler)
        with ExitStack() as web:
            if http_port is not None:
                from ...act.apply import hand_to_leader  # lazy: start-up speed
                from ..web.app import create_app  # lazy: start-up speed (each command loads only what it uses)
                from ..web.server import serving_in_background

                # its own unfenced handle: the page reads, and hands approvals to the leader (this
                # controller or another one) through the store; it executes nothing
                page_store = web.enter_context(open_store(db))
                page = create_app(page_store, inv, bind=http_addr, applier=lambda plan_id, partial, by: hand_to_leader(
                    page_store, plan_id, partial, by, wait_s=APPROVAL_WAIT_S, stop_requested=controller.stopped))
                port = web.enter_context(serving_in_background(page, http_addr, http_port))
                err.print(f"web page: http://{http_addr}:{port}/", markup=False, highlight=False)
            if once:
                controller.run_once()
            else:
                controller.run_forever()


