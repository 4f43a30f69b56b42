"""docker on a node, through SSH: inspection and the commands a migration needs. Pure builders and
parsers are separate from the calls so they can be unit-tested."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import NodeError

from orchestrator.names import container_name
from orchestrator.remote import SshPool

#: mounts whose data would not follow a checkpoint to another node
UNSUPPORTED_MOUNTS = ("bind", "volume")


@dataclass(frozen=True)
class ContainerConfig:
    """What is needed to create the same container on another node."""

    name: str
    id: str
    image: str
    running: bool
    cmd: tuple[str, ...]
    entrypoint: tuple[str, ...]
    env: tuple[str, ...]
    labels: dict[str, str]
    workdir: str
    user: str
    tty: bool
    network: str
    cpuset: str
    memory: int
    nano_cpus: int
    devices: int
    gpus: int
    mounts: tuple[str, ...]

    def create_argv(self) -> list[str]:
        argv = ["docker", "create", "--name", self.name, "--network", self.network or "none"]
        for k, v in sorted(self.labels.items()):
            argv += ["--label", f"{k}={v}"]
        for e in self.env:
            argv += ["--env", e]
        if self.workdir:
            argv += ["--workdir", self.workdir]
        if self.user:
            argv += ["--user", self.user]
        if self.tty:
            argv += ["--tty"]
        if self.cpuset:
            argv += ["--cpuset-cpus", self.cpuset]
        if self.memory:
            argv += ["--memory", str(self.memory)]
        if self.nano_cpus:
            argv += ["--cpus", f"{self.nano_cpus / 1e9:g}"]
        if self.entrypoint:
            argv += ["--entrypoint", self.entrypoint[0]]
        argv.append(self.image)
        argv += list(self.entrypoint[1:]) + list(self.cmd)
        return argv

    def unsupported(self) -> str | None:
        if self.gpus or self.devices:
            return "it uses devices or GPUs, which CRIU cannot move"
        if self.mounts:
            return f"it has {'/'.join(self.mounts)} mounts whose data would stay behind"
        return None


def parse_inspect(node: str, text: str) -> ContainerConfig:
    try:
        [d] = json.loads(text)
        cfg, host, state = d["Config"], d["HostConfig"], d["State"]
        return ContainerConfig(
            name=d["Name"].lstrip("/"), id=d["Id"], image=cfg["Image"], running=bool(state["Running"]),
            cmd=tuple(cfg.get("Cmd") or ()), entrypoint=tuple(cfg.get("Entrypoint") or ()),
            env=tuple(e for e in cfg.get("Env") or () if not e.startswith("PATH=")),
            labels=dict(cfg.get("Labels") or {}), workdir=cfg.get("WorkingDir") or "", user=cfg.get("User") or "",
            tty=bool(cfg.get("Tty")), network=host.get("NetworkMode") or "none",
            cpuset=host.get("CpusetCpus") or "", memory=int(host.get("Memory") or 0),
            nano_cpus=int(host.get("NanoCpus") or 0), devices=len(host.get("Devices") or ()),
            gpus=len(host.get("DeviceRequests") or ()),
            mounts=tuple(sorted({m["Type"] for m in d.get("Mounts") or () if m.get("Type") in UNSUPPORTED_MOUNTS})),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise NodeError(node, f"docker inspect answered something unexpected ({exc!r})") from None


async def inspect(ssh: SshPool, node: str, name: str) -> ContainerConfig | None:
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


async def docker_root(ssh: SshPool, node: str) -> str:
    res = await ssh.run(node, ["docker", "info", "--format", "{{json .}}"])
    try:
        info = json.loads(res.stdout)
    except ValueError:
        raise NodeError(node, "docker info answered something that is not JSON") from None
    if not info.get("ExperimentalBuild"):
        raise NodeError(node, "dockerd runs without --experimental; checkpoint/restore needs it")
    return str(info["DockerRootDir"])


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
