"""The energy sampler learns a node's idle from the rows its store already holds, so a restarted
controller still splits a package-domain RAPL interval well below the curve's idle: containers
get their share of the active energy and the parts add up to what the counter measured."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from peakpack.db.store import Store
from peakpack.orchestrator.domain.model import (
    ClusterConfig,
    ClusterSnapshot,
    Container,
    Inventory,
    NodeState,
)
from peakpack.orchestrator.domain.records import DemandRecord, EnergyRow, EnergySample
from peakpack.power.sampler import EnergySampler
from tests.support.build import node_spec

TOP = 10**12
BOOT = "b00t"


class Shell:
    """Answers READ_SCRIPT with fixed counters."""

    def __init__(self, text: str) -> None:
        self.pool = SimpleNamespace(run=lambda node, argv, timeout: SimpleNamespace(stdout=text))

    def gather(self, results: list[Any]) -> list[Any]:
        return results


def test_a_restarted_sampler_learns_the_counters_idle_from_the_store(tmp_path: Path) -> None:
    inv = Inventory(ClusterConfig("t"), (node_spec("n1", address="192.0.2.2"),))
    before = datetime.now(UTC) - timedelta(seconds=60)
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        # an earlier quiet interval: the package drew 30 W (the wall curve's idle is 100 W)
        store.energy.add([EnergyRow("n1", before - timedelta(minutes=10), before - timedelta(minutes=9), 1800.0,
                                    "rapl", idle_j=1800.0, residual_j=0.0)])
        store.energy.add_samples([
            EnergySample("n1", before, "rapl", energy_uj=0, zone="intel-rapl:0", max_energy_range_uj=TOP,
                         boot_id=BOOT),
            EnergySample("n1", before, "busy", boot_id=BOOT, busy_ns=0)])
        store.demand.add([DemandRecord(at=before, container="a", node="n1", interval_s=None, cpu=0.0, cpu_time_ns=0,
                                       memory_mb=10.0, source="stats"),
                          DemandRecord(at=before + timedelta(seconds=59), container="a", node="n1", interval_s=59.0,
                                       cpu=1.5, cpu_time_ns=int(1.5 * 59e9), memory_mb=10.0, source="cgroup")])
        # now: 60 W over the last minute, 2 cores busy, 1.5 of them container a's
        text = f"boot {BOOT}\nbusy {int(2 * 60e9)}\nintel-rapl:0 {60 * 60 * 10**6} {TOP}\n"
        sampler = EnergySampler(inv, store, Shell(text), log=lambda _line: None)  # type: ignore[arg-type]
        snapshot = ClusterSnapshot(nodes=(NodeState("n1"),), containers=(Container("a", "n1", 1.5, 10.0),))
        node, a = sampler.sample(snapshot, None)
    seconds = (node.end - node.start).total_seconds()
    assert node.source == "rapl" and node.idle_j == pytest.approx(30.0 * seconds)  # learned, not 100 W
    assert a.container == "a" and a.energy_j > 0
    assert node.idle_j + node.residual_j + a.energy_j == pytest.approx(node.energy_j)


def test_an_interval_with_a_power_cycle_is_no_row_and_teaches_no_idle(tmp_path: Path) -> None:
    """Lab nodes report the host's boot id, so a power cycle shorter than the sampler's window
    left one row spanning the time off (the counter stands still while off): a mean power near 0,
    which `split_idle_w` then learned as the node's idle, and the savings ledger with it. A power
    event of the node since its last sample now cuts there: that interval is missing, and the
    next one starts at the first sample after the wake."""
    inv = Inventory(ClusterConfig("t", epoch_seconds=60),
                    (node_spec("n1", address="192.0.2.2"),))
    now = datetime.now(UTC)
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.energy.add_samples([EnergySample("n1", now - timedelta(seconds=90), "rapl", energy_uj=0,
                                               zone="intel-rapl:0", max_energy_range_uj=TOP, boot_id=BOOT)])
        off = store.power.begin("n1", "power_off", "plan 1: emptied")
        store.power.finish(off, "SUCCEEDED")
        on = store.power.begin("n1", "power_on", "plan 2")
        store.power.finish(on, "SUCCEEDED")
        # 10 s at 100 W before it went off, 5 s since it answered again: 1,500 J over 90 s
        text = f"boot {BOOT}\nbusy 0\nintel-rapl:0 {1500 * 10**6} {TOP}\n"
        sampler = EnergySampler(inv, store, Shell(text), log=lambda _line: None)  # type: ignore[arg-type]
        snapshot = ClusterSnapshot(nodes=(NodeState("n1"),), containers=())
        assert sampler.sample(snapshot, None) == []
        assert store.energy.history() == []
        later = f"boot {BOOT}\nbusy 0\nintel-rapl:0 {(1500 + 100 * 30) * 10**6} {TOP}\n"
        sampler.shell = Shell(later)  # type: ignore[assignment]
        [row] = sampler.sample(snapshot, None)
    assert row.start > now and row.energy_j == pytest.approx(3000.0)
