"""Energy in the counter's own domain: RAPL counts the CPU package, often far below the wall idle
of the node's power curve, so the idle taken out of a measured row is learned from the counter
(Kepler-style, the lowest power it reported), the curve's only for model rows; and the ledger
predicts each row in that row's domain."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from peakpack.orchestrator.decide.predict import check_prediction, predict
from peakpack.orchestrator.domain.model import (
    ClusterConfig,
    ClusterSnapshot,
    Container,
    Inventory,
    NodeState,
    PowerCurve,
    cluster_metrics,
)
from peakpack.orchestrator.domain.plan import Action, Plan, SolverReport
from peakpack.orchestrator.domain.records import EnergyRow
from peakpack.orchestrator.domain.settings import ForecastSettings, PlannerSettings
from peakpack.power.accounting import kepler_split, model_energy, split_idle_w
from tests.support.build import node_spec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CURVE = PowerCurve.linear(100, 250)  # the wall: 100 W idle


def rapl(start_s: float, watts: float, seconds: float = 60.0, node: str = "n1", source: str = "rapl") -> EnergyRow:
    start = T0 + timedelta(seconds=start_s)
    return EnergyRow(node, start, start + timedelta(seconds=seconds), watts * seconds, source)


def test_a_package_counter_below_the_curves_idle_still_gives_containers_their_active_energy() -> None:
    quiet, busy = rapl(0, 30.0), rapl(60, 60.0)  # the package: 30 W when quiet, 60 W busy; wall idle 100 W
    idle_w = split_idle_w(busy, CURVE, [quiet])
    assert idle_w == pytest.approx(30.0)  # the counter's own lowest power, not the curve's 100 W
    node, a, b = kepler_split(busy, idle_w, busy_cores=2.0, container_cores={"a": 1.5, "b": 0.25})
    assert node.idle_j == pytest.approx(30.0 * 60)
    assert (a.container, a.energy_j) == ("a", pytest.approx(1800.0 * 1.5 / 2))
    assert (b.container, b.energy_j) == ("b", pytest.approx(1800.0 * 0.25 / 2))
    assert node.idle_j + node.residual_j + a.energy_j + b.energy_j == pytest.approx(busy.energy_j)
    # the curve's idle in the package's domain: everything idle, every container 0 J
    assert [r.energy_j for r in kepler_split(busy, CURVE.idle_w, 2.0, {"a": 1.5, "b": 0.25})[1:]] == [0.0, 0.0]


def test_the_idle_is_learned_per_node_and_source_and_the_curves_only_for_model_rows() -> None:
    busy = rapl(60, 60.0)
    others = [rapl(0, 5.0, node="n2"), rapl(0, 8.0, source="dcmi"),
              EnergyRow("n1", T0, T0 + timedelta(seconds=60), 60.0, "rapl", container="a")]
    assert split_idle_w(busy, CURVE, others) == pytest.approx(60.0)  # none of them is n1's rapl counter
    assert split_idle_w(busy, CURVE, []) == pytest.approx(60.0)  # a first interval is all idle
    [first] = kepler_split(busy, split_idle_w(busy, CURVE, []), 2.0, {"a": 1.0})[:1]
    assert (first.idle_j, first.residual_j) == (pytest.approx(busy.energy_j), 0.0)
    assert split_idle_w(busy, CURVE, [rapl(120, 40.0, seconds=30)]) == pytest.approx(40.0)  # power, not joules
    modelled = model_energy("n1", CURVE, 4, 2.0, T0, T0 + timedelta(seconds=60))
    assert split_idle_w(modelled, CURVE, [rapl(0, 30.0)]) == CURVE.idle_w  # the curve's own domain


def test_the_ledger_predicts_each_row_in_its_own_domain() -> None:
    inv = Inventory(ClusterConfig("t", cap=0.7, memory_cap=0.9),
                    (node_spec("n1", address="192.0.2.2", cpus=10, memory_mb=10000, curve=CURVE),
                     node_spec("n2", address="192.0.2.3", cpus=10, memory_mb=10000, curve=CURVE)))
    snap = ClusterSnapshot(nodes=(NodeState("n1"), NodeState("n2")),
                           containers=(Container("a", "n1", 2.0, 1000), Container("b", "n2", 1.0, 1000)))
    after = snap.with_changes(moves={"b": "n1"}, power={"n2": False})
    plan = Plan("peakpack", (Action.migrate("b", "n2", "n1"), Action.power_off("n2")),
                cluster_metrics(inv, snap), cluster_metrics(inv, after), SolverReport("OPTIMAL", 0, 0, 0))
    settings = PlannerSettings(migration_j=500.0, migration_j_per_gb=0.0, forecast=ForecastSettings(window_seconds=600))
    doc = predict(inv, snap, plan, settings, []).to_json()
    # n1 carries 3 of 10 cores after the plan: 145 W on the curve, 45 W of it above idle; n2 is off
    assert doc["nodes_after"] == {"n1": {"power_w": pytest.approx(145.0), "idle_w": 100.0}}
    applied = T0
    row = EnergyRow("n1", T0, T0 + timedelta(seconds=60), 75.0 * 60, "rapl", idle_j=30.0 * 60, residual_j=0.0)
    ledger = check_prediction(applied, doc, [row], [])
    # the package's own idle (30 W) plus the curve's active part (45 W): 75 W, not the wall's 145 W
    assert ledger["predicted_energy_j"] == pytest.approx((30.0 + 45.0) * 60 + 500.0)
    assert ledger["measured_energy_j"] == pytest.approx(75.0 * 60) and ledger["measured_source"] == "rapl"
    woken = EnergyRow("n2", T0, T0 + timedelta(seconds=60), 6000.0, "model", idle_j=6000.0, residual_j=0.0)
    assert check_prediction(applied, doc, [row, woken], [])["predicted_energy_j"] == ledger["predicted_energy_j"]
    assert check_prediction(applied, {k: v for k, v in doc.items() if k != "nodes_after"}, [row], [])[
        "predicted_energy_j"] is None  # a plan stored before per-node predictions: nothing to set against
