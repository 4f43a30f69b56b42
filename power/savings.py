"""Recording the savings ledger (orchestrator/domain/savings.py) from the nodes' own counters,
around what the executor does: `power/switch.PowerSwitch` and `migrate/node_ops.LiveContainers` (its bracket) call it.

- Before a node is switched off, an idle probe: two readings of its counter `IDLE_PROBE_S`
  apart while it hosts nothing (the executor checked), whose mean power is what the node draws
  on and empty: what staying off saves. The second reading is stored as an energy sample, the
  start of the `off` row.
- Around a plan's migrations, readings of every node they touch; the energy above each node's
  mean power in its last energy row (what it drew anyway) is their cost. It becomes a
  `migration` row of the plan once the plan switches a node off (a plan that switches nothing
  off saves nothing to charge it to).
- When the node answers again after its wake, a reading closes the `off` row and gives the
  `boot` row: the energy drawn since the probe, measured when one counter spans it (a RAPL
  counter whose boot id did not change, or DCMI readings at the probe, before the wake and
  after), else not measured, with the model's figure (boot_seconds x boot power) apart.

RAPL and DCMI are never mixed: a row's figures all come from its `source`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from peakpack.orchestrator.decide.predict import migration_energy_j
from peakpack.orchestrator.domain.errors import PeakpackError
from peakpack.orchestrator.domain.model import ClusterSnapshot, Inventory
from peakpack.orchestrator.domain.ports import Journal
from peakpack.orchestrator.domain.records import EnergySample
from peakpack.orchestrator.domain.savings import SavingKind, SavingRecord
from peakpack.orchestrator.remote.shell import RemoteShell

from . import ipmi
from .accounting import trapezoid_j
from .rapl import READ_SCRIPT, counter_delta_uj, parse_node_counters, parse_zones

#: seconds the idle probe lasts: a RAPL counter ticks every millisecond (the lab's every 0.5 s)
IDLE_PROBE_S = 5.0
#: the executor's reasons for power actions start with the plan (act/executor.py)
PLAN_REASON = re.compile(r"^plan (\d+)")


@dataclass(frozen=True)
class Reading:
    """One reading of a node's counter: RAPL zones (energy, wrap) with the boot id, or DCMI watts."""

    node: str
    at: datetime
    source: str
    zones: dict[str, tuple[int, int]] = field(default_factory=dict)
    boot_id: str | None = None
    power_w: float | None = None

    def samples(self) -> list[EnergySample]:
        if self.source == "dcmi":
            return [EnergySample(self.node, self.at, "dcmi", power_w=self.power_w)]
        return [EnergySample(self.node, self.at, "rapl", energy_uj=uj, zone=zone, max_energy_range_uj=top,
                             boot_id=self.boot_id) for zone, (uj, top) in sorted(self.zones.items())]


def energy_j(readings: Sequence[Reading]) -> float | None:
    """Joules a node drew from its first reading to its last: RAPL zone deltas (wraps handled)
    when every reading has the same boot id and zones, DCMI by the trapezoid rule; None when one
    counter does not span them."""
    if len(readings) < 2 or len({r.source for r in readings}) != 1:
        return None
    first, last = readings[0], readings[-1]
    if first.source == "dcmi":
        watts = [(r.at, r.power_w) for r in readings if r.power_w is not None]
        return trapezoid_j(watts) if len(watts) == len(readings) else None
    if first.boot_id is None or first.boot_id != last.boot_id or first.zones.keys() != last.zones.keys():
        return None
    return sum(counter_delta_uj(first.zones[z][0], last.zones[z][0], last.zones[z][1]) for z in first.zones) / 1e6


def off_energy_j(before: Reading, standby: Reading | None, after: Reading) -> float | None:
    """DCMI: what a node drew from `before` (on, at the probe) to `after` (on again): its standby
    reading (taken right before the wake) over the time off, then the trapezoid to `after`."""
    if standby is None or standby.power_w is None or after.power_w is None:
        return None
    return (standby.power_w * (standby.at - before.at).total_seconds()
            + (after.at - standby.at).total_seconds() * (standby.power_w + after.power_w) / 2)


