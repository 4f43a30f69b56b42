"""RAPL energy counters (Linux powercap) read over SSH, and the wraparound arithmetic.

The counters live in /sys/class/powercap/intel-rapl:N/energy_uj (one package zone per socket),
or under $PEAKPACK_POWERCAP_ROOT when a node sets it (the lab does). Each zone wraps at its
own max_energy_range_uj. A reboot restarts them: the node's boot id, read with them, tells a
reset from a wrap. The same read gives the node's busy CPU time (/proc/stat, or the file
$PEAKPACK_NODE_CPU_USAGE names, in ns: the lab's node cgroup), which per-container energy is
shared against."""

from __future__ import annotations

import re
from dataclasses import dataclass

from peakpack.orchestrator.domain.errors import NodeError

#: prints "boot BOOT_ID", "busy NS" (CPU time the node spent not idle) and "zone energy_uj
#: max_energy_range_uj" for every package zone (no zone line when there is no counter)
READ_SCRIPT = (
    'echo "boot $(cat /proc/sys/kernel/random/boot_id)"; '
    'if [ -n "$PEAKPACK_NODE_CPU_USAGE" ]; then echo "busy $(cat "$PEAKPACK_NODE_CPU_USAGE")"; '
    'else awk -v hz="$(getconf CLK_TCK)" \'$1=="cpu" {printf "busy %.0f\\n", ($2+$3+$4+$7+$8+$9) * 1e9 / hz}\' '
    '/proc/stat; fi; '
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


@dataclass(frozen=True)
class NodeCounters:
    """What READ_SCRIPT says besides the zones: the boot id and the busy CPU time (ns)."""

    boot_id: str | None
    busy_ns: int | None


def parse_node_counters(node: str, text: str) -> NodeCounters:
    boot, busy = None, None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "boot":
            boot = parts[1]
        elif len(parts) == 2 and parts[0] == "busy":
            try:
                busy = int(parts[1])
            except ValueError:
                raise NodeError(node, f"busy CPU time is unexpected: {line[:60]!r}") from None
    return NodeCounters(boot, busy)


def restarted(previous_boot: str | None, current_boot: str | None, previous: int, current: int) -> bool:
    """Whether a counter may have restarted between two readings, so their difference means
    nothing: the node rebooted (its boot id changed), or, without boot ids, the counter went
    down (a reset and a wrap look the same then)."""
    if previous_boot is not None and current_boot is not None:
        return previous_boot != current_boot
    return current < previous


def counter_delta_uj(previous: int, current: int, max_range: int) -> int:
    """Energy between two readings of one zone; a smaller reading means the counter wrapped once."""
    if current >= previous:
        return current - previous
    return current + max_range - previous
