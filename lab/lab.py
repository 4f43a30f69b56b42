"""Bring a lab up, report on it, run commands on its nodes, take it down (idempotently)."""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from peakpack.orchestrator.domain import inputs

from .faults import FULL_BYTES, Fault, disk_free_bytes, free_disk, heal, inject, partitioned
from .image import LAB_IMAGE, build_rootfs_tar
from .layout import SEGMENT_NETWORK, STATE_FILE, LabLayout, NodeLayout
from .node import (
    CGROUP_ROOT,
    DAEMON_PATH,
    ETC_CRIU,
    LabError,
    create_disk,
    docker,
    ensure_mntns,
    netns_pids,
    nsenter,
    powered,
    read_pid,
    release_disk,
    sh,
    start_dockerd,
    start_node,
    stop_node,
    wait_for,
)

#: where progress lines and notices go (print, or the CLI's spinner)
Log = Callable[[str], None]

#: what peakpack's traffic measurement needs on a node (per network namespace; README)
TRAFFIC_SYSCTLS = ("net.netfilter.nf_conntrack_acct=1", "net.netfilter.nf_conntrack_timestamp=1")
REQUIRED = ("ip", "nsenter", "dockerd", "docker", "docker-proxy", "iptables", "ssh", "ssh-keygen", "ipmitool",
            "criu", "rsync", "mkfs.ext4", "losetup", "mount", "sysctl")
#: each node's own filesystem (a sparse image: the host pays only for what is written)
DISK_GB = 8
#: post-copy migrations need CRIU to grow pipes to 4 MiB; root without CAP_SYS_RESOURCE (as here)
#: may not go past this host-wide sysctl (docs/migration.md)
PIPE_MAX_SIZE = 4 << 20

#: runc tells CRIU to read this file on every checkpoint and restore (unless a container's
#: `org.criu.config` annotation names another); one option per line, `#` starts a comment. Each
#: lab node has its own (`NodeLayout.etc_criu`, on /etc/criu in the node's mount namespace).
CRIU_RUNC_CONF = ETC_CRIU / "runc.conf"
CRIU_RUNC_CONF_TEXT = """\
# Written by `peakpack lab up` because this file was absent; peakpack never overwrites it.
# tcp-close: checkpoint a container with established TCP connections (CRIU refuses otherwise)
# and restore those connections closed; listening sockets are restored as they were.
tcp-close
"""


@dataclass(frozen=True)
class NodeStatus:
    name: str
    address: str
    powered: bool
    sshd: bool
    dockerd: bool
    containers: int | None
    bmc: str
    energy_uj: int | None
    partitioned: bool            # its link is down (`lab fault --partition`)
    disk_free_bytes: int | None  # free on its own filesystem (None: a lab from before nodes had one)
    disk_full: bool              # less than 1 MiB free (`lab fault --fill-disk`, or containers filled it)

    def to_json(self) -> dict[str, object]:
        return self.__dict__.copy()


def default_dir() -> Path:
    return Path(os.environ.get("PEAKPACK_LAB_DIR", "/var/lib/peakpack/lab"))


