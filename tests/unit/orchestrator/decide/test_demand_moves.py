"""A container's demand history follows it by name across a migration or a restart, as the
simulator's VMs keep theirs: the move (or restart) costs one counter delta, not its history, so
its `peakpack.cpu` label does not come back; with its start time known, not even that delta (its
new cgroup's counter counts from the restore or restart)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from peakpack.orchestrator.decide.demand import forecast_demand
from peakpack.orchestrator.domain.model import ClusterSnapshot, Container, NodeState
from peakpack.orchestrator.domain.records import DemandRecord
from peakpack.orchestrator.domain.settings import ForecastSettings
from peakpack.orchestrator.observe.cluster import Usage, demand_records

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def usage(node: str, cpu_s: float, started_at: datetime | None = None) -> Usage:
    return Usage(container="db", node=node, cpu_time_ns=int(cpu_s * 1e9), memory_mb=10.0, sample_cores=0.05,
                 started_at=started_at)


def test_history_follows_a_moved_or_restarted_container_and_only_the_delta_across_it_is_lost() -> None:
    rows: list[DemandRecord] = []
    for minute, (node, cpu_s) in enumerate([("n1", 0), ("n1", 120), ("n1", 240),  # 2 cores on n1
                                            ("n2", 3), ("n2", 123),               # moved: a new cgroup
                                            ("n2", 1)]):                          # restarted: counter reset
        rows += demand_records([usage(node, cpu_s)], {r.container: r for r in rows}, T0 + timedelta(minutes=minute))
    assert [r.source for r in rows] == ["stats", "cgroup", "cgroup", "stats", "cgroup", "stats"]
    now = T0 + timedelta(minutes=5)
    snap = ClusterSnapshot(nodes=(NodeState("n1"), NodeState("n2")), taken_at=now,
                           containers=(Container("db", "n2", 0.25, 10, declared=True),))  # labelled 0.25 cores
    planned, forecasts = forecast_demand(snap, rows, ForecastSettings(window_seconds=300), 60)
    # the forecast is its history on both nodes (three deltas of 2 cores), not the label
    assert forecasts["db"].source == "forecast" and forecasts["db"].epochs == 3
    assert planned.container("db").cpu == pytest.approx(2.0)


def test_the_first_reading_after_a_move_counts_from_the_restore_so_a_label_never_comes_back() -> None:
    """A container seen once (no delta yet) that moves: its first reading on the target is its
    counter since the restore, a measured row, so the next plan does not fall back to its label."""
    restored = T0 + timedelta(seconds=30)
    first = demand_records([usage("n1", 500, started_at=T0 - timedelta(days=1))], {}, T0)
    assert [r.source for r in first] == ["stats"]  # seen for the first time: no counter interval
    after = demand_records([usage("n2", 3, started_at=restored)], {r.container: r for r in first},
                           T0 + timedelta(seconds=60))
    assert [(r.source, r.interval_s) for r in after] == [("cgroup", 30.0)]
    assert after[0].cpu == pytest.approx(0.1)  # 3 CPU-seconds over the 30 s since the restore
    # a start time ahead of the head node's clock (skew) is left out: the one-second sample again
    skewed = demand_records([usage("n2", 3, started_at=T0 + timedelta(minutes=5))], {r.container: r for r in first},
                            T0 + timedelta(seconds=60))
    assert [r.source for r in skewed] == ["stats"]
    now = T0 + timedelta(seconds=60)
    snap = ClusterSnapshot(nodes=(NodeState("n1"), NodeState("n2")), taken_at=now,
                           containers=(Container("db", "n2", 0.25, 10, declared=True),))
    planned, forecasts = forecast_demand(snap, first + after, ForecastSettings(window_seconds=300), 60)
    assert forecasts["db"].source == "forecast" and planned.container("db").cpu == pytest.approx(0.1)
