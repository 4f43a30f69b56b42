#!/usr/bin/env python3
"""peakpack's QoS guard: one per node, checking every second or two, and working on when the head
node or the network is gone. peakpack copies this one file to each node over SSH and runs it as
a systemd unit (in the lab: a detached process its boot hook restarts at every power on); it needs
nothing but Python >= 3.9's standard library, the local Docker engine's socket, cgroupfs and /proc.

Containers are latency-sensitive (label `peakpack.qos=ls`, the default) or best-effort
(`peakpack.qos=be`). The guard

- gives best-effort containers the lowest CPU weight and makes them the OOM killer's first choice
  as soon as it sees them (so the kernel favours the others with no loop running);
- caps best-effort CPU, Koordinator-style, once the node's CPU use passes a watermark or a
  latency-sensitive container stalls (PSI cpu `some`, else run-queue wait) while best-effort
  containers are busy, for `breaches_to_act` checks in a row: they may use
  `capacity x be_share - latency-sensitive use` (at least `capacity x be_floor`), written as each
  container's own CFS quota (never `docker update`: nothing travels with a migrated container's
  HostConfig) and, on a node with more than one CPU, kept off at least one of its CPUs
  (Koordinator's cpuset policy: a latency-sensitive container that wakes finds a CPU no
  best-effort one holds); the cap comes back one step per clear check after `clears_to_restore` clear ones,
  and is lifted once best-effort no longer presses against it or no latency-sensitive container
  is left;
- stops the lowest-priority, largest best-effort container when the node's available memory falls
  under a watermark, or its memory.pressure `full` stays up (never a latency-sensitive one);
- never touches a container a migration holds (`STATE_DIR/holds/NAME`, written by the migrator);
- writes every action as one JSON line to `STATE_DIR/events.jsonl` (the controller reads them at
  its next observation) and its current view to `STATE_DIR/state.json`.

The decisions (`CpuSuppress`, `MemoryGuard`, `split_quota`, `choose_victims`, the parsers) are
pure functions of what was sampled, tested without a node; the classes after them read and write
the node. Commands: run (foreground, for systemd), start (detached), stop, status, report.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import fcntl
import hashlib
import http.client
import json
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: bump when events.jsonl, state.json or `report` change shape
PROTOCOL = 1
DEFAULT_STATE_DIR = "/var/lib/peakpack/qos"
PERIOD_US = 100_000
QOS_LABEL = "peakpack.qos"
PRIORITY_LABEL = "peakpack.priority"
QOS_CLASSES = ("ls", "be")


# -- settings -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """What the guard is told (`STATE_DIR/guard.json`, written by peakpack from the inventory's
    `[qos]`; re-read when it changes). Shares are of the node's capacity or of the interval."""

    interval_seconds: float = 1.0
    cpu_watermark: float = 0.80         # node CPU use above this share of capacity is a breach
    stall_watermark: float = 0.10       # a latency-sensitive container stalled this share of the interval
    be_share: float = 0.65              # best-effort may use capacity x this - latency-sensitive use ...
    be_floor: float = 0.10              # ... and never less than capacity x this
    cpu_step: float = 0.10              # the cap moves by capacity x this per check
    breaches_to_act: int = 2            # checks in a row before acting (Crane's avoidance)
    clears_to_restore: int = 2          # clear checks in a row before giving back
    memory_watermark: float = 0.10      # available memory under this share of the limit: stop best-effort
    memory_full_watermark: float = 0.10  # memory.pressure `full` above this for breaches_to_act checks: same
    # guard.json only (the inventory does not set these)
    stall_steps: int = 1                # on stall, the cap goes at most this many steps under the formula
    be_busy_share: float = 0.05         # best-effort using less than capacity x this is not blamed for stall
    memory_release: float = 0.02        # stop best-effort until the watermark + this is available
    evict_cooldown_seconds: float = 3.0
    hold_ttl_seconds: float = 900.0     # a hold without `until` lasts this long after it was written
    log_max_bytes: int = 4 << 20
    cpus: float | None = None        # the node's declared CPUs (None: its parent's quota, or the host's)
    memory_mb: float | None = None   # its declared memory (None: its parent's limit, or MemTotal)
    node: str | None = None          # its inventory name

    @property
    def interval(self) -> float:
        return self.interval_seconds