class Lab:
    def __init__(self, folder: Path | None = None) -> None:
        self.dir = (folder or default_dir()).resolve()

    @property
    def layout(self) -> LabLayout:
        lab = LabLayout.load(self.dir)
        if lab is None:
            raise LabError(f"--dir: no lab in {self.dir}; start one with `peakpack lab up --dir {self.dir}`")
        return lab

    @property
    def inventory_path(self) -> Path:
        return self.dir / "inventory.toml"

    def is_up(self) -> bool:
        lab = LabLayout.load(self.dir)
        return lab is not None and any(Path(f"/var/run/netns/{n.netns}").exists() for n in lab.nodes)

    # -- up -------------------------------------------------------------------------------------

    def up(self, nodes: int = 3, cpus: int = 2, log: Log = print, notice: Log | None = None,
           disk_gb: int | None = None, memory_mb: int = 4096) -> LabLayout:
        """`log` gets progress lines (the CLI shows them in a passing spinner); `notice` (default:
        a line on stderr) gets what the operator must see afterwards, e.g. a file written outside
        the lab folder. Each node's docker data-root is its own `disk_gb` GiB ext4 filesystem; its
        containers together get at most `cpus` CPUs and `memory_mb` MB (its cgroup parent's limits)."""
        if notice is None:
            notice = _stderr
        if os.geteuid() != 0:
            raise LabError("lab up: needs root (network namespaces, dockerd); run it as root")
        inputs.LAB_NODES.check(nodes, "--nodes")
        inputs.NODE_CPUS.check(cpus, "--cpus")
        disk_gb = DISK_GB if disk_gb is None else disk_gb  # None: the default size
        inputs.LAB_DISK_GB.check(disk_gb, "--disk-gb")
        inputs.LAB_MEMORY_MB.check(memory_mb, "--memory-mb")
        missing = [c for c in REQUIRED if shutil.which(c, path=DAEMON_PATH) is None]
        if missing:
            raise LabError(f"lab up: {', '.join(missing)} missing; run scripts/install-system-deps.sh as root")
        if self.is_up():
            raise LabError(f"--dir: a lab is already running in {self.dir} ({len(self.layout.nodes)} nodes); "
                           "use it, or `peakpack lab down` first")
        if self.dir.exists() and any(self.dir.iterdir()):
            self.down(log=lambda _: None)  # leftovers of a crashed lab
        raise_pipe_max_size(notice)
        lab = LabLayout.plan(self.dir, nodes, cpus, taken=_in_use, memory_mb=memory_mb)
        for n in lab.nodes:
            n.dir.mkdir(parents=True, exist_ok=True)
        lab.save()
        try:
            log(f"keys and secrets for {nodes} nodes")
            self._keys(lab)
            log(f"network: bridge {lab.bridge} on {lab.subnet}.0/24")
            self._network(lab)
            log(f"disks: a sparse {disk_gb} GiB ext4 image per node on its docker data-root")
            for n in lab.nodes:
                create_disk(n, disk_gb)
            log("mount namespaces: each node its own /etc/criu (a copy of this host's) and /dev/shm")
            for n in lab.nodes:
                seed_etc_criu(n, log)
                ensure_mntns(n)
            self._daemon(lab)
            log("starting dockerd and sshd on every node")
            with ThreadPoolExecutor(max_workers=4) as pool:
                list(pool.map(start_node, lab.nodes))
            for n in lab.nodes:
                wait_for(partial(_port_open, n.address, 22), 30, f"{n.name}: sshd does not answer")
            log(f"image {LAB_IMAGE} on every node")
            tar = build_rootfs_tar(lab.dir / "busybox-rootfs.tar")
            with ThreadPoolExecutor(max_workers=4) as pool:
                list(pool.map(lambda n: docker(n, "import", str(tar), LAB_IMAGE), lab.nodes))
            log(f"network {SEGMENT_NETWORK}: macvlan over every node's eth0, {lab.segment_subnet}")
            self.ensure_segment_network()
            self._write_inventory(lab)
        except BaseException:
            self.down(log=lambda _: None)
            raise
        log(f"lab up: {nodes} nodes; inventory {lab.inventory}")
        return lab

    def _keys(self, lab: LabLayout) -> None:
        lab.keys.mkdir(mode=0o700, exist_ok=True)
        (lab.dir / "secrets").mkdir(mode=0o700, exist_ok=True)
        for key in ("id_ed25519", "peer_ed25519"):
            sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"peakpack-lab-{key}", "-f", str(lab.keys / key)])
        authorized = "".join((lab.keys / f"{k}.pub").read_text() for k in ("id_ed25519", "peer_ed25519"))
        known = []
        for n in lab.nodes:
            host_key = n.dir / "ssh_host_ed25519_key"
            sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", n.name, "-f", str(host_key)])
            known.append(f"{n.address} {' '.join((n.dir / 'ssh_host_ed25519_key.pub').read_text().split()[:2])}\n")
            (n.dir / "authorized_keys").write_text(authorized)
            (n.dir / "authorized_keys").chmod(0o600)
            password = lab.dir / "secrets" / f"{n.name}.bmc"
            password.write_text(secrets.token_urlsafe(12) + "\n")
            password.chmod(0o600)
            env = {
                "DOCKER_HOST": f"unix://{n.docker_sock}",
                "NODE_NAME": n.name,
                "PEAKPACK_POWERCAP_ROOT": str(n.powercap),
                # the node's busy CPU time is its own cgroup's, not the host's /proc/stat
                "PEAKPACK_NODE_CPU_USAGE": str(CGROUP_ROOT / "cpuacct" / n.cgroup / "cpuacct.usage"),
                "PEAKPACK_PEER_IDENTITY": str(lab.keys / "peer_ed25519"),
                "PEAKPACK_PEER_KNOWN_HOSTS": str(lab.keys / "known_hosts"),
                # the QoS guard: the node is this cgroup parent, its folder is the node's own, and
                # what should start at boot goes into the boot folder (the lab has no systemd)
                "PEAKPACK_NODE_CGROUP": f"/{n.cgroup}",
                "PEAKPACK_QOS_DIR": str(n.qos_dir),
                "PEAKPACK_BOOT_DIR": str(n.boot_dir),
                "PATH": DAEMON_PATH,
                # bash sources ~/.bashrc for commands run by sshd only at shell level 1; a
                # root .bashrc that runs `pyenv rehash` would otherwise hang every command for
                # 60 s once a power cut leaves its lock file behind
                "SHLVL": "1",
            }
            (n.dir / "sshd_config").write_text("\n".join([
                f"ListenAddress {n.address}",
                "Port 22",
                f"HostKey {host_key}",
                f"PidFile {n.pidfile('sshd')}",
                f"AuthorizedKeysFile {n.dir / 'authorized_keys'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "MaxSessions 64",
                "MaxStartups 64:30:128",
                "SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()),
                "Subsystem sftp internal-sftp",
                "",
            ]))
        (lab.keys / "known_hosts").write_text("".join(known))

    def _network(self, lab: LabLayout) -> None:
        sh(["ip", "link", "add", lab.bridge, "type", "bridge"])
        sh(["ip", "addr", "add", f"{lab.host_address}/24", "dev", lab.bridge])
        sh(["ip", "link", "set", lab.bridge, "up"])
        for n in lab.nodes:
            peer = f"{lab.prefix}n{n.index}"
            sh(["ip", "netns", "add", n.netns])
            sh(["ip", "link", "add", n.host_veth, "type", "veth", "peer", "name", peer])
            sh(["ip", "link", "set", n.host_veth, "master", lab.bridge, "up"])
            sh(["ip", "link", "set", peer, "netns", n.netns])
            ns = ["ip", "-n", n.netns]
            sh([*ns, "link", "set", peer, "name", "eth0"])
            sh([*ns, "addr", "add", f"{n.address}/24", "dev", "eth0"])
            sh([*ns, "link", "set", "eth0", "up"])
            sh([*ns, "link", "set", "lo", "up"])
            # byte counters and start times on every tracked flow, as a real node's /etc/sysctl.d/
            # would set them: peakpack measures the traffic between containers from them
            sh([*nsenter(n), "sysctl", "-q", "-w", *TRAFFIC_SYSCTLS])

    def _daemon(self, lab: LabLayout) -> None:
        ready = lab.dir / "labd.ready"
        with open(lab.dir / "labd.log", "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "peakpack.lab.daemon", str(lab.dir)], stdout=log,
                                    stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                                    cwd=Path(__file__).resolve().parents[1])
        (lab.dir / "labd.pid").write_text(f"{proc.pid}\n")
        wait_for(ready.exists, 30, f"lab daemon did not start; see {lab.dir / 'labd.log'}")

    def _write_inventory(self, lab: LabLayout) -> None:
        lines = [
            "# Written by `peakpack lab up`: the lab's nodes, keys and BMCs. Paths are relative to this file.",
            "[cluster]", 'name = "lab"', "epoch_seconds = 60", "",
            "[planner]              # lab nodes boot in seconds; real servers: keep the defaults",
            "grace_seconds = 0", "boot_seconds = 10", "wake_timeout_seconds = 90", "",
            "[remote]               # the lab's nodes are on this host's loopback: a node that stops answering",
            "connect_timeout_seconds = 3   # is found in seconds; real networks: keep the defaults",
            "keepalive_seconds = 2", "",
            "[migration]            # lab containers are small and answer at once after a restore:",
            "dump_timeout_seconds = 10     # a dump stalled by a partition is aborted sooner, and the source",
            "grace_seconds = 1             # is removed sooner; real services: keep the defaults (60 and 5)", "",
        ]
        for n in lab.nodes:
            port = int((n.dir / "bmc.port").read_text())
            lines += [
                "[[nodes]]", f'name = "{n.name}"', f'address = "{n.address}"', f"cpus = {lab.cpus}",
                f"memory_mb = {lab.memory_mb}", 'role = "worker"', "power_managed = true",
                "[nodes.power]", f"idle_w = {lab.idle_w:g}", f"max_w = {lab.max_w:g}",
                "[nodes.ssh]", 'user = "root"', "port = 22", 'identity_file = "keys/id_ed25519"',
                'known_hosts = "keys/known_hosts"',
                "[nodes.bmc]", f'address = "{lab.host_address}"', f"port = {port}", 'username = "admin"',
                f'password_file = "secrets/{n.name}.bmc"',
                "cipher_suite = 3  # pyghmi's BMC server offers suite 3 only (real BMCs: keep the default 17)", "",
            ]
        lab.inventory.write_text("\n".join(lines))

    def ensure_segment_network(self) -> None:
        """`SEGMENT_NETWORK` on every powered node where it is missing: the same name, driver,
        subnet, gateway (the host's side of the bridge) and parent (`eth0`) everywhere, and each
        node's own `--ip-range` (`LabLayout.ip_range`)."""
        lab = self.layout
        for n in lab.nodes:
            if not powered(n) or docker(n, "network", "inspect", SEGMENT_NETWORK, check=False).returncode == 0:
                continue
            docker(n, "network", "create", "-d", "macvlan", "--subnet", lab.segment_subnet,
                   "--gateway", lab.host_address, "--ip-range", lab.ip_range(n), "-o", "parent=eth0",
                   SEGMENT_NETWORK)

    # -- status / exec ------------------------------------------------------------------------------

    def status(self) -> list[NodeStatus]:
        lab = self.layout
        result = []
        for n in lab.nodes:
            dockerd = read_pid(n.pidfile("dockerd")) is not None
            containers = None
            if dockerd:
                try:  # a restarting dockerd accepts but answers only once it has stopped its orphans
                    proc = docker(n, "ps", "-aq", check=False, timeout=10)
                    containers = len(proc.stdout.split()) if proc.returncode == 0 else None
                except subprocess.TimeoutExpired:
                    pass
            try:
                energy: int | None = int((n.rapl_zone / "energy_uj").read_text())
            except (OSError, ValueError):
                energy = None
            port = (n.dir / "bmc.port").read_text().strip() if (n.dir / "bmc.port").exists() else "?"
            free = disk_free_bytes(n)
            result.append(NodeStatus(
                name=n.name, address=n.address, powered=powered(n), sshd=read_pid(n.pidfile("sshd")) is not None,
                dockerd=dockerd, containers=containers, bmc=f"{lab.host_address}:{port}", energy_uj=energy,
                partitioned=partitioned(n), disk_free_bytes=free, disk_full=free is not None and free < FULL_BYTES,
            ))
        return result

    # -- faults -----------------------------------------------------------------------------------

    def fault(self, node: str, fault: Fault | str) -> str:
        """Inject `fault` into `node` (or undo one: HEAL, START_DOCKERD, FREE_DISK) for real;
        idempotent. Returns one line saying what is now true. See lab/faults.py."""
        try:
            fault = Fault(fault)
        except ValueError:
            raise LabError(f"fault: {fault!r} is not one of {', '.join(f.value for f in Fault)}") from None
        return inject(self._node(node), fault)

    def rapl_counter(self, node: str, present: bool) -> None:
        """Give a node its RAPL counter back, or take it away (a node without an energy counter:
        peakpack must fall back to DCMI or the power curve and say so). The zone is moved aside
        whole, so the counter keeps its value for when it comes back."""
        n = self._node(node)
        if present and n.rapl_hidden.exists():
            os.replace(n.rapl_hidden, n.rapl_zone)  # back first: the daemon counts again only after
        elif not present and not n.rapl_hidden.exists():
            os.replace(n.rapl_zone, n.rapl_hidden)

    def clear_faults(self) -> None:
        """Undo every fault on every node: links up, disks freed, dockerd running on powered nodes,
        RAPL counters present."""
        for n in self.layout.nodes:
            heal(n)
            self.rapl_counter(n.name, True)
            free_disk(n)
            if powered(n):
                start_dockerd(n)

    def _node(self, node: str) -> NodeLayout:
        lab = self.layout
        try:
            return lab.node(node)
        except KeyError:
            raise LabError(
                f"NODE: {node!r} is not in the lab; use one of {', '.join(x.name for x in lab.nodes)}"
            ) from None

    def ssh_argv(self, node: str) -> list[str]:
        lab = self.layout
        n = self._node(node)
        return ["ssh", "-i", str(lab.keys / "id_ed25519"), "-o", f"UserKnownHostsFile={lab.keys / 'known_hosts'}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
                f"root@{n.address}"]

    def exec(self, node: str, argv: list[str], timeout: float | None = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.ssh_argv(node), "--", shlex.join(argv)], capture_output=True, text=True,
                              timeout=timeout)

    def node(self, name: str) -> NodeLayout:
        return self.layout.node(name)

    # -- down -----------------------------------------------------------------------------------

    def down(self, log: Log = print) -> None:
        lab = LabLayout.load(self.dir)
        if lab is None:
            log(f"lab down: nothing to do in {self.dir}")
            if self.dir.exists() and not any(self.dir.iterdir()):
                self.dir.rmdir()
            return
        pid = read_pid(lab.dir / "labd.pid")
        if pid:
            os.killpg(pid, signal.SIGKILL) if _is_group_leader(pid) else os.kill(pid, signal.SIGKILL)
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(stop_node, lab.nodes))
        for n in lab.nodes:
            for pid in netns_pids(n):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            sh(["ip", "netns", "del", n.netns], check=False)
            sh(["ip", "link", "del", n.host_veth], check=False)
            shutil.rmtree(n.exec_root, ignore_errors=True)
            _remove_cgroups(n.cgroup)
        sh(["ip", "link", "del", lab.bridge], check=False)
        _unmount_under(lab.dir)  # the nodes' disks too (their loop devices detach with the unmount)
        for n in lab.nodes:
            release_disk(n)
        time.sleep(0.2)
        shutil.rmtree(lab.dir, ignore_errors=True)
        if lab.dir.exists():
            _unmount_under(lab.dir)
            shutil.rmtree(lab.dir)
        log(f"lab down: removed {lab.dir}")


