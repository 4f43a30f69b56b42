"""Preflight's room check, the pure part: what a container needs on the target (its memory limit,
else what it uses; its layer, volumes and checkpoint on disk) against what the target has."""

from __future__ import annotations

import pytest

from peakpack.migrate.room import (
    DISK_RESERVE,
    MEMORY_RESERVE,
    Need,
    Room,
    copied_folders,
    memory_need,
    parse_numbers,
    shortfall,
)
from peakpack.orchestrator.domain.errors import NodeError

MIB = 1024**2
INSPECT = {"HostConfig": {"Memory": 0}, "GraphDriver": {"Data": {"UpperDir": "/var/lib/docker/overlay2/x/diff"}},
           "Mounts": [{"Type": "volume", "Source": "/var/lib/docker/volumes/data/_data"},
                      {"Type": "bind", "Source": "/srv/shared"}]}
STATS = {"memory_stats": {"usage": 300 * MIB, "stats": {"inactive_file": 100 * MIB}}}


def test_the_need_is_the_limit_when_there_is_one_else_what_it_uses() -> None:
    assert memory_need(INSPECT, STATS) == (200 * MIB, 200 * MIB)  # page cache is not use
    limited = {**INSPECT, "HostConfig": {"Memory": 1024 * MIB}}
    assert memory_need(limited, STATS) == (1024 * MIB, 200 * MIB)
    cgroup_v1 = {"memory_stats": {"usage": 300 * MIB, "stats": {"total_inactive_file": 50 * MIB}}}
    assert memory_need(INSPECT, cgroup_v1) == (250 * MIB, 250 * MIB)


def test_the_copied_folders_are_the_layer_and_the_volumes() -> None:
    assert copied_folders(INSPECT) == ["/var/lib/docker/overlay2/x/diff", "/var/lib/docker/volumes/data/_data"]


@pytest.mark.parametrize("need, room, why", [
    (Need(100 * MIB, 100 * MIB), Room(100 * MIB + MEMORY_RESERVE, 100 * MIB + DISK_RESERVE), None),
    (Need(100 * MIB, 100 * MIB), Room(100 * MIB + MEMORY_RESERVE - 1, 10**12), "MiB of memory available"),
    (Need(100 * MIB, 100 * MIB), Room(10**12, 100 * MIB + DISK_RESERVE - 1), "MiB free for docker"),
])
def test_a_target_without_room_is_refused_with_the_fix(need: Need, room: Room, why: str | None) -> None:
    got = shortfall("web-1", "node-2", need, room)
    assert (got is None) if why is None else (why in got and got.startswith("node-2 ") and "choose" in got)


def test_garbage_from_a_node_is_its_error() -> None:
    assert parse_numbers("node-2", "123\n456\n", 2) == [123, 456]
    with pytest.raises(NodeError, match="node node-2: could not measure"):
        parse_numbers("node-2", "MemAvailable?\n", 2)