#: (lowest, highest) for each number a guard.json may set
RANGES: dict[str, tuple[float, float]] = {
    "interval_seconds": (0.2, 60), "cpu_watermark": (0.05, 1.0), "stall_watermark": (0.001, 1.0),
    "be_share": (0.01, 1.0), "be_floor": (0.01, 1.0), "cpu_step": (0.01, 1.0), "breaches_to_act": (1, 60),
    "clears_to_restore": (1, 600), "memory_watermark": (0.0, 0.9), "memory_full_watermark": (0.001, 1.0),
    "stall_steps": (0, 100), "be_busy_share": (0.0, 1.0), "memory_release": (0.0, 0.5),
    "evict_cooldown_seconds": (0.0, 600), "hold_ttl_seconds": (1, 86400), "log_max_bytes": (4096, 1 << 30),
    "cpus": (0.01, 100000), "memory_mb": (1, 1 << 40),
}
INTEGERS = ("breaches_to_act", "clears_to_restore", "stall_steps", "log_max_bytes")


def parse_settings(given: Any, where: str) -> tuple[Settings, list[str]]:
    """guard.json's content -> the settings and one line per key it refuses (that key keeps its
    default): an unknown key, or a value out of range, each naming the key and the fix."""
    if not isinstance(given, dict):
        return Settings(), [f"{where}: not a JSON object; write {{\"key\": value, ...}}, defaults in use"]
    known = {f.name for f in dataclasses.fields(Settings)}
    values: dict[str, Any] = {}
    errors = []
    for key, value in given.items():
        if key not in known:
            errors.append(f"{where}: unknown key {key!r}; known keys: {', '.join(sorted(known))}")
        elif key == "node":
            if isinstance(value, str):
                values[key] = value
            else:
                errors.append(f"{where}: node = {value!r}; give the node's name as a string")
        elif value is None and key in ("cpus", "memory_mb"):
            continue
        elif (not isinstance(value, (int, float)) or isinstance(value, bool)
              or not RANGES[key][0] <= value <= RANGES[key][1]
              or (key in INTEGERS and value != int(value))):
            lo, hi = RANGES[key]
            kind = "a whole number" if key in INTEGERS else "a number"
            errors.append(f"{where}: {key} = {value!r}; use {kind} in {lo:g}..{hi:g} "
                          f"(default {getattr(Settings(), key)!r} in use)")
        else:
            values[key] = int(value) if key in INTEGERS else float(value)
    return Settings(**values), errors


# -- parsing what the kernel and the engine say (pure) ---------------------------------------------

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


# -- deciding (pure) ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Seen:
    """One container as sampled over the last interval."""

    name: str
    qos: str                   # "ls" or "be"
    cores: float = 0.0
    stall: float | None = None  # share of the interval it was ready but not running
    stall_source: str = "psi"  # psi (cpu.pressure some) or wait (run-queue wait)
    throttled: bool = False    # its own quota ran out during the interval
    quota_us: int | None = None    # its quota now (None: unlimited)
    ceiling_us: int | None = None  # the quota docker gave it (HostConfig)
    working_set: int = 0       # bytes: usage - inactive file cache
    priority: int = 0
    held: bool = False         # a migration holds it: never touched


@dataclass(frozen=True)
class Decision:
    """One action: an event kind, why, the facts it was decided on, and what to write."""

    kind: str
    reason: str
    facts: dict[str, Any] = field(default_factory=dict)
    quotas: dict[str, int | None] = field(default_factory=dict)  # cpu: container -> quota (None: lifted)
    cpus: list[int] | None = None  # cpu: the CPUs best-effort is kept on (None: each its own set again)
    victims: tuple[str, ...] = ()  # memory: containers to stop


def split_quota(be: list[Seen], allowed: float) -> dict[str, int]:
    """Water-filling: each best-effort container gets what it used (+20%), a throttled one counts
    as wanting everything, and none gets less than an even share of what is left; every quota
    within its own ceiling. Quotas in µs per PERIOD_US."""
    def want(c: Seen) -> float:
        w = float("inf") if c.throttled else c.cores * 1.2 + 0.02
        return w if c.ceiling_us is None else min(w, c.ceiling_us / PERIOD_US)

    out: dict[str, int] = {}
    left = allowed
    ordered = sorted(be, key=lambda c: (want(c), c.name))
    for i, c in enumerate(ordered):
        give = left if i == len(ordered) - 1 else min(want(c), left / (len(ordered) - i))
        quota = int(max(give, 0.01) * PERIOD_US)
        out[c.name] = quota if c.ceiling_us is None else min(quota, c.ceiling_us)
        left -= give
    return out


