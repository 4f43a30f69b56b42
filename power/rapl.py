"""RAPL energy counters (Linux powercap) read over SSH, and the wraparound arithmetic.

The counters live in /sys/class/powercap/intel-rapl:N/energy_uj (one package zone per socket),
or under $PEAKPACK_POWERCAP_ROOT when a node sets it (the lab does). Each zone wraps at its
own max_energy_range_uj."""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import NodeError

#: prints "zone energy_uj max_energy_range_uj" for every package zone; nothing when there is none
READ_SCRIPT = (
    'root="${PEAKPACK_POWERCAP_ROOT:-/sys/class/powercap}"; '
    'for z in "$root"/intel-rapl:*; do [ -r "$z/energy_uj" ] || continue; '
    'echo "${z##*/} $(cat "$z/energy_uj") $(cat "$z/max_energy_range_uj")"; done'
)
PACKAGE_ZONE = re.compile(r"^intel-rapl:\d+$")


@dataclass(frozen=True)
class ZoneReading:
    zone: str
    energy_uj: int
    max_energy_range_uj: int


def parse_zones(node: str, text: str) -> list[ZoneReading]:
    zones = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or not PACKAGE_ZONE.match(parts[0]):
            continue  # sub-zones (intel-rapl:0:0) are inside their package's count
        try:
            zone, energy, top = parts[0], int(parts[1]), int(parts[2])
        except (IndexError, ValueError):
            raise NodeError(node, f"RAPL counter line is unexpected: {line[:60]!r}") from None
        if top <= 0 or not 0 <= energy <= top:
            raise NodeError(node, f"RAPL zone {zone}: energy_uj {energy} outside 0..{top}")
        zones.append(ZoneReading(zone, energy, top))
    return zones


def counter_delta_uj(previous: int, current: int, max_range: int) -> int:
    """Energy between two readings of one zone; a smaller reading means the counter wrapped once."""
    if current >= previous:
        return current - previous
    return current + max_range - previous
