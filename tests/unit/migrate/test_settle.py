"""Settling reads each node's facts only once nothing of the migration still runs there, treats an
engine error as an unknown copy, resumes a dumped source in place, keeps it until the target has
run for the grace period, disarms what a migration left on a node, removes the checkpoint left
behind by a rollback, and reconciliation survives one migration that cannot be settled. The nodes
are fakes that answer as the lab's do (the process lines below were read with `ps` on the lab
during a checkpoint, a restore and a post-copy transfer); the real faults are in
tests/integration/test_faults_*.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from peakpack.db.store import Store
from peakpack.migrate.batch import reconcile_migrations
from peakpack.migrate.criu import NODE_SCRIPT, Facts, LazyPages
from peakpack.migrate.resolve import Copy as ResolvedCopy
from peakpack.migrate.resolve import Images
from peakpack.migrate.settle import PROCESSES_ARGV, MigrationFacts, Settler, _copy, in_flight
from peakpack.orchestrator.domain.settings import MigrationSettings
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
LAZY = ("timeout -s KILL 91 sh -c \"$@\"; echo $? > \"$0\" /docker-node-2/peakpack-criu/7/lazy-pages.rc criu "
        "lazy-pages --page-server --address 10.207.62.11 --port 27007 -D /docker-node-2/peakpack-criu/7/images "
        "-W /docker-node-2/peakpack-criu/7/images --status-fd 3 -o /docker-node-2/peakpack-criu/7/lazy-pages.log -v2")


def ps(*lines: str, netns: str = NETNS) -> str:
    """PROCESSES_ARGV's output on a node whose session is in NETNS."""
    return f"net:[{NETNS}]\n" + "".join(f"{netns} {line}\n" for line in lines)


@pytest.mark.parametrize("line", [
    "docker checkpoint create web peakpack-7",
    "/usr/bin/docker start --checkpoint peakpack-7 web",
    "docker start --checkpoint=peakpack-7 web",
    "docker checkpoint create --leave-running web peakpack-7",
    RUNC_DUMP,
    LAZY,
    LAZY.partition(" criu ")[2].join(("criu ", "")),  # the daemon itself
])
def test_a_checkpoint_or_restore_of_this_container_is_in_flight(line: str) -> None:
    assert in_flight(ps("sshd: root@notty", line, "criu: dump --rpc -t 2919"), "web", SRC_ID, 7) == [line]


@pytest.mark.parametrize("text", [
    ps("docker checkpoint create web peakpack-7", netns="4026532999"),  # another lab node's process
    ps("docker checkpoint create web peakpack-8"),     # another migration of the same container
    ps("docker start --checkpoint peakpack-7 db"),     # another container
    ps("docker ps -q", "docker logs web", SHIM),      # the container merely runs
    ps(RUNC_RESTORE),                                  # a restore of the other node's copy (another ID)
    ps("ssh root@10.0.0.2 -- docker checkpoint create web peakpack-7"),  # a client, not this node's docker
    ps(LAZY.replace("/7/", "/8/")),                   # another migration's page transfer
    ps("criu page-server -D /docker-node-2/peakpack-criu/7/images --address 10.0.0.2 --port 27007"),  # waits only
    f"net:[{NETNS}]\n         - [kthreadd]\n",
])
def test_anything_else_is_not(text: str) -> None:
    assert in_flight(text, "web", SRC_ID, 7) == []


