"""What the nodes look like now, over SSH: per node its containers (name, image, CPU cores and
memory in use, class and group from labels), and whether it is powered at all.

Each container is marked movable or not, with the reason, by the same rule migration preflight
applies (`migrate.spec`), so the planner never proposes a move that preflight would refuse.
A container's demand is what its labels declare (`peakpack.cpu` cores, `peakpack.memory_mb`) when
present, like a request in Kubernetes, else what `docker stats` measures. A node that does not
answer SSH is powered off if its BMC says so; a node that should be on but does not answer is an
error, because planning around a node we cannot see could overload it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from migrate import docker as dk
from migrate import spec
from orchestrator.remote import RemoteShell, SshPool

from .errors import HostKeyError, NodeError
from .model import ClusterSnapshot, Container, ContainerClass, Inventory, NodeState

#: every container, stopped ones too: a volume shared with a stopped container still pins both
INSPECT_ALL = 'ids=$(docker ps -aq); if [ -z "$ids" ]; then echo "[]"; else docker inspect $ids; fi'

#: node name -> True/False (BMC power state) or None (no BMC); power/ supplies the real one
PowerProbe = Callable[[str], bool | None]


def parse_containers(node: str, inspect_json: str, stats_text: str) -> list[Container]:
    try:
        items = json.loads(inspect_json)
    except ValueError:
        raise NodeError(node, "docker inspect answered something that is not JSON") from None
    stats = dk.parse_stats(node, stats_text)
    try:
        why_not = spec.immovable(items)
    except (KeyError, TypeError, AttributeError) as exc:
        raise NodeError(node, f"container data from docker is unexpected ({exc!r})") from None
    result = []
    for d in items:
        try:
            if not d["State"]["Running"]:
                continue
            name = d["Name"].lstrip("/")
            labels = d["Config"].get("Labels") or {}
            measured_cpu, measured_mem = stats.get(name, (0.0, 0.0))
            cls = labels.get("peakpack.class", "turtle")
            if cls not in ("devil", "turtle"):
                raise NodeError(node, f"container {name}: label peakpack.class={cls!r}; use devil or turtle")
            result.append(Container(
                name=name, node=node,
                cpu=float(labels.get("peakpack.cpu", measured_cpu)),
                memory_mb=float(labels.get("peakpack.memory_mb", measured_mem)),
                image=d["Config"]["Image"], cls=ContainerClass(cls), group=labels.get("peakpack.group"),
                immovable=why_not.get(name), ports=spec.published_ports(d),
            ))
        except (KeyError, TypeError, ValueError) as exc:
            raise NodeError(node, f"container data from docker is unexpected ({exc!r})") from None
    return result


async def observe_node(ssh: SshPool, node: str, bmc_power: PowerProbe) -> tuple[NodeState, list[Container]]:
    try:
        inspect, stats = await asyncio.gather(
            ssh.run(node, ["sh", "-c", INSPECT_ALL], timeout=60),
            ssh.run(node, ["docker", "stats", "--no-stream", "--format", "{{json .}}"], timeout=60),
        )
    except HostKeyError:
        raise
    except NodeError as exc:
        state = bmc_power(node)
        if state is False:
            ssh.forget(node)
            return NodeState(node, powered=False), []
        raise NodeError(node, f"does not answer and its BMC {'says it is on' if state else 'cannot tell'}: "
                              f"{str(exc).split(': ', 1)[-1]}") from None
    return NodeState(node, powered=True), parse_containers(node, inspect.stdout, stats.stdout)


def observe_cluster(inventory: Inventory, shell: RemoteShell | None = None,
                    bmc_power: PowerProbe | None = None) -> ClusterSnapshot:
    if bmc_power is None:
        from power.ipmi import power_probe

        bmc_power = power_probe(inventory)
    own = shell is None
    shell = shell or RemoteShell(inventory)
    try:
        results = shell.gather([observe_node(shell.pool, n.name, bmc_power) for n in inventory.nodes])
    finally:
        if own:
            shell.close()
    nodes, containers = [], []
    for r in results:
        if isinstance(r, BaseException):
            raise r
        nodes.append(r[0])
        containers.extend(r[1])
    seen: dict[str, str] = {}
    for c in containers:
        if c.name in seen:
            raise NodeError(c.node, f"container {c.name} also runs on {seen[c.name]}; stop one copy")
        seen[c.name] = c.node
    return ClusterSnapshot(nodes=tuple(nodes), containers=tuple(containers))
