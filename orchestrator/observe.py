"""What the nodes look like now, over SSH: per node its containers (name, image, CPU cores and
memory in use, class and group from labels), and whether it is powered at all.

Each container is marked movable or not, with the reason, by the same rule migration preflight
applies (`migrate.spec`), so the planner never proposes a move that preflight would refuse.
A container's demand is what its labels declare (`peakpack.cpu` cores, `peakpack.memory_mb`) when
present, like a request in Kubernetes, else what `docker stats` measures. A node that does not
answer SSH is powered off if its BMC says so; a node that should be on but cannot be observed is
held: the plan neither moves containers onto or off it nor switches it, and the rest of the
cluster is planned (and woken) as usual."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from migrate import spec
from orchestrator.remote import RemoteShell, SshPool

from .errors import HostKeyError, NodeError
from .model import ClusterSnapshot, Container, ContainerClass, Inventory, NodeState

#: every container, stopped ones too: a volume shared with a stopped container still pins both;
#: a failing `docker ps` fails the node (an error is not an empty node)
INSPECT_ALL = 'ids=$(docker ps -aq) || exit 1; if [ -z "$ids" ]; then echo "[]"; else docker inspect $ids; fi'

#: node name -> True/False (BMC power state) or None (no BMC); power/ supplies the real one
PowerProbe = Callable[[str], bool | None]


_SIZE = re.compile(r"^\s*([\d.]+)\s*([KMGT]?i?B)\s*$", re.I)
_UNIT = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 1024, "mib": 1024**2, "gib": 1024**3,
         "tib": 1024**4}


def parse_size_mb(text: str) -> float:
    """docker stats' '12.5MiB' -> MB (MiB, as the inventory's memory_mb)."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(text)
    return float(m.group(1)) * _UNIT[m.group(2).lower()] / 1024**2


def parse_stats(node: str, text: str) -> dict[str, tuple[float, float]]:
    """`docker stats --no-stream --format '{{json .}}'` -> name: (cores, memory MB)."""
    result = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            d: dict[str, Any] = json.loads(line)
            cores = float(str(d["CPUPerc"]).rstrip("%") or 0) / 100
            mem = parse_size_mb(str(d["MemUsage"]).split("/")[0])
            result[str(d["Name"])] = (cores, mem)
        except (ValueError, KeyError) as exc:
            raise NodeError(node, f"docker stats answered something unexpected ({exc!r})") from None
    return result


def parse_containers(node: str, inspect_json: str, stats_text: str) -> list[Container]:
    try:
        items = json.loads(inspect_json)
    except ValueError:
        raise NodeError(node, "docker inspect answered something that is not JSON") from None
    stats = parse_stats(node, stats_text)
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


@dataclass(frozen=True)
class NodeView:
    """One node as observed: its state and containers, or why it could not be seen."""

    state: NodeState
    containers: list[Container]
    unknown: str | None = None  # why the node could not be observed: plan around it, never on it


async def observe_node(ssh: SshPool, node: str, bmc_power: PowerProbe) -> NodeView:
    try:
        inspect, stats = await asyncio.gather(
            ssh.run(node, ["sh", "-c", INSPECT_ALL], timeout=60),
            ssh.run(node, ["docker", "stats", "--no-stream", "--format", "{{json .}}"], timeout=60),
        )
        return NodeView(NodeState(node, powered=True), parse_containers(node, inspect.stdout, stats.stdout))
    except HostKeyError as exc:
        return NodeView(NodeState(node, powered=True), [], str(exc))
    except NodeError as exc:
        state = await asyncio.to_thread(bmc_power, node)  # ipmitool blocks: keep the other nodes' SSH going
        if state is False:
            ssh.forget(node)
            return NodeView(NodeState(node, powered=False), [])
        return NodeView(NodeState(node, powered=True), [],
                        f"node {node}: not observed and its BMC {'says it is on' if state else 'cannot tell'}: "
                        f"{str(exc).split(': ', 1)[-1]}")


def observe_cluster(inventory: Inventory, shell: RemoteShell | None = None,
                    bmc_power: PowerProbe | None = None) -> ClusterSnapshot:
    """Every node at once. A node that cannot be observed is held (its containers are unknown, so
    nothing moves onto it, off it, or switches it), and the rest of the cluster is planned as usual."""
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
    views: list[NodeView] = []
    for r in results:
        if isinstance(r, BaseException):  # observe_node turns node failures into views: this is a bug
            raise r
        views.append(r)
    held = {v.state.name: v.unknown for v in views if v.unknown is not None}
    seen: dict[str, str] = {}
    containers = []
    for c in (c for v in views for c in v.containers):
        if c.name in seen:  # two copies: neither node is touched until an operator or reconcile decides
            why = f"container {c.name} runs on both {seen[c.name]} and {c.node}"
            held.setdefault(c.node, why)
            held.setdefault(seen[c.name], why)
            continue
        seen[c.name] = c.node
        containers.append(c)
    return ClusterSnapshot(nodes=tuple(v.state for v in views), containers=tuple(containers), held=held)
