"""Where everything of one lab lives, derived from its folder alone, so several labs run side by
side (tests, helpers, an operator's demo) without sharing a name, a subnet or a port."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

STATE_FILE = "lab.json"
#: a Docker macvlan network over every node's eth0 (the lab's bridge is their shared segment):
#: containers on it keep their address and open connections when they move (docs/lab.md)
SEGMENT_NETWORK = "labnet"


@dataclass(frozen=True)
class NodeLayout:
    name: str          # node-1 ..
    index: int         # 1 ..
    netns: str         # ppXXXX-n1
    address: str       # 10.a.b.(10+index)
    dir: Path          # DIR/nodes/node-1
    host_veth: str     # ppXXXXh1 (on the bridge)
    exec_root: Path    # /run/ppXXXX-n1 (short: docker puts sockets there)
    cgroup: str        # ppXXXX-n1, the --cgroup-parent of this node's containers

    @property
    def docker_sock(self) -> Path:
        return self.dir / "docker.sock"

    @property
    def docker_root(self) -> Path:
        """dockerd's --data-root, the mount point of the node's own filesystem (`disk_image`)."""
        return self.dir / "docker"

    @property
    def disk_image(self) -> Path:
        """A sparse file holding the node's ext4 filesystem, loop-mounted on `docker_root`."""
        return self.dir / "disk.img"

    @property
    def fill_file(self) -> Path:
        """What `--fill-disk` allocates: every free block of the node's filesystem."""
        return self.docker_root / "peakpack-fill"

    @property
    def mntns(self) -> Path:
        """The node's mount namespace (a bind-mounted nsfs file; `node.ensure_mntns`)."""
        return self.dir / "mnt.ns"

    @property
    def etc_criu(self) -> Path:
        """The node's own /etc/criu (bind-mounted on /etc/criu inside its mount namespace)."""
        return self.dir / "etc-criu"

    @property
    def docker_plugins(self) -> Path:
        """The node's own /run/docker/plugins, where its dockerd discovers plugins by their sockets
        (bind-mounted inside its mount namespace): a plugin a test serves to one node is never
        found, and then remembered, by another node's or another lab's dockerd."""
        return self.dir / "docker-plugins"

    @property
    def powercap(self) -> Path:
        return self.dir / "powercap"

    @property
    def rapl_zone(self) -> Path:
        return self.powercap / "intel-rapl:0"

    @property
    def rapl_hidden(self) -> Path:
        """Where `Lab.rapl_counter(node, False)` keeps the zone: the node then has no counter."""
        return self.dir / "rapl-hidden"

    @property
    def power_file(self) -> Path:
        """'on' or 'off': the node's power state as its BMC reports it."""
        return self.dir / "power"

    @property
    def qos_dir(self) -> Path:
        """The node's QoS guard folder (`$PEAKPACK_QOS_DIR`: guard.pyz, events.jsonl, state.json, holds/):
        nodes share one filesystem, so each has its own."""
        return self.dir / "qos"

    @property
    def boot_dir(self) -> Path:
        """Executables the lab runs, detached in the node's namespace, every time the node powers
        on (`$PEAKPACK_BOOT_DIR`): the lab's stand-in for enabled systemd units."""
        return self.dir / "boot.d"

    def pidfile(self, what: str) -> Path:
        return self.dir / f"{what}.pid"

    def log(self, what: str) -> Path:
        return self.dir / f"{what}.log"


@dataclass(frozen=True)
class LabLayout:
    dir: Path
    prefix: str        # pp + 4 hex digits of the folder's hash
    subnet: str        # 10.a.b (a /24)
    nodes: tuple[NodeLayout, ...]
    cpus: int
    idle_w: float
    max_w: float
    memory_mb: int = 4096  # each node's, declared and enforced (its cgroup parent's limit)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def host_address(self) -> str:
        return f"{self.subnet}.1"

    @property
    def segment_subnet(self) -> str:
        """The lab's /24: the nodes' own addresses and the segment network's (`SEGMENT_NETWORK`)."""
        return f"{self.subnet}.0/24"

    def ip_range(self, node: NodeLayout) -> str:
        """The addresses `node`'s engine hands out on the segment network: a block of its own from
        .64 up, so that two engines (each keeping its own address book) never choose the same."""
        size = 16
        while size > 1 and size * len(self.nodes) > 192:
            size //= 2
        bits = 32 - (size.bit_length() - 1)
        return f"{self.subnet}.{64 + size * (node.index - 1)}/{bits}"

    @property
    def keys(self) -> Path:
        return self.dir / "keys"

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.toml"

    def node(self, name: str) -> NodeLayout:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @classmethod
    def plan(cls, folder: Path, nodes: int, cpus: int, idle_w: float = 100.0, max_w: float = 250.0,
             taken: Callable[[LabLayout], bool] = lambda _: False, memory_mb: int = 4096) -> LabLayout:
        """The layout of a lab in `folder`; when `taken` says its names or subnet are already in use
        (another lab up on this host hashed alike), the next of a few salted variants."""
        folder = folder.resolve()
        for salt in range(64):
            layout = replace(cls._derive(folder, salt, nodes, cpus, idle_w, max_w), memory_mb=memory_mb)
            if not taken(layout):
                return layout
        raise ValueError(f"{folder}: every derived lab subnet is in use; take a lab down first")

    @classmethod
    def _derive(cls, folder: Path, salt: int, nodes: int, cpus: int, idle_w: float, max_w: float) -> LabLayout:
        digest = hashlib.sha256((str(folder) if salt == 0 else f"{folder}#{salt}").encode()).digest()
        prefix = "pp" + digest[:2].hex()
        subnet = f"10.{200 + digest[2] % 50}.{digest[3]}"
        layouts = tuple(
            NodeLayout(
                name=f"node-{i}", index=i, netns=f"{prefix}-n{i}", address=f"{subnet}.{10 + i}",
                dir=folder / "nodes" / f"node-{i}", host_veth=f"{prefix}h{i}",
                exec_root=Path("/run") / f"{prefix}-n{i}", cgroup=f"{prefix}-n{i}",
            )
            for i in range(1, nodes + 1)
        )
        return cls(folder, prefix, subnet, layouts, cpus, idle_w, max_w)

    def save(self) -> None:
        d = asdict(self)
        (self.dir / STATE_FILE).write_text(json.dumps(d, default=str, indent=2))

    @classmethod
    def load(cls, folder: Path) -> LabLayout | None:
        path = folder.resolve() / STATE_FILE
        if not path.exists():
            return None
        d = json.loads(path.read_text())
        nodes = tuple(
            NodeLayout(**{**n, "dir": Path(n["dir"]), "exec_root": Path(n["exec_root"])}) for n in d["nodes"]
        )
        return cls(Path(d["dir"]), d["prefix"], d["subnet"], nodes, d["cpus"], d["idle_w"], d["max_w"],
                   d.get("memory_mb", 4096))
