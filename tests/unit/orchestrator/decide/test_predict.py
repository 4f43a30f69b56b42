"""A plan's prediction: energy per action, and each migration's frozen time from the line of its
own node pair once the store has enough of that pair's moves, the cluster's line before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from peakpack.orchestrator.decide.predict import (
    DEFAULT_FROZEN_MS,
    MIN_FIT_POINTS,
    frozen_fits,
    frozen_model,
    predict,
)
from peakpack.orchestrator.domain.model import cluster_metrics
from peakpack.orchestrator.domain.plan import Action, Plan, SolverReport
from peakpack.orchestrator.domain.records import FrozenSample
from peakpack.orchestrator.domain.settings import ForecastSettings, PlannerSettings
from tests.unit.orchestrator.decide.test_review import DRAIN, inventory, snapshot


def samples(source: str, target: str, ms_per_mb: float, base_ms: float = 0.0) -> list[FrozenSample]:
    """MIN_FIT_POINTS moves source -> target on the line base + slope x MB."""
    return [FrozenSample(source, target, mb, base_ms + ms_per_mb * mb) for mb in (100.0, 200.0, 300.0)]


def test_frozen_time_is_the_default_until_three_migrations_then_a_fit() -> None:
    few = [(100.0, 5000.0)] * (MIN_FIT_POINTS - 1)
    assert frozen_model(few).source == "default"
    assert frozen_model(few).at(0) == DEFAULT_FROZEN_MS
    fit = frozen_model([(100.0, 3000.0), (200.0, 5000.0), (300.0, 7000.0)])
    assert fit.source == "fit"
    assert fit.at(400.0) == pytest.approx(9000.0)
    same = frozen_model([(100.0, 3000.0), (100.0, 5000.0), (100.0, 4000.0)])
    assert same.source == "fit" and same.at(100.0) == pytest.approx(4000.0)


def test_each_pair_with_enough_moves_gets_its_own_line_and_the_rest_the_clusters() -> None:
    slow, fast = samples("n1", "n2", 10.0), samples("n2", "n3", 1.0)
    fits = frozen_fits(slow + fast + [FrozenSample("n3", "n1", 500.0, 2000.0)])
    assert fits.model("n1", "n2").source == "pair" and fits.at("n1", "n2", 1000.0) == pytest.approx(10000.0)
    assert fits.model("n2", "n3").source == "pair" and fits.at("n2", "n3", 1000.0) == pytest.approx(1000.0)
    # one move n3 -> n1 is not a line: that pair, and the reverse of a fitted one, take the cluster's
    assert fits.model("n3", "n1") == fits.cluster == fits.model("n2", "n1")
    assert fits.cluster.source == "fit" and fits.cluster.points == 7
    # a pair whose moves all had one size keeps the cluster's slope through their mean
    flat = frozen_fits(slow + [FrozenSample("n3", "n1", 400.0, ms) for ms in (1000.0, 2000.0, 3000.0)])
    assert flat.model("n3", "n1").ms_per_mb == pytest.approx(flat.cluster.ms_per_mb)
    assert flat.at("n3", "n1", 400.0) == pytest.approx(2000.0)


def test_predicted_savings_add_up_to_before_minus_after_less_migrations() -> None:
    inv, snap = inventory(), snapshot()
    settings = PlannerSettings(migration_j=1000.0, migration_j_per_gb=0.0,
                               forecast=ForecastSettings(window_seconds=3600.0))
    before = cluster_metrics(inv, snap)
    after = cluster_metrics(inv, snap.with_changes(moves={"a": "n2", "b": "n2"}, power={"n1": False}))
    plan = Plan("peakpack", DRAIN, before, after, SolverReport("OPTIMAL", 0, 0, 0))
    p = predict(inv, snap, plan, settings, [])
    assert p.energy_saved_j == pytest.approx((before.power_w - after.power_w) * 3600 - 2 * 1000)
    # n1 switched off saves its idle 100 W for the hour; the moves shift load between equal curves
    assert p.actions[2].energy_saved_j == pytest.approx(100 * 3600)
    # 1000 MB each, the lab's line for pages sent straight to the target over TLS and cubic: 0.713 s
    # + 2.14 ms per MB
    assert [a.frozen_ms for a in p.actions] == [pytest.approx(2853.0)] * 2 + [None]
    doc = p.to_json()
    assert doc["frozen_source"] == "default" and doc["horizon_s"] == 3600.0
    assert doc["frozen_ms"] == pytest.approx(2 * 2853.0)


def test_a_plans_moves_are_predicted_from_their_own_pairs_line() -> None:
    inv, snap = inventory(), snapshot()
    settings = PlannerSettings(forecast=ForecastSettings(window_seconds=3600.0))
    before = cluster_metrics(inv, snap)
    actions = (Action.migrate("a", "n1", "n2"), Action.migrate("c", "n2", "n1"))
    plan = Plan("peakpack", actions, before, before, SolverReport("OPTIMAL", 0, 0, 0))
    history = samples("n1", "n2", 10.0) + samples("n1", "n3", 1.0)
    p = predict(inv, snap, plan, settings, history)
    # a: 1000 MB over n1 -> n2, which froze 10 ms per MB; c: 500 MB back over n2 -> n1, no moves
    # of its own (the way back is another pair), so the cluster's line through all six
    assert p.actions[0].frozen_ms == pytest.approx(10000.0) and p.actions[0].frozen_source == "pair"
    assert p.actions[1].frozen_ms == pytest.approx(p.frozen.cluster.at(500.0))
    assert p.actions[1].frozen_source == "fit"
    doc = p.to_json()
    assert doc["frozen_source"] == "fit+pair"
    assert doc["frozen_pairs"]["n1->n2"]["ms_per_mb"] == pytest.approx(10.0)
    assert doc["frozen_pairs"]["n1->n3"]["points"] == 3 and "n2->n1" not in doc["frozen_pairs"]
    assert [a.to_json()["frozen_source"] for a in p.actions] == ["pair", "fit"]
    # the same moves predicted before the store had any: the lab's line, named so
    assert replace(p, actions=predict(inv, snap, plan, settings, []).actions).frozen_source == "default"
