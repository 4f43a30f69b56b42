"""Pressure fed back to the planner, pure: stall shares from the counters each observation reads,
a lower cap for nodes whose latency-sensitive containers stalled (with hysteresis), containers
suspected of slowing their neighbours, and which containers a node's QoS guard stopped should be
started again now.

Stall is the share of an interval a container was ready to run but did not (PSI cpu `some` of its
cgroup, or, where the kernel has no PSI, the run-queue wait of its threads): what packing costs
the containers packed, measured rather than inferred from a `peakpack.class` label.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from ..domain.capacity import node_capacity, within
from ..domain.model import ClusterSnapshot, Inventory, QosClass, node_loads
from ..domain.records import DemandRecord, PressureRecord, QosEventRecord
from ..domain.settings import PlannerSettings

#: a guard's event when it stopped a best-effort container, and the controller's when it started it
#: again (or tried: a container removed meanwhile is not tried again)
EVICTED, RESTARTED, RESTART_FAILED = "mem_evict", "be_restart", "be_restart_failed"


@dataclass(frozen=True)
class Reading:
    """One container's cumulative stall counters as read now (None: not readable there)."""

    container: str
    node: str
    qos: QosClass
    cpu_some_us: int | None
    memory_some_us: int | None
    memory_full_us: int | None
    wait_ns: int | None


def _share(now: int | None, before: int | None, unit: float, interval: float | None) -> float | None:
    """A counter's growth as a share of the interval; None when it cannot be told (no earlier
    reading, or the counter went back: a new cgroup)."""
    if now is None or before is None or not interval or now < before:
        return None
    return (now - before) / unit / interval


def pressure_records(readings: Sequence[Reading], previous: Mapping[str, PressureRecord],
                     at: datetime) -> list[PressureRecord]:
    """This observation's pressure rows: each counter's delta since the container's previous row
    (on the same node) as a share of the interval; the counters are kept for the next one."""
    rows = []
    for r in readings:
        before = previous.get(r.container)
        if before is not None and (before.node != r.node or before.at >= at):
            before = None  # moved (another cgroup) or no time passed: nothing to subtract
        last = before if before is not None else PressureRecord(at, r.container, r.node, r.qos.value, *[None] * 5)
        interval = (at - before.at).total_seconds() if before is not None else None
        rows.append(PressureRecord(
            at=at, container=r.container, node=r.node, qos=r.qos.value, interval_s=interval,
            cpu_stall=_share(r.cpu_some_us, last.cpu_some_us, 1e6, interval),
            memory_some=_share(r.memory_some_us, last.memory_some_us, 1e6, interval),
            memory_full=_share(r.memory_full_us, last.memory_full_us, 1e6, interval),
            wait=_share(r.wait_ns, last.wait_ns, 1e9, interval),
            cpu_some_us=r.cpu_some_us, memory_some_us=r.memory_some_us, memory_full_us=r.memory_full_us,
            wait_ns=r.wait_ns))
    return rows


@dataclass(frozen=True)
class NodeStall:
    """The most stalled latency-sensitive container of a node over one observed interval."""

    at: datetime
    node: str
    container: str
    share: float


def node_stalls(rows: Iterable[PressureRecord]) -> dict[str, list[NodeStall]]:
    """Per node, oldest first: each observed interval's most stalled latency-sensitive container."""
    worst: dict[tuple[str, datetime], NodeStall] = {}
    for r in rows:
        stall = r.stall
        if r.qos != QosClass.LS.value or stall is None:
            continue
        key = (r.node, r.at)
        if key not in worst or stall > worst[key].share:
            worst[key] = NodeStall(r.at, r.node, r.container, stall)
    out: dict[str, list[NodeStall]] = defaultdict(list)
    for s in sorted(worst.values(), key=lambda s: s.at):
        out[s.node].append(s)
    return dict(out)


@dataclass(frozen=True)
class LoweredCap:
    """A node's CPU cap for the next plan, below the cluster's, and why."""

    node: str
    cap: float
    why: str


def lowered_caps(rows: Iterable[PressureRecord], settings: PlannerSettings) -> dict[str, LoweredCap]:
    """Nodes that plan under a lower cap (`PlannerSettings.qos`): each interval in which the node's
    most stalled latency-sensitive container stalled more than `stall_share` lowers it one
    `cap_step` (down to `min_cap`); `clear_epochs` clear intervals in a row give one step back."""
    q = settings.qos
    deepest = max(0, math.ceil((settings.cap - q.min_cap) / q.cap_step - 1e-9))
    out = {}
    for node, series in node_stalls(rows).items():
        level = clears = 0
        last: NodeStall | None = None
        for s in series:
            if s.share > q.stall_share:
                level, clears, last = min(level + 1, deepest), 0, s
            else:
                clears += 1
                if level and clears >= q.clear_epochs:
                    level, clears = level - 1, 0
        if level and last is not None:
            cap = min(settings.cap, max(settings.cap - level * q.cap_step, q.min_cap))
            out[node] = LoweredCap(node, cap, (
                f"cap lowered from {settings.cap:.0%} to {cap:.0%}: latency-sensitive {last.container} stalled "
                f"{last.share:.0%} of the interval ending {last.at:%Y-%m-%d %H:%M:%S} UTC (over "
                f"{q.stall_share:.0%}); {clears} of {q.clear_epochs} clear intervals before a step back"))
    return out


