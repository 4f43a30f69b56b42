"""docker on a node through its CLI over SSH: what the observer, pinning and crash reconciliation
read. Parsers are separate from the calls so they can be unit-tested. (Migration talks to the
Engine API instead: orchestrator/remote/engine.py.)"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import NodeError
from orchestrator.names import container_name
from orchestrator.remote import SshPool


@dataclass(frozen=True)
class ContainerState:
    """The little of `docker inspect` that pinning and crash reconciliation read."""

    name: str
    id: str
    running: bool
    cpuset: str


def parse_inspect(node: str, text: str) -> ContainerState:
    try:
        [d] = json.loads(text)
        return ContainerState(name=d["Name"].lstrip("/"), id=d["Id"], running=bool(d["State"]["Running"]),
                              cpuset=d["HostConfig"].get("CpusetCpus") or "")
    except (ValueError, KeyError, TypeError) as exc:
        raise NodeError(node, f"docker inspect answered something unexpected ({exc!r})") from None


async def inspect(ssh: SshPool, node: str, name: str) -> ContainerState | None:
    """The container's configuration, or None when the node has no container of that name."""
    res = await ssh.run(node, ["docker", "inspect", "--type", "container", container_name(name)], check=False)
    if res.exit_status != 0:
        if "no such" in res.stderr.lower():
            return None
        raise NodeError(node, f"docker inspect {name} failed: {res.stderr.strip()[:200]}")
    return parse_inspect(node, res.stdout)


async def is_running(ssh: SshPool, node: str, name: str) -> bool:
    cfg = await inspect(ssh, node, name)
    return cfg is not None and cfg.running


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