@dataclass
class CpuSuppress:
    """Koordinator's best-effort CPU suppress with Crane's avoidance hysteresis, as a state
    machine over checks. `allowed` is the best-effort cores allowed now (None: not capped).

    Stall caused by something else (other latency-sensitive containers, daemons, another lab node
    on the same cores) must not starve best-effort: a stall is blamed on best-effort only while it
    uses CPU, and a stall that persists under the cap tightens it by at most `stall_steps` steps
    under the formula until a clear check (Koordinator itself follows usage only)."""

    allowed: float | None = None
    breaches: int = 0
    clears: int = 0
    first_breach_ts: float = 0.0
    below: int = 0  # stall-driven steps taken under the formula since the last clear check

    def step(self, seen: list[Seen], node_cores: float, capacity: float, s: Settings, now: float,
             node_cpus: Sequence[int] = ()) -> Decision | None:
        """One check. `node_cpus`: the CPUs the node's containers may run on (its cpuset)."""
        ls = [c for c in seen if c.qos == "ls"]
        be = [c for c in seen if c.qos == "be" and not c.held]
        # a held best-effort container keeps its CPU: it counts as latency-sensitive use
        ls_used = sum(c.cores for c in seen if c.qos == "ls" or c.held)
        be_used = sum(c.cores for c in be)
        stalled = max(ls, key=lambda c: c.stall or 0.0, default=None)
        stall = (stalled.stall or 0.0) if stalled else 0.0
        busy = be_used > capacity * s.be_busy_share
        reasons = []
        if node_cores > s.cpu_watermark * capacity:
            reasons.append(f"node CPU {node_cores:.2f} > {s.cpu_watermark:.0%} of {capacity:g}")
        stall_breach = stall > s.stall_watermark and busy
        if stall_breach and stalled is not None:
            reasons.append(f"{stalled.name} stalled {stall:.0%} ({stalled.stall_source})")
        breach = bool(reasons) and bool(be) and bool(ls)  # no latency-sensitive container: nothing to protect
        if breach:
            if self.breaches == 0:
                self.first_breach_ts = now
            self.breaches, self.clears = self.breaches + 1, 0
        else:
            self.breaches, self.clears, self.below = 0, self.clears + 1, 0
        target = max(capacity * s.be_share - ls_used, capacity * s.be_floor)
        step = capacity * s.cpu_step
        before = self.allowed
        # best-effort presses against the cap when its quota runs out, it uses nearly all of it, or
        # it waits for CPU (kept on fewer CPUs, it may use less than its quota and still want more)
        pressing = any(c.throttled and (c.ceiling_us is None or (c.quota_us or 0) < c.ceiling_us) for c in be) \
            or be_used > (self.allowed or 0.0) - step or any((c.stall or 0.0) > s.stall_watermark for c in be)
        note = ""
        if not be:
            self.allowed = None
        elif breach and self.breaches >= s.breaches_to_act:
            if self.allowed is None:
                self.allowed, self.below = target, 0
            elif stall_breach and self.below < s.stall_steps:
                self.allowed = max(capacity * s.be_floor, min(target, self.allowed) - step)
                self.below += 1
            else:
                if stall_breach:
                    note = f"; already {self.below} step(s) under the formula: not tightening further"
                self.allowed = min(target, self.allowed)
        elif self.allowed is not None and self.clears >= s.clears_to_restore:
            if not pressing or not ls:  # nothing to protect, or best-effort does not use its cap
                self.allowed = None
            else:
                self.allowed = min(target, self.allowed + step)
        elif self.allowed is not None:
            self.allowed = min(self.allowed, target)  # latency-sensitive use grew: the cap follows at once
        facts: dict[str, Any] = {"node_cores": round(node_cores, 3), "ls_cores": round(ls_used, 3),
                                 "be_cores": round(be_used, 3), "ls_stall": round(stall, 3), "capacity": capacity}
        if self.allowed is None:
            if before is None:
                return None
            why = "no best-effort container left" if not be else \
                "no latency-sensitive container left" if not ls else "best-effort no longer presses against its cap"
            return Decision("cpu_restore", why, facts, {c.name: c.ceiling_us for c in be})
        now_us = {c.name: c.quota_us for c in be}
        skip = max(1000, int(0.02 * capacity * PERIOD_US))  # Koordinator skips changes under 1% of the node
        changed = {n: q for n, q in split_quota(be, self.allowed).items()
                   if before is None or now_us[n] is None or abs(now_us[n] - q) >= skip}  # type: ignore[operator]
        facts["allowed_cores"] = round(self.allowed, 3)
        cpus = be_cpus(list(node_cpus), self.allowed)
        if before is None:
            facts["first_breach_ts"] = round(self.first_breach_ts, 3)
            return Decision("cpu_suppress", "; ".join(reasons), facts, dict(changed), cpus)
        if not changed:
            return None
        why = "; ".join(reasons) + note if breach else \
            "clear: giving back" if self.allowed > before else "latency-sensitive use grew: the cap follows"
        return Decision("cpu_adjust", why, facts, dict(changed), cpus)


def choose_victims(be: list[Seen], need: int) -> tuple[str, ...]:
    """Best-effort containers to stop until `need` bytes are freed: lowest priority first, then
    the largest; at least one."""
    chosen: list[str] = []
    freed = 0
    for c in sorted(be, key=lambda c: (c.priority, -c.working_set, c.name)):
        if chosen and freed >= need:
            break
        chosen.append(c.name)
        freed += c.working_set
    return tuple(chosen)


