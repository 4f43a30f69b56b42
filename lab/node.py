"""Starting and stopping one lab node's services: the node's sshd and dockerd run inside its
network namespace (entered with nsenter --net only: `ip netns exec` remounts /sys and hides the
cgroup v1 hierarchies dockerd needs). "Power off" is abrupt, like a real power loss: every
container process is killed through the node's cgroup, then the daemons and every process left in
the namespace."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from orchestrator.errors import PeakpackError

from .layout import NodeLayout

#: runc finds criu on PATH; the lab's CRIU 4.1 lives in /usr/local/sbin.
DAEMON_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CGROUP_ROOT = Path("/sys/fs/cgroup")


class LabError(PeakpackError):
    pass


def sh(argv: list[str], check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(argv[:4])}...: {(proc.stderr or proc.stdout).strip().splitlines()[-1:] or proc.returncode}")
    return proc


def read_pid(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def nsenter(node: NodeLayout) -> list[str]:
    return ["nsenter", f"--net=/var/run/netns/{node.netns}"]


def start_sshd(node: NodeLayout) -> None:
    if read_pid(node.pidfile("sshd")):
        return
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    sh([*nsenter(node), "/usr/sbin/sshd", "-f", str(node.dir / "sshd_config"), "-E", str(node.log("sshd"))])


def start_dockerd(node: NodeLayout) -> None:
    if read_pid(node.pidfile("dockerd")):
        return
    node.exec_root.mkdir(parents=True, exist_ok=True)
    argv = [
        *nsenter(node), "dockerd", "--experimental",
        "--data-root", str(node.dir / "docker"), "--exec-root", str(node.exec_root),
        "-H", f"unix://{node.docker_sock}", "--pidfile", str(node.pidfile("dockerd")),
        "--containerd-namespace", node.netns, "--containerd-plugins-namespace", f"{node.netns}p",
        # docker0 (172.17.0.1/16), user-defined bridges, iptables NAT/port publishing and
        # ip_forward all live in the node's network namespace: every node can have the same
        # subnets and published ports without touching the host's links or firewall
        "--cgroup-parent", f"/{node.cgroup}", "--exec-opt", "native.cgroupdriver=cgroupfs",
        "--storage-driver", "overlay2",
    ]
    with open(node.log("dockerd"), "ab") as log:
        subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, "PATH": DAEMON_PATH})
    wait_for(lambda: docker_ready(node), 60, f"{node.name}: dockerd did not start; see {node.log('dockerd')}")


def docker(node: NodeLayout, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return sh(["docker", "-H", f"unix://{node.docker_sock}", *args], check=check, timeout=timeout)


def docker_ready(node: NodeLayout) -> bool:
    return node.docker_sock.exists() and docker(node, "version", "--format", "{{.Server.Version}}", check=False,
                                                timeout=10).returncode == 0


def wait_for(predicate, seconds: float, message: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise LabError(message)


def cgroup_pids(node: NodeLayout) -> set[int]:
    pids: set[int] = set()
    root = CGROUP_ROOT / "pids" / node.cgroup
    if root.is_dir():
        for procs in root.rglob("cgroup.procs"):
            pids.update(int(p) for p in procs.read_text().split())
    return pids


def netns_pids(node: NodeLayout) -> set[int]:
    proc = sh(["ip", "netns", "pids", node.netns], check=False)
    return {int(p) for p in proc.stdout.split()} if proc.returncode == 0 else set()


def kill_all(pids: set[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def start_node(node: NodeLayout) -> None:
    """Power on: the BMC reports "on" at once, the node's services come up after (it boots)."""
    node.power_file.write_text("on\n")
    start_dockerd(node)
    start_sshd(node)


def stop_node(node: NodeLayout) -> None:
    """Power loss: containers die first (nothing checkpoints them), then the node's daemons."""
    node.power_file.write_text("off\n")
    kill_all(cgroup_pids(node))
    dockerd = read_pid(node.pidfile("dockerd"))
    if dockerd:
        os.kill(dockerd, signal.SIGTERM)
        try:
            wait_for(lambda: read_pid(node.pidfile("dockerd")) is None, 30, "")
        except LabError:
            os.kill(dockerd, signal.SIGKILL)
    for _ in range(3):
        left = netns_pids(node) | cgroup_pids(node)
        if not left:
            break
        kill_all(left)
        time.sleep(0.2)
    for what in ("sshd", "dockerd"):
        node.pidfile(what).unlink(missing_ok=True)
    node.docker_sock.unlink(missing_ok=True)


def powered(node: NodeLayout) -> bool:
    try:
        return node.power_file.read_text().strip() == "on"
    except OSError:
        return False
