"""Options and helpers shared by every `peakpack` sub-command module."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

out = Console()
err = Console(stderr=True)

DbOpt = Annotated[
    Optional[str],
    typer.Option(
        "--db",
        help="Store URL (sqlite:///FILE or postgresql://...); default: a SQLite file in the "
        "user's data dir, or $PEAKPACK_DB.",
        envvar="PEAKPACK_DB",
    ),
]
InventoryOpt = Annotated[
    Optional[Path],
    typer.Option("--inventory", "-i", help="Inventory TOML; default: the embedded demo cluster."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]


def load_inventory(path: str | Path) -> Any:
    """`config.load_inventory`, imported on use: pydantic and the inventory schema stay off the
    start-up of commands that never read an inventory (and of `--help`)."""
    from ...domain.config import load_inventory as load  # lazy: start-up speed (each command loads only what it uses)

    return load(path)


def demo_inventory() -> Any:
    """`config.demo_inventory`, imported on use (see `load_inventory`)."""
    from ...domain.config import demo_inventory as demo  # lazy: start-up speed (each command loads only what it uses)

    return demo()


def open_store(url: str | None) -> Any:
    """The store is imported lazily so commands that never touch it stay fast."""
    from peakpack.db.store import Store  # lazy: start-up speed (each command loads only what it uses)

    return Store.open(url)


def since_time(since: str | None) -> datetime | None:
    """`--since 2h` -> the UTC instant two hours ago (None: all history)."""
    if since is None:
        return None
    from ...domain.inputs import parse_duration  # lazy: start-up speed (each command loads only what it uses)

    return datetime.now(UTC) - parse_duration(since, flag="--since")


def manual_lease(store: Any, role: str) -> Any:
    """The controller lease for a command that acts on nodes by hand (migrate, pin, reconcile):
    refused at once while a controller leads, renewed in the background however long it runs."""
    from ...act.leadership import MIN_TTL_S, Lease  # lazy: start-up speed (each command loads only what it uses)

    return Lease(store, MIN_TTL_S, role=role, log=lambda text: err.print(text, markup=False, highlight=False))
