"""Is there room on the target? Preflight asks before anything changes: the target's available
memory must hold the container (its memory limit, or what it uses when it has none), and the
filesystem of the target's docker root must hold what is copied there (the writable layer, the
volumes, and the checkpoint, which is about as large as the memory in use), each with a reserve
left over, so a migration never OOM-kills the target's other containers or fills its disk.

Labels only declare demand and the planner's caps are shares of the inventory's sizes; this is
the check on what the nodes really have, read when the move is about to happen."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from peakpack.orchestrator.domain.errors import NodeError, TargetRefused
from peakpack.orchestrator.remote import SshPool
from peakpack.orchestrator.remote.docker_api import EnginePool

#: left free on the target after the move: the kernel, the engine and its other containers'
#: growth need some, and a node run to its last byte fails in ways nothing can settle
MEMORY_RESERVE = 256 * 1024**2
DISK_RESERVE = 512 * 1024**2

#: On the target: available memory (bytes) and free bytes of the docker root's filesystem.
ROOM_SCRIPT = 'awk \'$1 == "MemAvailable:" {print $2 * 1024}\' /proc/meminfo && df -B1 --output=avail "$1" | tail -n 1'
#: On the source: bytes of each folder given (the writable layer and the volumes), one per line.
SIZE_SCRIPT = 'for p in "$@"; do du -sb -- "$p" | cut -f1 || exit 1; done'


@dataclass(frozen=True)
class Need:
    """What the container takes to the target: memory it may use there and bytes written there."""

    memory: int
    disk: int


@dataclass(frozen=True)
class Room:
    """What the target has: available memory and free bytes of its docker root's filesystem."""

    memory: int
    disk: int


def memory_need(inspect: dict[str, Any], stats: dict[str, Any]) -> tuple[int, int]:
    """(memory the target must give it, memory in use): its limit when it has one, else what it
    uses (reclaimable page cache left out, as `docker stats` does)."""
    memory = stats.get("memory_stats") or {}
    cache = memory.get("stats") or {}
    used = max(0, int(memory.get("usage") or 0) - int(cache.get("inactive_file", cache.get("total_inactive_file", 0))))
    limit = int((inspect.get("HostConfig") or {}).get("Memory") or 0)
    return (limit if limit > 0 else used), used


def shortfall(container: str, target: str, need: Need, room: Room) -> str | None:
    """Why `target` cannot take the container (one line with the fix), or None."""
    mib = 1024**2
    if need.memory + MEMORY_RESERVE > room.memory:
        return (f"{target} has {room.memory // mib} MiB of memory available; {container} needs "
                f"{need.memory // mib} MiB (its limit, or what it uses) and {MEMORY_RESERVE // mib} MiB must stay "
                "free; choose another node or free memory there")
    if need.disk + DISK_RESERVE > room.disk:
        return (f"{target} has {room.disk // mib} MiB free for docker; {container} needs {need.disk // mib} MiB "
                f"(its writable layer, volumes and checkpoint) and {DISK_RESERVE // mib} MiB must stay free; choose "
                "another node or free disk there")
    return None


def parse_numbers(node: str, text: str, count: int) -> list[int]:
    try:
        numbers = [int(float(x)) for x in text.split()]
    except ValueError:
        numbers = []
    if len(numbers) != count:
        raise NodeError(node, f"could not measure memory and disk: {text[:80]!r}")
    return numbers


def copied_folders(inspect: dict[str, Any]) -> list[str]:
    """The folders a migration copies: the writable layer and every volume (on the source)."""
    return [str(inspect["GraphDriver"]["Data"]["UpperDir"]),
            *(str(m["Source"]) for m in inspect.get("Mounts") or () if m.get("Type") == "volume")]


async def check_room(ssh: SshPool, engines: EnginePool, container: str, source: str, target: str,
                     inspect: dict[str, Any], target_root: str) -> None:
    """Raise TargetRefused unless `target` has room for `container` (`inspect`: its inspect
    document on the source; `target_root`: the target's docker root).

    What the move needs of the target at its peak, the restore: the restored memory (its limit, or
    what it uses) and, on the disk of its docker root, the writable layer, the volumes and the
    pages the dump sent (about the memory in use). The pages pass through the target's page cache
    on their way to and from that disk, which the kernel reclaims: memory it need not hold back.
    The page server receiving them holds a few MB with peakpack's CRIU build (scripts/criu-patches;
    a stock CRIU 4.2 receiving over TLS holds about as much as the pages), and it exits before the
    restore begins, so its peak never adds to the restore's."""
    folders = copied_folders(inspect)
    stats, sizes, free = await asyncio.gather(
        engines.call(source, lambda api: api.stats(container, stream=False)),
        ssh.run(source, ["sh", "-c", SIZE_SCRIPT, "sh", *folders], timeout=300),
        ssh.run(target, ["sh", "-c", ROOM_SCRIPT, "sh", target_root], timeout=60),
    )
    memory, in_use = memory_need(inspect, stats)
    copied = sum(parse_numbers(source, sizes.stdout, len(folders)))
    available, disk = parse_numbers(target, free.stdout, 2)
    why = shortfall(container, target, Need(memory, copied + in_use), Room(available, disk))
    if why is not None:
        raise TargetRefused(why)
