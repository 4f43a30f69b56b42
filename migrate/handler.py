"""Live migration of one container as a transaction:

preflight -> create on target -> checkpoint on source (stops it) -> rsync the checkpoint node to
node -> place it in the target container's own checkpoints/ folder -> restore on target -> verify
-> remove the source container.

Every step is journaled in the store before and after it runs. A failure before the checkpoint
removes what was created on the target (FAILED: the source never stopped). A failure after it
restores the container on the source from the same checkpoint and verifies it (ROLLED_BACK). The
invariant: a container runs on at most one node at any time, and its state is never lost.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from db.store import MigrationState, Store
from orchestrator.errors import MigrationError, NodeError, PeakpackError
from orchestrator.model import Inventory

from . import docker as dk
from orchestrator.names import container_name, node_name
from orchestrator.remote import SshPool

#: A hook called with the step name just before it runs (tests use it to break the target for
#: real, e.g. by corrupting the transferred checkpoint); never reachable from the CLI.
StepHook = Callable[[str], Awaitable[None]]

#: rsync from the source node to the target node. Node-to-node SSH uses the peer key the node
#: offers in $PEAKPACK_PEER_IDENTITY / $PEAKPACK_PEER_KNOWN_HOSTS (the lab sets them), else the
#: node's own root SSH configuration; host keys are always checked.
RSYNC_SCRIPT = (
    'exec rsync -a --mkpath --inplace -e "ssh ${PEAKPACK_PEER_IDENTITY:+-i $PEAKPACK_PEER_IDENTITY} '
    '${PEAKPACK_PEER_KNOWN_HOSTS:+-o UserKnownHostsFile=$PEAKPACK_PEER_KNOWN_HOSTS} '
    '-o StrictHostKeyChecking=yes -o BatchMode=yes" "$1" "$2"'
)


@dataclass
class Timings:
    checkpoint_ms: float | None = None
    transfer_ms: float | None = None
    restore_ms: float | None = None
    frozen_ms: float | None = None
    total_ms: float | None = None
    bytes: int | None = None
    frozen_at: float | None = None
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class MigrationResult:
    migration_id: int
    container: str
    source: str
    target: str
    state: MigrationState
    reason: str | None
    frozen_ms: float | None
    total_ms: float | None


def checkpoint_name(migration_id: int) -> str:
    return f"peakpack-{migration_id}"


class Migration:
    def __init__(self, ssh: SshPool, store: Store, inventory: Inventory, container: str, source: str, target: str,
                 action_id: int | None = None, hook: StepHook | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.ssh, self.store, self.inventory = ssh, store, inventory
        self.container = container_name(container)
        self.source, self.target = node_name(source, "--from"), node_name(target, "--to")
        self.action_id = action_id
        self.hook = hook
        self.progress = progress or (lambda _: None)
        self.t = Timings()
        self.mid = 0
        self.cfg: dk.ContainerConfig | None = None
        self.src_root = self.dst_root = ""
        self.target_id = ""

    async def _step(self, name: str, fn: Callable[[], Awaitable[str | None]], nbytes: Callable[[], int | None] = lambda: None) -> None:
        if self.hook is not None:
            await self.hook(name)
        self.progress(name)
        sid = self.store.step_started(self.mid, name)
        try:
            detail = await fn()
        except BaseException as exc:
            self.store.step_finished(sid, ok=False, detail=_one_line(exc))
            raise
        self.store.step_finished(sid, ok=True, detail=detail, bytes=nbytes())

    async def run(self) -> MigrationResult:
        for node in (self.source, self.target):
            if node not in self.inventory.nodes_by_name:
                raise MigrationError(f"{'--from' if node == self.source else '--to'}: {node} is not in the inventory")
        if self.source == self.target:
            raise MigrationError(f"--to: {self.container} already runs on {self.target}")
        self.mid = self.store.begin_migration(self.container, self.source, self.target, self.action_id)
        checkpointed = False
        try:
            await self._step("preflight", self.preflight)
            await self._step("creating", self.create)
            await self._step("checkpointing", self.checkpoint)
            checkpointed = True
            await self._step("transferring", self.transfer, lambda: self.t.bytes)
            await self._step("restoring", self.restore)
            await self._step("verifying", self.verify)
            await self._step("cleaning_up", self.cleanup)
        except (PeakpackError, OSError, asyncio.TimeoutError) as exc:
            reason = _one_line(exc)
            if not checkpointed:
                await self._remove_target_quietly()
                return self._finish(MigrationState.FAILED, reason)
            return await self.rollback(reason)
        return self._finish(MigrationState.SUCCEEDED, None)

    # -- steps ----------------------------------------------------------------------------------

    async def preflight(self) -> str:
        cfg = await dk.inspect(self.ssh, self.source, self.container)
        if cfg is None or not cfg.running:
            raise MigrationError(f"{self.container}: not running on {self.source}")
        why = cfg.unsupported()
        if why:
            raise MigrationError(f"{self.container}: cannot be live-migrated: {why}")
        self.cfg = cfg
        if await dk.inspect(self.ssh, self.target, self.container) is not None:
            raise MigrationError(f"{self.container}: {self.target} already has a container of that name; remove it first")
        (self.src_root, self.dst_root), versions, flags = await asyncio.gather(
            asyncio.gather(dk.docker_root(self.ssh, self.source), dk.docker_root(self.ssh, self.target)),
            asyncio.gather(*(self._criu(n) for n in (self.source, self.target))),
            asyncio.gather(*(self._cpu_flags(n) for n in (self.source, self.target))),
        )
        if versions[0] != versions[1]:
            raise MigrationError(f"CRIU {versions[0]} on {self.source} but {versions[1]} on {self.target}; "
                                 "install the same version on both")
        missing = flags[0] - flags[1]
        if missing:
            raise MigrationError(f"{self.target} lacks CPU features the container may use: {' '.join(sorted(missing)[:6])}")
        has_image = await self.ssh.run(self.target, ["docker", "image", "inspect", cfg.image], check=False)
        if not has_image.ok:
            await self._copy_image(cfg.image)
        return f"criu {versions[0]}, image {cfg.image}"

    async def _criu(self, node: str) -> str:
        res = await self.ssh.run(node, ["criu", "check"], check=False)
        if not res.ok or "Looks good" not in res.stdout + res.stderr:
            raise NodeError(node, "`criu check` fails; install CRIU >= 4.1 (scripts/install-system-deps.sh)")
        ver = await self.ssh.run(node, ["criu", "--version"])
        return next((line.split(":", 1)[1].strip() for line in ver.stdout.splitlines() if line.startswith("Version")), "?")

    async def _cpu_flags(self, node: str) -> set[str]:
        res = await self.ssh.run(node, ["grep", "-m1", "^flags", "/proc/cpuinfo"])
        return set(res.stdout.split(":", 1)[-1].split())

    async def _copy_image(self, image: str) -> None:
        tar = f"/tmp/peakpack-image-{self.mid}.tar"
        await self.ssh.run(self.source, ["docker", "save", "-o", tar, image], timeout=600)
        try:
            await self._rsync(tar, tar)
            await self.ssh.run(self.target, ["docker", "load", "-i", tar], timeout=600)
        finally:
            await asyncio.gather(*(self.ssh.run(n, ["rm", "-f", tar], check=False) for n in (self.source, self.target)))

    async def create(self) -> str:
        assert self.cfg
        res = await self.ssh.run(self.target, self.cfg.create_argv())
        self.target_id = res.stdout.strip()
        return self.target_id[:12]

    @property
    def src_checkpoint(self) -> str:
        assert self.cfg
        return f"{self.src_root}/containers/{self.cfg.id}/checkpoints/{checkpoint_name(self.mid)}"

    @property
    def dst_checkpoint(self) -> str:
        return f"{self.dst_root}/containers/{self.target_id}/checkpoints/{checkpoint_name(self.mid)}"

    async def checkpoint(self) -> None:
        t0 = time.monotonic()
        self.t.frozen_at = t0
        await self.ssh.run(self.source, ["docker", "checkpoint", "create", self.container, checkpoint_name(self.mid)],
                           timeout=900)
        self.t.checkpoint_ms = (time.monotonic() - t0) * 1000

    async def _rsync(self, path: str, dest: str) -> None:
        """Copy `path` on the source to `dest` on the target, node to node."""
        spec = self.inventory.node(self.target)
        login = f"{spec.ssh.user}@{spec.address}" if spec.ssh else spec.address
        await self.ssh.run(self.source, ["sh", "-c", RSYNC_SCRIPT, "rsync", path, f"{login}:{dest}"], timeout=1800)

    async def transfer(self) -> str:
        t0 = time.monotonic()
        size = await self.ssh.run(self.source, ["du", "-sb", self.src_checkpoint])
        self.t.bytes = int(size.stdout.split()[0])
        await self._rsync(self.src_checkpoint + "/", self.dst_checkpoint + "/")
        self.t.transfer_ms = (time.monotonic() - t0) * 1000
        return f"{self.t.bytes} bytes to {shlex.quote(self.dst_checkpoint)}"

    def restore_timeout(self) -> float:
        """CRIU restores at ~25 MB/s here; allow 5 MB/s plus a minute before calling it stuck."""
        return 60.0 + (self.t.bytes or 0) / 5e6

    async def restore(self) -> None:
        t0 = time.monotonic()
        await self.ssh.run(self.target, ["docker", "start", "--checkpoint", checkpoint_name(self.mid), self.container],
                           timeout=self.restore_timeout())
        self.t.restore_ms = (time.monotonic() - t0) * 1000
        if self.t.frozen_at is not None:
            self.t.frozen_ms = (time.monotonic() - self.t.frozen_at) * 1000

    async def verify(self) -> None:
        await asyncio.sleep(0.3)
        if not await dk.is_running(self.ssh, self.target, self.container):
            raise MigrationError(f"{self.container}: restored on {self.target} but not running")

    async def cleanup(self) -> None:
        await self.ssh.run(self.source, ["docker", "rm", "-f", self.container])

    # -- failure paths ----------------------------------------------------------------------------

    async def _remove_target_quietly(self) -> None:
        if not self.target_id:
            return
        try:  # also ends a restore that hangs on the target
            await self.ssh.run(self.target, ["docker", "rm", "-f", self.container], check=False, timeout=60)
        except PeakpackError:
            pass

    async def rollback(self, reason: str) -> MigrationResult:
        """Restore on the source from the same checkpoint; the target's copy goes."""
        self.progress("rolling back")
        sid = self.store.step_started(self.mid, "rollback")
        try:
            await self._remove_target_quietly()
            if not await dk.is_running(self.ssh, self.source, self.container):
                await self.ssh.run(self.source, ["docker", "start", "--checkpoint", checkpoint_name(self.mid),
                                                 self.container], timeout=self.restore_timeout())
            await asyncio.sleep(0.3)
            if not await dk.is_running(self.ssh, self.source, self.container):
                raise MigrationError(f"{self.container}: restored on {self.source} but not running")
        except (PeakpackError, OSError, asyncio.TimeoutError) as exc:
            self.store.step_finished(sid, ok=False, detail=_one_line(exc))
            return self._finish(MigrationState.ROLLBACK_FAILED,
                                f"{reason}; rollback on {self.source} failed too: {_one_line(exc)} "
                                f"(checkpoint {checkpoint_name(self.mid)} is kept on {self.source})")
        self.store.step_finished(sid, ok=True)
        if self.t.frozen_at is not None:
            self.t.frozen_ms = (time.monotonic() - self.t.frozen_at) * 1000
        return self._finish(MigrationState.ROLLED_BACK, reason)

    def _finish(self, state: MigrationState, reason: str | None) -> MigrationResult:
        self.t.total_ms = (time.monotonic() - self.t.started) * 1000
        self.store.finish_migration(
            self.mid, state, reason, checkpoint_ms=self.t.checkpoint_ms, transfer_ms=self.t.transfer_ms,
            restore_ms=self.t.restore_ms, frozen_ms=self.t.frozen_ms, total_ms=self.t.total_ms, bytes=self.t.bytes,
        )
        return MigrationResult(self.mid, self.container, self.source, self.target, state, reason,
                               self.t.frozen_ms, self.t.total_ms)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]
