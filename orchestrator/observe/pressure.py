"""What the nodes' QoS guards did and how much their containers stalled, read at each observation
(`serve`, `apply`), over SSH, two commands per powered node; read only: the epoch's `record` step
stores the rows, and its `install_guards` step installs the guards found outdated:

- PRESSURE_SCRIPT: every running container's cumulative PSI totals (cpu `some`, memory `some` and
  `full`, from its cgroup2 directory: `/sys/fs/cgroup` on a cgroup v2 host, `/sys/fs/cgroup/unified`
  on a hybrid one, where runc puts containers too) and the run-queue wait of its threads
  (`/proc/TID/schedstat`); the store keeps one row per container per observation
  (`decide/pressure.pressure_records`: deltas as shares of the interval), whether a guard runs or not;
- the guard's report (`qos/guard_report.report_argv`): its events since the last one stored, journaled
  once each (`Journal.qos`), and whether it runs the build and settings peakpack would install.

Neither can fail an observation: a node that does not answer them is logged and planned as usual.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from peakpack.qos import report as guard_report
from peakpack.qos.guard.parse import qos_class

from ..decide.pressure import Reading, pressure_records
from ..domain.errors import NodeError
from ..domain.guard import GuardSettings
from ..domain.model import ClusterSnapshot, Inventory, NodeSpec, QosClass
from ..domain.ports import Journal
from ..domain.records import PressureRecord, QosEventRecord
from ..remote import SshPool

#: "NAME CPU_SOME_US MEM_SOME_US MEM_FULL_US WAIT_NS" per running container ("-": not readable).
#: mawk's %d stops at 2^31, hence %.0f.
PRESSURE_SCRIPT = r"""
ids=$(docker ps -q) || exit 1
[ -n "$ids" ] || exit 0
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then v2=/sys/fs/cgroup; else v2=/sys/fs/cgroup/unified; fi
total() { [ -r "$1" ] && awk -v k="$2" '$1==k { sub("total=", "", $5); print $5 }' "$1"; }
docker inspect -f '{{.Name}} {{.State.Pid}}' $ids 2>/dev/null | while read -r name pid; do
  [ "${pid:-0}" -gt 0 ] || continue
  p2=$(awk -F: '$1=="0" {print $3; exit}' "/proc/$pid/cgroup" 2>/dev/null)
  pc=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3; exit}' "/proc/$pid/cgroup" 2>/dev/null)
  if [ -n "$p2" ] && [ -d "$v2$p2" ]; then d="$v2$p2"; else d=; fi
  cs=$(total "$d/cpu.pressure" some); ms=$(total "$d/memory.pressure" some); mf=$(total "$d/memory.pressure" full)
  if [ -n "$pc" ]; then threads=/sys/fs/cgroup/cpu$pc/tasks; else threads="$d/cgroup.threads"; fi
  w=$(sed 's|.*|/proc/&/schedstat|' "$threads" 2>/dev/null | xargs cat 2>/dev/null |
      awk '{s+=$2} END {printf "%.0f", s}')
  echo "${name#/} ${cs:--} ${ms:--} ${mf:--} ${w:--}"
