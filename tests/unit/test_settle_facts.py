"""Settling reads each node's facts only once nothing of the migration still runs there, treats an
engine error as an unknown copy, removes the checkpoint left behind by a rollback, and
reconciliation survives one migration that cannot be settled. The nodes are fakes that answer
as the lab's do (the process lines below were read with `ps` on the lab during a checkpoint and a
restore); the real faults are in tests/integration/test_faults.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from peakpack.db.store import Store
from peakpack.migrate.batch import reconcile_migrations
from peakpack.migrate.settle import PROCESSES_ARGV, MigrationFacts, Settler, in_flight
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote.docker_api import EngineAPIError, EngineNotFound
from peakpack.orchestrator.remote.ssh import CommandResult

T = TypeVar("T")
NETNS = "4026532422"
SRC_ID, DST_ID = "6fa81cd370ffd1277dbf50a3cb7a97f48b71618c87cf783ac5b433ad5c3d7f67", "9b" * 32
RUNC_DUMP = (
    f"runc --root /run/pp2fe0-n1/runtime-runc/pp2fe0-n1 --log /run/pp2fe0-n1/containerd/daemon/"
    f"io.containerd.runtime.v2.task/pp2fe0-n1/{SRC_ID}/log.json --log-format json checkpoint --image-path "
    f"/tmp/ctd-checkpoint4017171571 --work-path /run/pp2fe0-n1/containerd/daemon/x/{SRC_ID}/criu-work {SRC_ID}"
)
RUNC_RESTORE = RUNC_DUMP.replace(" checkpoint ", " restore ").replace(SRC_ID, DST_ID)
SHIM = f"/usr/bin/containerd-shim-runc-v2 -namespace pp2fe0-n1 -id {SRC_ID} -address /run/pp2fe0-n1/c.sock"


def ps(*lines: str, netns: str = NETNS) -> str:
    """PROCESSES_ARGV's output on a node whose session is in NETNS."""
    return f"net:[{NETNS}]\n" + "".join(f"{netns} {line}\n" for line in lines)


@pytest.mark.parametrize("line", [
    "docker checkpoint create web peakpack-7",
    "/usr/bin/docker start --checkpoint peakpack-7 web",
    "docker start --checkpoint=peakpack-7 web",
    RUNC_DUMP,
])
def test_a_checkpoint_or_restore_of_this_container_is_in_flight(line: str) -> None:
    assert in_flight(ps("sshd: root@notty", line, "criu: dump --rpc -t 2919"), "web", SRC_ID, "peakpack-7") == [line]


@pytest.mark.parametrize("text", [
    ps("docker checkpoint create web peakpack-7", netns="4026532999"),  # another lab node's process
    ps("docker checkpoint create web peakpack-8"),     # another migration of the same container
    ps("docker start --checkpoint peakpack-7 db"),     # another container
    ps("docker ps -q", "docker logs web", SHIM),      # the container merely runs
    ps(RUNC_RESTORE),                                  # a restore of the other node's copy (another ID)
    ps("ssh root@10.0.0.2 -- docker checkpoint create web peakpack-7"),  # a client, not this node's docker
    f"net:[{NETNS}]\n         - [kthreadd]\n",
])
def test_anything_else_is_not(text: str) -> None:
    assert in_flight(text, "web", SRC_ID, "peakpack-7") == []


@dataclass
class Copy:
    id: str
    running: bool
    checkpoint: bool = False
    processes: list[str] = field(default_factory=list)
    error: Exception | None = None  # what inspect raises


class FakeApi:
    def __init__(self, nodes: FakeNodes, node: str) -> None:
        self.nodes, self.node = nodes, node

    def info(self) -> dict[str, Any]:
        return {"DockerRootDir": f"/docker-{self.node}"}

    def remove_container(self, name: str, force: bool) -> None:
        self.nodes.commands.append((self.node, ["remove", name]))
        del self.nodes.copies[(self.node, name)]

    def update_container(self, name: str, restart_policy: dict[str, Any]) -> None:
        self.nodes.commands.append((self.node, ["update", name, restart_policy["Name"]]))

    def inspect_volume(self, name: str) -> dict[str, Any]:
        raise EngineNotFound("no such volume")


class FakeNodes:
    """SshPool and EnginePool at once, over copies keyed by (node, container); records what runs."""

    def __init__(self, copies: dict[tuple[str, str], Copy]) -> None:
        self.copies = copies
        self.commands: list[tuple[str, list[str]]] = []
        self.no_ps: set[str] = set()  # nodes whose `ps` cannot list processes (busybox, say)

    async def run(self, node: str, argv: list[str], *, timeout: float = 120.0, check: bool = True,
                  input: str | None = None) -> CommandResult:
        if argv == PROCESSES_ARGV:
            if node in self.no_ps:
                return CommandResult(1, "", "ps: unrecognized option: netns=")
            return CommandResult(0, ps(*(p for (n, _), c in self.copies.items() if n == node for p in c.processes)), "")
        self.commands.append((node, list(argv)))
        if argv[0] == "test":  # the complete-checkpoint test: the folder names the container's ID
            found = [c for (n, _), c in self.copies.items() if n == node and c.id in argv[2]]
            return CommandResult(0 if found and found[0].checkpoint else 1, "", "")
        if argv[:2] == ["docker", "start"]:
            self.copies[(node, argv[-1])].running = True
        return CommandResult(0, "", "")

    async def inspect_container_or_none(self, node: str, name: str, *, timeout: float = 30.0) -> dict[str, Any] | None:
        c = self.copies.get((node, name))
        if c is not None and c.error is not None:
            raise c.error
        return None if c is None else {"Id": c.id, "State": {"Running": c.running}}

    async def call(self, node: str, fn: Callable[[Any], T], *, timeout: float = 60.0) -> T:
        return fn(FakeApi(self, node))

    async def call_or_none(self, node: str, fn: Callable[[Any], T], *, timeout: float = 60.0) -> T | None:
        try:
            return fn(FakeApi(self, node))
        except EngineNotFound:
            return None