def seed_etc_criu(node: NodeLayout, log: Log = print) -> None:
    """A node's /etc/criu starts as a copy of this host's (the operator's runc.conf and whatever
    else is there), with `tcp-close` written when there is no runc.conf; from then on it is the
    node's own: what a migration writes into it is seen by that node only."""
    node.etc_criu.mkdir(parents=True, exist_ok=True)
    if ETC_CRIU.is_dir():
        for f in ETC_CRIU.iterdir():
            if f.is_file() and not (node.etc_criu / f.name).exists():
                shutil.copy2(f, node.etc_criu / f.name)
    ensure_criu_config(written=log, kept=lambda _: None, path=node.etc_criu / "runc.conf")


def raise_pipe_max_size(notice: Log = print, path: Path = Path("/proc/sys/fs/pipe-max-size")) -> None:
    """fs.pipe-max-size is one value for the whole host (not per namespace): raised to
    PIPE_MAX_SIZE when lower, never lowered, and left so by `lab down` (another lab may use it)."""
    old = int(path.read_text())
    if old < PIPE_MAX_SIZE:
        path.write_text(f"{PIPE_MAX_SIZE}\n")
        notice(f"lab up: raised fs.pipe-max-size from {old} to {PIPE_MAX_SIZE} on this host (one value for the "
               "whole host): post-copy migrations need it; `sysctl -w fs.pipe-max-size=1048576` puts it back")


