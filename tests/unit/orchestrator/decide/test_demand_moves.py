"""A container's demand history follows it by name across a migration or a restart, as the
simulator's VMs keep theirs: the move (or restart) costs one counter delta, not its history, so
its `peakpack.cpu` label does not come back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from peakpack.orchestrator.decide.demand import forecast_demand
from peakpack.orchestrator.domain.model import ClusterSnapshot, Container, NodeState
from peakpack.orchestrator.domain.records import DemandRecord
from peakpack.orchestrator.domain.settings import ForecastSettings
from peakpack.orchestrator.observe.cluster import Usage, demand_records

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def usage(node: str, cpu_s: float) -> Usage:
    return Usage(container="db", node=node, cpu_time_ns=int(cpu_s * 1e9), memory_mb=10.0, sample_cores=0.05)


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
