"""Starting and stopping one lab node's services: the node's sshd and dockerd run inside its
network namespace and its own mount namespace (entered with nsenter --net --mount: `ip netns exec`
remounts /sys and hides the cgroup v1 hierarchies dockerd needs). The mount namespace is a copy of
the host's with the node's own /etc/criu and /dev/shm on top, so every node has its own CRIU
configuration as separate machines would (runc makes CRIU read /etc/criu/runc.conf, and a
migration edits it per node). "Power off" is abrupt, like a real power loss: every container
process is killed through the node's cgroup, then the daemons and every process left in the
namespace. The node's disk is its own ext4 filesystem (a sparse image file, loop-mounted on
dockerd's data-root), so it can fill up without filling the host's; it stays mounted while the
node is off, like a real disk. Its CPUs and memory are its cgroup parent's limits, so a node can be
full; its boot folder is run at every power on (what systemd would start)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from peakpack.orchestrator.domain.errors import PeakpackError

from .layout import LabLayout, NodeLayout

#: runc finds criu on PATH; the lab's CRIU 4.2 lives in /usr/local/sbin.
DAEMON_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CGROUP_ROOT = Path("/sys/fs/cgroup")


class LabError(PeakpackError):
    pass


def sh(argv: list[str], check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if check and proc.returncode != 0:
        raise LabError(
            f"{' '.join(argv[:4])}...: {(proc.stderr or proc.stdout).strip().splitlines()[-1:] or proc.returncode}"
        )
    return proc


def read_pid(pidfile: Path) -> int | None:
    """The pid in `pidfile` if that process runs (a killed daemon's pidfile stays behind)."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def alive(pid: int) -> bool:
    """Running, not a zombie: a SIGKILLed daemon stays a zombie until its parent reaps it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


#: where runc makes CRIU read its options; each node has its own (a bind mount in its mount namespace)
ETC_CRIU = Path("/etc/criu")
#: where dockerd discovers plugins; each node has its own too (`NodeLayout.docker_plugins`)
DOCKER_PLUGINS = Path("/run/docker/plugins")


def ensure_mntns(node: NodeLayout) -> None:
    """Create the node's mount namespace once (idempotent), kept alive by a bind mount of its nsfs
    file as `ip netns add` does for network namespaces, so it outlives a power cycle like a real
    node's /etc. It is a copy of the host's mounts taken now (the node's disk is mounted before),
    minus other labs' and nodes' disks, namespace files and container overlays (copies would keep
    them busy after their owners unmount them; the host's / is private, nothing propagates), plus
    the node's own /etc/criu (`node.etc_criu`), its own /run/docker/plugins
    (`node.docker_plugins`) and its own RAM scratch space on /dev/shm."""
    ns = node.mntns
    if _mounted(ns, Path("/proc/self/mountinfo").read_text()):
        return
    for folder in (ETC_CRIU, node.etc_criu, DOCKER_PLUGINS, node.docker_plugins):
        folder.mkdir(parents=True, exist_ok=True)
    ns.touch()
    sh(["unshare", f"--mount={ns}", "--propagation", "private", "true"])
    script = (
        'findmnt -rn -o TARGET,FSTYPE,SOURCE | sort -r | while read -r t f s; do '
        '  case "$f:$s" in nsfs:*|overlay:*|ext4:/dev/loop*) [ "$t" = "$1" ] || umount -l "$t" 2>/dev/null;; esac; '
        'done; '
        'mount --bind "$2" "$3" && mount --bind "$5" "$6" && mount -t tmpfs -o mode=1777 "shm-$4" /dev/shm'
    )
    sh(["nsenter", f"--mount={ns}", "sh", "-c", script, "sh", str(node.docker_root), str(node.etc_criu),
        str(ETC_CRIU), node.netns, str(node.docker_plugins), str(DOCKER_PLUGINS)])


def nsenter(node: NodeLayout) -> list[str]:
    ensure_mntns(node)
    return ["nsenter", f"--net=/var/run/netns/{node.netns}", f"--mount={node.mntns}"]


def _mounted(path: Path, mountinfo: str) -> bool:
    return any(_unescape(line.split()[4]) == str(path) for line in mountinfo.splitlines())


def start_sshd(node: NodeLayout) -> None:
    """Start the node's sshd and wait until it listens. sshd forks into the background before it
    binds its port, so its first process exits while connections are still refused; it writes its
    pidfile once the listening socket is bound, and that is what the wait reads."""
    if read_pid(node.pidfile("sshd")):
        return
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    sh([*nsenter(node), "/usr/sbin/sshd", "-f", str(node.dir / "sshd_config"), "-E", str(node.log("sshd"))])
    wait_for(lambda: read_pid(node.pidfile("sshd")), 30,
             f"{node.name}: sshd did not start listening: see {node.log('sshd')}")


def start_dockerd(node: NodeLayout) -> None:
    """Start the node's dockerd and wait until its API answers. After a crash (SIGKILL) dockerd,
    which runs without live-restore, first stops the containers it finds still running (each with
    its stop signal, then SIGKILL after its stop timeout, 10 s by default) before it answers."""
    if read_pid(node.pidfile("dockerd")):
        return
    if node.disk_image.exists():
        mount_disk(node)  # never let dockerd write into the host's filesystem instead
    # A killed dockerd leaves its pidfile, and its containerd's (which dies with it): dockerd
    # refuses to start while its pid is taken, and waits forever for a containerd whose pid is
    # still a zombie (its new parent reaps it when it likes) instead of starting a new one.
    node.pidfile("dockerd").unlink(missing_ok=True)
    if read_pid(containerd_pidfile(node)) is None:
        containerd_pidfile(node).unlink(missing_ok=True)
    node.exec_root.mkdir(parents=True, exist_ok=True)
    argv = [
        *nsenter(node), "dockerd", "--experimental",
        "--data-root", str(node.docker_root), "--exec-root", str(node.exec_root),
        "-H", f"unix://{node.docker_sock}", "--pidfile", str(node.pidfile("dockerd")),
        "--containerd-namespace", node.netns, "--containerd-plugins-namespace", f"{node.netns}p",
        # docker0 (172.17.0.1/16), user-defined bridges, iptables NAT/port publishing and
        # ip_forward all live in the node's network namespace: every node can have the same
        # subnets and published ports without touching the host's links or firewall
        "--cgroup-parent", f"/{node.cgroup}", "--exec-opt", "native.cgroupdriver=cgroupfs",
        "--storage-driver", "overlay2",
    ]
    with open(node.log("dockerd"), "ab") as log:
        logged = log.tell()
        proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "PATH": DAEMON_PATH})

    def ready() -> bool:
        if proc.poll() is not None:  # e.g. on a full disk: it cannot create <data-root>/tmp
            with open(node.log("dockerd"), "rb") as log:
                log.seek(logged)
                last = [line for line in log.read().decode(errors="replace").splitlines() if line.strip()][-1:]
            raise LabError(f"{node.name}: dockerd exited with status {proc.returncode}: "
                           f"{last[0][:300] if last else 'no output'}; see {node.log('dockerd')}")
        return docker_ready(node)

    wait_for(ready, 60, f"{node.name}: dockerd did not start; see {node.log('dockerd')}")


def containerd_pidfile(node: NodeLayout) -> Path:
    """dockerd starts and supervises its own containerd, which writes its pid here."""
    return node.exec_root / "containerd" / "containerd.pid"


def docker(node: NodeLayout, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return sh(["docker", "-H", f"unix://{node.docker_sock}", *args], check=check, timeout=timeout)


def docker_ready(node: NodeLayout) -> bool:
    # a restarting dockerd accepts on its socket but answers only once it has restored its containers
    try:
        return node.docker_sock.exists() and docker(node, "version", "--format", "{{.Server.Version}}",
                                                    check=False, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


# -- the node's disk ------------------------------------------------------------------------------

def create_disk(node: NodeLayout, size_gb: int) -> None:
    """A sparse image file with an ext4 filesystem (no blocks reserved for root, so root's writes
    fill it too), mounted on the node's docker data-root. Costs the host only what is written."""
    node.docker_root.mkdir(parents=True, exist_ok=True)
    with open(node.disk_image, "wb") as image:
        image.truncate(size_gb << 30)
    sh(["mkfs.ext4", "-q", "-F", "-m", "0", "-L", node.netns[:16], str(node.disk_image)])
    mount_disk(node)


def mount_disk(node: NodeLayout) -> None:
    if disk_device(node) is None:
        # discard: blocks freed inside (a removed container, the --fill-disk file) are punched
        # out of the image file, so the host gets its space back
        sh(["mount", "-t", "ext4", "-o", "loop,discard", str(node.disk_image), str(node.docker_root)])
    if _mounted(node.mntns, Path("/proc/self/mountinfo").read_text()):
        # nothing propagates into the node's namespace (private): mount the same loop device there
        # too, never a second loop device on the same image
        inside = sh(["nsenter", f"--mount={node.mntns}", "cat", "/proc/self/mountinfo"]).stdout
        if not _mounted(node.docker_root, inside):
            sh(["nsenter", f"--mount={node.mntns}", "mount", "-o", "discard", str(disk_device(node)),
                str(node.docker_root)])


def disk_device(node: NodeLayout) -> str | None:
    """The loop device of `node.disk_image` if it is what is mounted on the docker root."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        source = fields[fields.index("-") + 2]
        if _unescape(fields[4]) == str(node.docker_root) and loop_backing(source) == node.disk_image:
            return source
    return None


def loop_backing(device: str) -> Path | None:
    if not re.fullmatch(r"/dev/loop\d+", device):
        return None
    try:
        return Path(Path(f"/sys/block/{device[5:]}/loop/backing_file").read_text().strip())
    except OSError:
        return None


def release_disk(node: NodeLayout) -> None:
    """After everything under the lab folder is unmounted: detach a loop device still holding the
    image (its autoclear detaches it with the last unmount; this catches one left busy)."""
    proc = sh(["losetup", "-j", str(node.disk_image)], check=False)
    for line in proc.stdout.splitlines():
        sh(["losetup", "-d", line.split(":", 1)[0]], check=False)


def _unescape(field: str) -> str:
    """/proc/self/mountinfo writes space, tab, newline and backslash in paths as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def wait_for(predicate: Callable[[], object], seconds: float, message: str) -> None:
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


def limit_node(node: NodeLayout, cpus: float, memory_mb: int) -> None:
    """The node is as big as it declares, so it can be full: its cgroup parent (dockerd's
    --cgroup-parent, made here before runc would make it) gets a CFS quota of `cpus` and a memory
    limit of `memory_mb`, which all its containers share. runc makes the containers' cgroups under
    it as before (it fills the empty cpuset of a parent made here from the root's). Idempotent:
    run at every power on."""
    for hierarchy in CGROUP_ROOT.iterdir():
        if (hierarchy / "cgroup.procs").exists():
            (hierarchy / node.cgroup).mkdir(exist_ok=True)
    cpu = CGROUP_ROOT / "cpu" / node.cgroup
    period = int((cpu / "cpu.cfs_period_us").read_text())
    (cpu / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
    (CGROUP_ROOT / "memory" / node.cgroup / "memory.limit_in_bytes").write_text(str(memory_mb << 20))


def node_env(node: NodeLayout) -> dict[str, str]:
    """The environment every SSH session on the node gets (its sshd's SetEnv)."""
    env: dict[str, str] = {}
    for line in (node.dir / "sshd_config").read_text().splitlines():
        if line.startswith("SetEnv "):
            env.update(item.split("=", 1) for item in line[len("SetEnv "):].split())  # type: ignore[misc]
    return env


def run_boot_scripts(node: NodeLayout) -> None:
    """What systemd would start at boot (peakpack's QoS guard): every executable in the node's
    boot folder, detached, in its network namespace, with its SSH sessions' environment; like a
    system daemon, outside the node's container cgroup."""
    if not node.boot_dir.is_dir():
        return
    env = node_env(node)
    for script in sorted(node.boot_dir.iterdir()):
        if script.is_file() and os.access(script, os.X_OK):
            with open(node.log("boot"), "ab") as log:
                subprocess.Popen([*nsenter(node), str(script)], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                 start_new_session=True, env=env)


def start_node(node: NodeLayout) -> None:
    """Power on: the BMC reports "on" at once, the node's services come up after (it boots). A
    power-off still under way (its dockerd stopping) finishes first: a node boots from off. On a
    node that is on, it starts what is not running (its daemons check)."""
    if not powered(node):
        try:
            wait_for(lambda: not netns_pids(node), 60, "")
        except LabError:
            kill_all(netns_pids(node))
    node.power_file.write_text("on\n")
    lab = LabLayout.load(node.dir.parents[1])  # the lab's folder holds its nodes' folders
    if lab is not None:
        limit_node(node, lab.cpus, lab.memory_mb)
    try:
        start_dockerd(node)
    finally:
        start_sshd(node)  # a node whose dockerd fails (a full disk) still boots and answers SSH
        run_boot_scripts(node)


def stop_node(node: NodeLayout) -> None:
    """Power loss: the node stops answering at once (its sshd dies first, as its link would go
    down), its containers die (nothing checkpoints them), then its dockerd, which may take a while
    to notice containerd is gone."""
    node.power_file.write_text("off\n")
    sshd = read_pid(node.pidfile("sshd"))
    if sshd:
        kill_all({sshd})
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
    if _mounted(node.mntns, Path("/proc/self/mountinfo").read_text()):  # RAM does not survive a power cut
        sh(["nsenter", f"--mount={node.mntns}", "find", "/dev/shm", "-mindepth", "1", "-delete"], check=False)


def powered(node: NodeLayout) -> bool:
    try:
        return node.power_file.read_text().strip() == "on"
    except OSError:
        return False
