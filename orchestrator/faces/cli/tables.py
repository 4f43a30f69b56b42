"""Tables that fit the terminal: every column says how important it is, and when the terminal is
too narrow the least important columns are dropped whole (and counted) instead of cells being
split across lines ("SUCCEE / DED"). `--wide` shows every column however wide the result.

A table is a tuple of `Column`s over rows that are JSON dicts (what `--json` prints), so the
table and the JSON cannot disagree about a value; the formatters only choose compact units.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

Row = dict[str, Any]
WideOpt = Annotated[bool, typer.Option("--wide", help="Every column, however wide the terminal.")]
Formatter = Callable[[Any], str]

#: Rich's default table draws "│ " before and " " after every cell, plus the closing "│".
_CELL_OVERHEAD = 3
_TABLE_OVERHEAD = 1
#: A column that may be cut short (free text) never gets narrower than this.
_MIN_ELLIPSIS_WIDTH = 8


def _scaled(value: float, steps: Sequence[tuple[float, str]], sep: str) -> str:
    """`value` in the largest unit it reaches, with three significant digits at most."""
    scale, unit = steps[0]
    for step_scale, step_unit in steps:
        if abs(value) >= step_scale:
            scale, unit = step_scale, step_unit
    v = value / scale
    if v == int(v) and scale == 1:
        digits = str(int(v))
    elif abs(v) < 1:
        digits = f"{v:.2g}"
    else:
        digits = f"{v:.0f}" if abs(v) >= 10 else f"{v:.1f}"
    return f"{digits}{sep}{unit}".rstrip()


def text(value: Any) -> str:
    return "" if value is None else str(value)


def count(value: Any) -> str:
    """1234 -> 1.2k, 3400000 -> 3.4M."""
    if value is None:
        return ""
    return _scaled(float(value), ((1, ""), (1e3, "k"), (1e6, "M"), (1e9, "G")), "")


def size_bytes(value: Any) -> str:
    """Bytes in decimal units: 3400000 -> 3.4 MB."""
    if value is None:
        return ""
    return _scaled(float(value), ((1, "B"), (1e3, "kB"), (1e6, "MB"), (1e9, "GB"), (1e12, "TB")), " ")


def seconds(value: Any) -> str:
    """A duration in seconds: 0.25 -> 250 ms, 12.3 -> 12 s, 150 -> 2.5 min, 7200 -> 2.0 h."""
    if value is None:
        return ""
    v = float(value)
    if abs(v) < 1:
        return f"{v * 1000:.0f} ms"
    if abs(v) < 100:
        return f"{v:.1f} s" if abs(v) < 10 else f"{v:.0f} s"
    if abs(v) < 3600 * 1.5:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.1f} h"


def millis(value: Any) -> str:
    return "" if value is None else seconds(float(value) / 1000)


def joules(value: Any) -> str:
    """1234 -> 1.2 kJ."""
    if value is None:
        return ""
    return _scaled(float(value), ((1, "J"), (1e3, "kJ"), (1e6, "MJ"), (1e9, "GJ")), " ")


def watts(value: Any) -> str:
    if value is None:
        return ""
    return _scaled(float(value), ((1, "W"), (1e3, "kW"), (1e6, "MW")), " ")


def share(value: Any) -> str:
    """A share of something (0.234) as a percentage: 23%."""
    return "" if value is None else f"{float(value):.0%}"


def when(value: Any) -> str:
    """An ISO 8601 instant as `MM-DD HH:MM:SS` (the year and zone rarely help in a table)."""
    if value is None:
        return ""
    try:
        return datetime.fromisoformat(str(value)).strftime("%m-%d %H:%M:%S")
    except ValueError:
        return str(value)


def field(path: str) -> Callable[[Row], Any]:
    """A getter for a dotted path into a JSON row: `field("after.power_w")`."""

    def get(row: Row) -> Any:
        value: Any = row
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    return get


@dataclass(frozen=True)
class Column:
    """One column: `key` is a dotted path into the row or a getter; `priority` 0 is never dropped,
    higher numbers are dropped first when the terminal is narrow. `truncate` columns (free text:
    reasons, details) are cut short with an ellipsis instead of dropped, down to `min_width`."""

    header: str
    key: str | Callable[[Row], Any]
    format: Formatter = text
    priority: int = 1
    min_width: int | None = None
    justify: Literal["left", "right"] = "left"
    truncate: bool = False

    def cell(self, row: Row) -> str:
        getter = field(self.key) if isinstance(self.key, str) else self.key
        # A cell is one line: a newline inside free text would split it as surely as wrapping.
        return " ".join(self.format(getter(row)).split())


@dataclass(frozen=True)
class Fitted:
    """A table ready to print, what it needs, and which columns were left out to fit."""

    table: Table
    width: int
    hidden: tuple[str, ...]


def _natural(column: Column, cells: list[str]) -> int:
    return max([len(column.header), *map(len, cells)])


def _least(column: Column, cells: list[str]) -> int:
    """The narrowest a column may be: whole cells, or a cut-short text column's floor."""
    natural = _natural(column, cells)
    if not column.truncate:
        return natural
    return min(natural, max(column.min_width or _MIN_ELLIPSIS_WIDTH, len(column.header)))


