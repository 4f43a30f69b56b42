"""The node's files: reading and writing cgroupfs and /proc, one container's cgroup (`Cgroup`), the
node's own (`NodeScope`), and whether PSI can be read."""

from __future__ import annotations

import errno
import hashlib
import os

from peakpack.orchestrator.domain.guard import GuardSettings

from . import PERIOD_US
from .parse import Mounts, format_cpus, parse_cpus, parse_kv, parse_psi, schedstat_wait_ns


def read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def read_int(path: str) -> int | None:
    text = read(path)
    try:
        return int(text.split()[0]) if text else None
    except ValueError:
        return None


def write(path: str, value: object) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def own_file() -> str:
    """The archive this guard runs from (`guard.pyz`: the first file up from this module's path,
    which lies inside it); outside an archive, this module's own file."""
    path = os.path.abspath(__file__)
    while not os.path.isfile(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def file_digest(path: str) -> str | None:
    """What identifies a build of the guard or a guard.json: the first 16 hex digits of its sha256."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return None


class Cgroup:
    """One container's cgroup in every hierarchy that has it: counters and the knobs the guard
    sets (v1 controller files when the container has them, else v2's)."""

    def __init__(self, mounts: Mounts, v1: dict[str, str], v2: str | None, psi: bool = True) -> None:
        def v1_dir(controller: str) -> str | None:
            return mounts.v1[controller] + v1[controller] if controller in v1 and controller in mounts.v1 else None

        self.cpu, self.cpuacct, self.memory = v1_dir("cpu"), v1_dir("cpuacct"), v1_dir("memory")
        self.cpuset = v1_dir("cpuset")
        self.v2 = mounts.v2 + v2 if (mounts.v2 is not None and v2 is not None) else None
        self.rel = v1.get("cpu") or v2 or ""  # its path inside its hierarchy: what node scoping compares
        self.with_psi = psi

    @property
    def key(self) -> str:
        return self.cpu or self.v2 or "?"

    def cpu_ns(self) -> int | None:
        if self.cpuacct:
            return read_int(self.cpuacct + "/cpuacct.usage")
        usec = parse_kv(read(f"{self.v2}/cpu.stat")).get("usage_usec") if self.v2 else None
        return None if usec is None else usec * 1000

    def nr_throttled(self) -> int:
        return parse_kv(read((self.cpu or self.v2 or "") + "/cpu.stat")).get("nr_throttled", 0)

    def memory_bytes(self) -> tuple[int | None, int | None, int]:
        """(limit or None for unlimited, usage, inactive file cache)."""
        if self.memory:
            limit = read_int(self.memory + "/memory.limit_in_bytes")
            stat = parse_kv(read(self.memory + "/memory.stat"))
            return (None if limit is None or limit >= 1 << 62 else limit,
                    read_int(self.memory + "/memory.usage_in_bytes"), stat.get("total_inactive_file", 0))
        if self.v2 and os.path.exists(self.v2 + "/memory.current"):
            limit_text = (read(self.v2 + "/memory.max") or "max").strip()
            stat = parse_kv(read(self.v2 + "/memory.stat"))
            return (None if limit_text == "max" else int(limit_text), read_int(self.v2 + "/memory.current"),
                    stat.get("inactive_file", 0))
        return None, None, 0

    def psi(self, resource: str) -> dict[str, int] | None:
        return parse_psi(read(f"{self.v2}/{resource}.pressure")) if self.v2 and self.with_psi else None

    def thread_waits(self) -> dict[str, int]:
        """tid -> run-queue wait (ns) of every thread of the cgroup now."""
        listing = (read(self.cpu + "/tasks") if self.cpu else read(f"{self.v2}/cgroup.threads") if self.v2 else "")
        out = {}
        for tid in (listing or "").split():
            wait = schedstat_wait_ns(read(f"/proc/{tid}/schedstat"))
            if wait is not None:
                out[tid] = wait
        return out

    def pids(self) -> list[str]:
        where = self.cpu or self.v2
        return (read(where + "/cgroup.procs") or "").split() if where else []

    def _v2_cpu(self) -> bool:
        return self.v2 is not None and os.path.exists(f"{self.v2}/cpu.max")

    def quota_us(self) -> int | None:
        """Its own CFS quota per PERIOD_US (None: unlimited)."""
        if self.cpu:
            quota = read_int(self.cpu + "/cpu.cfs_quota_us")
            period = read_int(self.cpu + "/cpu.cfs_period_us") or PERIOD_US
            return None if quota is None or quota < 0 else quota * PERIOD_US // period
        if self._v2_cpu():
            limit, _, span = (read(f"{self.v2}/cpu.max") or "max").strip().partition(" ")
            return None if limit == "max" else int(limit) * PERIOD_US // int(span or PERIOD_US)
        return None

    def set_quota_us(self, quota: int | None) -> None:
        if self.cpu:
            if read_int(self.cpu + "/cpu.cfs_period_us") != PERIOD_US:
                write(self.cpu + "/cpu.cfs_period_us", PERIOD_US)
            write(self.cpu + "/cpu.cfs_quota_us", -1 if quota is None else max(1000, quota))
        elif self._v2_cpu():
            write(f"{self.v2}/cpu.max", f"{'max' if quota is None else max(1000, quota)} {PERIOD_US}")
        else:
            raise OSError(errno.ENOENT, "no cpu controller for this cgroup")

    def _cpuset_file(self) -> str | None:
        if self.cpuset:
            return self.cpuset + "/cpuset.cpus"
        return f"{self.v2}/cpuset.cpus" if self.v2 and os.path.exists(f"{self.v2}/cpuset.cpus") else None

    def cpus(self) -> list[int]:
        """The CPUs it may run on (its effective set when its own is inherited, as in v2)."""
        path = self._cpuset_file()
        if path is None:
            return []
        return parse_cpus(read(path)) or parse_cpus(read(path.replace("cpuset.cpus", "cpuset.cpus.effective")))

    def set_cpus(self, cpus: list[int]) -> None:
        path = self._cpuset_file()
        if path is None:
            raise OSError(errno.ENOENT, "no cpuset controller for this cgroup")
        write(path, format_cpus(cpus))

    def lowest_weight(self) -> bool:
        """v1 cpu.shares 2 / v2 cpu.weight 1 (the lowest each allows); True when it had to be written
        (a new cgroup: the container started, restarted or was restored)."""
        if self.cpu:
            path, lowest = self.cpu + "/cpu.shares", 2
        elif self._v2_cpu():
            path, lowest = f"{self.v2}/cpu.weight", 1
        else:
            return False
        if read_int(path) == lowest:
            return False
        write(path, lowest)
        return True


class NodeScope:
    """What the node is: a cgroup parent (a lab node, its containers' --cgroup-parent) or the whole
    host (a real node: /proc/stat, /proc/meminfo, /proc/pressure)."""

    def __init__(self, mounts: Mounts, parent: str, s: GuardSettings, psi: bool) -> None:
        self.host = parent in ("host", "/", "")
        self.path = None if self.host else "/" + parent.strip("/")
        self.cg = None if self.path is None else Cgroup(mounts, {c: self.path for c in mounts.v1}, self.path, psi)
        self.with_psi = psi
        self.capacity = s.cpus or self._cpus()
        self.memory_limit = int(s.memory_mb * 2**20) if s.memory_mb else None

    def _cpus(self) -> float:
        quota = self.cg.quota_us() if self.cg else None
        return quota / PERIOD_US if quota else float(len(os.sched_getaffinity(0)))

    def cpu_list(self) -> list[int]:
        """The CPUs the node's containers may run on: its parent's cpuset, or the host's."""
        return (self.cg.cpus() if self.cg else []) or sorted(os.sched_getaffinity(0))

    def contains(self, cg: Cgroup) -> bool:
        return self.path is None or cg.rel.startswith(self.path + "/")

    def cpu_ns(self) -> int | None:
        if self.cg:
            return self.cg.cpu_ns()
        fields = (read("/proc/stat") or "cpu 0 0 0 0 0").splitlines()[0].split()[1:]
        busy = sum(int(x) for x in fields[:8]) - int(fields[3]) - int(fields[4])  # minus idle, iowait
        return busy * 10**9 // os.sysconf("SC_CLK_TCK")

    def memory(self) -> tuple[int, int]:
        """(limit, available) in bytes: the kubelet's `memory.available` (limit minus the working set)."""
        if self.cg:
            limit, usage, inactive = self.cg.memory_bytes()
            limit = self.memory_limit or limit
            if limit and usage is not None:
                return limit, limit - max(0, usage - inactive)
        info = {}
        for line in (read("/proc/meminfo") or "").splitlines():
            name, _, rest = line.partition(":")
            if rest.split():
                info[name] = int(rest.split()[0]) * 1024
        limit = self.memory_limit or info.get("MemTotal", 0)
        return limit, min(limit, info.get("MemAvailable", 0))

    def memory_full_us(self) -> int | None:
        psi = self.cg.psi("memory") if self.cg else parse_psi(read("/proc/pressure/memory")) if self.with_psi else None
        return None if psi is None else psi.get("full")


def psi_off_reason(no_psi: bool) -> str | None:
    """Why PSI cannot be used here (None: it can)."""
    if no_psi:
        return "--no-psi given"
    try:
        with open("/proc/pressure/cpu") as f:
            f.read()
    except OSError as exc:
        return (f"/proc/pressure/cpu: {exc.strerror} (a kernel without PSI, or psi=0, or "
                "CONFIG_PSI_DEFAULT_DISABLED without psi=1)")
    return None