@dataclass
class Copy:
    id: str
    running: bool
    images: Images = Images.NONE
    dumped: bool = False          # CRIU's network lock in its namespace: dumped and left stopped
    ran_s: float = 60.0           # how long it has run
    armed: bool = False           # the migration's lock, block or daemon is on its node
    processes: list[str] = field(default_factory=list)
    error: Exception | None = None  # what inspect raises
    broken: bool = False          # its restore fails every time (a checkpoint CRIU cannot restore)

    def __post_init__(self) -> None:
        self.started = time.time() - self.ran_s


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
    """SshPool and EnginePool at once, over copies keyed by (node, container); records what runs
    (CRIU's node script as `criu SUBCOMMAND ARGS...`)."""

    def __init__(self, copies: dict[tuple[str, str], Copy]) -> None:
        self.copies = copies
        self.commands: list[tuple[str, list[str]]] = []
        self.no_ps: set[str] = set()  # nodes whose `ps` cannot list processes (busybox, say)

    def _copy(self, node: str) -> Copy | None:
        return next((c for (n, _), c in self.copies.items() if n == node), None)

    async def run(self, node: str, argv: list[str], *, timeout: float = 120.0, check: bool = True,
                  input: str | None = None) -> CommandResult:
        if argv == PROCESSES_ARGV:
            if node in self.no_ps:
                return CommandResult(1, "", "ps: unrecognized option: netns=")
            return CommandResult(0, ps(*(p for (n, _), c in self.copies.items() if n == node for p in c.processes)), "")
        while argv and (argv[0] == "env" or "=" in argv[0]):  # the migration's id and lease token
            argv = argv[1:]
        if argv[:3] == ["sh", "-c", NODE_SCRIPT]:
            argv = ["criu", *argv[4:]]
            if argv[1] == "docker":  # the node's docker CLI, under the migration's fence
                argv = argv[1:]
            elif argv[1] == "restore":  # `docker start --checkpoint`, its leftovers noted
                argv = ["docker", "start", "--checkpoint", argv[3], argv[4]]
        c = self._copy(node)
        if argv[:2] == ["criu", "facts"]:
            armed = c is not None and c.armed
            if c is None:
                return CommandResult(0, f"now={time.time()}\nchain=no\ndump=no\npages=no\ncomplete=no\n"
                                        "lazy=none\narmed=no\n", "")
            return CommandResult(0, f"now={time.time()}\nchain={'yes' if c.dumped else 'no'}\n"
                                    f"dump={'yes' if c.images is Images.DUMP else 'no'}\n"
                                    f"pages={'yes' if c.images in (Images.PAGES, Images.COMPLETE) else 'no'}\n"
                                    f"complete={'yes' if c.images is Images.COMPLETE else 'no'}\n"
                                    f"lazy=none\narmed={'yes' if armed else 'no'}\n", "")
        self.commands.append((node, list(argv)))
        if argv[:2] == ["criu", "read"]:
            return CommandResult(0, "\n", "")  # no runc.conf: nothing to strip
        if argv[:2] == ["criu", "unlock"] and c is not None:
            c.armed = False
        if argv[:2] == ["criu", "resume"] and c is not None:
            c.dumped = False
        if argv[:2] == ["docker", "start"]:
            if self.copies[(node, argv[-1])].broken:
                return CommandResult(1, "", "Error response from daemon: failed to restore: criu failed")
            self.copies[(node, argv[-1])].running = True
        return CommandResult(0, "", "")

    async def inspect_container_or_none(self, node: str, name: str, *, timeout: float = 30.0) -> dict[str, Any] | None:
        c = self.copies.get((node, name))
        if c is not None and c.error is not None:
            raise c.error
        if c is None:
            return None
        started = datetime.fromtimestamp(c.started, UTC).isoformat().replace("+00:00", "123Z")
        return {"Id": c.id, "State": {"Running": c.running, "Pid": 4242 if c.running else 0, "StartedAt": started},
                "NetworkSettings": {"Networks": {}}}  # --network none: no address to announce

    async def call(self, node: str, fn: Callable[[Any], T], *, timeout: float = 60.0) -> T:
        return fn(FakeApi(self, node))

    async def call_or_none(self, node: str, fn: Callable[[Any], T], *, timeout: float = 60.0) -> T | None:
        try:
            return fn(FakeApi(self, node))
        except EngineNotFound:
            return None


def settle(nodes: FakeNodes, checkpointed: bool = True, grace_s: float = 0.0) -> tuple[MigrationState, str | None]:
    settler = Settler(nodes, nodes, "web", "node-1", "node-2", 7, MigrationFacts(),  # type: ignore[arg-type]
                      settings=MigrationSettings(grace_seconds=grace_s))
    return asyncio.run(settler.run(checkpointed, "the restore timed out"))


def starts(nodes: FakeNodes) -> list[tuple[str, list[str]]]:
    return [(n, argv) for n, argv in nodes.commands if argv[:2] in (["docker", "start"], ["criu", "resume"])]


