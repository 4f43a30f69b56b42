"""Live migration of one container as a transaction:

preflight (nothing changes on either node unless every check passes) -> create the same networks,
volumes and container on the target from the source's Engine API inspect document -> pre-copy the
writable layer and volumes while the container runs -> arm both nodes' CRIU (`criu.py`: the node's
lock, a runc.conf block, a page server on the target) -> FREEZE: `docker checkpoint create
--leave-running` on the source, whose pages stream straight into the target's page server and
which CRIU leaves dumped and stopped, intact -> copy the dump's metadata (~30 KB), Docker's
descriptors.json and what changed in the files since the pre-copy -> restore on the target:
UNFREEZE -> verify -> settle: once the target has run for the grace period, remove the source.

Post-copy (`MigrationSettings.post_copy`, off by default, never for containers labelled
`peakpack.critical=true`): the dump leaves the memory on the source, which serves it; the target
is restored at once and fetches its pages while it runs, and counts as migrated only once its
lazy-pages daemon reports every page arrived.

Every step is journaled in the store before and after it runs; what settling needs later (the
restart policy, the volumes) is journaled when preflight ends, before anything changes. Both
copies carry restart policy "no" while the migration is open (the source from arming on, the
target from its creation), so no engine restarts either behind our back, even after a power cut.
Every way out, success included, goes through `settle.Settler`: it observes both nodes and acts
only on what it sees (remove the source once the target runs; resume the dumped source in place
when the target does not; wait, IN_DOUBT, when a node that matters does not answer). The
invariant: a container runs on at most one node at any time, and its state is never destroyed
before a copy runs from it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from operator import methodcaller
from typing import Any

from peakpack.orchestrator.domain.errors import FencedError, MigrationError, NodeError, PeakpackError, TargetRefused
from peakpack.orchestrator.domain.inputs import container_name, node_name
from peakpack.orchestrator.domain.model import Inventory, NodeSpec
from peakpack.orchestrator.domain.ports import Journal
from peakpack.orchestrator.domain.settings import CRITICAL_LABEL, MigrationSettings
from peakpack.orchestrator.domain.states import MigrationState, Step
from peakpack.orchestrator.remote import SshPool
from peakpack.orchestrator.remote.docker_api import EngineAPIError, EnginePool

from . import criu, moved, room, runc_conf, segment, spec, tls
from .copy import copy_all, stream_image
from .hold import set_hold
from .settle import NO_RESTART, MigrationFacts, PowerProbe, Settler, checkpoint_name, checkpoint_path

#: A hook called with the step name just before it runs (tests use it to break the target for
#: real, e.g. by corrupting the transferred checkpoint); never reachable from the CLI.
StepHook = Callable[[str], Awaitable[None]]

#: CRIU below this cannot dump a process holding a TCP/UDP socket on Linux >= 6.16
MIN_CRIU = (4, 2)
#: the longest a checkpoint, an image pull and the flush before the freeze may take (`service
#: install` sizes its stop timeout by the longest step; a dump's own deadline stays below it)
CHECKPOINT_TIMEOUT_S = 900.0
PULL_TIMEOUT_S = 900.0
SYNC_TIMEOUT_S = 600.0


@dataclass
class Timings:
    checkpoint_ms: float | None = None
    transfer_ms: float | None = None
    restore_ms: float | None = None
    frozen_ms: float | None = None
    total_ms: float | None = None
    bytes: int | None = None  # moved while the container was frozen
    precopy_bytes: int | None = None
    frozen_at: float | None = None
    #: post-copy: from the freeze until the last page had arrived on the target
    last_page_ms: float | None = None
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
    #: refused by preflight: nothing was changed on either node
    refused: bool = False
    #: what preflight refused is the target node (the command line's `--to`)
    refused_target: bool = False
    #: what the `[migration] on_moved` hook did (None: no hook, or not settled yet)
    told: str | None = None


def criu_version(text: str) -> tuple[int, ...]:
    """`criu --version` output -> (4, 2, 1); () when there is no Version line."""
    for line in text.splitlines():
        if line.startswith("Version:"):
            return tuple(int(p) for p in line.split(":", 1)[1].strip().split(".") if p.isdigit())
    return ()


@dataclass(frozen=True)
class Found:
    """What preflight found, every check passed: what the steps run on (nothing is filled in later)."""

    src: dict[str, Any]               # the source container's inspect document
    src_root: str                     # each node's docker root
    dst_root: str
    memory_mb: float                  # the source container's resident memory (its dump's deadline)
    post_copy: bool                   # this migration runs post-copy (the setting, and not critical)
    moving: tuple[spec.Endpoint, ...]  # the endpoints whose addresses move with it
    networks_to_create: tuple[dict[str, Any], ...]  # on the target, before the container
    facts: MigrationFacts             # journaled: what settling needs later
    congestion: tuple[str, ...] = ()  # the page streams' congestion control option, where both CRIUs take it


class Migration:
    def __init__(self, ssh: SshPool, engines: EnginePool, store: Journal, inventory: Inventory, container: str,
                 source: str, target: str, action_id: int | None = None, hook: StepHook | None = None,
                 progress: Callable[[str], None] | None = None, bmc_power: PowerProbe | None = None,
                 stop_requested: Callable[[], bool] = lambda: False, settings: MigrationSettings | None = None
                 ) -> None:
        self.ssh, self.engines, self.store, self.inventory = ssh, engines, store, inventory
        self.settings = settings or inventory.migration
        self.bmc_power = bmc_power
        self.stop_requested = stop_requested
        self.container = container_name(container)
        self.source, self.target = node_name(source, "--from"), node_name(target, "--to")
        self.action_id = action_id
        self.hook = hook
        self.progress = progress or (lambda _: None)
        self.t = Timings()
        self.mid = 0
        self._found: Found | None = None  # what preflight found, once it passed
        # what the steps make as they go
        self.target_id = ""
        self.dst_upper = ""
        self.dst_volume_dirs: dict[str, str] = {}
        self.port = 0             # the page server's (post-copy: the source's lazy dump's) port
        self._dump: asyncio.Task[None] | None = None  # post-copy: the source's dump, serving pages
        #: the store's lease token this process holds: node-side steps carry it (`criu.NodeCriu`)
        self.token = store.fencing_token or 0
        self._renewer: asyncio.Task[None] | None = None  # keeps the node leases and holds alive
        self._fenced: FencedError | None = None  # a node refused our token: another controller leads

    async def _step(self, name: Step, fn: Callable[[], Awaitable[str | None]],
                    nbytes: Callable[[], int | None] = lambda: None) -> None:
        if self.hook is not None:
            await self.hook(name)
        if self._fenced is not None:
            raise self._fenced
        self.progress(name)
        sid = self.store.migrations.step_started(self.mid, name)
        try:
            detail = await fn()
        except BaseException as exc:
            self.store.migrations.step_finished(sid, ok=False, detail=_one_line(exc))
            raise
        self.store.migrations.step_finished(sid, ok=True, detail=detail, bytes=nbytes())

    def _spec(self, node: str) -> NodeSpec:
        return self.inventory.node(node)

    @property
    def found(self) -> Found:
        if self._found is None:
            raise RuntimeError("a step of a migration ran before its preflight passed")
        return self._found

    @property
    def facts(self) -> MigrationFacts:
        """What settling needs (nothing was changed before preflight passed: the defaults)."""
        return self._found.facts if self._found is not None else MigrationFacts()

    async def run(self) -> MigrationResult:
        for node in (self.source, self.target):
            if node not in self.inventory.nodes_by_name:
                raise MigrationError(f"{'--from' if node == self.source else '--to'}: {node} is not in the inventory")
        if self.source == self.target:
            raise TargetRefused(f"{self.container} already runs on {self.target}")
        self.mid = self.store.migrations.begin(self.container, self.source, self.target, self.action_id)
        try:
            await self._step(Step.PREFLIGHT, self.preflight)
        except Exception as exc:  # noqa: BLE001 - whatever it was, nothing has changed yet
            return self._finish(MigrationState.FAILED, _one_line(exc), refused=True,
                                refused_target=isinstance(exc, TargetRefused))
        failure = None
        try:
            for name, fn, nbytes in (
                (Step.CREATING, self.create, None), (Step.PRECOPY, self.precopy, lambda: self.t.precopy_bytes),
                (Step.ARMING, self.arm, None), (Step.CHECKPOINTING, self.checkpoint, None),
                (Step.TRANSFERRING, self.transfer, lambda: self.t.bytes), (Step.RESTORING, self.restore, None),
                (Step.VERIFYING, self.verify, None),
            ):
                if self.t.frozen_at is None and self.stop_requested():
                    raise MigrationError("the controller is stopping; nothing was frozen yet")
                await self._step(name, fn, nbytes or (lambda: None))
        except FencedError:
            raise  # another controller leads now and settles this migration from the facts: hands off
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - any error settles the same way
            failure = _one_line(exc)
            await self._stop_lazy_dump()
        finally:
            if self._renewer is not None:  # settling renews (and in the end releases) the leases itself
                self._renewer.cancel()
        result = await self.settle(failure)
        if result.state is not MigrationState.IN_DOUBT:
            await set_hold(self.ssh, (self.source, self.target), self.container, self.mid, held=False)
            result = replace(result, told=await self._tell(result))
        return result

    async def _tell(self, result: MigrationResult) -> str | None:
        """The operator's hook, once the outcome is in the store; its failure undoes nothing."""
        inv = self.inventory
        try:
            return await moved.tell(self.engines, self.store, self.settings, {n.name: n.address for n in inv.nodes},
                                    inv.source.parent if inv.source else None, self.mid, self.container,
                                    self.source, self.target, result.state, result.reason, self.facts)
        except FencedError:
            raise
        except Exception as exc:  # noqa: BLE001 - the migration is settled whatever the hook's journal does
            return f"on_moved for migration {self.mid}: {_one_line(exc)}"

    async def settle(self, failure: str | None) -> MigrationResult:
        """Finish forward or back from what the nodes show (journaled as its own step)."""
        if self.hook is not None:
            await self.hook("settling")
        self.progress("settling" if failure is None else "rolling back")
        settler = Settler(self.ssh, self.engines, self.container, self.source, self.target, self.mid, self.facts,
                          self.bmc_power, self.restore_timeout(), self.settings, guard=self.store.check_fence,
                          token=self.token)
        try:
            sid = self.store.migrations.step_started(self.mid, Step.CLEANING_UP if failure is None else Step.ROLLBACK)
        except FencedError:
            raise  # another controller leads: it settles this migration from the facts; touch nothing
        except Exception:  # noqa: BLE001 - the journal failing must not keep the container frozen
            sid = None
        state, reason = await settler.run(checkpointed=self.t.frozen_at is not None, failure=failure)
        if self.t.frozen_at is not None and self.t.frozen_ms is None:
            self.t.frozen_ms = (time.monotonic() - self.t.frozen_at) * 1000
        try:
            if sid is not None:
                settled = state not in (MigrationState.IN_DOUBT, MigrationState.ROLLBACK_FAILED)
                self.store.migrations.step_finished(sid, ok=settled, detail=reason)
            if state is MigrationState.IN_DOUBT:
                self.store.migrations.step_finished(
                    self.store.migrations.step_started(self.mid, Step.IN_DOUBT), ok=False, detail=reason
                )
                return self._result(state, reason)
            return self._finish(state, reason)
        except FencedError:
            raise
        except Exception:  # noqa: BLE001 - left unfinished in the store: reconciliation settles it again
            return self._result(state, reason)

    # -- preflight: checks only, plus bringing the image -------------------------------------------

    async def preflight(self) -> str:
        """Checks only (plus bringing the image): every way the move could fail that can be known
        before anything changes, refused in one line. What it found is the steps' `found`."""
        src = await self.engines.inspect_container_or_none(self.source, self.container)
        if src is None or not src["State"]["Running"]:
            raise MigrationError(f"CONTAINER: {self.container} is not running on {self.source}; "
                                 "see `docker ps` there")
        on_source = await self._inspect_all(self.source)
        why = spec.immovable(on_source, self.source).get(self.container)
        if why:
            raise MigrationError(f"{self.container}: cannot be live-migrated: {why}")
        if await self.engines.inspect_container_or_none(self.target, self.container) is not None:
            raise TargetRefused(f"{self.target} already has a container named {self.container}; remove it first")
        on_target = [d for d in await self._inspect_all(self.target) if d["State"]["Running"]]
        clashes = spec.ports_in_use(src, on_target)
        if clashes:
            raise TargetRefused(f"port {clashes[0]} is already published on {self.target}; "
                                "choose another node or free the port")
        infos = await asyncio.gather(
            *(self.engines.call(n, lambda api: api.info()) for n in (self.source, self.target))
        )
        for node, info in zip((self.source, self.target), infos):
            if not info.get("ExperimentalBuild"):
                raise NodeError(node, "dockerd runs without --experimental; checkpoint/restore needs it")
            if info.get("Driver") != "overlay2":
                raise NodeError(node, f"docker storage driver is {info.get('Driver')}; the writable layer is "
                                      "copied only between overlay2 engines")
        src_root, dst_root = (str(i["DockerRootDir"]) for i in infos)
        await room.check_room(self.ssh, self.engines, self.container, self.source, self.target, src, dst_root)
        pid = int(src["State"]["Pid"])
        (versions, crius), (here, there) = await asyncio.gather(
            self._criu_facts(pid),
            asyncio.gather(self._node_facts(self.source, ()), self._node_facts(self.target, spec.needed_paths(src))),
        )
        if versions[0] != versions[1]:
            raise MigrationError(f"CRIU {versions[0]} on {self.source} but {versions[1]} on {self.target}; "
                                 "install the same version on both")
        moving = spec.moving_endpoints(src, here.networks)
        if moving:
            await asyncio.gather(*(self._segment_tools(n) for n in (self.source, self.target)))
        for node, ready in zip((self.source, self.target), crius):
            if (why := criu.why_not_ready(node, ready)) is not None:
                raise MigrationError(why)
        if (why := criu.why_cannot_dump(self.container, self.source, crius[0])) is not None:
            raise MigrationError(why)
        ends = list(zip((self.source, self.target), crius, strict=True))
        if (why := criu.why_no_congestion(self.settings.page_stream_congestion, ends)) is not None:
            raise MigrationError(why)
        congestion, said = criu.page_stream_congestion(self.settings.page_stream_congestion, ends)
        post_copy, route = await self._route(src, crius[0])
        route += await self._tls() + said
        why_not = spec.why_not_onto(src, here, there, self.target)
        if why_not is not None:
            raise TargetRefused(why_not)
        networks = []
        for name in spec.user_networks(src):
            if name not in here.networks:
                raise NodeError(self.source, f"network {name} of {self.container} is gone")
            if name not in there.networks:
                networks.append(spec.network_create_args(here.networks[name]))
        await self._ensure_image(src)
        tcp = {p: spec.probe_addresses(src, (p,)) for p in spec.published_ports(src) if p.endswith("/tcp")}
        listening = await self._listening(pid, moving)
        answered = await criu.NodeCriu(self.ssh, self.source, src_root, self.mid, self.token).answering(
            pid, sorted({a for addresses in tcp.values() for a in addresses} | set(listening)))
        clients = spec.clients(src, here.networks)
        facts = MigrationFacts(restart_policy=dict(src["HostConfig"].get("RestartPolicy") or NO_RESTART),
                               volumes=tuple(v.name for v in spec.volumes(src)),
                               summary=f"criu {versions[0]}, image {src['Config']['Image']}, {route}, "
                                       f"clients: {clients.says(self.target)}",
                               answering=tuple(p for p, a in tcp.items() if a and set(a) <= answered),
                               clients=clients.value, moving=tuple(e.to_json() for e in moving),
                               listening=tuple(a for a in listening if a in answered),
                               before=moved.reached(src, self.source, self._spec(self.source).address),
                               nonce=secrets.token_hex(4))
        self._found = Found(src, src_root, dst_root, crius[0].memory_mb, post_copy, moving, tuple(networks), facts,
                            tuple(congestion))
        return facts.dumps()  # journaled before anything changes: settling may need it

    async def _tls(self) -> str:
        """Both nodes ready for TLS page streams (`tls.ensure`: a certificate of this cluster's CA,
        issued where missing or due); refused where CRIU lacks TLS. What the journal records."""
        if not self.settings.tls:
            return ", pages in clear ([migration] tls = false)"
        ca = await asyncio.to_thread(tls.Authority.open, tls.ca_folder(self.settings, self.inventory))
        done = await asyncio.gather(*(tls.ensure(self.ssh, self._spec(n), ca) for n in (self.source, self.target)))
        return ", TLS" + "".join(f" ({d})" for d in done if d)

    async def _segment_tools(self, node: str) -> None:
        """What moving addresses need on a node besides CRIU's tools (`segment.TOOLS`)."""
        res = await self.ssh.run(node, ["sh", "-c", 'for t; do command -v "$t" >/dev/null || echo "$t"; done',
                                        "sh", *segment.TOOLS], check=False)
        missing = res.stdout.split()
        if missing or not res.ok:
            raise NodeError(node, f"{', '.join(missing) or 'a shell'} missing, which moving {self.container}'s "
                                  "address needs; install python3 (>= 3.9) and iproute2 there")

    async def _listening(self, pid: int, moving: Sequence[spec.Endpoint]) -> list[str]:
        """'ADDRESS:PORT' where the container listens for TCP at its moving IPv4 addresses."""
        addresses = [e.ipv4 for e in moving if e.ipv4]
        if not addresses:
            return []
        res = await self.ssh.run(self.source, ["nsenter", "-t", str(pid), "-n", "ss", "-Hltn"], timeout=30)
        return spec.listening_at(res.stdout, addresses)

    async def _inspect_all(self, node: str) -> list[dict[str, Any]]:
        def all_containers(api: Any) -> list[dict[str, Any]]:
            return [api.inspect_container(c["Id"]) for c in api.containers(all=True)]

        return await self.engines.call(node, all_containers)

    async def _criu_facts(self, pid: int) -> tuple[tuple[str, str], tuple[criu.Preflight, criu.Preflight]]:
        """Both nodes' CRIU versions and facts (the source's with the container's processes)."""
        got = await asyncio.gather(self._criu(self.source, pid), self._criu(self.target, 0))
        return (got[0][0], got[1][0]), (got[0][1], got[1][1])

    async def _criu(self, node: str, pid: int) -> tuple[str, criu.Preflight]:
        res = await self.ssh.run(node, ["criu", "check"], check=False)
        if not res.ok or "Looks good" not in res.stdout + res.stderr:
            raise NodeError(node, "`criu check` fails; install CRIU >= 4.2 (scripts/install-system-deps.sh)")
        version = criu_version((await self.ssh.run(node, ["criu", "--version"])).stdout)
        if version < MIN_CRIU:
            raise NodeError(node, f"CRIU {'.'.join(map(str, version)) or '?'} cannot dump TCP sockets on this "
                                  "kernel; install CRIU >= 4.2 (scripts/build-criu.sh)")
        facts = await self.ssh.run(node, criu.script("preflight", *([pid] if pid else [])), timeout=60)
        return ".".join(map(str, version)), criu.parse_preflight(node, facts.stdout)

    async def _route(self, src: spec.Inspect, source: criu.Preflight) -> tuple[bool, str]:
        """Post-copy when the setting says so, the container is not labelled critical and both nodes
        can (the source may grow its pipes, the target's kernel has userfaultfd); else pages to the
        target before the restore. Returns (post-copy, what the journal records)."""
        if not self.settings.post_copy:
            return False, "pages to the target"
        if spec.labels(src).get(CRITICAL_LABEL, "").lower() == "true":
            return False, f"pages to the target (post-copy is never used for {CRITICAL_LABEL}=true)"
        if (why := criu.why_not_post_copy(self.source, source)) is not None:
            raise MigrationError(why)
        check = await self.ssh.run(self.target, ["criu", "check", "--feature", "uffd-noncoop"], check=False)
        if not check.ok:
            raise NodeError(self.target, "its kernel lacks userfaultfd (`criu check --feature uffd-noncoop` "
                                         "fails), which post-copy needs; turn [migration] post_copy off")
        return True, "post-copy"

    async def _node_facts(self, node: str, paths: Sequence[str]) -> spec.NodeFacts:
        """The facts `spec.why_not_onto` judges, read as the observer reads them."""
        return spec.parse_node_facts(node, (await self.ssh.run(node, spec.node_facts_argv(paths), timeout=60)).stdout)

    async def _volume_or_none(self, node: str, name: str) -> dict[str, Any] | None:
        return await self.engines.call_or_none(node, lambda api: api.inspect_volume(name))

    async def _ensure_image(self, src: spec.Inspect) -> None:
        """The target must hold the very image the source runs (same ID) under the name the
        container was created with: pulled by digest when the target reaches a registry, else
        streamed by ID from the source's engine (the source's tag may point elsewhere by now, e.g.
        after another migration brought a different build of the same name), then tagged."""
        ref, want = src["Config"]["Image"], src["Image"]

        async def image_id(name: str) -> str | None:
            got = await self.engines.call_or_none(self.target, lambda api: api.inspect_image(name))
            return None if got is None else str(got["Id"])

        if await image_id(want) is None:
            digests = (await self.engines.call(self.source, lambda api: api.inspect_image(want))).get("RepoDigests")
            for digest in digests or ():
                try:
                    await self.engines.call(self.target, methodcaller("pull", digest), timeout=PULL_TIMEOUT_S)
                    break
                except (EngineAPIError, PeakpackError):
                    continue
        if await image_id(want) is None:
            try:
                await stream_image(self.ssh, self.source, want, self._spec(self.target))
            except PeakpackError as exc:
                raise TargetRefused(f"{self.target} lacks image {ref} and it could not be brought from "
                                     f"{self.source} ({_one_line(exc)}); load it there first") from None
        tag = spec.repository_tag(ref)
        if tag is not None and await image_id(ref) != want:
            await self.engines.call(self.target, lambda api: api.tag(want, tag[0], tag[1], force=True))
        if await image_id(ref) != want:
            raise TargetRefused(f"image {ref} on {self.target} is not the one {self.container} runs "
                                 f"({want[:19]}); load the same image there")

    # -- the transaction ------------------------------------------------------------------------

    async def _renew(self) -> None:
        """This migration's lease on both nodes (taken, or renewed with our token: a node holding a
        newer controller's refuses, FencedError) and the QoS guards' hold on its container."""
        ttl = self.settings.lease_seconds
        await asyncio.gather(self.src_criu.lock("source", ttl), self.dst_criu.lock("target", ttl))
        await set_hold(self.ssh, (self.source, self.target), self.container, self.mid, held=True, seconds=ttl)

    async def _keep_leases(self) -> None:
        """In the background while the steps run: a step may take longer than a lease (a long copy)."""
        while True:
            await asyncio.sleep(self.settings.renew_every_s)
            try:
                await self._renew()
            except FencedError as exc:
                self._fenced = exc  # the next step raises it
                return
            except PeakpackError:
                continue  # a node that does not answer: the steps find out

    async def create(self) -> str:
        """Both nodes' leases taken first (nothing else of the migration runs there without them),
        then networks, volumes and the container on the target; the container with restart policy
        "no" until the migration ends (the operator's policy is set when it is settled)."""
        await self._renew()
        self._renewer = asyncio.ensure_future(self._keep_leases())
        for args in self.found.networks_to_create:
            await self.engines.call(self.target, methodcaller("create_network", **args))
        volume_dirs: dict[str, str] = {}
        for v in spec.volumes(self.found.src):
            theirs = await self._volume_or_none(self.source, v.name) or {}
            await self.engines.call(self.target, methodcaller(
                "create_volume", v.name, driver="local", driver_opts=theirs.get("Options") or None,
                labels=theirs.get("Labels") or None))
            volume_dirs[v.name] = str((await self._volume_or_none(self.target, v.name) or {})["Mountpoint"])
        self.dst_volume_dirs = volume_dirs
        body, more_networks = spec.create_body(self.found.src, source_address=self._spec(self.source).address,
                                               target_address=self._spec(self.target).address, keep=self.found.moving)
        body["HostConfig"]["RestartPolicy"] = dict(NO_RESTART)
        made = await self.engines.call(self.target, lambda api: api.create_container_from_config(body, self.container))
        self.target_id = str(made["Id"])
        for net, endpoint in more_networks.items():
            ipam = endpoint.get("IPAMConfig") or {}
            await self.engines.call(self.target, methodcaller(
                "connect_container_to_network", self.target_id, net, aliases=endpoint.get("Aliases"),
                links=endpoint.get("Links"), ipv4_address=ipam.get("IPv4Address"),
                ipv6_address=ipam.get("IPv6Address"), driver_opt=endpoint.get("DriverOpts")))
        made_inspect = await self.engines.call(self.target, lambda api: api.inspect_container(self.target_id))
        self.dst_upper = str(made_inspect["GraphDriver"]["Data"]["UpperDir"])
        return self.target_id[:12]

    def _copies(self) -> list[tuple[str, str]]:
        """(source folder, target folder) pairs of the container's files: its writable layer and
        every volume."""
        pairs = [(str(self.found.src["GraphDriver"]["Data"]["UpperDir"]) + "/", self.dst_upper + "/")]
        for m in self.found.src.get("Mounts") or ():
            if m.get("Type") == "volume":
                pairs.append((str(m["Source"]) + "/", self.dst_volume_dirs[m["Name"]] + "/"))
        return pairs

    async def _copy_all(self, pairs: list[tuple[str, str]]) -> int:
        return await copy_all(self.ssh, self.source, pairs, self._spec(self.target), control=f"{self.src_criu.dir}/ssh")

    async def precopy(self) -> str:
        """While the container runs: most of its files reach the target before the freeze (over an
        SSH connection that stays open for the copy while frozen)."""
        await self.src_criu.make("")
        self.t.precopy_bytes = await self._copy_all(self._copies())
        # flush what was written before the freeze, so the dump does not queue behind it
        await asyncio.gather(*(self.ssh.run(n, ["sync"], timeout=SYNC_TIMEOUT_S) for n in (self.source, self.target)))
        return f"{self.t.precopy_bytes} bytes"

    @property
    def src_checkpoint(self) -> str:
        return checkpoint_path(self.found.src_root, str(self.found.src["Id"]), self.mid)

    @property
    def dst_checkpoint(self) -> str:
        return checkpoint_path(self.found.dst_root, self.target_id, self.mid)

    @property
    def key(self) -> str:
        """The migration's name on its nodes' leases (`criu.lease_key`)."""
        return criu.lease_key(self.mid, self.facts.nonce)

    @property
    def src_criu(self) -> criu.NodeCriu:
        return criu.NodeCriu(self.ssh, self.source, self.found.src_root, self.mid, self.token, self.key)

    @property
    def dst_criu(self) -> criu.NodeCriu:
        return criu.NodeCriu(self.ssh, self.target, self.found.dst_root, self.mid, self.token, self.key)

    @property
    def src_segment(self) -> segment.NodeSegment:
        return segment.NodeSegment(self.ssh, self.source, self.found.src_root, self.mid, self.token, self.key)

    @property
    def _sockets(self) -> str:
        """The source's sockets of this migration's page transfer (`ss` filter): its connection to
        the target's page server, or, post-copy, its lazy dump's listener and connection."""
        return f"sport = :{self.port}" if self.found.post_copy else f"dport = :{self.port}"

    @property
    def _stream_options(self) -> list[str]:
        """CRIU's options for both ends of the page stream (runc.conf lines): TLS, its congestion control."""
        return [*(tls.CRIU_OPTIONS if self.settings.tls else ()), *self.found.congestion]

    async def arm(self) -> str:
        """Before the freeze, both nodes locked and their runc.conf blocks written: the target's
        page server listening (post-copy: its images folder ready) and pointing its restore at it;
        the source's dump sending its pages there (post-copy: serving them itself) and leaving the
        source stopped. The source's restart policy is held at "no" from here on: no engine may
        restart the dumped source behind our back."""
        if self.facts.restart_policy.get("Name") not in (None, "", "no"):
            await self.engines.call(self.source, lambda api: api.update_container(self.container,
                                                                                   restart_policy=NO_RESTART))
        src, dst, s = self.src_criu, self.dst_criu, self.settings
        source_address, target_address = self._spec(self.source).address, self._spec(self.target).address
        await asyncio.gather(self._renew(), src.make("dump"), src.make("work"), dst.make("images"))
        stream = self._stream_options
        if self.found.post_copy:
            self.port = s.page_server_port + self.mid % s.page_server_ports
            source_lines = ["lazy-pages", f"address {source_address}", *stream]
            target_lines = [f"work-dir {dst.dir}/images", "lazy-pages"]
        else:
            self.port = await dst.page_server(target_address, s.page_server_port, s.page_server_ports,
                                              self._dump_deadline() + 60, runc_conf.arguments(stream))
            source_lines, target_lines = ["page-server", f"address {target_address}", *stream], []
        tcp = runc_conf.tcp_lines(self.facts.keeps_connections)
        await asyncio.gather(
            src.arm("source", [f"images-dir {src.dir}/dump", f"work-dir {src.dir}/work", *source_lines,
                               f"port {self.port}", "leave-stopped",
                               "network-lock iptables", *tcp]),
            dst.arm("target", [f"images-dir {dst.dir}/images", *target_lines, *tcp]))
        return f"{'post-copy from' if self.found.post_copy else 'page server on'} port {self.port}"

    async def checkpoint(self) -> str:
        """FREEZE: the dump, left stopped on the source (Docker still calls it running). Pages go to
        the target's page server as they are read; post-copy, the step ends once the dump is ready to
        serve them (the source listens), and the dump itself ends only when the target has them all.
        A dump still running at its deadline is aborted on the node, and CRIU resumes the source."""
        deadline = self._dump_deadline()
        t0 = time.monotonic()
        self.t.frozen_at = t0
        # the SDK has no checkpoint verb; the node's docker CLI calls the engine's endpoint
        dump = self.src_criu.checkpoint(self.container, str(self.found.src["Id"]), checkpoint_name(self.mid), deadline,
                                        self._sockets)
        if self.found.post_copy:
            self._dump = asyncio.ensure_future(dump)
            while not self._dump.done() and not await self.src_criu.listening(self.port):
                await asyncio.sleep(0.02)
            if self._dump.done():
                self._dump.result()  # its error, if any
                raise MigrationError(f"{self.container}: the lazy dump on {self.source} ended before serving pages")
            # CRIU itself switches a source whose page transfer fails back to alive, while the target
            # may run from the pages it has: frozen, the source runs no more until settling says so
            await self.src_criu.freeze(int(self.found.src["State"]["Pid"]))
        else:
            await dump
        self.t.checkpoint_ms = (time.monotonic() - t0) * 1000
        return "ready to serve its pages" if self.found.post_copy else "dumped and stopped"

    async def transfer(self) -> str:
        """While frozen: the dump's metadata and Docker's descriptors.json into the target's images
        (post-copy: from runc's work folder, the checkpoint still runs), and what changed in the
        files since the pre-copy; then the source's block is stripped (post-copy: the target's
        lazy-pages daemon starts instead)."""
        t0 = time.monotonic()
        src = self.src_criu
        if self.found.post_copy:
            descriptors = f"{await src.image_path(str(self.found.src['Id']))}/descriptors.json"
        else:
            descriptors = f"{self.src_checkpoint}/descriptors.json"
        payload, _ = await asyncio.gather(src.send(descriptors), self._links_down())
        done_with_source = [] if self.found.post_copy else [src.strip()]  # post-copy: it serves pages still
        copying = asyncio.ensure_future(self._copy_all(self._copies()))
        await asyncio.gather(copying, self.dst_criu.receive(payload, self.dst_checkpoint), *done_with_source)
        self.t.bytes = copying.result() + len(payload) * 3 // 4
        if self.found.post_copy:
            await self.dst_criu.lazy_pages(self._spec(self.source).address, self.port, self._dump_deadline(),
                                           runc_conf.arguments(self._stream_options))
        self.t.transfer_ms = (time.monotonic() - t0) * 1000
        return f"{self.t.bytes} bytes while frozen"

    async def _links_down(self) -> None:
        """The dumped source's interfaces that hold the moving addresses down (`segment`): its
        kernel must not answer ARP for them and pull the traffic back while the target runs."""
        if self.found.moving:
            await self.src_segment.down(int(self.found.src["State"]["Pid"]), self.facts.moving_addresses)

    def _dump_deadline(self) -> float:
        """Seconds the dump (post-copy: the page transfer) may run before it is aborted on the node:
        the setting's, within the longest a checkpoint step may take (`CHECKPOINT_TIMEOUT_S`)."""
        return min(self.settings.dump_deadline_s(self.found.memory_mb), CHECKPOINT_TIMEOUT_S - 60)

    def restore_timeout(self) -> float:
        """CRIU restores at ~25 MB/s here or faster; allow 5 MB/s plus a minute before calling it stuck."""
        return 60.0 + (self._found.memory_mb if self._found is not None else 0.0) / 5

    async def restore(self) -> str | None:
        """UNFREEZE: the target restored from the images its runc.conf block points CRIU at, and
        its addresses announced at once (`segment.announce_restored`: switches and neighbours
        still deliver to the source, or hold packets for an old neighbour entry); then its block is
        stripped (post-copy: its lazy-pages daemon goes on feeding it)."""
        t0 = time.monotonic()
        await self.dst_criu.restore(checkpoint_name(self.mid), self.container, timeout=self.restore_timeout())
        self.t.restore_ms = (time.monotonic() - t0) * 1000
        if self.t.frozen_at is not None:
            self.t.frozen_ms = (time.monotonic() - self.t.frozen_at) * 1000
        said = None
        got = await self.engines.inspect_container_or_none(self.target, self.container)
        if got is not None and got["State"]["Running"]:
            there = segment.NodeSegment(self.ssh, self.target, self.found.dst_root, self.mid, self.token, self.key)
            said = await there.announce_restored(int(got["State"]["Pid"]), got, self.facts.moving_addresses)
        await self.dst_criu.strip()
        return said

    async def verify(self) -> str:
        """The target runs; post-copy, every page has arrived (the source's dump ends when they are
        all served, the target's lazy-pages daemon says how many arrived). Whether it keeps running
        for the grace period is judged when settling, while the source can still resume."""
        detail = "running"
        if self._dump is not None and self.t.frozen_at is not None:
            await self._dump
            if await self.dst_criu.lazy_pages_ended() is not criu.LazyPages.DONE:
                raise MigrationError(f"{self.container}: post-copy to {self.target} ended before every page "
                                     f"arrived (see {self.dst_criu.dir}/lazy-pages.log there)")
            self.t.last_page_ms = (time.monotonic() - self.t.frozen_at) * 1000
            await self.src_criu.strip()
            detail = f"every page arrived {self.t.last_page_ms / 1000:.2f} s after the freeze"
        await asyncio.sleep(0.3)
        got = await self.engines.inspect_container_or_none(self.target, self.container)
        if got is None or not got["State"]["Running"]:
            raise MigrationError(f"{self.container}: restored on {self.target} but not running")
        there = {e.network: e for e in spec.endpoints(got)}
        for e in self.found.moving:
            if e.addresses != there.get(e.network, spec.Endpoint(e.network, "", "", "")).addresses:
                raise MigrationError(f"{self.container}: restored on {self.target} without its address "
                                     f"{e.addresses[0]} on {e.network}")
        return detail

    async def _stop_lazy_dump(self) -> None:
        """After a failure, a lazy dump still serving pages is aborted now rather than at its
        deadline (CRIU then leaves the source as it was: settling resumes it)."""
        if self._dump is None:
            return
        if self._dump.done():
            if not self._dump.cancelled():
                self._dump.exception()  # retrieved: settling judges the source from its facts
            return
        try:
            await self.src_criu.abort(self._sockets)
            await asyncio.wait_for(self._dump, 60)
        except (Exception, asyncio.CancelledError):  # noqa: BLE001 - settling judges the source from its facts
            self._dump.cancel()

    def _finish(self, state: MigrationState, reason: str | None, refused: bool = False,
                refused_target: bool = False) -> MigrationResult:
        result = self._result(state, reason, refused, refused_target)
        self.store.migrations.finish(
            self.mid, state, reason, checkpoint_ms=self.t.checkpoint_ms, transfer_ms=self.t.transfer_ms,
            restore_ms=self.t.restore_ms, frozen_ms=self.t.frozen_ms, total_ms=self.t.total_ms, bytes=self.t.bytes,
        )
        return result

    def _result(self, state: MigrationState, reason: str | None, refused: bool = False,
                refused_target: bool = False) -> MigrationResult:
        self.t.total_ms = (time.monotonic() - self.t.started) * 1000
        return MigrationResult(self.mid, self.container, self.source, self.target, state, reason,
                               self.t.frozen_ms, self.t.total_ms, refused, refused_target=refused_target)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]