done
"""


def parse_pressure(node: str, text: str, snapshot: ClusterSnapshot) -> list[Reading]:
    """PRESSURE_SCRIPT's lines -> readings of the snapshot's containers on `node` (each with the
    class the observation gave it)."""
    ours = {c.name: c.qos for c in snapshot.containers if c.node == node}

    def number(word: str) -> int | None:
        return None if word == "-" else int(word)

    readings = []
    try:
        for line in text.splitlines():
            if not line.strip():
                continue
            name, cpu, mem_some, mem_full, wait = line.split()
            if name in ours:
                readings.append(Reading(name, node, ours[name], number(cpu), number(mem_some), number(mem_full),
                                        number(wait)))
    except ValueError:
        raise NodeError(node, f"container pressure answered something unexpected: {text[:80]!r}") from None
    return readings


def qos_of(labels: dict[str, str]) -> tuple[QosClass, str | None]:
    """A container's `peakpack.qos` class and what is wrong with its label, by the guard's own rule
    (one rule for both ends): a bad value is latency-sensitive."""
    value, problem = qos_class(labels)
    return QosClass(value), problem


def event_records(node: str, report: guard_report.GuardReport) -> list[QosEventRecord]:
    """The report's events as store records, under the inventory's name of the node."""
    records = []
    for e in report.events:
        try:
            rest = {k: v for k, v in e.items() if k not in ("seq", "ts", "node", "log", "kind", "container", "reason")}
            records.append(QosEventRecord(node=node, log=str(e.get("log") or report.log), seq=int(e["seq"]),
                                          at=datetime.fromtimestamp(float(e["ts"]), UTC), kind=str(e["kind"]),
                                          container=e.get("container"), reason=e.get("reason"),
                                          detail=rest or None))
        except (KeyError, TypeError, ValueError):
            continue  # a line the guard did not write: skipped, the rest are stored
    return records


@dataclass(frozen=True)
class NodeQos:
    """One node's pressure readings and its guard's report (None: that command failed, `error`
    says why; `unreported` says why there is no report)."""

    node: str
    readings: list[Reading]
    report: guard_report.GuardReport | None
    error: str | None = None
    unreported: str | None = None

    def outdated(self, spec: NodeSpec, settings: GuardSettings) -> str | None:
        """Why this node's guard must be (re)installed (None: it runs as peakpack would install
        it). A guard that fails to report is outdated too: a guard.py cut short, or broken on the
        node, never reports again, and would otherwise never be replaced."""
        if self.report is None:
            return f"the guard fails to report ({self.unreported})"
        return self.report.outdated(spec, settings)


async def read_node(ssh: SshPool, node: str, after: tuple[str, int] | None, snapshot: ClusterSnapshot) -> NodeQos:
    pressure, report = await asyncio.gather(
        ssh.run(node, ["sh", "-c", PRESSURE_SCRIPT], timeout=60, check=False),
        ssh.run(node, guard_report.report_argv(after), timeout=60, check=False), return_exceptions=True)
    errors = [str(pressure)] if isinstance(pressure, BaseException) else []
    readings: list[Reading] = []
    parsed, unreported = None, None
    try:
        if not isinstance(pressure, BaseException) and pressure.ok:
            readings = parse_pressure(node, pressure.stdout, snapshot)
    except NodeError as exc:
        errors.append(str(exc))
    try:
        if isinstance(report, BaseException):
            unreported = str(report)
        elif report.ok:
            parsed = guard_report.GuardReport.parse(node, report.stdout)
        else:
            unreported = f"node {node}: the guard's report failed: {report.stderr.strip()[-200:]}"
    except NodeError as exc:
        unreported = str(exc)
    return NodeQos(node, readings, parsed, "; ".join([*errors, *([unreported] if unreported else [])]) or None,
                   unreported)


@dataclass(frozen=True)
class QosReadings:
    """Every observed node's stall rows and guard report, as rows to store: the `Observation`'s part."""

    pressure: list[PressureRecord]
    events: list[QosEventRecord]
    lost: list[str]  # nodes whose guard log rotated past events not yet read
    outdated: list[tuple[str, str]]  # (node, why its guard must be installed)
    notes: list[str]


def read_qos(inventory: Inventory, store: Journal, ssh: SshPool, call: Callable[[Any], Any],
             snapshot: ClusterSnapshot, *, recent: datetime | None = None) -> QosReadings:
    """Read every observed node's pressure and guard report (the store is only read: which events
    it holds, each container's previous pressure row since `recent`).
    `call` runs a coroutine on the shell's loop (`RemoteShell.call`)."""
    nodes = [n.name for n in snapshot.nodes if n.powered and n.name not in snapshot.held]
    after = store.qos.last_seq()

    async def read_all() -> list[NodeQos]:
        return list(await asyncio.gather(*(read_node(ssh, n, after.get(n), snapshot) for n in nodes)))

    results: list[NodeQos] = call(read_all())
    readings = [r for q in results for r in q.readings]
    pressure = pressure_records(readings, store.pressure.latest(since=recent), snapshot.taken_at) if readings else []
    events: list[QosEventRecord] = []
    lost, outdated, notes = [], [], []
    for q in results:
        if q.error:
            notes.append(f"qos: {q.error}")
        if q.report is not None:
            events += event_records(q.node, q.report)
            if q.report.lost:
                lost.append(q.node)
        why = q.outdated(inventory.node(q.node), inventory.qos.guard)
        if why is not None:
            outdated.append((q.node, why))
    return QosReadings(pressure, events, lost, outdated, notes)