def settle(nodes: FakeNodes, checkpointed: bool = True) -> tuple[MigrationState, str | None]:
    settler = Settler(nodes, nodes, "web", "node-1", "node-2", 7, MigrationFacts())  # type: ignore[arg-type]
    return asyncio.run(settler.run(checkpointed, "the restore timed out"))


def starts(nodes: FakeNodes) -> list[tuple[str, list[str]]]:
    return [(n, argv) for n, argv in nodes.commands if argv[:2] == ["docker", "start"]]


def changes(nodes: FakeNodes) -> list[tuple[str, list[str]]]:
    """Every command that changes a node (all but the checkpoint test)."""
    return [(n, argv) for n, argv in nodes.commands if argv[0] != "test"]


def test_a_restore_still_running_on_the_target_is_waited_for_not_doubled() -> None:
    """`docker start --checkpoint` outlived its SSH timeout: the target shows a stopped copy with
    the checkpoint, the source too; restoring the source now would make two copies."""
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=False, checkpoint=True),
                       ("node-2", "web"): Copy(DST_ID, running=False, checkpoint=True,
                                               processes=["docker start --checkpoint peakpack-7 web", RUNC_RESTORE])})
    state, reason = settle(nodes)
    assert state is MigrationState.IN_DOUBT and "node-2 still runs `docker start --checkpoint" in (reason or "")
    assert not changes(nodes)
    # the restore ends with the target running: the next reconciliation finishes forward
    nodes.copies[("node-2", "web")] = Copy(DST_ID, running=True, checkpoint=True)
    assert settle(nodes)[0] is MigrationState.SUCCEEDED
    assert list(nodes.copies) == [("node-2", "web")] and starts(nodes) == []


def test_a_dump_still_stopping_the_source_keeps_the_target() -> None:
    """`docker checkpoint create` outlived its timeout (or its leader was killed): the source
    still shows running, but the dump will stop it; removing the target now could leave nothing."""
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, processes=[RUNC_DUMP, "criu: dump --rpc -t 2919"]),
                       ("node-2", "web"): Copy(DST_ID, running=False)})
    state, reason = settle(nodes)
    assert state is MigrationState.IN_DOUBT and "node-1 still runs `runc" in (reason or "")
    assert ("node-2", "web") in nodes.copies and not changes(nodes)


def test_an_engine_error_is_an_unknown_copy_not_a_crash() -> None:
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True),
                       ("node-2", "web"): Copy(DST_ID, running=False,
                                               error=EngineAPIError("500 Server Error: Internal Server Error"))})
    state, reason = settle(nodes)
    assert state is MigrationState.IN_DOUBT and "node-2 answers, but its engine failed: 500" in (reason or "")
    assert not changes(nodes)


def test_a_node_that_cannot_list_its_processes_is_in_doubt_with_the_fix() -> None:
    """Without a process list nobody knows whether a restore still runs there: wait, say why."""
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=False, checkpoint=True),
                       ("node-2", "web"): Copy(DST_ID, running=False, checkpoint=True)})
    nodes.no_ps.add("node-2")
    state, reason = settle(nodes)
    assert state is MigrationState.IN_DOUBT and not changes(nodes)
    assert "node-2 answers, but cannot list its processes" in (reason or "") and "install procps" in (reason or "")


def test_a_rollback_removes_the_checkpoint_the_source_was_restored_from() -> None:
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, checkpoint=True)})
    assert settle(nodes)[0] is MigrationState.ROLLED_BACK
    folder = f"/docker-node-1/containers/{SRC_ID}/checkpoints/peakpack-7"
    assert ("node-1", ["rm", "-rf", "--", folder, f"{folder}.partial"]) in nodes.commands


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as s:
        yield s


def open_migration(store: Store, container: str) -> int:
    """A migration its controller left during the checkpoint (preflight's facts journaled)."""
    mid = store.migrations.begin(container, "node-1", "node-2")
    store.migrations.step_finished(
        store.migrations.step_started(mid, "preflight"), ok=True, detail=MigrationFacts().dumps()
    )
    store.migrations.step_started(mid, "checkpointing")
    return mid


def test_one_migration_that_cannot_be_reconciled_leaves_the_others_settled(store: Store) -> None:
    broken, fine = open_migration(store, "web"), open_migration(store, "db")
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, error=KeyError("State")),  # a bug, say
                       ("node-1", "db"): Copy(DST_ID, running=True)})
    lines = asyncio.run(reconcile_migrations(nodes, nodes, store))  # type: ignore[arg-type]
    assert len(lines) == 2 and "IN_DOUBT: reconciling failed (KeyError" in lines[0]
    states = {m.id: m.state for m in store.migrations.history()}
    assert states == {broken: MigrationState.IN_DOUBT, fine: MigrationState.ROLLED_BACK}
    [doubt] = [s for s in store.migrations.steps(broken) if s.step == "in_doubt"]
    assert "reconciling failed (KeyError" in (doubt.detail or "")