@dataclass
class MemoryGuard:
    """The kubelet's `memory.available` eviction, with PSI `full` as the second trigger: stop
    best-effort containers before the kernel's OOM killer picks anyone."""

    breaches: int = 0
    cooldown_until: float = 0.0

    def step(self, seen: list[Seen], limit: int, available: int, full: float, s: Settings,
             now: float) -> Decision | None:
        low = limit > 0 and available < s.memory_watermark * limit
        self.breaches = self.breaches + 1 if full > s.memory_full_watermark else 0
        if not (low or self.breaches >= s.breaches_to_act) or now < self.cooldown_until:
            return None
        self.cooldown_until = now + s.evict_cooldown_seconds
        reason = (f"available {available >> 20} MiB < {s.memory_watermark:.0%} of {limit >> 20} MiB" if low
                  else f"memory.pressure full {full:.0%} for {self.breaches} checks")
        facts = {"available_mb": available >> 20, "limit_mb": limit >> 20, "memory_full": round(full, 3)}
        be = [c for c in seen if c.qos == "be" and not c.held]
        if not be:
            return Decision("mem_no_victim", reason + "; no best-effort container to stop", facts)
        need = int((s.memory_watermark + s.memory_release) * limit) - available
        return Decision("mem_evict", reason, facts, victims=choose_victims(be, need))


# -- the node's files ------------------------------------------------------------------------------

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


def file_digest(path: str) -> str | None:
    """What identifies a build of this file or a guard.json: the first 16 hex digits of its sha256."""
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

    def __init__(self, mounts: Mounts, parent: str, s: Settings, psi: bool) -> None:
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


# -- the Docker engine over its unix socket -------------------------------------------------------

class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock


class Engine:
    """The node's own engine only: the guard needs nothing from the network."""

    def __init__(self, docker_host: str) -> None:
        if not docker_host.startswith("unix://"):
            raise SystemExit(f"DOCKER_HOST: {docker_host!r} is not unix://PATH; the guard talks to the local engine")
        self.path = docker_host[len("unix://"):]

    def call(self, method: str, url: str, timeout: float = 10) -> Any:
        conn = _UnixConnection(self.path, timeout)
        try:
            conn.request(method, url, headers={"Host": "docker"})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status >= 300:
                raise OSError(f"{method} {url}: {resp.status} {body[:200].decode(errors='replace').strip()}")
            return json.loads(body) if body.strip() else None
        finally:
            conn.close()

    def running(self) -> list[dict[str, Any]]:
        return self.call("GET", "/containers/json")

    def inspect(self, cid: str) -> dict[str, Any]:
        return self.call("GET", f"/containers/{cid}/json")

    def stop(self, cid: str) -> None:
        """At once (t=0): a `--restart always` container stays stopped, until the controller starts it."""
        self.call("POST", f"/containers/{cid}/stop?t=0", timeout=30)


# -- events and state -----------------------------------------------------------------------------

class EventLog:
    """Append-only JSON lines, each written whole in one write(): a reader never sees half a line.
    `seq` grows per node and survives restarts and rotation (`events.jsonl.1`); `log` is a random
    id kept in `log.id`, so a wiped state folder (seq from 1 again) is a new log to the controller."""

    def __init__(self, state_dir: str, node: str, max_bytes: int) -> None:
        self.path = os.path.join(state_dir, "events.jsonl")
        self.node, self.max_bytes = node, max_bytes
        self.seq = max(last_seq(self.path), last_seq(self.path + ".1"))
        id_path = os.path.join(state_dir, "log.id")
        self.log_id = (read(id_path) or "").strip()
        if not self.log_id:
            self.log_id = os.urandom(6).hex()
            write_atomic(id_path, self.log_id + "\n")

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        event = {"seq": self.seq, "ts": round(time.time(), 3), "node": self.node, "log": self.log_id, "kind": kind,
                 **fields}
        line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        try:
            if os.path.getsize(self.path) + len(line) > self.max_bytes:
                os.replace(self.path, self.path + ".1")
        except OSError:
            pass
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return event


def last_seq(path: str) -> int:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["seq"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def events_after(state_dir: str, after: int) -> tuple[list[dict[str, Any]], bool]:
    """Events with seq > `after`, oldest first, and whether some in between were rotated away."""
    base = os.path.join(state_dir, "events.jsonl")
    found = []
    for path in (base + ".1", base):
        for line in (read(path) or "").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("seq"), int) and event["seq"] > after:
                found.append(event)
    lost = bool(found) and found[0]["seq"] > after + 1
    return found, lost


# -- the guard ------------------------------------------------------------------------------------

