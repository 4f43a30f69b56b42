"""Demand history: cgroup counter deltas, the per-epoch history, the forecast the planner gets,
and `history demand`'s join of rows with the forecast each plan used."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from peakpack.db.store import Store
from peakpack.orchestrator.decide.demand import (
    cores_between,
    forecast_demand,
    history_matrix,
    measured_cores,
    with_forecasts,
)
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.config import demo_inventory
from peakpack.orchestrator.domain.errors import NodeError, PeakpackError
from peakpack.orchestrator.domain.model import ClusterSnapshot, Container, NodeState
from peakpack.orchestrator.domain.records import DemandRecord
from peakpack.orchestrator.domain.settings import ForecastSettings
from peakpack.orchestrator.faces.cli import app
from peakpack.orchestrator.observe.cluster import Usage, demand_records, parse_usage

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def row(container: str, at: datetime, cpu: float | None, ns: int | None = None, node: str = "n1",
        interval: float | None = 60.0, source: str = "cgroup") -> DemandRecord:
    return DemandRecord(at=at, container=container, node=node, interval_s=interval, cpu=cpu, cpu_time_ns=ns,
                        memory_mb=10.0, source=source)


def test_usage_script_output_gives_counter_memory_and_the_one_second_rate() -> None:
    text = "# 100.00\nweb 5000000000 20971520\ndb - 0\n# 101.00\nweb 5500000000 20971520\ndb - 0\n"
    usage = parse_usage("n1", text)
    assert usage["web"] == Usage("web", "n1", 5_500_000_000, 20.0, pytest.approx(0.5))
    assert usage["db"].cpu_time_ns is None and usage["db"].sample_cores is None
    assert parse_usage("n1", "") == {}
    with pytest.raises(NodeError, match="n1"):
        parse_usage("n1", "# 1\nweb five 3\n")


def test_cores_are_the_counter_delta_and_a_counter_that_went_down_starts_over() -> None:
    before = row("web", T0, None, ns=10 * 10**9)
    assert cores_between(before, "n1", 40 * 10**9, T0 + timedelta(seconds=60)) == (0.5, 60.0)
    assert cores_between(before, "n1", 1 * 10**9, T0 + timedelta(seconds=60)) is None  # restarted: new cgroup
    assert cores_between(before, "n2", 40 * 10**9, T0 + timedelta(seconds=60)) is None  # migrated: new cgroup
    assert cores_between(None, "n1", 40 * 10**9, T0) is None


def test_observed_rows_are_deltas_against_the_previous_row_or_the_short_sample() -> None:
    at = T0 + timedelta(seconds=30)
    usage = [Usage("web", "n1", 25 * 10**9, 12.0, 0.9), Usage("new", "n1", 10**9, 5.0, 0.2),
             Usage("db", "n1", 40 * 10**9, 5.0, 0.2)]
    # db's previous row is from a store written when labels were kept as rows: its counter still counts
    previous = {"web": row("web", T0, 0.1, ns=10 * 10**9), "db": row("db", T0, 1.5, ns=10 * 10**9, source="label")}
    web, new, db = demand_records(usage, previous, at)
    assert (web.cpu, web.interval_s, web.source, web.cpu_time_ns) == (0.5, 30.0, "cgroup", 25 * 10**9)
    assert (new.cpu, new.interval_s, new.source) == (0.2, None, "stats")
    assert (db.cpu, db.source, db.cpu_time_ns) == (1.0, "cgroup", 40 * 10**9)  # measured, label or not
    # per-container energy reads the counters: db used 1 core
    assert measured_cores([previous["db"], db, previous["web"], web], "n1", T0) == {"db": 1.0, "web": 0.5}
    assert measured_cores([previous["db"], db], "n1", at) == {}  # its newest row is not in the interval


def test_history_is_one_column_per_epoch_weighted_by_each_rows_interval() -> None:
    now = T0 + timedelta(seconds=300)
    rows = [
        row("a", now - timedelta(seconds=200), 1.0, interval=100),   # epoch 0 of 3 (100 s each)
        row("a", now - timedelta(seconds=10), 2.0, interval=90),     # epoch 2: 90 s at 2 cores
        row("a", now, 0.0, interval=10),                             # epoch 2: 10 s at 0 cores
        row("a", now - timedelta(seconds=250), 9.0, source="stats"),  # a short sample is no history
        row("b", now - timedelta(seconds=400), 3.0),                 # older than the window
    ]
    h = history_matrix(rows, ["a", "b"], now, 100, 3)
    assert h[0, 0] == 1.0 and np.isnan(h[0, 1]) and h[0, 2] == pytest.approx(1.8)
    assert np.isnan(h[1]).all()


def test_the_planner_gets_the_forecast_and_a_container_without_history_its_label_or_what_was_observed() -> None:
    snap = ClusterSnapshot(nodes=(NodeState("n1"),), taken_at=T0 + timedelta(seconds=180),
                           containers=(Container("a", "n1", 0.1, 10, declared=True), Container("b", "n1", 0.7, 10),
                                       Container("c", "n1", 0.4, 10, declared=True)))
    rows = [row("a", T0 + timedelta(seconds=60), 1.0), row("a", T0 + timedelta(seconds=120), 2.0),
            row("a", T0 + timedelta(seconds=180), 3.0)]
    planned, forecasts = forecast_demand(snap, rows, ForecastSettings(window_seconds=120), 60)
    # a's label says 0.1 but it has history: the mean of the last two epochs wins
    assert planned.container("a").cpu == pytest.approx(2.5)
    assert forecasts["a"].source == "forecast" and forecasts["a"].epochs == 2
    assert planned.container("b").cpu == 0.7 and forecasts["b"].source == "observed"
    assert planned.container("c").cpu == 0.4 and forecasts["c"].source == "label"  # no history: its label
    quantile = forecast_demand(snap, rows, ForecastSettings(window_seconds=180, quantile=1.0), 60)[0]
    assert quantile.container("a").cpu == pytest.approx(3.0)


def test_history_demand_shows_rows_and_the_forecast_each_plan_used(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    now = datetime.now(UTC)
    with Store.open(url) as store:
        store.demand.add([row("web", now - timedelta(seconds=120), None, ns=0, source="stats", interval=None),
                          row("web", now - timedelta(seconds=60), 0.5, ns=30 * 10**9),
                          row("db", now - timedelta(seconds=60), 0.2, ns=12 * 10**9)])
        assert store.demand.latest()["web"].cpu == 0.5
        assert [r.cpu for r in store.demand.history("web")] == [None, 0.5]
        inv = demo_inventory()
        node = inv.nodes[0].name
        snap = ClusterSnapshot(nodes=tuple(NodeState(n.name) for n in inv.nodes),
                               containers=(Container("web", node, 0.45, 10),))
        plan_id = store.plans.save(make_plan(inv, snap, policy="noop"), inventory="demo", snapshot=snap)
        joined = with_forecasts(store.demand.history("web"), store.plans.cpus())
    assert [(r["cpu"], r["forecast"], r["plan_id"]) for r in joined] == [(None, None, None), (0.5, 0.45, plan_id)]
    result = CliRunner().invoke(app, ["history", "demand", "--container", "web", "--json", "--db", url])
    assert result.exit_code == 0, result.output
    assert [r["forecast"] for r in json.loads(result.stdout)] == [None, 0.45]
    bad = CliRunner().invoke(app, ["history", "plans", "--container", "web", "--db", url])
    assert isinstance(bad.exception, PeakpackError) and str(bad.exception).startswith("--container")


def test_the_controller_plans_on_the_forecast_and_stores_it_with_the_plan(tmp_path: Path) -> None:
    from peakpack.orchestrator.act.controller import Controller, ControllerSettings

    url = f"sqlite:///{tmp_path / 's.db'}"
    now = datetime.now(UTC)
    with Store.open(url) as store:
        store.demand.add([row("db-1", now - timedelta(seconds=s), cpu, node="node-1")
                          for s, cpu in ((120, 0.2), (60, 0.4))])
        controller = Controller(demo_inventory(), store, ControllerSettings(dry_run=True, demo=True, policy="noop",
                                                                            epoch_seconds=60))
        plan = controller.run_once()
        [db1] = [c for c in store.plans.snapshot(plan.plan_id)["containers"] if c["name"] == "db-1"]
        [cache] = [c for c in store.plans.snapshot(plan.plan_id)["containers"] if c["name"] == "cache-2"]
    assert db1["cpu"] == pytest.approx(0.3)  # the mean of its history, not the snapshot's 1.15
    assert cache["cpu"] == 1.29              # no history: as observed
