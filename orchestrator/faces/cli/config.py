"""`peakpack config show`: the planner's effective settings and where each came from."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from .common import InventoryOpt, JsonOpt, demo_inventory, load_inventory, out

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="The planner's effective settings (inventory \\[planner]).")

#: what a None means, for the table (the JSON keeps null)
UNSET = {"boot_power_w": "each node's max_w",
         "forecast.quantile": "none: mean + k_std x std"}


@app.command()
def show(inventory: InventoryOpt = None, json_out: JsonOpt = False) -> None:
    """Every setting `plan`, `serve` and `simulate` read: its value and its source ("default" or
    the inventory key that set it)."""
    inv = load_inventory(inventory) if inventory else demo_inventory()
    values: dict[str, Any] = inv.planner.by_key()
    sources = dict(inv.planner_sources)
    rows = {k: {"value": v, "source": sources.get(k, "default")} for k, v in values.items()}
    if json_out:
        sys.stdout.write(json.dumps({"inventory": str(inv.source), "settings": rows}) + "\n")
        return
    table = Table(title=escape(f"planner settings of {inv.source}"))
    for col in ("key", "value", "source"):
        table.add_column(col)
    for key, row in rows.items():
        value = row["value"]
        table.add_row(key, UNSET.get(key, "none") if value is None else str(value).lower()
                      if isinstance(value, bool) else str(value), escape(row["source"]))
    out.print(table)
