"""power/: counter arithmetic, reboots told from wraps, energy integration (RAPL, DCMI, model) and
Kepler's split of a node's energy into idle, containers' shares and residual."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import PowerCurve
from peakpack.orchestrator.domain.records import EnergySample
from peakpack.power.accounting import integrate_power, integrate_rapl, kepler_split, model_energy
from peakpack.power.rapl import counter_delta_uj, parse_node_counters, parse_zones, restarted

T0 = datetime(2026, 1, 1, tzinfo=UTC)


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


def rapl(seconds: float, uj: int, zone: str = "intel-rapl:0", boot: str | None = "b1") -> EnergySample:
    return EnergySample("n", T0 + timedelta(seconds=seconds), "rapl", energy_uj=uj, zone=zone,
                        max_energy_range_uj=1_000_000, boot_id=boot)


def test_rapl_integration_handles_wrap_per_zone() -> None:
    s = [rapl(0, 900_000), rapl(10, 100_000), rapl(0, 0, "intel-rapl:1"), rapl(10, 300_000, "intel-rapl:1")]
    row = integrate_rapl("n", s)
    assert row is not None and row.energy_j == pytest.approx(0.5) and row.source == "rapl"
    assert integrate_rapl("n", s[:1]) is None  # one sample is no interval: missing, not zero


def test_a_reboot_is_a_reset_not_a_wrap_and_the_row_starts_after_it() -> None:
    rebooted = [rapl(0, 900_000), rapl(10, 100_000, boot="b2")]
    assert integrate_rapl("n", rebooted) is None  # not 0.2 J of "wrap": the interval is missing
    row = integrate_rapl("n", [rapl(0, 100), rapl(10, 900_000, boot="b2"), rapl(20, 950_000, boot="b2")])
    assert row is not None and row.start == T0 + timedelta(seconds=10) and row.energy_j == pytest.approx(0.05)
    assert restarted("b1", "b1", 900, 100) is False  # same boot: a wrap
    assert restarted(None, None, 900, 100) is True   # no boot ids: a drop cannot be told from a reset
    assert integrate_rapl("n", [rapl(0, 900_000, boot=None), rapl(10, 100_000, boot=None)]) is None
    counters = parse_node_counters("n", "boot abc-1\nbusy 123000\nintel-rapl:0 5 10\n")
    assert (counters.boot_id, counters.busy_ns) == ("abc-1", 123000)


def test_dcmi_trapezoid_model_rows_and_attribution() -> None:
    s = [
        EnergySample("n", T0, "dcmi", power_w=100.0),
        EnergySample("n", T0 + timedelta(seconds=10), "dcmi", power_w=200.0),
    ]
    assert integrate_power("n", s).energy_j == pytest.approx(1500.0)
    row = model_energy("n", PowerCurve.linear(100, 200), 4, 2.0, T0, T0 + timedelta(seconds=10))
    assert row.source == "model" and row.energy_j == pytest.approx(1500.0)



def test_kepler_split_idle_active_by_cpu_time_and_an_honest_residual() -> None:
    row = integrate_power("n", [EnergySample("n", T0, "dcmi", power_w=200.0),
                                EnergySample("n", T0 + timedelta(seconds=10), "dcmi", power_w=200.0)])
    node, a, b = kepler_split(row, idle_w=100.0, busy_cores=2.0, container_cores={"a": 1.5, "b": 0.25})
    assert (node.container, node.idle_j, node.source) == (None, pytest.approx(1000.0), "dcmi")
    assert (a.container, a.energy_j, b.energy_j) == ("a", pytest.approx(750.0), pytest.approx(125.0))
    assert node.residual_j == pytest.approx(125.0)  # 0.25 busy cores no container accounts for
    assert node.idle_j + node.residual_j + a.energy_j + b.energy_j == pytest.approx(row.energy_j)
    over = kepler_split(row, 100.0, busy_cores=1.0, container_cores={"a": 1.5, "b": 0.5})
    assert over[0].residual_j == 0 and sum(r.energy_j for r in over[1:]) == pytest.approx(1000.0)
    [alone] = kepler_split(row, 100.0, busy_cores=None, container_cores={"a": 1.5})  # no busy time: not guessed
    assert alone.residual_j == pytest.approx(1000.0) and alone.to_json()["measured"] is True
    [modelled] = kepler_split(model_energy("n", PowerCurve.linear(100, 200), 4, 2.0, T0, T0 + timedelta(seconds=10)),
                              100.0, None, {})
    assert modelled.to_json()["measured"] is False and modelled.idle_j == pytest.approx(1000.0)
