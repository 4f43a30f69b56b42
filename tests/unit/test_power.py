"""power/: counter arithmetic, energy integration and attribution, and the power policy rules."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from db.store import EnergySample
from orchestrator.config import demo_inventory, demo_snapshot
from orchestrator.errors import NodeError
from orchestrator.model import Container, PowerCurve, PowerPolicyConfig
from orchestrator.plan import ActionKind
from orchestrator.planning import make_plan
from power.accounting import attribute, integrate_power, integrate_rapl, model_energy
from power.policy import NodeFacts, adjust_plan, break_even_seconds, idle_updates
from power.rapl import counter_delta_uj, parse_zones

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_counter_wraps_once_and_is_never_negative() -> None:
    assert counter_delta_uj(100, 350, 1000) == 250
    assert counter_delta_uj(900, 50, 1000) == 150


def test_zones_are_parsed_and_garbage_is_refused() -> None:
    zones = parse_zones("n", "intel-rapl:0 5000 10000\nintel-rapl:0:0 10 10000\nintel-rapl:1 7 10000\n")
    assert [(z.zone, z.energy_uj) for z in zones] == [("intel-rapl:0", 5000), ("intel-rapl:1", 7)]
    with pytest.raises(NodeError, match="node n"):
        parse_zones("n", "intel-rapl:0 lots 10000\n")
    with pytest.raises(NodeError):
        parse_zones("n", "intel-rapl:0 20000 10000\n")


def test_rapl_integration_handles_wrap_per_zone() -> None:
    s = [EnergySample("n", T0, "rapl", energy_uj=900_000, zone="intel-rapl:0", max_energy_range_uj=1_000_000),
         EnergySample("n", T0 + timedelta(seconds=10), "rapl", energy_uj=100_000, zone="intel-rapl:0",
                      max_energy_range_uj=1_000_000),
         EnergySample("n", T0, "rapl", energy_uj=0, zone="intel-rapl:1", max_energy_range_uj=1_000_000),
         EnergySample("n", T0 + timedelta(seconds=10), "rapl", energy_uj=300_000, zone="intel-rapl:1",
                      max_energy_range_uj=1_000_000)]
    row = integrate_rapl("n", s)
    assert row is not None and row.energy_j == pytest.approx(0.5) and row.source == "rapl"
    assert integrate_rapl("n", s[:1]) is None  # one sample is no interval: missing, not zero


def test_dcmi_trapezoid_model_rows_and_attribution() -> None:
    s = [EnergySample("n", T0, "dcmi", power_w=100.0), EnergySample("n", T0 + timedelta(seconds=10), "dcmi", power_w=200.0)]
    assert integrate_power("n", s).energy_j == pytest.approx(1500.0)
    row = model_energy("n", PowerCurve.linear(100, 200), 4, 2.0, T0, T0 + timedelta(seconds=10))
    assert row.source == "model" and row.energy_j == pytest.approx(1500.0)
    parts = attribute(row, [Container("a", "n", 3.0, 0), Container("b", "n", 1.0, 0), Container("c", "m", 5.0, 0)])
    assert {p.container: p.energy_j for p in parts} == pytest.approx({"a": 1125.0, "b": 375.0})


def consolidating():  # type: ignore[no-untyped-def]
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = make_plan(inv, snap, time_limit_s=5)
    offs = [a.node for a in plan.actions if a.kind is ActionKind.POWER_OFF]
    assert offs
    return inv, snap, plan, offs


def test_policy_waits_for_the_grace_period_and_respects_quarantine() -> None:
    inv, snap, plan, offs = consolidating()
    now = T0 + timedelta(hours=1)
    long_idle = NodeFacts(idle_since={n: T0 for n in offs}, quarantined={})
    assert adjust_plan(plan, snap, inv, long_idle, now) == plan
    fresh = NodeFacts(idle_since={}, quarantined={})
    kept = adjust_plan(plan, snap, inv, fresh, now)
    assert not [a for a in kept.actions if a.kind is ActionKind.POWER_OFF]
    assert any("grace period" in n for n in kept.notes)
    assert kept.after.nodes_on > plan.after.nodes_on
    quarantined = NodeFacts(idle_since={n: T0 for n in offs}, quarantined={offs[0]: "did not wake"})
    left = [a.node for a in adjust_plan(plan, snap, inv, quarantined, now).actions if a.kind is ActionKind.POWER_OFF]
    assert offs[0] not in left and set(left) == set(offs[1:])


def test_spare_capacity_and_break_even() -> None:
    inv, snap, plan, offs = consolidating()
    facts = NodeFacts(idle_since={n: T0 for n in offs}, quarantined={})
    now = T0 + timedelta(hours=1)
    spare = replace(inv, power_policy=PowerPolicyConfig(spare_nodes=1))
    left = [a for a in adjust_plan(plan, snap, spare, facts, now).actions if a.kind is ActionKind.POWER_OFF]
    assert len(left) == len(offs) - 1
    slow_boot = replace(inv, power_policy=PowerPolicyConfig(boot_seconds=3600))
    spec = inv.node(offs[0])
    assert break_even_seconds(spec, 3600, None) > inv.cluster.epoch_seconds
    assert not [a for a in adjust_plan(plan, snap, slow_boot, facts, now).actions if a.kind is ActionKind.POWER_OFF]


def test_idle_tracking() -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    empty = {n.name for n in snap.nodes} - {c.node for c in snap.containers}
    updates = idle_updates(snap, NodeFacts(idle_since={"node-1": T0}, quarantined={}), T0)
    assert updates.get("node-1", "unset") is None  # hosts work again: no longer idle
    assert {n for n, t in updates.items() if t is not None} == empty
