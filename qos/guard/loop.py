"""The guard's loop: each check samples the node and its containers, decides, and writes."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import time
from typing import Any

from peakpack.orchestrator.domain.guard import GuardSettings, parse_guard_json

from . import PERIOD_US, PROTOCOL
from .decide import CpuSuppress, Decision, MemoryGuard, Seen
from .engine import Engine
from .events import EventLog
from .node import Cgroup, NodeScope, file_digest, own_file, psi_off_reason, read, write, write_atomic
from .parse import (
    ceiling_us,
    format_cpus,
    hold_active,
    parse_cpus,
    parse_mountinfo,
    parse_proc_cgroup,
    priority_of,
    qos_class,
    wait_delta,
)


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
        self.version = file_digest(own_file())
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

    def _read_settings(self) -> tuple[GuardSettings, list[str]]:
        try:
            self.config_mtime = os.stat(self.config_path).st_mtime
        except OSError:
            self.config_mtime = 0.0
            return GuardSettings(), []
        try:
            given = json.loads(read(self.config_path) or "{}")
        except ValueError as exc:
            return GuardSettings(), [f"{self.config_path}: not JSON ({exc}); fix it, defaults in use"]
        return parse_guard_json(given, self.config_path)

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