class Tracked:
    """A running container followed between checks: the counters of the previous check."""

    def __init__(self, cid: str, name: str, qos: str, priority: int, pid: int, cg: Cgroup,
                 ceiling: int | None) -> None:
        self.id, self.name, self.qos, self.priority, self.pid, self.cg = cid, name, qos, priority, pid, cg
        self.ceiling = ceiling
        self.cpu_ns = cg.cpu_ns()
        self.psi_cpu = cg.psi("cpu")
        self.waits: dict[str, int] = cg.thread_waits() if qos == "ls" and self.psi_cpu is None else {}
        self.throttled = cg.nr_throttled()
        self.oom_adjusted: set = set()
        self.seen = Seen(name, qos, quota_us=cg.quota_us(), ceiling_us=ceiling, priority=priority)
        #: its own CPUs (Docker's, or peakpack's pinning): given back when the cap is lifted
        self.own_cpus = cg.cpus()
        self.kept_on: list[int] | None = None  # the CPUs the guard keeps it on now

    def sample(self, dt: float, held: bool, with_memory: bool) -> Seen:
        cpu = self.cg.cpu_ns()
        cores = max(0.0, (cpu - self.cpu_ns) / 1e9 / dt) if cpu is not None and self.cpu_ns is not None else 0.0
        self.cpu_ns = cpu
        psi = self.cg.psi("cpu")
        stall, source = None, "psi"
        if psi is not None and self.psi_cpu is not None:
            stall = max(0.0, (psi["some"] - self.psi_cpu["some"]) / 1e6 / dt)
        elif self.qos == "ls":  # no PSI for this cgroup: its threads' run-queue wait
            waits = self.cg.thread_waits()
            stall, source = wait_delta(self.waits, waits) / 1e9 / dt, "wait"
            self.waits = waits
        self.psi_cpu = psi
        throttled = self.cg.nr_throttled()
        working_set = self.seen.working_set
        if with_memory:
            _, usage, inactive = self.cg.memory_bytes()
            working_set = max(0, (usage or 0) - inactive)
        self.seen = Seen(self.name, self.qos, cores, stall, source, throttled > self.throttled, self.cg.quota_us(),
                         self.ceiling, working_set, self.priority, held)
        self.throttled = throttled
        return self.seen