def fit_table(
    columns: Sequence[Column], rows: Sequence[Row], width: int | None, *, title: str | None = None
) -> Fitted:
    """The table of `rows` in at most `width` characters (None: every column, however wide).
    Columns empty in every row are left out silently; then the least important are dropped
    (the rightmost first among equals) until the rest fit whole; text columns take what is left."""
    cells = {c: [c.cell(r) for r in rows] for c in columns}
    shown = [c for c in columns if any(cells[c])]
    hidden: list[Column] = []

    def needed(cols: list[Column], measure: Callable[[Column, list[str]], int]) -> int:
        return _TABLE_OVERHEAD + sum(measure(c, cells[c]) + _CELL_OVERHEAD for c in cols)

    if width is not None:
        while needed(shown, _least) > width:
            droppable = [c for c in shown if c.priority > 0]
            if not droppable:
                break
            drop = max(reversed(droppable), key=lambda c: c.priority)
            shown.remove(drop)
            hidden.append(drop)
        for c in sorted(hidden, key=lambda c: c.priority):  # a narrow one dropped on the way may fit again
            back = sorted([*shown, c], key=list(columns).index)
            if needed(back, _least) <= width:
                shown = back
                hidden.remove(c)
    widths = {c: _natural(c, cells[c]) for c in shown}
    if width is not None:
        spare = width - needed(shown, _least)
        for c in shown:  # text columns grow back towards their natural width, left to right
            least = _least(c, cells[c])
            widths[c] = min(widths[c], least + max(spare, 0))
            spare -= widths[c] - least
    table = Table(title=None if title is None else Text(title))
    for c in shown:
        table.add_column(c.header, justify=c.justify, no_wrap=True, overflow="ellipsis",
                         min_width=widths[c], max_width=widths[c])
    for i in range(len(rows)):  # cells are text as the store has it: node-produced, never rich markup
        table.add_row(*(Text(cells[c][i]) for c in shown))
    total = _TABLE_OVERHEAD + sum(w + _CELL_OVERHEAD for w in widths.values())
    return Fitted(table, total, tuple(c.header for c in columns if c in hidden))


def print_table(
    console: Console, columns: Sequence[Column], rows: Sequence[Row], *, title: str | None = None,
    wide: bool = False,
) -> None:
    """Print `rows` fitted to the console's width (or every column with `wide`), then one line
    naming the columns left out and that `--wide` shows them."""
    width = console.width
    fitted = fit_table(columns, rows, None if wide else width, title=title)
    console.width = max(width, fitted.width)  # rich caps a table at the console's width
    try:
        console.print(fitted.table, crop=False)
    finally:
        console.width = width
    if fitted.hidden:
        n = len(fitted.hidden)
        console.print(f"{n} column{'s' if n > 1 else ''} hidden to fit {width} characters, --wide shows all: "
                      f"{', '.join(fitted.hidden)}", markup=False, highlight=False, style="dim")
