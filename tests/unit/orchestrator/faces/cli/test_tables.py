"""Tables fit the terminal: at 80 columns no cell is split across lines and the least important
columns are dropped (and named), `--wide` and a 200-column terminal show every column."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from peakpack.orchestrator.faces.cli.history import TABLE_COLUMNS
from peakpack.orchestrator.faces.cli.tables import (
    Column,
    count,
    fit_table,
    joules,
    millis,
    print_table,
    seconds,
    size_bytes,
    text,
    watts,
    when,
)


def _set(row: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        row = row.setdefault(part, {})
    row[leaf] = value


def sample_rows(columns: tuple[Column, ...], n: int = 4) -> list[dict[str, Any]]:
    """Rows as wide as real ones get: long names, long free text, big numbers, every column filled."""
    rows = []
    for i in range(n):
        row: dict[str, Any] = {}
        for c in columns:
            if not isinstance(c.key, str):
                continue
            value: Any = ("2026-11-23T20:40:05.123456+00:00" if c.format is when else
                          f"SUCCEEDED-{c.header}-{i} " + "because the node was emptied " * 3 if c.truncate else
                          f"SUCCEEDED{i}" if c.format is text else
                          123456.7 * (i + 1))  # every other formatter formats a number
            _set(row, c.key, value)
        rows.append(row)
    return rows


def render(columns: tuple[Column, ...], rows: list[dict[str, Any]], width: int, wide: bool = False) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    print_table(console, columns, rows, title="t", wide=wide)
    return console.export_text()


@pytest.mark.parametrize("kind", sorted(TABLE_COLUMNS))
def test_at_80_columns_no_cell_is_split_and_hidden_columns_are_named(kind: str) -> None:
    columns = TABLE_COLUMNS[kind]
    rows = sample_rows(columns)
    text = render(columns, rows, 80)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    body = [line for line in lines if line.startswith("│")]
    assert len(body) == len(rows)  # one line per row: nothing wrapped onto a second line
    header = next(line for line in lines if line.startswith("┃"))
    shown = [c for c in columns if f" {c.header} " in header]
    assert shown and all(c in shown for c in columns if c.priority == 0 and any(c.cell(r) for r in rows))
    for row, line in zip(rows, body):
        for c in shown:
            if not c.truncate:
                assert c.cell(row) in line, (c.header, line)
    missing = [c.header for c in columns if c not in shown and any(c.cell(r) for r in rows)]
    if missing:
        note = " ".join(text.split("hidden")[-1].split())  # the note itself may wrap, at spaces
        assert "--wide shows all" in note and all(h in note for h in missing)
        # a column is dropped only when it does not fit beside the columns at least as important
        for h in (c for c in columns if c.header in missing):
            rivals = [c for c in columns if c is h or (c in shown and c.priority <= h.priority)]
            assert fit_table(rivals, rows, 80).hidden, h.header


@pytest.mark.parametrize("kind", sorted(TABLE_COLUMNS))
@pytest.mark.parametrize("width,wide", [(200, False), (80, True)])
def test_wide_and_200_columns_show_every_column(kind: str, width: int, wide: bool) -> None:
    columns = TABLE_COLUMNS[kind]
    rows = sample_rows(columns, n=2)
    text = render(columns, rows, width, wide=wide)
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    for c in columns:
        if any(c.cell(r) for r in rows):
            assert f" {c.header} " in header
    assert "hidden" not in text
    assert len([line for line in text.splitlines() if line.startswith("│")]) == len(rows)


def test_a_narrow_terminal_drops_the_least_important_first_and_cuts_free_text_short() -> None:
    columns = (
        Column("id", "id", priority=0),
        Column("state", "state", priority=0),
        Column("extra", "extra", priority=5),
        Column("size", "size", size_bytes, priority=2),
        Column("reason", "reason", priority=1, truncate=True),
    )
    rows = [{"id": 7, "state": "SUCCEEDED", "extra": "x" * 30, "size": 3_400_000, "reason": "r" * 100}]
    fitted = fit_table(columns, rows, 50)
    assert fitted.hidden == ("extra",)
    assert fitted.width <= 50
    text = render(columns, rows, 50)
    assert "SUCCEEDED" in text and "3.4 MB" in text and "…" in text
    assert fit_table(columns, rows, None).hidden == ()


def test_compact_units() -> None:
    assert [count(v) for v in (7, 1234, 3_400_000)] == ["7", "1.2k", "3.4M"]
    assert size_bytes(3_400_000) == "3.4 MB" and size_bytes(512) == "512 B"
    assert [seconds(v) for v in (0.25, 12.3, 150)] == ["250 ms", "12 s", "2.5 min"]
    assert millis(1500) == "1.5 s"
    assert joules(1234) == "1.2 kJ" and watts(85) == "85 W"
    assert when("2026-11-23T20:40:05.123456+00:00") == "11-23 20:40:05"
