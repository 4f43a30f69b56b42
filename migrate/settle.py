"""Settling a migration: observe both nodes, let `resolve.decide` choose, act, observe again, until
the container runs exactly once with nothing left behind, or a fact that matters is unknown
(IN_DOUBT, retried at the next reconciliation). The same code ends every migration: the success
path (removing the source once the target has run for the grace period), the failure path of a
live migration (resuming the dumped source in place), and reconciliation after a crash, so there
is one way out of every state.

Every action is check-then-act: it runs only because the facts just observed call for it, and
after it the facts are observed again instead of assuming it worked. A node's facts are trusted
only once nothing of this migration is still running there (a checkpoint, a restore or a
post-copy page transfer, maybe started by a killed leader): until it ends, that copy is unknown.
Each round also disarms every node that answers and runs nothing of the migration: its CRIU
daemons killed, its runc.conf block stripped, its lock released (`criu.NodeCriu.disarm`).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from operator import methodcaller
from typing import Any

from peakpack.orchestrator.domain.errors import FencedError, NodeError, PeakpackError
from peakpack.orchestrator.domain.model import Clients
from peakpack.orchestrator.domain.settings import MigrationSettings
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote import SshPool
from peakpack.orchestrator.remote.docker_api import EngineAPIError, EnginePool

from . import spec
from .criu import Facts, LazyPages, NodeCriu, lease_key
from .hold import set_hold
from .resolve import Copy, Decision, Images, Move, Side, decide
from .runc_conf import tcp_lines
from .segment import NodeSegment

#: node -> True/False (its BMC's power state) or None (no BMC / unreadable); power/ supplies it
PowerProbe = Callable[[str], bool | None]
MAX_ROUNDS = 8
#: a restore of the target that failed this many times (across reconciliations) is not tried again:
#: an operator must look (its checkpoint or the node is broken; retrying forever helps no one)
MAX_RESTORES = 3
#: how a failed restore reads in the journal (`Settler.run`'s IN_DOUBT reason), which counts them
RESTORE_FAILED = f"{Move.RESTORE_TARGET.value} failed"
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
    #: published TCP ports ('PORT/tcp') that accepted connections on the source before anything
    #: changed: the target must answer on them before the source goes
    answering: tuple[str, ...] = ()
    #: what its clients see (`Clients`): "kept" runs the dump and the restore with tcp-established
    clients: str = Clients.ELSEWHERE.value
    #: the endpoints whose addresses move with it (`spec.moving_endpoints`), as `Endpoint.to_json`
    moving: tuple[dict[str, str], ...] = ()
    #: 'ADDRESS:PORT' at its moving addresses that accepted connections on the source before
    #: anything changed: the target must answer there too before the source goes
    listening: tuple[str, ...] = ()
    #: where clients reached it before the move (`moved.reached`): the hook's "before"
    before: dict[str, Any] = field(default_factory=dict)
    #: the nonce of its name on its nodes' leases (`criu.lease_key`)
    nonce: str = ""

    @property
    def keeps_connections(self) -> bool:
        return self.clients == Clients.KEPT.value

    @property
    def moving_addresses(self) -> tuple[str, ...]:
        return tuple(a for e in self.moving for a in (e.get("ipv4"), e.get("ipv6")) if a)

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str | None) -> MigrationFacts | None:
        try:
            d = json.loads(text or "")
            return cls(dict(d["restart_policy"]), tuple(d["volumes"]), str(d.get("summary", "")),
                       tuple(d.get("answering", ())), str(d.get("clients", Clients.ELSEWHERE.value)),
                       tuple(dict(e) for e in d.get("moving", ())), tuple(d.get("listening", ())),
                       dict(d.get("before") or {}), str(d.get("nonce", "")))
        except (ValueError, KeyError, TypeError):
            return None


def checkpoint_name(migration_id: int) -> str:
    return f"peakpack-{migration_id}"


def checkpoint_path(docker_root: str, container_id: str, migration_id: int) -> str:
    """Where docker keeps a container's checkpoint (and where `start --checkpoint` looks for it)."""
    return f"{docker_root}/containers/{container_id}/checkpoints/{checkpoint_name(migration_id)}"


