"""What the kernel and the engine say, parsed (pure): PSI, schedstat, cgroup and mount tables, CPU
lists, labels, holds, CPU ceilings."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from . import PERIOD_US, PRIORITY_LABEL, QOS_CLASSES, QOS_LABEL


def parse_psi(text: str | None) -> dict[str, int] | None:
    """A PSI file (`some avg10=.. avg60=.. avg300=.. total=US` and, for memory, `full ...`) ->
    {'some': total µs, 'full': total µs}; None for no file or no PSI (EOPNOTSUPP reads as None)."""
    if not text:
        return None
    out: dict[str, int] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        for item in rest.split():
            if item.startswith("total="):
                try:
                    out[kind] = int(item[len("total="):])
                except ValueError:
                    return None
    return out or None


def schedstat_wait_ns(text: str | None) -> int | None:
    """/proc/TID/schedstat (`run_ns wait_ns timeslices`) -> the time the thread waited on a run
    queue, ready but not running."""
    try:
        return int((text or "").split()[1])
    except (IndexError, ValueError):
        return None


def wait_delta(before: dict[str, int], now: dict[str, int]) -> int:
    """Run-queue wait added between two readings of a container's threads (tid -> wait ns): a
    thread born since counts whole (it waited only since), one that exited took its wait along
    (lost: at most one interval of a short-lived thread), a tid reused by a newer thread whose
    counter is lower counts from zero."""
    total = 0
    for tid, wait in now.items():
        old = before.get(tid, 0)
        total += wait - old if wait >= old else wait
    return total


def parse_kv(text: str | None) -> dict[str, int]:
    """`key value` lines (cpu.stat, memory.stat) -> {key: int}."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


@dataclass(frozen=True)
class Mounts:
    """Where each cgroup v1 controller and the cgroup2 hierarchy are mounted."""

    v1: dict[str, str]
    v2: str | None


def parse_mountinfo(text: str) -> Mounts:
    """/proc/self/mountinfo -> Mounts (combined `cpu,cpuacct` mounts and pure v2 hosts included).
    A hybrid host mounts cgroup2 at /sys/fs/cgroup/unified: runc puts containers there too, so
    their PSI files are readable although the controllers are v1's."""
    v1: dict[str, str] = {}
    v2 = None
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3 or fields[3] != "/":
            continue
        point = fields[4].replace("\\040", " ")
        if rfields[0] == "cgroup2" and v2 is None:
            v2 = point
        elif rfields[0] == "cgroup":
            for opt in rfields[2].split(","):
                if opt in ("cpu", "cpuacct", "memory", "cpuset"):
                    v1.setdefault(opt, point)
    return Mounts(v1, v2)


def parse_proc_cgroup(text: str) -> tuple[dict[str, str], str | None]:
    """/proc/PID/cgroup -> ({v1 controller: path}, the cgroup2 path or None)."""
    v1: dict[str, str] = {}
    v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2 = path
        for c in controllers.split(","):
            if c:
                v1[c] = path
    return v1, v2


def parse_cpus(text: str | None) -> list[int]:
    """A cpuset list ("0-2,5") -> [0, 1, 2, 5]."""
    cpus: list[int] = []
    for part in (text or "").strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpus(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def be_cpus(node_cpus: list[int], allowed: float) -> list[int] | None:
    """The CPUs best-effort containers are kept on while capped: as many as the cores they are
    allowed (at least one), and never all of the node's, so a latency-sensitive container that wakes
    finds a CPU that no best-effort one holds; None when the node has one CPU (nothing to keep free)."""
    if len(node_cpus) < 2:
        return None
    k = min(len(node_cpus) - 1, max(1, math.ceil(allowed - 1e-9)))
    return sorted(node_cpus)[-k:]


def qos_class(labels: dict[str, str]) -> tuple[str, str | None]:
    """The container's class from its labels, and what is wrong with the label (then it is
    latency-sensitive: a typo must never expose a container to the guard)."""
    value = labels.get(QOS_LABEL, "ls")
    if value in QOS_CLASSES:
        return value, None
    return "ls", f"label {QOS_LABEL}={value!r}: use ls or be; treated as ls"


def priority_of(labels: dict[str, str]) -> int:
    """`peakpack.priority` (lower: stopped first on memory pressure); 0 when absent or not a number."""
    try:
        return int(labels.get(PRIORITY_LABEL, "0"))
    except ValueError:
        return 0


def hold_active(text: str | None, mtime: float, now: float, ttl: float) -> bool:
    """A migration's hold (`holds/NAME`, JSON {"until": epoch s, "migration": id}) is a lease: it
    ends at `until`, or `ttl` after it was written when it names none, so a controller that died
    mid-migration cannot shield a container forever."""
    try:
        until = float(json.loads(text or "{}").get("until"))
    except (ValueError, TypeError, AttributeError):
        until = mtime + ttl
    return now < until


def ceiling_us(host_config: dict[str, Any]) -> int | None:
    """The CPU quota (per PERIOD_US) the container was given by `docker run/update --cpus` or
    `--cpu-quota`: the guard never lets it exceed that, and gives it back when it lifts its own."""
    if host_config.get("NanoCpus"):
        return int(host_config["NanoCpus"] * PERIOD_US // 10**9)
    if (host_config.get("CpuQuota") or 0) > 0:
        return int(host_config["CpuQuota"] * PERIOD_US // (host_config.get("CpuPeriod") or PERIOD_US))
    return None