def mean_power_w(readings: Sequence[Reading]) -> float | None:
    joules = energy_j(readings)
    seconds = (readings[-1].at - readings[0].at).total_seconds() if readings else 0.0
    return None if joules is None or seconds <= 0 else joules / seconds


def plan_of(reason: str | None) -> int | None:
    m = PLAN_REASON.match(reason or "")
    return int(m.group(1)) if m else None


class SavingsRecorder:
    """Reads counters around power actions and migrations and writes the ledger's rows."""

    def __init__(self, inventory: Inventory, store: Journal, shell: RemoteShell, log: Callable[[str], None],
                 probe_s: float = IDLE_PROBE_S) -> None:
        self.inventory, self.store, self.shell, self.log, self.probe_s = inventory, store, shell, log, probe_s
        #: migration rows measured but not yet charged to a plan (it must switch a node off)
        self.pending: list[SavingRecord] = []

    def read(self, node: str) -> Reading | None:
        """The node's RAPL zones over SSH, else its BMC's DCMI power; None when it has neither
        (or does not answer)."""
        now = datetime.now(UTC)
        try:
            res = self.shell.run(node, ["sh", "-c", READ_SCRIPT], timeout=30)
            zones = parse_zones(node, res.stdout)
            if zones:
                boot = parse_node_counters(node, res.stdout).boot_id
                return Reading(node, now, "rapl", {z.zone: (z.energy_uj, z.max_energy_range_uj) for z in zones}, boot)
        except PeakpackError:
            pass
        spec = self.inventory.node(node)
        watts = ipmi.dcmi_power(spec) if spec.bmc else None
        return Reading(node, now, "dcmi", power_w=watts) if watts is not None else None

    def probe_idle(self, node: str) -> list[Reading]:
        """Two readings `probe_s` apart on a node that hosts nothing (empty list: no counter)."""
        first = self.read(node)
        if first is None:
            return []
        time.sleep(self.probe_s)
        second = self.read(node)
        return [first, second] if second is not None else []

    def switched_off(self, node: str, reason: str | None, probe: Sequence[Reading]) -> None:
        """The node went off: its `off` row (idle power from the probe, if measured), and the
        plan's migrations, now that it saved something."""
        plan_id = plan_of(reason)
        idle = mean_power_w(probe)
        start = probe[-1].at if probe else datetime.now(UTC)
        if probe:
            self.store.energy.add_samples(probe[-1].samples())
        note = (f"idle probe {self.probe_s:g} s" if idle is not None
                else "its counter could not be read before it went off")
        self.store.savings.add(SavingRecord(SavingKind.OFF, node, plan_id, start, source=probe[-1].source
                                            if idle is not None else None, idle_w=idle, note=note))
        for row in self.pending:
            self.store.savings.add(SavingRecord(row.kind, None, plan_id, row.start, row.end, row.source,
                                                energy_j=row.energy_j, model_j=row.model_j, note=row.note))
        self.pending = []
        if idle is not None:
            self.log(f"savings: {node} draws {idle:.1f} W idle ({probe[-1].source}, {self.probe_s:g} s probe); "
                     "switched off")

    def before_wake(self, node: str) -> Reading | None:
        """A DCMI reading while the node is off (its standby draw); RAPL cannot be read then."""
        spec = self.inventory.node(node)
        watts = ipmi.dcmi_power(spec) if spec.bmc else None
        return None if watts is None else Reading(node, datetime.now(UTC), "dcmi", power_w=watts)

    def woke(self, node: str, standby: Reading | None) -> None:
        """The node answers again: close its `off` row and store what the way back cost."""
        off = self.store.savings.open_off(node)
        if off is None or off.id is None:
            return
        now = self.read(node)
        end = now.at if now is not None else datetime.now(UTC)
        self.store.savings.close(off.id, end)
        spanned = None
        before = self._reading_at(node, now.source, off.start) if now is not None and off.source == now.source else None
        if now is not None and before is not None:
            spanned = energy_j([before, now]) if now.source == "rapl" else off_energy_j(before, standby, now)
        model = self._boot_model_j(node)
        note = ("drawn from the idle probe until it answered again" if spanned is not None
                else "not measured: no counter spans the time off (RAPL restarts at boot); "
                     "model: boot_seconds x boot power")
        self.store.savings.add(SavingRecord(SavingKind.BOOT, node, off.plan_id, off.start, end,
                                            source=off.source, energy_j=spanned,
                                            model_j=None if spanned is not None else model, note=note))

    def _reading_at(self, node: str, source: str, at: datetime) -> Reading | None:
        """The stored reading that started an `off` row (the probe's second one)."""
        samples = [s for s in self.store.energy.samples(node, source, since=at - timedelta(seconds=1)) if s.at <= at]
        if not samples:
            return None
        last = max(s.at for s in samples)
        mine = [s for s in samples if s.at == last]
        if source == "dcmi":
            return Reading(node, last, "dcmi", power_w=mine[-1].power_w)
        return Reading(node, last, "rapl", {s.zone: (s.energy_uj or 0, s.max_energy_range_uj or 0) for s in mine},
                       mine[0].boot_id)

    @contextmanager
    def migrations(self, nodes: Iterable[str], count: int) -> Iterator[None]:
        """Bracket a batch of `count` migrations touching `nodes`: the energy they drew above what
        each node drew in its last energy row, held until a plan switches a node off."""
        touched = sorted(set(nodes))
        before = {n: self.read(n) for n in touched}
        started = datetime.now(UTC)
        yield
        after = {n: self.read(n) for n in touched}
        end = datetime.now(UTC)
        extra, sources = 0.0, set[str | None]()
        for n in touched:
            pair = [r for r in (before[n], after[n]) if r is not None]
            drawn = energy_j(pair) if len(pair) == 2 else None
            base = self._base_power(n, pair[0].source) if drawn is not None else None
            if drawn is None or base is None:
                sources.add(None)
                continue
            sources.add(pair[0].source)
            extra += drawn - base * (pair[1].at - pair[0].at).total_seconds()
        source = next(iter(sources)) if len(sources) == 1 else None  # all of one counter, or not measured
        self.pending.append(SavingRecord(
            SavingKind.MIGRATION, None, None, started, end, source=source,
            energy_j=extra if source is not None else None,
            model_j=None if source is not None else count * migration_energy_j(self.inventory.planner, 0.0),
            note=(f"{count} migration(s) on {', '.join(touched)}: energy above each node's last mean power"
                  if source is not None else f"{count} migration(s): not every node's counter could be read "
                  "(or they differ); model: migration_j each")))

    def _base_power(self, node: str, source: str) -> float | None:
        """Mean power of the node's last energy row of `source` (the interval just before)."""
        since = datetime.now(UTC) - timedelta(seconds=3 * self.inventory.cluster.epoch_seconds + 60)
        rows = [r for r in self.store.energy.history(since) if r.node == node and r.source == source]
        if not rows or rows[-1].end <= rows[-1].start:
            return None
        return rows[-1].energy_j / (rows[-1].end - rows[-1].start).total_seconds()

    def woken_outside(self, snapshot: ClusterSnapshot) -> None:
        """Nodes observed on whose `off` row is still open were woken by something else (an
        operator, a BMC policy): close the row now; what that wake cost is not measured."""
        for n in snapshot.nodes:
            if n.powered and n.name not in snapshot.held:
                off = self.store.savings.open_off(n.name)
                if off is not None and off.id is not None:
                    self.store.savings.close(off.id, snapshot.taken_at)
                    self.store.savings.add(SavingRecord(SavingKind.BOOT, n.name, off.plan_id, snapshot.taken_at,
                                                        snapshot.taken_at, source=off.source,
                                                        model_j=self._boot_model_j(n.name),
                                                        note="woken outside peakpack: not measured"))

    def _boot_model_j(self, node: str) -> float:
        """The model's boot energy: boot_seconds x boot power (default the node's max_w)."""
        settings = self.inventory.planner
        return settings.boot_seconds * (settings.boot_power_w or self.inventory.node(node).power.max_w)
