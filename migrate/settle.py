"""Settling a migration: observe both nodes, let `resolve.decide` choose, act, observe again, until
the container runs exactly once with nothing left behind, or a fact that matters is unknown
(IN_DOUBT, retried at the next reconciliation). The same code ends every migration: the success
path (removing the source), the failure path of a live migration, and reconciliation after a
crash, so there is one way out of every state.

Every action is check-then-act: it runs only because the facts just observed call for it, and
after it the facts are observed again instead of assuming it worked. A node's facts are trusted
only once no checkpoint or restore of the container is still running there (a command that
outlived its SSH timeout, or one a killed leader started): until it ends, that copy is unknown.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from peakpack.orchestrator.domain.errors import NodeError, PeakpackError
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote import SshPool
from peakpack.orchestrator.remote.docker_api import EngineAPIError, EnginePool

from .resolve import Copy, Decision, Move, Side, decide

#: node -> True/False (its BMC's power state) or None (no BMC / unreadable); power/ supplies it
PowerProbe = Callable[[str], bool | None]
#: files a complete checkpoint has (runc writes descriptors.json after CRIU's dump succeeded)
CHECKPOINT_FILES = ("inventory.img", "pstree.img", "descriptors.json")
MAX_ROUNDS = 8
NO_RESTART = {"Name": "no", "MaximumRetryCount": 0}
#: One SSH command: this session's network namespace, then every process's namespace and command
#: line, untruncated (`in_flight` reads it).
PROCESSES_ARGV = ["sh", "-c", "readlink /proc/self/ns/net && exec ps -e -ww -o netns=,args="]


@dataclass(frozen=True)
class MigrationFacts:
    """What the migration needs to settle that the nodes may no longer show; journaled (as the
    preflight step's detail) before anything changes."""

    restart_policy: dict[str, Any] = field(default_factory=lambda: dict(NO_RESTART))
    volumes: tuple[str, ...] = ()
    summary: str = ""

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str | None) -> MigrationFacts | None:
        try:
            d = json.loads(text or "")
            return cls(dict(d["restart_policy"]), tuple(d["volumes"]), str(d.get("summary", "")))
        except (ValueError, KeyError, TypeError):
            return None


def checkpoint_name(migration_id: int) -> str:
    return f"peakpack-{migration_id}"


def checkpoint_path(docker_root: str, container_id: str, migration_id: int) -> str:
    """Where docker keeps a container's checkpoint (and where `start --checkpoint` looks for it)."""
    return f"{docker_root}/containers/{container_id}/checkpoints/{checkpoint_name(migration_id)}"


def in_flight(processes: str, container: str, container_id: str, checkpoint: str) -> list[str]:
    """The command lines in `processes` (PROCESSES_ARGV's output) of a checkpoint or restore of
    this container that still runs: `docker checkpoint create NAME CHECKPOINT` and `docker start
    --checkpoint CHECKPOINT NAME` (the client lives until the engine answers), and runc's
    `checkpoint`/`restore` naming the container's ID (it outlives a killed client; CRIU runs as its
    child). Only processes in this session's network namespace count: the lab's nodes share one
    process table, and on a real node these all run in the host's namespace."""
    first, _, rest = processes.partition("\n")
    ours = first.strip().removeprefix("net:[").removesuffix("]")
    found = []
    for line in rest.splitlines():
        netns, _, args = line.strip().partition(" ")
        words = args.split()
        if netns != ours or not words:
            continue
        program = os.path.basename(words[0])
        if program == "docker" and container in words and (
                checkpoint in words or f"--checkpoint={checkpoint}" in words):
            found.append(args.strip())
        elif program == "runc" and {"checkpoint", "restore"} & set(words) and container_id in args:
            found.append(args.strip())
    return found


