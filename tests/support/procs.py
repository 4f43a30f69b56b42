"""This host's processes as /proc shows them, for tests that look for what a step left running."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def stat_fields() -> Iterator[tuple[int, list[str]]]:
    """Every process's pid and the fields of its /proc/PID/stat after its name (state, ppid, pgrp,
    ...): the name is in parentheses and may hold spaces. A process gone meanwhile is skipped."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            yield int(stat.parent.name), stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
