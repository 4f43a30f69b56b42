"""Energy sampling for the controller: each time it is called it reads every powered node's RAPL
counters, boot id and busy CPU time over SSH (DCMI from the BMC where a node has no RAPL), stores
the samples, and turns the interval since the previous sample into energy rows per node and per
container (`accounting.kepler_split`, with the containers' cores from the demand rows the observer
has just stored for the same interval, and the idle power in the row's own domain:
`accounting.split_idle_w` learns it from the node's recent measured rows).

Every row says where its number came from: "rapl" or "dcmi" (measured), "model" (the node's power
curve at its measured load, for a node with neither). A counter restarted by a reboot (the boot
id changed) gives no row for that interval: missing is reported as missing, never as zero or as
a wrap. Nor does an interval with a power event of the node in it (a power cycle shorter than the
sampler's window, on a node whose boot id survives it, like the lab's): the row would span the
time off with a mean power near 0, which is neither the node's draw nor its idle; the next row
starts at the first sample after the event."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from peakpack.orchestrator.decide.demand import measured_cores
from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import ClusterSnapshot, Inventory, node_loads
from peakpack.orchestrator.domain.ports import Journal
from peakpack.orchestrator.domain.records import EnergyRow, EnergySample
from peakpack.orchestrator.remote.shell import RemoteShell

from . import ipmi
from .accounting import (
    IDLE_LOOKBACK,
    integrate_power,
    integrate_rapl,
    kepler_split,
    model_energy,
    split_idle_w,
)
from .rapl import READ_SCRIPT, NodeCounters, parse_node_counters, parse_zones, restarted
from .savings import SavingsRecorder


class EnergySampler:
    def __init__(self, inventory: Inventory, store: Journal, shell: RemoteShell, log: Callable[[str], None]) -> None:
        self.inventory, self.store, self.shell, self.log = inventory, store, shell, log
        self.last_model: dict[str, datetime] = {}
        #: each node's rows of the last IDLE_LOOKBACK, from which `split_idle_w` learns its idle;
        #: read from the store once, then kept up to date here
        self._recent: dict[str, list[EnergyRow]] | None = None

    def _read(self, powered: list[str], now: datetime
              ) -> dict[str, tuple[NodeCounters, list[EnergySample]] | Exception]:
        results = self.shell.gather([self.shell.pool.run(n, ["sh", "-c", READ_SCRIPT], timeout=30) for n in powered])
        out: dict[str, tuple[NodeCounters, list[EnergySample]] | Exception] = {}
        for node, res in zip(powered, results):
            if isinstance(res, BaseException):
                if not isinstance(res, Exception):
                    raise res
                out[node] = res
                continue
            try:
                counters, zones = parse_node_counters(node, res.stdout), parse_zones(node, res.stdout)
            except NodeError as exc:
                out[node] = exc
                continue
            out[node] = (counters, [EnergySample(node, now, "rapl", energy_uj=z.energy_uj, zone=z.zone,
                                                 max_energy_range_uj=z.max_energy_range_uj,
                                                 boot_id=counters.boot_id) for z in zones])
        return out

    def _since(self, window: datetime) -> dict[str, datetime]:
        """Per node, where its samples may start: the window, or after its last power event."""
        cuts: dict[str, datetime] = defaultdict(lambda: window)
        for e in self.store.power.events(since=window - timedelta(minutes=10)):
            cuts[e.node] = max(cuts[e.node], e.finished_at or e.at, e.at)
        return cuts

    def _busy_cores(self, node: str, now: datetime, counters: NodeCounters, window: datetime) -> float | None:
        """The node's busy cores since its previous stored read (so a restarted controller still
        has one), None without a comparable one; stores this read for the next interval."""
        if counters.busy_ns is None:
            return None
        previous = [s for s in self.store.energy.samples(node, "busy", since=window) if s.at > window][-1:]
        self.store.energy.add_samples([EnergySample(node, now, "busy", boot_id=counters.boot_id,
                                                    busy_ns=counters.busy_ns)])
        before = previous[0] if previous else None
        if before is None or before.busy_ns is None:
            return None
        seconds = (now - before.at).total_seconds()
        if seconds <= 0 or restarted(before.boot_id, counters.boot_id, before.busy_ns, counters.busy_ns):
            return None
        return (counters.busy_ns - before.busy_ns) / 1e9 / seconds

    def _container_cores(self, node: str, since: datetime, window: datetime) -> dict[str, float]:
        """Cores of each container on `node` from the counters of its two newest demand rows, if
        the newest ends within the interval (the observation just before this sample)."""
        return measured_cores(self.store.demand.history(since=window), node, since)

    def sample(self, snapshot: ClusterSnapshot, plan_id: int | None) -> list[EnergyRow]:
        powered = [n.name for n in snapshot.nodes if n.powered]
        now = datetime.now(UTC)
        readings = self._read(powered, now)
        rows: list[EnergyRow] = []
        window = now - timedelta(seconds=3 * self.inventory.cluster.epoch_seconds + 60)
        since = self._since(window)
        loads = node_loads(snapshot.containers)
        for node in powered:
            got = readings[node]
            if isinstance(got, Exception):
                self.log(f"energy: {node}: counters unreadable ({got}); energy missing for this interval")
                continue
            counters, samples = got
            busy = self._busy_cores(node, now, counters, since[node])
            row: EnergyRow | None = None
            if samples:
                previous = self._latest(node, since[node])
                self.store.energy.add_samples(samples)
                if previous:
                    row = integrate_rapl(node, previous + samples, plan_id)
                    if row is None:
                        self.log(f"energy: {node}: boot id changed since the last sample (rebooted): its RAPL "
                                 "counters restarted, so this interval is missing")
            else:
                load = busy if busy is not None else loads[node].cpu if node in loads else 0.0
                row = self._dcmi_or_model(node, load, now, plan_id, since[node])
            if row is not None:
                history = self._history(node, now)
                idle_w = split_idle_w(row, self.inventory.node(node).power, history)
                rows.extend(kepler_split(row, idle_w, busy, self._container_cores(node, row.start, window)))
                history.append(row)
        if rows:
            self.store.energy.add(rows)
        return rows

    def _history(self, node: str, now: datetime) -> list[EnergyRow]:
        """`node`'s energy rows that end within IDLE_LOOKBACK of `now` (a restarted controller
        reads them from the store)."""
        if self._recent is None:
            self._recent = defaultdict(list)
            for r in self.store.energy.history(since=now - IDLE_LOOKBACK):
                self._recent[r.node].append(r)
        self._recent[node] = [r for r in self._recent[node] if r.end >= now - IDLE_LOOKBACK]
        return self._recent[node]

    def _latest(self, node: str, since: datetime) -> list[EnergySample]:
        by_zone: dict[str, EnergySample] = {}
        for s in self.store.energy.samples(node, "rapl", since=since):
            if s.at > since:
                by_zone[s.zone] = s
        return list(by_zone.values())

    def _dcmi_or_model(self, node: str, load_cores: float, now: datetime, plan_id: int | None,
                       window: datetime) -> EnergyRow | None:
        spec = self.inventory.node(node)
        watts = ipmi.dcmi_power(spec) if spec.bmc else None
        if watts is not None:
            previous = [s for s in self.store.energy.samples(node, "dcmi", since=window) if s.at > window][-1:]
            sample = EnergySample(node, now, "dcmi", power_w=watts)
            self.store.energy.add_samples([sample])
            return integrate_power(node, previous + [sample], plan_id)
        start = self.last_model.get(node)
        self.last_model[node] = now
        if start is None:
            self.log(f"energy: {node}: no RAPL counter and no DCMI reading; using its power curve (source model)")
            return None
        return model_energy(node, spec.power, spec.cpus, load_cores, start, now, plan_id)


class EnergyAccount:
    """`Services.account_energy`: the interval that ends with `snapshot` closed (nodes woken
    outside peakpack closed in the savings ledger first), one log line per counter source
    (measured and modelled energy are never summed into one figure)."""

    def __init__(self, sampler: EnergySampler, savings: SavingsRecorder, log: Callable[[str], None]) -> None:
        self.sampler, self.savings, self.log = sampler, savings, log

    def __call__(self, snapshot: ClusterSnapshot, plan_id: int | None) -> list[EnergyRow]:
        self.savings.woken_outside(snapshot)
        rows = self.sampler.sample(snapshot, plan_id)
        nodes = [r for r in rows if r.container is None]
        if nodes:
            self.log("energy: " + ", ".join(
                f"{sum(r.energy_j for r in nodes if r.source == s) / 1000:.1f} kJ {s} "
                f"({sum(1 for r in nodes if r.source == s)} node(s))" for s in sorted({r.source for r in nodes})))
        return rows
