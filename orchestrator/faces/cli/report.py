"""`peakpack report --out DIR`: the stored history as an HTML page of plots."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from ...domain import inputs
from .common import DbOpt, SinceOpt, checked, open_store, out, since_time


def report(
    out_dir: Annotated[Path, typer.Option("--out", file_okay=False, callback=checked(inputs.folder),
                                          help="Folder for index.html and the PNGs.")],
    since: SinceOpt = None,
    db: DbOpt = None,
) -> None:
    """Write an HTML page with nodes on, power and energy over time, migrations, downtime and the
    energy saved (measured)."""
    from ...domain.savings import headline, ledger  # lazy: start-up speed
    from ..report import History, write_report  # lazy: start-up speed (each command loads only what it uses)

    start = since_time(since)
    with open_store(db) as store:
        book = ledger(store.savings.history(start), datetime.now(UTC), start)
        h = History(
            plans=[r.to_json() for r in store.plans.history(start)],
            migrations=[r.to_json() for r in store.migrations.history(start)],
            power=[r.to_json() for r in store.power.events(start)],
            energy=[r.to_json() for r in store.energy.history(start)],
            savings=book.rows("day"),
            savings_headline=headline(book),
        )
    index = write_report(h, out_dir)
    out.print(f"report written to {index}", markup=False, highlight=False)