def changes(nodes: FakeNodes) -> list[tuple[str, list[str]]]:
    """Every command that changes a node: all but reading runc.conf, and the bookkeeping of the
    migration's lease on the node and of the QoS guards' hold (renewed every settling round)."""
    return [(n, argv) for n, argv in nodes.commands
            if argv[:2] not in (["criu", "read"], ["criu", "lock"], ["criu", "unlock"]) and "holds" not in argv[2]]


def test_a_restore_still_running_on_the_target_is_waited_for_not_doubled() -> None:
    """`docker start --checkpoint` outlived its SSH timeout: the target shows a stopped copy with
    the checkpoint, the source its dumped copy; resuming the source now would make two copies."""
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, images=Images.DUMP, dumped=True),
                       ("node-2", "web"): Copy(DST_ID, running=False, images=Images.COMPLETE,
                                               processes=["docker start --checkpoint peakpack-7 web", RUNC_RESTORE])})
    state, reason = settle(nodes)
    assert state is MigrationState.IN_DOUBT and "node-2 still runs `docker start --checkpoint" in (reason or "")
    assert not changes(nodes)
    # the restore ends with the target running: the next reconciliation finishes forward
    nodes.copies[("node-2", "web")] = Copy(DST_ID, running=True, images=Images.COMPLETE)
    assert settle(nodes)[0] is MigrationState.SUCCEEDED
    assert list(nodes.copies) == [("node-2", "web")] and starts(nodes) == []


def test_a_dump_still_stopping_the_source_keeps_the_target() -> None:
    """`docker checkpoint create` outlived its timeout (or its leader was killed): the source
    still shows running, but the dump will stop it; removing the target now could leave nothing."""
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, processes=[RUNC_DUMP, "criu: dump --rpc -t 2919"]),
                       ("node-2", "web"): Copy(DST_ID, running=False, images=Images.PAGES)})
    state, reason = settle(nodes)
    assert state is MigrationState.IN_DOUBT and "node-1 still runs `runc" in (reason or "")
    assert ("node-2", "web") in nodes.copies and not changes(nodes)


def test_a_post_copy_transfer_still_running_is_waited_for() -> None:
    """The target runs, restored post-copy, while its pages still arrive: it is not yet a whole
    copy, and the source that serves them is not yet a stale one."""
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, dumped=True, images=Images.DUMP),
                       ("node-2", "web"): Copy(DST_ID, running=True, images=Images.COMPLETE, processes=[LAZY])})
    state, reason = settle(nodes)
    assert state is MigrationState.IN_DOUBT and "node-2 still runs `timeout" in (reason or "")
    assert not changes(nodes)


def test_a_dumped_source_is_resumed_in_place_when_the_target_does_not_run() -> None:
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, images=Images.DUMP, dumped=True, armed=True),
                       ("node-2", "web"): Copy(DST_ID, running=False, images=Images.COMPLETE, armed=True)})
    assert settle(nodes)[0] is MigrationState.ROLLED_BACK
    assert starts(nodes) == [("node-1", ["criu", "resume", "4242"])]  # in place: nothing restored, nothing fresh
    assert list(nodes.copies) == [("node-1", "web")]
    # both nodes' leases renewed, then disarmed: daemons stopped, runc.conf read (block stripped); the
    # leases released once settled
    for node in ("node-1", "node-2"):
        done = [argv[1] for n, argv in nodes.commands if n == node and argv[0] == "criu"]
        assert done[:3] == ["lock", "stop", "read"] and done[-1] == "unlock", (node, done)


def test_the_dumped_source_is_kept_until_the_target_ran_the_grace_period() -> None:
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, images=Images.DUMP, dumped=True),
                       ("node-2", "web"): Copy(DST_ID, running=True, images=Images.COMPLETE, ran_s=0.0)})
    t0 = time.monotonic()
    assert settle(nodes, grace_s=0.5)[0] is MigrationState.SUCCEEDED
    assert time.monotonic() - t0 >= 0.5 and list(nodes.copies) == [("node-2", "web")]