@dataclass
class Settler:
    """The nodes' side of one migration: observe a node, act on the decision."""

    ssh: SshPool
    engines: EnginePool
    container: str
    source: str
    target: str
    migration_id: int
    facts: MigrationFacts
    bmc_power: PowerProbe | None = None
    restore_timeout: float = 900.0
    notes: list[str] = field(default_factory=list)
    #: called before every action on a node: raises (FencedError) once this process may act no
    #: more (`Journal.check_fence`), so a fenced process stops touching nodes at once
    guard: Callable[[], None] = lambda: None

    @property
    def checkpoint(self) -> str:
        return checkpoint_name(self.migration_id)

    async def checkpoint_dir(self, node: str, container_id: str) -> str:
        info = await self.engines.call(node, lambda api: api.info())
        return checkpoint_path(str(info["DockerRootDir"]), container_id, self.migration_id)

    async def side(self, node: str) -> Side:
        """What `node` shows of the container. Check, then trust: while a checkpoint or restore of
        it still runs there, its state is half-made (a dump that has not stopped it yet, a restore
        that will start it), so the copy is UNKNOWN and nothing is decided on it; the state is read
        again after that check. An engine that answers with an error is UNKNOWN too (not fenced)."""
        try:
            d = await self.engines.inspect_container_or_none(node, self.container)
            if d is None:
                return Side(node, Copy.ABSENT)
            processes = await self.ssh.run(node, PROCESSES_ARGV, check=False, timeout=30)
            if not processes.ok:  # it answers, but cannot say what runs: not the same as silent
                return Side(node, Copy.UNKNOWN, doubt="answers, but cannot list its processes "
                            f"(`ps -e -o netns=,args=` exited {processes.exit_status}); install procps there")
            busy = in_flight(processes.stdout, self.container, str(d["Id"]), self.checkpoint)
            if busy:
                return Side(node, Copy.UNKNOWN, doubt=f"still runs `{busy[0][:200]}`")
            d = await self.engines.inspect_container_or_none(node, self.container)
            if d is None:
                return Side(node, Copy.ABSENT)
            folder = await self.checkpoint_dir(node, str(d["Id"]))
            test = ["test", "-f", f"{folder}/{CHECKPOINT_FILES[0]}"]
            for name in CHECKPOINT_FILES[1:]:
                test += ["-a", "-f", f"{folder}/{name}"]
            complete = (await self.ssh.run(node, test, check=False, timeout=30)).ok
            return Side(node, Copy.RUNNING if d["State"]["Running"] else Copy.STOPPED, complete)
        except EngineAPIError as exc:  # the engine answered with an error (e.g. a 500 from inspect)
            return Side(node, Copy.UNKNOWN, doubt=f"answers, but its engine failed: {_one_line(exc)}")
        except NodeError:
            off = await asyncio.to_thread(self.bmc_power, node) is False if self.bmc_power else False
            return Side(node, Copy.UNKNOWN, fenced=off)

    async def run(self, checkpointed: bool, failure: str | None) -> tuple[MigrationState, str | None]:
        """Settle; returns the migration's state (terminal, or IN_DOUBT) and the reason to record."""
        note = failure
        for _ in range(MAX_ROUNDS):
            src, dst = await asyncio.gather(self.side(self.source), self.side(self.target))
            d = decide(src, dst)
            if d.move is Move.WAIT:
                return MigrationState.IN_DOUBT, _join(note, d.why)
            if d.move is Move.LOST:
                return MigrationState.ROLLBACK_FAILED, _join(note, d.why)
            self.guard()
            try:
                await self.act(d)
            except (PeakpackError, EngineAPIError, OSError) as exc:
                return MigrationState.IN_DOUBT, _join(note, f"{d.move.value} failed: {_one_line(exc)}; retried "
                                                           "at the next reconciliation")
            if d.move in (Move.START_SOURCE_FRESH, Move.START_TARGET_FRESH):
                note = _join(note, d.why)
            if d.move is Move.DONE_FORWARD:
                return MigrationState.SUCCEEDED, note
            if d.move is Move.DONE_BACK:
                return (MigrationState.ROLLED_BACK if checkpointed else MigrationState.FAILED), note
        return MigrationState.IN_DOUBT, _join(note, "did not settle; retried at the next reconciliation")

    async def act(self, d: Decision) -> None:
        src, dst = self.source, self.target
        match d.move:
            case Move.FINISH:
                await self.engines.call(src, lambda api: api.remove_container(self.container, force=True))
            case Move.DONE_FORWARD:
                await self._finalize_target()
            case Move.KEEP_SOURCE:
                await self.engines.call(dst, lambda api: api.remove_container(self.container, force=True))
            case Move.DONE_BACK:
                await self._remove_checkpoint(src)
                await self._remove_volumes(dst)
                await self._set_restart_policy(src)
            case Move.RESTORE_SOURCE:
                await self._start(src, checkpoint=True)
            case Move.RESTORE_TARGET:
                await self._start(dst, checkpoint=True)
            case Move.START_SOURCE_FRESH:
                await self._start(src, checkpoint=False)
            case Move.START_TARGET_FRESH:
                await self._start(dst, checkpoint=False)

    async def _start(self, node: str, checkpoint: bool) -> None:
        argv = ["docker", "start", *(["--checkpoint", self.checkpoint] if checkpoint else []), self.container]
        await self.ssh.run(node, argv, timeout=self.restore_timeout)
        await asyncio.sleep(0.3)  # a restore that dies at once shows as stopped when observed next

    async def _finalize_target(self) -> None:
        """The target copy is the container now: its restart policy as the operator gave it, its
        transferred checkpoint gone, and the source's volumes (copied) removed."""
        await self._set_restart_policy(self.target)
        await self._remove_checkpoint(self.target)
        await self._remove_volumes(self.source)

    async def _remove_checkpoint(self, node: str) -> None:
        """This migration's checkpoint folder on `node` (and a `.partial` one): a whole memory image
        that docker keeps after `start --checkpoint`; called only once a copy runs from it."""
        d = await self.engines.inspect_container_or_none(node, self.container)
        if d is not None:
            folder = await self.checkpoint_dir(node, str(d["Id"]))
            await self.ssh.run(node, ["rm", "-rf", "--", folder, f"{folder}.partial"])

    async def _set_restart_policy(self, node: str) -> None:
        policy = self.facts.restart_policy
        if policy.get("Name") in (None, "", "no"):
            return
        await self.engines.call(node, lambda api: api.update_container(self.container, restart_policy=policy))

    async def _remove_volumes(self, node: str) -> None:
        """This migration's volumes on `node`: created there by it (target) or copied away (source);
        preflight made sure no other container shares them."""
        for name in self.facts.volumes:
            if await self.engines.call_or_none(node, lambda api, n=name: api.inspect_volume(n)) is not None:
                await self.engines.call(node, lambda api, n=name: api.remove_volume(n, force=True))


def _join(a: str | None, b: str | None) -> str | None:
    return "; ".join(x for x in (a, b) if x) or None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]
