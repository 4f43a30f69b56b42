"""Deciding (pure): how much CPU best-effort containers may use and when it comes back (`CpuSuppress`,
`split_quota`), whom to stop when memory runs out (`MemoryGuard`, `choose_victims`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from peakpack.orchestrator.domain.guard import GuardSettings

from . import PERIOD_US
from .parse import be_cpus


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

    def step(self, seen: list[Seen], node_cores: float, capacity: float, s: GuardSettings, now: float,
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

    def step(self, seen: list[Seen], limit: int, available: int, full: float, s: GuardSettings,
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