def test_a_source_that_died_after_its_dump_completes_the_transfer_then_restores_the_target() -> None:
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=False, images=Images.DUMP),
                       ("node-2", "web"): Copy(DST_ID, running=False, images=Images.PAGES)})

    async def receive(node: str, argv: list[str], **kw: Any) -> CommandResult:
        if NODE_SCRIPT in argv and argv[argv.index(NODE_SCRIPT) + 2] == "receive":
            nodes.copies[("node-2", "web")].images = Images.COMPLETE
        return await run(node, argv, **kw)

    run, nodes.run = nodes.run, receive  # type: ignore[method-assign]
    assert settle(nodes)[0] is MigrationState.SUCCEEDED
    did = [(n, argv[:2]) for n, argv in nodes.commands if argv[:2] != ["criu", "read"]]
    assert did.index(("node-1", ["criu", "send"])) < did.index(("node-2", ["criu", "receive"])) \
        < did.index(("node-2", ["docker", "start"]))
    assert list(nodes.copies) == [("node-2", "web")]


def test_an_engine_error_is_an_unknown_copy_not_a_crash() -> None:
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True),
                       ("node-2", "web"): Copy(DST_ID, running=False,
                                               error=EngineAPIError("500 Server Error: Internal Server Error"))})
    state, reason = settle(nodes)
    assert state is MigrationState.IN_DOUBT and "node-2 answers, but its engine failed: 500" in (reason or "")
    assert not changes(nodes)


def test_a_node_that_cannot_list_its_processes_is_in_doubt_with_the_fix() -> None:
    """Without a process list nobody knows whether a restore still runs there: wait, say why."""
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, images=Images.DUMP, dumped=True),
                       ("node-2", "web"): Copy(DST_ID, running=False, images=Images.COMPLETE)})
    nodes.no_ps.add("node-2")
    state, reason = settle(nodes)
    assert state is MigrationState.IN_DOUBT and not changes(nodes)
    assert "node-2 answers, but cannot list its processes" in (reason or "") and "install procps" in (reason or "")


def test_a_rollback_removes_the_checkpoint_and_the_migration_folders() -> None:
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, images=Images.DUMP)})
    assert settle(nodes)[0] is MigrationState.ROLLED_BACK
    folder = f"/docker-node-1/containers/{SRC_ID}/checkpoints/peakpack-7"
    assert ("node-1", ["rm", "-rf", "--", folder, f"{folder}.partial"]) in nodes.commands
    for node in ("node-1", "node-2"):
        assert (node, ["criu", "remove", f"/docker-{node}/peakpack-criu/7"]) in nodes.commands


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


def test_a_source_dumped_under_another_network_lock_is_still_known_dumped() -> None:
    """Every process stopped beside this migration's finished dump is a dumped source, whatever lock
    CRIU put on its network (the migration's block says iptables; an older or foreign one may not)."""
    running = {"State": {"Running": True}}
    base = Facts(now=0.0, locked_net=False, stopped=True, dump=True, pages=False, complete=False,
                 lazy=LazyPages.NONE, armed=False)
    assert _copy(running, base) is ResolvedCopy.DUMPED
    assert _copy(running, replace(base, dump=False)) is ResolvedCopy.RUNNING  # stopped by someone else
    assert _copy(running, replace(base, stopped=False, locked_net=True)) is ResolvedCopy.DUMPED


def test_a_restore_that_fails_every_time_is_handed_to_an_operator(store: Store) -> None:
    """Nothing runs anywhere and the target holds the complete checkpoint, but CRIU cannot restore it:
    tried at three reconciliations, then the migration ends ROLLBACK_FAILED saying so (not retried
    every epoch forever)."""
    mid = open_migration(store, "web")
    nodes = FakeNodes({("node-2", "web"): Copy(DST_ID, running=False, images=Images.COMPLETE, broken=True)})
    for _ in range(3):
        [line] = asyncio.run(reconcile_migrations(nodes, nodes, store))  # type: ignore[arg-type]
        assert "IN_DOUBT: " in line and "restore_target failed" in line
    [line] = asyncio.run(reconcile_migrations(nodes, nodes, store))  # type: ignore[arg-type]
    assert "ROLLBACK_FAILED" in line and "failed 3 times: an operator must look" in line
    assert {m.id: m.state for m in store.migrations.history()}[mid] is MigrationState.ROLLBACK_FAILED
    assert asyncio.run(reconcile_migrations(nodes, nodes, store)) == []  # settled: never tried again
