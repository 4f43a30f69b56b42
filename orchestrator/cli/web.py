"""`peakpack web`: the live web page over a store, without a running controller (reading
history; approving a plan executes it, which needs `--inventory`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import DbOpt, err, load_inventory, open_store

HttpPortOpt = Annotated[int, typer.Option("--http-port", min=0, max=65535, help="Serve the web page on this port.")]
HttpAddrOpt = Annotated[str, typer.Option("--http-addr", help="Address for the web page; 0.0.0.0 for every interface.")]


def web(
    http_port: HttpPortOpt,
    http_addr: HttpAddrOpt = "127.0.0.1",
    inventory: Annotated[Optional[Path], typer.Option(
        "--inventory", "-i",
        help="Inventory: node caps, the token (web.token_file) that enables approve/reject, and the cluster "
             "an approved plan is applied to. Without it the page is read-only.")] = None,
    since: Annotated[str, typer.Option(help="Migrations, power events and energy of the last DURATION, e.g. 2h, 7d.")] = "24h",
    db: DbOpt = None,
) -> None:
    """Serve the web page (nodes, plans, migrations, power events, energy charts) until Ctrl-C."""
    from db.store import parse_duration

    from ..web.app import create_app
    from ..web.server import run
    from ..web.state import View

    view = View(since=parse_duration(since, flag="--since"))
    inv = load_inventory(inventory) if inventory else None
    with open_store(db) as store:
        mode = "" if inv is not None and inv.web.token_file else " (read-only: no [web] token_file)"
        run(create_app(store, inv, view), http_addr, http_port,
            lambda port: err.print(f"peakpack web: http://{http_addr}:{port}/{mode}", markup=False, highlight=False))
