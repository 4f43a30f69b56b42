"""Faults injected into a lab node for real, each undone by its opposite (docs/lab.md, "Faults"):

- partition / heal: the node's link (eth0 in its network namespace) down / up. Nothing reaches the
  node and nothing leaves it (SSH, the Docker API over SSH, rsync between nodes, published ports);
  its BMC is served on the host side, like a real out-of-band BMC, and keeps answering.
- kill-dockerd / start-dockerd: SIGKILL the node's dockerd (its containerd dies with it, the
  containers and their shims run on) / start it again and wait until its API answers.
- fill-disk / free-disk: allocate every free block of the node's own filesystem (the one mounted
  on its docker data-root) / remove that allocation. The host's filesystems are never touched.

Every fault takes well under a second (start-dockerd waits for dockerd, see `node.start_dockerd`)
and is idempotent: injecting it again, or undoing what is not there, changes nothing.
"""

from __future__ import annotations

import errno
import json
import os
import signal
from enum import Enum

from .layout import NodeLayout
from .node import (
    LabError,
    alive,
    containerd_pidfile,
    disk_device,
    powered,
    read_pid,
    sh,
    start_dockerd,
    wait_for,
)

#: the node's one link, a veth whose other end is on the lab's bridge
NODE_LINK = "eth0"
#: below this many free bytes the node's filesystem counts as full
FULL_BYTES = 1 << 20


class Fault(str, Enum):
    PARTITION = "partition"
    HEAL = "heal"
    KILL_DOCKERD = "kill-dockerd"
    START_DOCKERD = "start-dockerd"
    FILL_DISK = "fill-disk"
    FREE_DISK = "free-disk"

    @property
    def flag(self) -> str:
        return f"--{self.value}"


def inject(node: NodeLayout, fault: Fault) -> str:
    """Do `fault` on `node`; returns one line saying what is now true."""
    return {
        Fault.PARTITION: partition, Fault.HEAL: heal,
        Fault.KILL_DOCKERD: kill_dockerd, Fault.START_DOCKERD: restart_dockerd,
        Fault.FILL_DISK: fill_disk, Fault.FREE_DISK: free_disk,
    }[Fault(fault)](node)


# -- network ----------------------------------------------------------------------------------------

def partition(node: NodeLayout) -> str:
    _link(node, "down")
    return f"{node.name}: partitioned ({NODE_LINK} down in {node.netns})"


def heal(node: NodeLayout) -> str:
    _link(node, "up")  # the kernel puts the /24 route back with the link
    return f"{node.name}: network healed ({NODE_LINK} up in {node.netns})"


def partitioned(node: NodeLayout) -> bool:
    """Whether the node's link is down (what `partition` does; a missing namespace counts too)."""
    proc = sh(["ip", "-n", node.netns, "-j", "link", "show", NODE_LINK], check=False)
    if proc.returncode != 0:
        return True
    [link] = json.loads(proc.stdout)
    return "UP" not in link.get("flags", [])


def _link(node: NodeLayout, state: str) -> None:
    if not os.path.exists(f"/var/run/netns/{node.netns}"):
        raise LabError(f"{node.name}: network namespace {node.netns} is gone; recreate the lab "
                       "(`peakpack lab down`, then `peakpack lab up`)")
    sh(["ip", "-n", node.netns, "link", "set", NODE_LINK, state])


# -- dockerd ----------------------------------------------------------------------------------------

def kill_dockerd(node: NodeLayout) -> str:
    """SIGKILL, like a crash: dockerd's containerd (started with a parent-death signal) and
    docker-proxy processes die with it; the container shims and containers run on, orphaned."""
    pid = read_pid(node.pidfile("dockerd"))
    if pid is None:
        node.pidfile("dockerd").unlink(missing_ok=True)
        return f"{node.name}: dockerd is not running"
    containerd = read_pid(containerd_pidfile(node))
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    wait_for(lambda: not alive(pid) and (containerd is None or not alive(containerd)), 10,
             f"{node.name}: dockerd (pid {pid}) or its containerd outlived SIGKILL for 10 s")
    node.pidfile("dockerd").unlink(missing_ok=True)  # its pid may be reused; dockerd left the file
    return f"{node.name}: dockerd killed (pid {pid}); containers run on without it"


def restart_dockerd(node: NodeLayout) -> str:
    if not powered(node):
        raise LabError(f"{node.name}: powered off; power it on through its BMC (dockerd starts with it)")
    was = read_pid(node.pidfile("dockerd"))
    start_dockerd(node)
    return (
        f"{node.name}: dockerd {'was already running' if was else 'started'} (pid {read_pid(node.pidfile('dockerd'))})"
    )


# -- disk -------------------------------------------------------------------------------------------

def fill_disk(node: NodeLayout) -> str:
    """fallocate every free block of the node's filesystem into `node.fill_file`: nothing is
    written (ext4 marks the blocks allocated), so it takes milliseconds and costs the host nothing."""
    _own_disk(node)
    fd = os.open(node.fill_file, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        block = os.statvfs(node.docker_root).f_frsize
        chunk = _free(node) // block * block
        while chunk >= block:
            try:
                os.posix_fallocate(fd, os.fstat(fd).st_size, chunk)
                chunk = _free(node) // block * block  # what is left: normally nothing
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                # the extents' metadata takes a few blocks too: ask for less until nothing fits
                chunk = min(chunk // 2, _free(node)) // block * block
    finally:
        os.close(fd)
    return f"{node.name}: disk full ({_free(node)} bytes free on {node.docker_root})"


def free_disk(node: NodeLayout) -> str:
    node.fill_file.unlink(missing_ok=True)
    free = disk_free_bytes(node)
    return f"{node.name}: disk freed ({'?' if free is None else f'{free / 2**30:.1f} GiB'} free on {node.docker_root})"


def disk_free_bytes(node: NodeLayout) -> int | None:
    """Free bytes of the node's own filesystem; None when it has none (a lab from before)."""
    return _free(node) if disk_device(node) is not None else None


def _free(node: NodeLayout) -> int:
    st = os.statvfs(node.docker_root)
    return st.f_bavail * st.f_frsize


def _own_disk(node: NodeLayout) -> None:
    """Refuse unless the docker root is the node's loop-mounted image: filling it must never fill
    the host's filesystem."""
    device = disk_device(node)
    if device is None or os.stat(device).st_rdev != os.stat(node.docker_root).st_dev:
        raise LabError(f"{node.name}: {node.docker_root} is not the node's own filesystem (a lab from before "
                       "nodes had disks?); recreate the lab: `peakpack lab down`, then `peakpack lab up`")


__all__ = [
    "FULL_BYTES",
    "NODE_LINK",
    "Fault",
    "disk_free_bytes",
    "fill_disk",
    "free_disk",
    "heal",
    "inject",
    "kill_dockerd",
    "partition",
    "partitioned",
    "restart_dockerd",
]