class Guard:
    def __init__(self, args: argparse.Namespace) -> None:
        self.state_dir = args.state_dir
        os.makedirs(os.path.join(self.state_dir, "holds"), exist_ok=True)
        self.config_path = os.path.join(self.state_dir, "guard.json")
        self.config_mtime = -1.0
        self.settings, errors = self._read_settings()
        self.node = args.node or self.settings.node or os.environ.get("NODE_NAME") or socket.gethostname()
        self.log = EventLog(self.state_dir, self.node, self.settings.log_max_bytes)
        self.psi_off = psi_off_reason(args.no_psi)
        self.mounts = parse_mountinfo(read("/proc/self/mountinfo") or "")
        self.scope = NodeScope(self.mounts, args.node_cgroup, self.settings, self.psi_off is None)
        self.engine = Engine(args.docker_host)
        self.version = file_digest(os.path.abspath(__file__))
        self.tracked: dict[str, Tracked] = {}
        self.bad_labels: set = set()
        self.cpu = CpuSuppress()
        self.memory = MemoryGuard()
        self.evicted: list[dict[str, Any]] = []
        self.node_cpu_ns = self.scope.cpu_ns()
        self.node_full_us = self.scope.memory_full_us()
        self.last = time.monotonic()
        self.stopping = False
        self.engine_ok = True
        self.checks = 0
        self.check_cpu_s = 0.0
        self.node_cores = 0.0
        self.mem = (0, 0, 0.0)
        for error in errors:
            self.log.emit("config_error", reason=error)

    def _read_settings(self) -> tuple[Settings, list[str]]:
        try:
            self.config_mtime = os.stat(self.config_path).st_mtime
        except OSError:
            self.config_mtime = 0.0
            return Settings(), []
        try:
            given = json.loads(read(self.config_path) or "{}")
        except ValueError as exc:
            return Settings(), [f"{self.config_path}: not JSON ({exc}); fix it, defaults in use"]
        return parse_settings(given, self.config_path)

    def reload(self) -> None:
        try:
            mtime = os.stat(self.config_path).st_mtime
        except OSError:
            mtime = 0.0
        if mtime == self.config_mtime:
            return
        self.settings, errors = self._read_settings()
        self.log.max_bytes = self.settings.log_max_bytes
        if self.settings.cpus:
            self.scope.capacity = self.settings.cpus
        for error in errors:
            self.log.emit("config_error", reason=error)
        self.log.emit("config", settings=dataclasses.asdict(self.settings))

    def held(self, name: str) -> bool:
        path = os.path.join(self.state_dir, "holds", name)
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            return False
        return hold_active(read(path), mtime, time.time(), self.settings.hold_ttl_seconds)

    def discover(self) -> None:
        """The engine's running containers: new or restarted ones (a new cgroup) are inspected."""
        listed = self.engine.running()
        seen = set()
        for c in listed:
            cid = c["Id"]
            seen.add(cid)
            t = self.tracked.get(cid)
            if t is not None and os.path.exists(f"/proc/{t.pid}"):
                continue
            try:
                doc = self.engine.inspect(cid)
            except OSError:
                continue
            pid = doc["State"].get("Pid") or 0
            if not pid:
                continue
            name = doc["Name"].lstrip("/")
            labels = doc["Config"].get("Labels") or {}
            qos, problem = qos_class(labels)
            if problem and name not in self.bad_labels:
                self.bad_labels.add(name)
                self.log.emit("bad_label", container=name, reason=problem)
            cg = Cgroup(self.mounts, *parse_proc_cgroup(read(f"/proc/{pid}/cgroup") or ""),
                        psi=self.psi_off is None)
            if not self.scope.contains(cg):
                continue  # not this node's (lab nodes share one process table)
            self.tracked[cid] = Tracked(cid, name, qos, priority_of(labels), pid, cg,
                                        ceiling_us(doc.get("HostConfig") or {}))
        for cid in list(self.tracked):
            if cid not in seen:
                del self.tracked[cid]

    def baseline(self, t: Tracked) -> None:
        """A best-effort container's class, re-applied when Docker makes it a new cgroup (start,
        restart, restore) and for every new task: the lowest CPU weight, and the OOM killer's
        first choice (oom_score_adj 1000 on its tasks; HostConfig stays as it was)."""
        try:
            if t.cg.lowest_weight():
                self.log.emit("be_weight", container=t.name, reason="best-effort: lowest CPU weight")
        except OSError as exc:
            self.log.emit("error", container=t.name, reason=f"cpu weight: {exc}")
        for pid in t.cg.pids():
            if pid not in t.oom_adjusted:
                try:
                    write(f"/proc/{pid}/oom_score_adj", 1000)
                    t.oom_adjusted.add(pid)
                except OSError:
                    continue

    def check(self) -> None:
        started = time.process_time()
        self.reload()
        now = time.monotonic()
        dt = max(1e-3, now - self.last)
        self.last = now
        try:
            self.discover()
            if not self.engine_ok:
                self.log.emit("engine_ok", reason="the engine answers again")
            self.engine_ok = True
        except OSError as exc:  # dockerd down: keep restraining what is known
            if self.engine_ok:
                self.log.emit("engine_error", reason=str(exc)[:300])
            self.engine_ok = False
        for cid in [c for c, t in self.tracked.items() if not os.path.exists(f"/proc/{t.pid}")]:
            del self.tracked[cid]
        seen = []
        for t in self.tracked.values():
            held = self.held(t.name)
            seen.append(t.sample(dt, held, with_memory=t.qos == "be" or self.checks % 10 == 0))
            if t.qos == "be" and not held:
                self.baseline(t)
        cpu = self.scope.cpu_ns()
        self.node_cores = (cpu - self.node_cpu_ns) / 1e9 / dt if cpu is not None and self.node_cpu_ns is not None \
            else sum(c.cores for c in seen)
        self.node_cpu_ns = cpu
        self.apply(self.cpu.step(seen, self.node_cores, self.scope.capacity, self.settings, time.time(),
                                 self.scope.cpu_list()))
        limit, available = self.scope.memory()
        full_us = self.scope.memory_full_us()
        full = (full_us - self.node_full_us) / 1e6 / dt if full_us is not None and self.node_full_us is not None \
            else 0.0
        self.node_full_us = full_us
        self.mem = (limit, available, full)
        self.apply(self.memory.step(seen, limit, available, full, self.settings, now))
        self.checks += 1
        self.check_cpu_s += time.process_time() - started
        self.write_state(seen)

    def apply(self, decision: Decision | None) -> None:
        if decision is None:
            return
        by_name = {t.name: t for t in self.tracked.values()}
        written: dict[str, int | None] = {}
        for name, quota in decision.quotas.items():
            try:
                by_name[name].cg.set_quota_us(quota)
                written[name] = quota
                self.keep_on(by_name[name], decision.cpus)
            except (KeyError, OSError) as exc:
                self.log.emit("error", container=name, reason=f"cpu quota: {exc}")
        if decision.kind.startswith("cpu_"):
            cpus = {} if decision.cpus is None else {"be_cpus": format_cpus(decision.cpus)}
            self.log.emit(decision.kind, reason=decision.reason, quota_us=written, **cpus, **decision.facts)
        for name in decision.victims:
            t = by_name[name]
            began = time.monotonic()
            try:
                self.engine.stop(t.id)
            except OSError as exc:
                self.log.emit("error", container=name, reason=f"stop: {exc}")
                continue
            event = self.log.emit("mem_evict", container=name, reason=decision.reason,
                                  working_set_mb=t.seen.working_set >> 20, cores=round(t.seen.cores, 3),
                                  stop_ms=round((time.monotonic() - began) * 1e3, 1), **decision.facts)
            self.evicted = [*self.evicted[-49:], {"container": name, "seq": event["seq"], "ts": event["ts"]}]
            self.tracked.pop(t.id, None)
        if decision.kind == "mem_no_victim":
            self.log.emit(decision.kind, reason=decision.reason, **decision.facts)

    def keep_on(self, t: Tracked, cpus: list[int] | None) -> None:
        """Keep a best-effort container on `cpus` (within its own set), or give it its own set back."""
        now = t.cg.cpus()
        if t.kept_on is not None and now != t.kept_on:
            t.own_cpus = now  # someone else set it since (`docker update --cpuset-cpus`, pinning): its own now
        want = t.own_cpus if cpus is None else [c for c in cpus if c in t.own_cpus] or t.own_cpus
        if want and want != now:
            t.cg.set_cpus(want)
        t.kept_on = None if cpus is None else want

    def write_state(self, seen: list[Seen]) -> None:
        limit, available, full = self.mem
        usage = os.times()
        state = {
            "protocol": PROTOCOL, "version": self.version, "node": self.node, "pid": os.getpid(),
            "ts": round(time.time(), 3), "seq": self.log.seq, "log": self.log.log_id, "engine_ok": self.engine_ok,
            "psi": self.psi_off is None, "capacity_cpus": self.scope.capacity, "node_cores": round(self.node_cores, 3),
            "be_allowed_cores": None if self.cpu.allowed is None else round(self.cpu.allowed, 3),
            "memory": {"limit_mb": limit >> 20, "available_mb": available >> 20, "full": round(full, 3)},
            "guard": {"cpu_s": round(usage.user + usage.system, 3), "checks": self.checks,
                      "ms_per_check": round(self.check_cpu_s / max(1, self.checks) * 1e3, 2)},
            "containers": {c.name: {"qos": c.qos, "held": c.held, "cores": round(c.cores, 3),
                                    "stall": None if c.stall is None else round(c.stall, 3),
                                    "quota_us": c.quota_us, "working_set_mb": c.working_set >> 20}
                           for c in seen},
            # what a restarted guard gives back when it lifts a cap it finds
            "own_cpus": {t.name: format_cpus(t.own_cpus) for t in self.tracked.values()
                         if t.qos == "be" and t.kept_on is not None},
            "evicted": self.evicted,
        }
        write_atomic(os.path.join(self.state_dir, "state.json"), json.dumps(state))

    def adopt(self) -> None:
        """A guard restarted (after an update or a crash) finds the quotas a predecessor wrote and
        carries on from them (their sum is the allowance) instead of forgetting them."""
        try:
            self.discover()
        except OSError:
            return
        try:
            before = json.loads(read(os.path.join(self.state_dir, "state.json")) or "{}").get("own_cpus") or {}
        except (ValueError, AttributeError):
            before = {}
        for t in self.tracked.values():
            if t.name in before:
                t.own_cpus, t.kept_on = parse_cpus(before[t.name]), t.cg.cpus()
        quotas = [t.seen.quota_us for t in self.tracked.values()
                  if t.qos == "be" and t.seen.quota_us is not None and t.seen.quota_us != t.ceiling]
        if quotas:
            self.cpu.allowed = sum(quotas) / PERIOD_US
            self.log.emit("adopt", reason="best-effort quotas found at start", allowed_cores=round(self.cpu.allowed, 3))

    def release(self) -> None:
        """On a clean stop the cap is given back (the weight stays: it is the class's)."""
        if self.cpu.allowed is None:
            return
        restored = {}
        for t in self.tracked.values():
            if t.qos == "be":
                try:
                    t.cg.set_quota_us(t.ceiling)
                    self.keep_on(t, None)
                    restored[t.name] = t.ceiling
                except OSError:
                    continue
        self.log.emit("cpu_restore", reason="guard stopping", quota_us=restored)

    def run(self) -> None:
        self.log.emit("guard_start", reason=f"version {self.version}", pid=os.getpid(),
                      capacity_cpus=self.scope.capacity, node_cgroup=self.scope.path or "host",
                      settings=dataclasses.asdict(self.settings))
        if self.psi_off:
            self.log.emit("psi_unavailable", reason=f"{self.psi_off}; stall from run-queue wait, memory from the "
                                                    "available-memory watermark only")
        self.adopt()
        while not self.stopping:
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001 - a guard must outlive one bad check
                self.log.emit("error", reason=f"check: {type(exc).__name__}: {exc}"[:400])
            deadline = self.last + self.settings.interval
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        self.release()
        self.log.emit("guard_stop", reason="stopped", pid=os.getpid())