def ensure_criu_config(written: Log = print, kept: Log = print, path: Path = CRIU_RUNC_CONF) -> bool:
    """Write `tcp-close` into runc's CRIU configuration if there is none; an existing file is the
    operator's and stays as it is. Says which through `written` or `kept`; returns whether it wrote."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # check-then-create in one step
    except FileExistsError:
        kept(f"criu: {path} exists; left as it is")
        return False
    with os.fdopen(fd, "w") as f:
        f.write(CRIU_RUNC_CONF_TEXT)
    written(f"wrote {path} with `tcp-close` (it was absent): Docker checkpoints of containers "
            "with open TCP connections now close those connections; edit or remove the file to change that")
    return True


def _stderr(text: str) -> None:
    print(text, file=sys.stderr)


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _in_use(lab: LabLayout) -> bool:
    """Whether another lab on this host already has this one's bridge, namespaces or subnet (two
    folders can hash to the same; e.g. a test run beside an operator's demo)."""
    if Path(f"/sys/class/net/{lab.bridge}").exists() or any(Path(f"/var/run/netns/{n.netns}").exists()
                                                            for n in lab.nodes):
        return True
    addresses = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    return f" {lab.subnet}." in addresses


def _port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def _unmount_under(folder: Path) -> None:
    """Innermost first; a path can hold a stack (a node's disk, under dockerd's bind mount of its
    data-root that a killed dockerd leaves behind), so repeat until nothing is left."""
    prefix = str(folder) + "/"
    for _ in range(5):
        mounts = [m for m in (line.split()[1] for line in Path("/proc/mounts").read_text().splitlines())
                  if m.startswith(prefix)]
        if not mounts:
            return
        for m in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)


def _remove_cgroups(name: str) -> None:
    if not CGROUP_ROOT.is_dir():
        return
    for controller in CGROUP_ROOT.iterdir():
        top = controller / name
        if top.is_dir():
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [
                top
            ]:
                try:
                    d.rmdir()  # cgroup folders go with rmdir only, innermost first
                except OSError:
                    pass


__all__ = ["CRIU_RUNC_CONF", "STATE_FILE", "Lab", "NodeStatus", "default_dir", "ensure_criu_config"]