def in_flight(processes: str, container: str, container_id: str, migration_id: int) -> list[str]:
    """The command lines in `processes` (PROCESSES_ARGV's output) of a checkpoint, restore or page
    transfer of this container that still runs: `docker checkpoint create [--leave-running] NAME
    CHECKPOINT` and `docker start --checkpoint CHECKPOINT NAME` (the client lives until the engine
    answers), runc's `checkpoint`/`restore` naming the container's ID (it outlives a killed client;
    CRIU runs as its child), and the `criu lazy-pages` daemon that feeds a post-copy restore its
    memory (in this migration's folder). Only processes in this session's network namespace count:
    the lab's nodes share one process table, and on a real node these all run in the host's one."""
    checkpoint = checkpoint_name(migration_id)
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
        elif program in ("criu", "timeout") and "lazy-pages" in words and f"/peakpack-criu/{migration_id}/" in args:
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
    settings: MigrationSettings = field(default_factory=MigrationSettings)
    #: called before every action on a node: raises (FencedError) once this process may act no
    #: more (`Journal.check_fence`), so a fenced process stops touching nodes at once
    guard: Callable[[], None] = lambda: None
    #: the store's lease token this process holds: every round renews the migration's node leases
    #: with it, and node-side steps carry it, so a node refuses a controller that was replaced
    token: int = 0
    #: restores of the target that failed before (the journal's count of `RESTORE_FAILED`)
    failed_restores: int = 0
    _roots: dict[str, str] = field(default_factory=dict)

    @property
    def checkpoint(self) -> str:
        return checkpoint_name(self.migration_id)

    @property
    def key(self) -> str:
        """The migration's name on its nodes' leases (journaled by an older version without a nonce:
        its id alone)."""
        return lease_key(self.migration_id, self.facts.nonce) if self.facts.nonce else str(self.migration_id)

    async def criu(self, node: str) -> NodeCriu:
        """`node`'s side of this migration (its docker root read once)."""
        if node not in self._roots:
            info = await self.engines.call(node, lambda api: api.info())
            self._roots[node] = str(info["DockerRootDir"])
        return NodeCriu(self.ssh, node, self._roots[node], self.migration_id, self.token, self.key)

    async def segment(self, node: str) -> NodeSegment:
        """`node`'s side of this migration's moving addresses."""
        await self.criu(node)
        return NodeSegment(self.ssh, node, self._roots[node], self.migration_id, self.token, self.key)

    async def checkpoint_dir(self, node: str, container_id: str) -> str:
        await self.criu(node)
        return checkpoint_path(self._roots[node], container_id, self.migration_id)

    async def side(self, node: str) -> Side:
        """What `node` shows of the container. Check, then trust: while a checkpoint, restore or
        page transfer of it still runs there, its state is half-made (a dump that has not stopped
        it yet, a restore that will start it, a restored copy whose memory is still arriving), so
        the copy is UNKNOWN and nothing is decided on it; the state is read again after that check.
        An engine that answers with an error is UNKNOWN too (not fenced)."""
        try:
            d = await self.engines.inspect_container_or_none(node, self.container)
            processes = await self.ssh.run(node, PROCESSES_ARGV, check=False, timeout=30)
            if not processes.ok:  # it answers, but cannot say what runs: not the same as silent
                return Side(node, Copy.UNKNOWN, doubt="answers, but cannot list its processes "
                            f"(`ps -e -o netns=,args=` exited {processes.exit_status}); install procps there")
            busy = in_flight(processes.stdout, self.container, str((d or {}).get("Id", "-")), self.migration_id)
            if busy:
                return Side(node, Copy.UNKNOWN, doubt=f"still runs `{busy[0][:200]}`")
            d = await self.engines.inspect_container_or_none(node, self.container)
            criu = await self.criu(node)
            folder = await self.checkpoint_dir(node, str(d["Id"])) if d is not None else ""
            pid = int(d["State"].get("Pid") or 0) if d is not None and d["State"]["Running"] else 0
            facts = await criu.facts(folder, pid)
            if d is None:
                return Side(node, Copy.ABSENT, armed=facts.armed)
            return Side(node, _copy(d, facts), _images(facts), running_s=_running_s(d, facts), armed=facts.armed,
                        answers=await self._answers(criu, d) if node == self.target and pid else True)
        except EngineAPIError as exc:  # the engine answered with an error (e.g. a 500 from inspect)
            return Side(node, Copy.UNKNOWN, doubt=f"answers, but its engine failed: {_one_line(exc)}")
        except NodeError:
            off = await asyncio.to_thread(self.bmc_power, node) is False if self.bmc_power else False
            return Side(node, Copy.UNKNOWN, fenced=off)

    async def _answers(self, criu: NodeCriu, d: dict[str, Any]) -> bool:
        """Whether the copy `d` accepts connections on every port that answered on the source (its
        published ports, and the ports it listened on at its moving addresses)."""
        if not self.facts.answering and not self.facts.listening:
            return True
        addresses = [*spec.probe_addresses(d, self.facts.answering), *self.facts.listening]
        return set(addresses) <= await criu.answering(int(d["State"]["Pid"]), addresses)

    async def run(self, checkpointed: bool, failure: str | None) -> tuple[MigrationState, str | None]:
        """Settle; returns the migration's state (terminal, or IN_DOUBT) and the reason to record."""
        note = failure
        for _ in range(MAX_ROUNDS):
            src, dst = await asyncio.gather(self.side(self.source), self.side(self.target))
            d = decide(src, dst, self.settings.grace_seconds)
            if d.move is Move.WAIT:
                return MigrationState.IN_DOUBT, _join(note, d.why)
            if d.move is Move.LOST:
                return MigrationState.ROLLBACK_FAILED, _join(note, d.why)
            if d.move is Move.RESTORE_TARGET and self.failed_restores >= MAX_RESTORES:
                return MigrationState.ROLLBACK_FAILED, _join(note, (
                    f"the restore on {self.target} failed {self.failed_restores} times: an operator must look (its "
                    f"checkpoint is in peakpack-criu/{self.migration_id}/ of {self.target}'s docker root; restore "
                    f"it by hand, or `docker start {self.container}` there to start it fresh)"))
            self.guard()
            try:
                await self._renew()
                armed = [await self.criu(s.node) for s in (src, dst) if s.armed]
                await asyncio.gather(*(c.disarm() for c in armed))
                if d.move is Move.SOAK:
                    await asyncio.sleep(max(0.1, self.settings.grace_seconds - dst.running_s))
                else:
                    await self.act(d)
            except FencedError:
                raise  # a node holds a newer controller's token: it settles this migration
            except (PeakpackError, EngineAPIError, OSError) as exc:
                return MigrationState.IN_DOUBT, _join(note, f"{d.move.value} failed: {_one_line(exc)}; retried "
                                                           "at the next reconciliation")
            if d.move in (Move.START_SOURCE_FRESH, Move.START_TARGET_FRESH) or (
                    note is None and d.move in (Move.REMOVE_TARGET, Move.RESUME_SOURCE)):
                note = _join(note, d.why)  # what lost the state, or why a migration without error goes back
            if d.move in (Move.DONE_FORWARD, Move.DONE_BACK):
                await self._release()
            if d.move is Move.DONE_FORWARD:
                return MigrationState.SUCCEEDED, note
            if d.move is Move.DONE_BACK:
                return (MigrationState.ROLLED_BACK if checkpointed else MigrationState.FAILED), note
        return MigrationState.IN_DOUBT, _join(note, "did not settle; retried at the next reconciliation")

    async def _renew(self) -> None:
        """The migration's lease on each node that answers, renewed with our token before anything
        is done there (a node holding a newer controller's token refuses: FencedError); the QoS
        guards' hold with it."""
        ttl = self.settings.lease_seconds
        for node, role in ((self.source, "source"), (self.target, "target")):
            try:
                await (await self.criu(node)).lock(role, ttl)
            except FencedError:
                raise
            except (NodeError, EngineAPIError):
                continue  # silent, or another migration's lease: nothing of ours is done there
        await set_hold(self.ssh, (self.source, self.target), self.container, self.migration_id, held=True,
                       seconds=ttl)

    async def _release(self) -> None:
        """Settled: the migration's lease on both nodes goes (a node that does not answer keeps a
        stale one, listed by `peakpack reconcile` with its age)."""
        for node in (self.source, self.target):
            try:
                await (await self.criu(node)).unlock()
            except (NodeError, EngineAPIError):
                continue

    async def act(self, d: Decision) -> None:
        src, dst = self.source, self.target
        match d.move:
            case Move.FINISH:
                await self._links_down(src)
                await self._thaw(src)  # a frozen copy cannot be killed
                await self.engines.call(src, lambda api: api.remove_container(self.container, force=True))
            case Move.DONE_FORWARD:
                await self._finalize_target()
            case Move.REMOVE_TARGET:
                if await self._links_down(dst) and self.facts.keeps_connections:
                    await (await self.segment(src)).diverged()
                await self.engines.call(dst, lambda api: api.remove_container(self.container, force=True))
            case Move.DONE_BACK:
                await self._thaw(src)
                await self._links_up(src)
                await self._remove_checkpoint(src)
                await self._remove_volumes(dst)
                await self._set_restart_policy(src)
                await self._remove_work_dirs()
            case Move.RESUME_SOURCE:
                await self._resume_source()
            case Move.COMPLETE_TRANSFER:
                await self.transfer_metadata()
            case Move.RESTORE_TARGET:
                await self._restore_target()
            case Move.START_SOURCE_FRESH:
                await self._start(src)
            case Move.START_TARGET_FRESH:
                await self._start(dst)

    async def transfer_metadata(self) -> None:
        """The source's half of the checkpoint (the dump's metadata, ~30 KB, and Docker's
        descriptors.json) into the target's, which holds the pages: the target's checkpoint is
        complete once Docker's folder there is renamed from `.partial`, the last thing done."""
        ids = await asyncio.gather(*(self._container_id(n) for n in (self.source, self.target)))
        here, there = await asyncio.gather(self.criu(self.source), self.criu(self.target))
        payload = await here.send(f"{await self.checkpoint_dir(self.source, ids[0])}/descriptors.json")
        await there.receive(payload, await self.checkpoint_dir(self.target, ids[1]))

    async def _container_id(self, node: str) -> str:
        d = await self.engines.inspect_container_or_none(node, self.container)
        if d is None:
            raise NodeError(node, f"{self.container} is gone")
        return str(d["Id"])

    async def _resume_source(self) -> None:
        """Undo leave-stopped in place: its connections out of TCP repair mode (with tasks left
        stopped CRIU never takes them out itself), or reset if a target copy ran with them
        (`segment`), its links back up with their routes, CRIU's network lock removed, every process
        continued; then its moving addresses announced from here again."""
        d = await self.engines.inspect_container_or_none(self.source, self.container)
        if d is None or not d["State"]["Running"]:
            raise NodeError(self.source, f"{self.container} is no longer there to resume")
        pid = int(d["State"]["Pid"])
        if self.facts.moving:
            segment = await self.segment(self.source)
            if self.facts.keeps_connections:
                await segment.connections(pid)
            await segment.up(pid)
        await (await self.criu(self.source)).resume(pid)
        await self._announce(self.source)

    async def _links_down(self, node: str) -> bool:
        """Before a running copy with moving addresses is removed, its links go down: its kernel
        would otherwise answer its clients' connections with a FIN or a reset as its sockets close,
        ending connections the other copy holds (best effort: the copy goes anyway). Whether such
        a copy was running there."""
        d = await self.engines.inspect_container_or_none(node, self.container) if self.facts.moving else None
        if d is None or not d["State"]["Running"]:
            return False
        try:
            await (await self.segment(node)).down(int(d["State"]["Pid"]), self.facts.moving_addresses)
        except NodeError:
            pass
        return True

    async def _thaw(self, node: str) -> None:
        """A post-copy source's cgroup thawed (`NodeCriu.freeze`), if its copy is there."""
        d = await self.engines.inspect_container_or_none(node, self.container)
        if d is not None and d["State"]["Running"]:
            await (await self.criu(node)).thaw(int(d["State"]["Pid"]))

    async def _links_up(self, node: str) -> None:
        """A copy that runs on `node` at the end has its moving addresses' links up (CRIU itself
        resumes a source whose dump failed, after `segment.down` may have run) and announced."""
        d = await self.engines.inspect_container_or_none(node, self.container) if self.facts.moving else None
        if d is not None and d["State"]["Running"]:
            await (await self.segment(node)).up(int(d["State"]["Pid"]))
            await self._announce(node)

    async def _announce(self, node: str) -> None:
        """The network told that the container's addresses are at `node` now
        (`segment.announce_restored`)."""
        d = await self.engines.inspect_container_or_none(node, self.container)
        if d is not None and d["State"]["Running"]:
            await (await self.segment(node)).announce_restored(int(d["State"]["Pid"]), d, self.facts.moving_addresses)

    async def _restore_target(self) -> None:
        """`docker start --checkpoint` on the target, with runc.conf there pointing CRIU at the
        images (under the node's lock, stripped again whatever happens)."""
        criu = await self.criu(self.target)
        await criu.arm("target", [f"images-dir {criu.dir}/images", *tcp_lines(self.facts.keeps_connections)])
        try:
            await self._start(self.target, checkpoint=True)
        finally:
            await criu.disarm()

    async def _start(self, node: str, checkpoint: bool = False) -> None:
        criu = await self.criu(node)
        if checkpoint:
            await criu.restore(self.checkpoint, self.container, timeout=self.restore_timeout)
        else:
            await criu.docker("start", self.container, timeout=self.restore_timeout)
        await self._announce(node)
        await asyncio.sleep(0.3)  # a restore that dies at once shows as stopped when observed next

    async def _finalize_target(self) -> None:
        """The target copy is the container now: its restart policy as the operator gave it, its
        transferred checkpoint gone, and the source's volumes (copied) removed."""
        await self._set_restart_policy(self.target)
        await self._remove_checkpoint(self.target)
        await self._remove_volumes(self.source)
        await self._remove_work_dirs()

    async def _remove_checkpoint(self, node: str) -> None:
        """This migration's checkpoint folder on `node` (and a `.partial` one): docker keeps it
        after `start --checkpoint`; called only once a copy runs without it."""
        d = await self.engines.inspect_container_or_none(node, self.container)
        if d is not None:
            folder = await self.checkpoint_dir(node, str(d["Id"]))
            await self.ssh.run(node, ["rm", "-rf", "--", folder, f"{folder}.partial"])

    async def _remove_work_dirs(self) -> None:
        """This migration's CRIU folders (the target's holds the container's memory), once a copy
        runs without them."""
        nodes = [await self.criu(n) for n in (self.source, self.target)]
        await asyncio.gather(*(c.remove() for c in nodes))

    async def _set_restart_policy(self, node: str) -> None:
        policy = self.facts.restart_policy
        if policy.get("Name") in (None, "", "no"):
            return
        await self.engines.call(node, lambda api: api.update_container(self.container, restart_policy=policy))

    async def _remove_volumes(self, node: str) -> None:
        """This migration's volumes on `node`: created there by it (target) or copied away (source);
        preflight made sure no other container shares them."""
        for name in self.facts.volumes:
            if await self.engines.call_or_none(node, methodcaller("inspect_volume", name)) is not None:
                await self.engines.call(node, methodcaller("remove_volume", name, force=True))


