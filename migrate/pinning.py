"""Node-local, contention-aware core pinning (ClavisMO's idea on one node): memory-intensive
"devils" get cores of their own, spread over different last-level caches and sockets where the
node has several; quiet "turtles" pack together on the cores that are left. Applying is
idempotent: a container already on its cpuset is not touched."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from typing import Any

from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import Container, ContainerClass
from peakpack.orchestrator.domain.ports import Journal
from peakpack.orchestrator.remote import SshPool
from peakpack.orchestrator.remote.docker_api import EnginePool


@dataclass(frozen=True)
class Cpu:
    id: int
    core: int
    socket: int
    llc: int  # id of the last-level cache this CPU shares


def parse_lscpu(node: str, text: str) -> list[Cpu]:
    """`lscpu -p=CPU,CORE,SOCKET,CACHE` -> CPUs; CACHE is 'L1d:L1i:L2:L3' ids (last one = LLC)."""
    cpus = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            cpu, core, socket, cache = line.split(",")[:4]
            llc = int(cache.split(":")[-1]) if cache else int(socket or 0)
            cpus.append(Cpu(int(cpu), int(core or cpu), int(socket or 0), llc))
        except ValueError:
            raise NodeError(node, f"lscpu answered an unexpected line: {line[:60]!r}") from None
    if not cpus:
        raise NodeError(node, "lscpu listed no CPUs")
    return cpus


def cpuset(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (docker's --cpuset-cpus syntax)."""
    ids = sorted(set(ids))
    parts, start = [], None
    for i, x in enumerate(ids):
        if start is None:
            start = x
        if i + 1 == len(ids) or ids[i + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ",".join(parts)


def parse_cpuset(text: str) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5}; '' -> set()."""
    ids: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        ids.update(range(int(lo), int(hi or lo) + 1))
    return ids


def plan_cpusets(cpus: list[Cpu], containers: list[Container],
                 current: dict[str, str] | None = None) -> dict[str, str]:
    """Pure: the cpuset of every container on one node. A devil keeps its current cpuset when it
    is still valid (on this node, apart from the other devils, big enough), so pinning applied
    twice changes nothing even when measured demand wobbles."""
    current = current or {}
    domains: dict[tuple[int, int], list[int]] = defaultdict(list)
    for c in sorted(cpus, key=lambda c: (c.socket, c.llc, c.core, c.id)):
        domains[(c.socket, c.llc)].append(c.id)
    order = sorted(domains, key=lambda d: -len(domains[d]))
    devils = sorted((c for c in containers if c.cls is ContainerClass.DEVIL), key=lambda c: c.name)
    turtles = [c for c in containers if c.cls is not ContainerClass.DEVIL]
    free = {d: list(domains[d]) for d in order}
    result: dict[str, str] = {}
    waiting = []
    for devil in devils:  # first, devils whose pinning still holds keep it
        want = max(1, math.ceil(devil.cpu - 0.05))
        have = parse_cpuset(current.get(devil.name, ""))
        free_ids = {x for d in order for x in free[d]}
        if have and have <= free_ids and len(have) >= min(want, len(cpus)) and len(have) < len(cpus):
            for d in order:
                free[d] = [x for x in free[d] if x not in have]
            result[devil.name] = cpuset(sorted(have))
        else:
            waiting.append((devil, want))
    for i, (devil, want) in enumerate(waiting):
        # the domain with the most free CPUs, so devils spread over caches and sockets
        domain = max(order, key=lambda d: (len(free[d]), -order.index(d)))
        if not free[domain]:  # more devils than CPUs: share round-robin, still one CPU each
            all_ids = sorted(c.id for c in cpus)
            result[devil.name] = cpuset([all_ids[i % len(all_ids)]])
            continue
        take, free[domain] = free[domain][:want], free[domain][want:]
        result[devil.name] = cpuset(take)
    left = [x for d in order for x in free[d]] or sorted(c.id for c in cpus)
    for t in turtles:
        result[t.name] = cpuset(left)
    return result


async def node_cpus(ssh: SshPool, node: str) -> list[Cpu]:
    res = await ssh.run(node, ["lscpu", "-p=CPU,CORE,SOCKET,CACHE"])
    return parse_lscpu(node, res.stdout)


def _set_cpuset(api: Any, *, name: str, cpus: str) -> None:
    """One container's cpuset through the node's Engine API (docker's low-level client)."""
    api.update_container(name, cpuset_cpus=cpus)


async def apply_pinning(ssh: SshPool, engines: EnginePool, store: Journal, node: str,
                        containers: list[Container]) -> dict[str, str]:
    """Set every container's cpuset on `node`; returns only those that changed."""
    current: dict[str, str] = {}
    for c in containers:
        d = await engines.inspect_container_or_none(node, c.name)
        if d is not None:
            current[c.name] = d["HostConfig"].get("CpusetCpus") or ""
    plan = plan_cpusets(await node_cpus(ssh, node), containers, current)
    changed = {}
    for name, want in sorted(plan.items()):
        if name not in current or current[name] == want:
            continue
        await engines.call(node, partial(_set_cpuset, name=name, cpus=want))
        store.pinning.record(node, name, want)
        changed[name] = want
    return changed