def with_lowered_caps(inventory: Inventory, lowered: Mapping[str, LoweredCap]) -> Inventory:
    """The inventory as the solver sees it: a node with a lowered cap carries it
    (`NodeSpec.cap`, read only by `capacity.node_cap`)."""
    if not lowered:
        return inventory
    return replace(inventory, nodes=tuple(replace(n, cap=lowered[n.name].cap) if n.name in lowered else n
                                          for n in inventory.nodes))


def suspected_devils(pressure: Iterable[PressureRecord], demand: Iterable[DemandRecord], settings: PlannerSettings,
                     min_samples: int = 6, margin: float = 0.05) -> dict[str, str]:
    """Containers whose co-runners stall when they are busy: over the observations a container
    shared a node with latency-sensitive ones, those stalled more than `stall_share` on average
    when it used more CPU than its median, and at least `margin` more than otherwise. A suspicion
    (-> the evidence), not a verdict: shown next to its `peakpack.class` label."""
    cpu = {(d.at, d.container): d.cpu for d in demand if d.cpu is not None}
    stalls: dict[tuple[datetime, str], dict[str, float]] = defaultdict(dict)
    present: dict[tuple[datetime, str], set[str]] = defaultdict(set)
    for r in pressure:
        present[(r.at, r.node)].add(r.container)
        if r.qos == QosClass.LS.value and r.stall is not None:
            stalls[(r.at, r.node)][r.container] = r.stall
    samples: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for (at, node), names in present.items():
        for name in names:
            others = [v for c, v in stalls[(at, node)].items() if c != name]
            if others and (at, name) in cpu:
                samples[name].append((cpu[(at, name)], max(others), node))
    out = {}
    for name, xs in samples.items():
        if len(xs) < min_samples:
            continue
        median = statistics.median(c for c, _, _ in xs)
        busy = [s for c, s, _ in xs if c > median]
        quiet = [s for c, s, _ in xs if c <= median]
        if not busy or not quiet:
            continue
        when_busy, otherwise = statistics.fmean(busy), statistics.fmean(quiet)
        if when_busy > settings.qos.stall_share and when_busy - otherwise >= margin:
            out[name] = (f"suspected devil: its co-runners stalled {when_busy:.0%} when it used more than "
                         f"{median:.2f} cores, {otherwise:.0%} otherwise ({len(xs)} observations on "
                         f"{', '.join(sorted({n for _, _, n in xs}))})")
    return out


@dataclass(frozen=True)
class Restart:
    """A container a node's guard stopped, to start again where it was (or why it waits)."""

    container: str
    node: str
    why: str
    now: bool  # start it now; False: it waits, `why` says for what


def guard_stopped(events: Iterable[QosEventRecord], running: Collection[str]) -> dict[str, QosEventRecord]:
    """Containers a node's QoS guard stopped for memory that nothing started since (their last
    event is the stop, and they do not run now) -> that stop, which names their node. They are
    still hosted there: started again there when it has room (`restarts`), so that node is not
    switched off. Events oldest first."""
    latest: dict[str, QosEventRecord] = {}
    for e in events:
        if e.kind in (EVICTED, RESTARTED, RESTART_FAILED) and e.container:
            latest[e.container] = e
    return {name: e for name, e in latest.items() if e.kind == EVICTED and name not in running}


def restarts(events: Sequence[QosEventRecord], snapshot: ClusterSnapshot, inventory: Inventory,
             demand: Iterable[DemandRecord], per_hour: int, now: datetime) -> list[Restart]:
    """The containers the guards stopped (`guard_stopped`), started again on their node when its
    memory has room under the cap for what they usually use (the median of their stored demand: a
    container that grew until it was stopped starts small again), at most `per_hour` times an
    hour. Events oldest first."""
    recent: dict[str, int] = defaultdict(int)
    for e in events:
        if e.kind == RESTARTED and e.container and now - e.at < timedelta(hours=1):
            recent[e.container] += 1
    usual: dict[str, list[float]] = defaultdict(list)
    for d in demand:
        usual[d.container].append(d.memory_mb)
    loads = node_loads(snapshot.containers)
    out = []
    for name, e in sorted(guard_stopped(events, {c.name for c in snapshot.containers}).items()):
        if e.node not in inventory.nodes_by_name:
            continue
        memory = statistics.median(usual[name]) if usual[name] else 0.0
        used = loads[e.node].memory_mb if e.node in loads else 0.0
        room = node_capacity(inventory.node(e.node), inventory.cluster)[1]
        if e.node not in snapshot.powered() or e.node in snapshot.held:
            out.append(Restart(name, e.node, f"{e.node} is off or held", False))
        elif recent[name] >= per_hour:
            out.append(Restart(name, e.node, f"restarted {recent[name]} times in the last hour and stopped again "
                               "each time; left stopped: fix it, then `docker start` it", False))
        elif not within(used + memory, room):
            out.append(Restart(name, e.node, f"{e.node} has {room - used:.0f} MB of its memory cap free, "
                               f"{name} usually uses {memory:.0f} MB", False))
        else:
            out.append(Restart(name, e.node, f"stopped by {e.node}'s QoS guard ({e.reason}); {e.node} has room "
                               f"for its usual {memory:.0f} MB again", True))
    return out