def _copy(d: dict[str, Any], facts: Facts) -> Copy:
    """Docker's state plus CRIU's marks: a "running" container whose network CRIU locked, or whose
    processes are all stopped beside this migration's finished dump, was dumped and left stopped
    (or its lazy dump failed); one restored post-copy whose page transfer ended early runs with
    holes in its memory."""
    if not d["State"]["Running"]:
        return Copy.STOPPED
    if facts.locked_net or (facts.stopped and facts.dump):
        return Copy.DUMPED
    return Copy.PARTIAL if facts.lazy is LazyPages.CUT else Copy.RUNNING


def _images(facts: Facts) -> Images:
    if facts.complete:
        return Images.COMPLETE
    if facts.pages:
        return Images.PAGES
    return Images.DUMP if facts.dump else Images.NONE


def _running_s(d: dict[str, Any], facts: Facts) -> float:
    """Seconds since Docker started the copy, by its node's clock (0 when not running)."""
    started = str(d["State"].get("StartedAt") or "")
    if not d["State"]["Running"] or not started.startswith(("1", "2")):
        return 0.0
    head, _, frac = started.rstrip("Z").partition(".")
    at = datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00")
    return max(0.0, facts.now - at.timestamp())


def _join(a: str | None, b: str | None) -> str | None:
    return "; ".join(x for x in (a, b) if x) or None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]
