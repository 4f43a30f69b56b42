"""`peakpack web`: the live web page over a store, without a running controller (reading
history; approving a plan executes it, which needs `--inventory`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ...domain import inputs
from .common import DbOpt, bounded, checked, err, load_inventory, open_store, since_duration

if TYPE_CHECKING:
    from peakpack.db.store import Store

    from ...act.apply import ApplyResult, Handed
    from ...domain.model import Inventory
    from ..web.app import Applier

#: how long a page waits for the leader to run an approved plan before it answers "handed over"
APPROVAL_WAIT_S = 300.0

HttpPortOpt = Annotated[int, typer.Option("--http-port", callback=bounded(inputs.ANY_PORT),
                                          help="Serve the web page on this port (0: any free port).")]
HttpAddrOpt = Annotated[str, typer.Option("--http-addr", callback=checked(inputs.host),
                                          help="Address for the web page; 0.0.0.0 for every interface.")]
MetricsPortOpt = Annotated[Optional[int], typer.Option("--metrics-port", callback=bounded(inputs.PORT),
                                                       help="Serve Prometheus metrics on this port.")]
MetricsAddrOpt = Annotated[str, typer.Option("--metrics-addr", callback=checked(inputs.host),
                                             help="Address for the metrics endpoint.")]


def web(
    http_port: HttpPortOpt,
    http_addr: HttpAddrOpt = "127.0.0.1",
    inventory: Annotated[
        Optional[Path],
        typer.Option(
            "--inventory",
            "-i",
            exists=True,
            dir_okay=False,
            help="Inventory: node caps, the token (web.token_file) that enables approve/reject, and the cluster "
            "an approved plan is applied to. Without it the page is read-only.",
        ),
    ] = None,
    since: Annotated[
        timedelta, typer.Option("--since", parser=since_duration, metavar="DURATION",
                                help="Migrations, power events and energy of the last DURATION, e.g. 2h, 7d.")
    ] = "24h",  # type: ignore[assignment]  # parsed by `since_duration`
    db: DbOpt = None,
) -> None:
    """Serve the web page (nodes, plans, migrations, power events, energy charts) until Ctrl-C."""
    from ..web.app import create_app  # lazy: start-up speed (each command loads only what it uses)
    from ..web.server import run
    from ..web.state import View

    view = View(since=since)
    inv = load_inventory(inventory) if inventory else None
    stopping = threading.Event()
    with open_store(db) as store:
        mode = "" if inv is not None and inv.web.token_file else " (read-only: no [web] token_file)"
        applier = None if inv is None else direct_applier(store, inv, stopping.is_set)
        run(create_app(store, inv, view, applier=applier, bind=http_addr), http_addr, http_port,
            lambda port: err.print(f"peakpack web: http://{http_addr}:{port}/{mode}", markup=False, highlight=False),
            stopping)


def direct_applier(store: Store, inventory: Inventory, stopping: Callable[[], bool]) -> Applier:
    """While a controller leads, hand the approval to it (`act.apply.hand_to_leader`: only the
    lease holder acts); while none does, apply in this process under the store's lease, like
    `peakpack apply`. The live services are built for each approved plan and closed after it;
    Ctrl-C starts no new action of a plan being applied (the one in flight settles)."""
    from ...act.apply import apply_plan, hand_to_leader  # lazy: start-up speed
    from ..wiring import live_services

    def apply(plan_id: int, partial: bool, by: str) -> ApplyResult | Handed:
        if store.lease.holder() is not None:
            return hand_to_leader(store, plan_id, partial, by, wait_s=APPROVAL_WAIT_S, stop_requested=stopping)
        services = live_services(inventory, store, err)
        try:
            return apply_plan(store, inventory, plan_id, partial=partial, decided_by=by, services=services,
                              log=lambda text: err.print(f"web apply: {text}", markup=False, highlight=False),
                              stop_requested=stopping)
        finally:
            services.close()

    return apply