# -- commands -------------------------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(prog="guard.py", description=(__doc__ or "").split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("run", "start", "stop", "status", "report"):
        s = sub.add_parser(name)
        s.add_argument("--state-dir", default=env.get("PEAKPACK_QOS_DIR", DEFAULT_STATE_DIR))
        if name in ("run", "start"):
            s.add_argument("--node", default=None, help="the node's inventory name (default: guard.json, "
                                                        "$NODE_NAME, the host name)")
            s.add_argument("--docker-host", default=env.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
            s.add_argument("--node-cgroup", default=env.get("PEAKPACK_NODE_CGROUP", "host"),
                           help="the node's cgroup parent (a lab node: /ppXXXX-nN), or host")
            s.add_argument("--no-psi", action="store_true", help="act as on a kernel without PSI")
        if name == "report":
            s.add_argument("--after", type=int, default=0, help="events with seq > AFTER ...")
            s.add_argument("--log", default="", help="... of this log (another log: all of its events; *: any log)")
    return p.parse_args(argv)


def running_pid(state_dir: str) -> int | None:
    try:
        pid = int((read(os.path.join(state_dir, "guard.pid")) or "").strip())
    except ValueError:
        return None
    command = (read(f"/proc/{pid}/cmdline") or "").split("\0")
    return pid if "run" in command and any(part.endswith("guard.py") for part in command) else None


def cmd_run(args: argparse.Namespace) -> int:
    os.makedirs(args.state_dir, exist_ok=True)
    lock = open(os.path.join(args.state_dir, "guard.lock"), "w")  # held (locked) for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # one guard per state folder, that is per node
    except OSError:
        print(f"guard: another guard holds {args.state_dir}/guard.lock (pid {running_pid(args.state_dir)})",
              file=sys.stderr)
        return 1
    write_atomic(os.path.join(args.state_dir, "guard.pid"), f"{os.getpid()}\n")
    guard = Guard(args)

    def stop(*_: object) -> None:
        guard.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    guard.run()
    return 0


def cmd_start(args: argparse.Namespace, argv: list[str]) -> int:
    """Detached (double fork, new session), so the SSH session or boot hook that starts it may end;
    a running guard is left alone."""
    os.makedirs(args.state_dir, exist_ok=True)
    pid = running_pid(args.state_dir)
    if pid:
        print(f"guard: already running (pid {pid})")
        return 0
    run_argv = [sys.executable, os.path.abspath(__file__), "run", *argv[1:]]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            log = os.open(os.path.join(args.state_dir, "guard.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.execv(run_argv[0], run_argv)
        os._exit(0)
    os.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pid = running_pid(args.state_dir)
        if pid:
            print(f"guard: started (pid {pid})")
            return 0
        time.sleep(0.05)
    print(f"guard: did not start; see {args.state_dir}/guard.log", file=sys.stderr)
    return 1


def cmd_stop(args: argparse.Namespace) -> int:
    pid = running_pid(args.state_dir)
    if not pid:
        print("guard: not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)
    print(f"guard: stopped (pid {pid})")
    return 0


def report(state_dir: str, after: int, log: str) -> dict[str, Any]:
    """What the controller reads at each observation, as one JSON document: whether the guard
    runs and which build (of this file and of guard.json), its events since the last one stored
    (all of them when the log is not the one the controller knows), and its current view."""
    current = (read(os.path.join(state_dir, "log.id")) or "").strip()
    events, lost = events_after(state_dir, after if log in (current, "*") else 0)
    try:
        state = json.loads(read(os.path.join(state_dir, "state.json")) or "null")
    except ValueError:
        state = None
    pid = running_pid(state_dir)
    return {"protocol": PROTOCOL, "running": pid is not None, "pid": pid, "log": current,
            "version": file_digest(os.path.abspath(__file__)),
            "running_version": (state or {}).get("version") if pid else None,
            "settings": file_digest(os.path.join(state_dir, "guard.json")),
            "events": events, "lost": lost and current == log, "state": state}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.cmd == "run":
        return cmd_run(args)
    if args.cmd == "start":
        return cmd_start(args, argv)
    if args.cmd == "stop":
        return cmd_stop(args)
    if args.cmd == "report":
        sys.stdout.write(json.dumps(report(args.state_dir, args.after, args.log)) + "\n")
        return 0
    pid = running_pid(args.state_dir)
    print(json.dumps({"running": pid is not None, "pid": pid,
                      "state": json.loads(read(os.path.join(args.state_dir, "state.json")) or "null")}))
    return 0 if pid else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
