"""`peakpack tls status|renew`: the cluster CA's certificates on the nodes (migrate/tls.py): when each
expires, and issuing them anew by hand. Every migration's preflight renews what is due by itself."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ...domain.errors import PeakpackError
from .common import JsonOpt, err, load_inventory, out
from .tables import Column, WideOpt, print_table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="TLS on the page streams: the nodes' certificates from the cluster CA (docs/migration.md).")
InventoryArg = Annotated[Path, typer.Option("--inventory", "-i", help="Inventory TOML naming the nodes.")]
NodesArg = Annotated[Optional[list[str]], typer.Argument(metavar="[NODE]...", help="Only these nodes.")]

STATUS_COLUMNS = (
    Column("node", "node", priority=0), Column("CRIU TLS", "criu_tls", priority=0),
    Column("certificate", "certificate", priority=0), Column("expires", "expires", priority=0),
    Column("note", "note", priority=1, truncate=True),
)


def _names(inv: Any, names: list[str] | None) -> list[str]:
    for name in names or ():
        if name not in inv.node_names:
            raise PeakpackError(f"NODE: {name!r} is not in the inventory; use one of {', '.join(inv.node_names)}")
    return list(names or inv.node_names)


@app.command()
def status(inventory: InventoryArg, nodes: NodesArg = None, json_out: JsonOpt = False, wide: WideOpt = False) -> None:
    """Each node: whether its CRIU speaks TLS, whether it holds a certificate of this cluster's CA,
    and when that expires (renewed at the next migration touching it once due)."""
    from peakpack.migrate import tls  # lazy: start-up speed (each command loads only what it uses)

    from ...remote.shell import RemoteShell

    inv = load_inventory(inventory)
    names = _names(inv, nodes)
    ca = tls.Authority.open(tls.ca_folder(inv.migration, inv))
    now = dt.datetime.now(dt.UTC)
    with RemoteShell(inv) as shell:
        held = shell.gather([tls.read(shell.pool, n, ca) for n in names])
    rows = []
    for name, h in zip(names, held, strict=True):
        if isinstance(h, BaseException):
            rows.append({"node": name, "criu_tls": "?", "certificate": "?", "expires": "", "note": str(h)})
            continue
        expires = h.expires()
        rows.append({"node": name, "criu_tls": "yes" if h.criu_tls else "NO", "expires":
                     "" if expires is None else f"{expires:%Y-%m-%d}",
                     "certificate": "this cluster's" if h.cert is not None and h.ca_matches else "none",
                     "note": tls.needs_issue(h, now) or ""})
    if json_out:
        sys.stdout.write(json.dumps(rows) + "\n")
        return
    print_table(out, STATUS_COLUMNS, rows, wide=wide, title=f"TLS (CA in {ca.folder})")


@app.command()
def renew(inventory: InventoryArg, nodes: NodesArg = None) -> None:
    """Issue and install each node's certificate now where it is missing, foreign or due."""
    from peakpack.migrate import tls  # lazy: start-up speed (each command loads only what it uses)

    from ...remote.shell import RemoteShell

    inv = load_inventory(inventory)
    names = _names(inv, nodes)
    ca = tls.Authority.open(tls.ca_folder(inv.migration, inv))
    with RemoteShell(inv) as shell:
        done = shell.gather([tls.ensure(shell.pool, inv.node(n), ca) for n in names])
    failed = 0
    for name, d in zip(names, done, strict=True):
        if isinstance(d, BaseException):
            failed += 1
            err.print(f"{name}: {d}", markup=False, highlight=False)
        else:
            out.print(d or f"{name}: its certificate is current", markup=False, highlight=False)
    if failed:
        raise typer.Exit(1)
