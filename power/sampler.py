"""Energy sampling for the controller: each epoch it reads every powered node's RAPL counters
over SSH (DCMI from the BMC where a node has no RAPL), stores the samples, and turns the interval
since the previous sample into energy rows per node and per container.

A counter that went backwards by more than a plausible wrap (a rebooted node resets it) gives no
row for that interval: missing is reported as missing, never as zero or a made-up number. Nodes
with no source at all get rows labelled "model" (their power curve at the observed load)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from db.store import EnergyRow, EnergySample, Store
from orchestrator.remote import RemoteShell
from orchestrator.errors import NodeError
from orchestrator.model import ClusterSnapshot, Inventory, node_loads

from . import ipmi
from .accounting import attribute, integrate_power, integrate_rapl, model_energy
from .rapl import READ_SCRIPT, parse_zones


class EnergySampler:
    def __init__(self, inventory: Inventory, store: Store, shell: RemoteShell, log: Callable[[str], None]) -> None:
        self.inventory, self.store, self.shell, self.log = inventory, store, shell, log
        self.last_model: dict[str, datetime] = {}

    def _read(self, powered: list[str]) -> dict[str, list[EnergySample] | Exception]:
        now = datetime.now(timezone.utc)
        results = self.shell.gather([self.shell.pool.run(n, ["sh", "-c", READ_SCRIPT], timeout=30) for n in powered])
        out: dict[str, list[EnergySample] | Exception] = {}
        for node, res in zip(powered, results):
            if isinstance(res, Exception):
                out[node] = res
                continue
            try:
                zones = parse_zones(node, res.stdout)
            except NodeError as exc:
                out[node] = exc
                continue
            out[node] = [EnergySample(node, now, "rapl", energy_uj=z.energy_uj, zone=z.zone,
                                      max_energy_range_uj=z.max_energy_range_uj) for z in zones]
        return out

    def _plausible(self, row: EnergyRow) -> bool:
        seconds = (row.end - row.start).total_seconds()
        peak = self.inventory.node(row.node).power.at(1.0)
        return row.energy_j <= peak * seconds * 2 + 1.0  # a reset counter reads as a huge "wrap"

    def sample(self, snapshot: ClusterSnapshot, plan_id: int | None) -> list[EnergyRow]:
        powered = [n.name for n in snapshot.nodes if n.powered]
        readings = self._read(powered)
        rows: list[EnergyRow] = []
        now = datetime.now(timezone.utc)
        window = now - timedelta(seconds=3 * self.inventory.cluster.epoch_seconds + 60)
        loads = node_loads(snapshot.containers)
        for node in powered:
            got = readings[node]
            row: EnergyRow | None = None
            if isinstance(got, Exception):
                self.log(f"energy: {node}: counters unreadable ({got}); energy missing for this interval")
                continue
            if got:
                previous = self._latest(node, window)
                self.store.add_energy_samples(got)
                if previous:
                    row = integrate_rapl(node, previous + got, plan_id)
                    if row is not None and not self._plausible(row):
                        self.log(f"energy: {node}: RAPL counter reset (reboot?) between samples; interval missing")
                        row = None
            else:
                row = self._dcmi_or_model(node, loads.get(node), now, plan_id, window)
            if row is not None:
                rows.append(row)
                rows.extend(attribute(row, snapshot.containers))
        if rows:
            self.store.add_energy(rows)
        return rows

    def _latest(self, node: str, since: datetime) -> list[EnergySample]:
        by_zone: dict[str, EnergySample] = {}
        for s in self.store.energy_samples(node, "rapl", since=since):
            by_zone[s.zone] = s
        return list(by_zone.values())

    def _dcmi_or_model(self, node: str, load, now: datetime, plan_id: int | None, window: datetime) -> EnergyRow | None:  # type: ignore[no-untyped-def]
        spec = self.inventory.node(node)
        watts = ipmi.dcmi_power(spec) if spec.bmc else None
        if watts is not None:
            previous = self.store.energy_samples(node, "dcmi", since=window)[-1:]
            sample = EnergySample(node, now, "dcmi", power_w=watts)
            self.store.add_energy_samples([sample])
            return integrate_power(node, previous + [sample], plan_id)
        start = self.last_model.get(node)
        self.last_model[node] = now
        if start is None:
            self.log(f"energy: {node}: no RAPL counter and no DCMI reading; using its power curve (source model)")
            return None
        return model_energy(node, spec.power, spec.cpus, load.cpu if load else 0.0, start, now, plan_id)
