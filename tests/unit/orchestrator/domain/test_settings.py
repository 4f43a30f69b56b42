"""`[planner]` in the inventory: one PlannerSettings, older keys still accepted, conflicts refused,
and `peakpack config show` says where every value came from; `[planner.qos]` and the guards' `[qos]`
likewise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from peakpack.orchestrator.decide.planner.problem import Weights
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.errors import InventoryError
from peakpack.orchestrator.domain.settings import ForecastSettings, PlannerSettings
from peakpack.orchestrator.faces.cli import app

NODES = """
[[nodes]]
name = "n1"
address = "192.0.2.11"
cpus = 8
memory_mb = 16384
[nodes.power]
idle_w = 100
max_w = 200
"""


def inventory(tmp_path: Path, sections: str) -> Path:
    p = tmp_path / "inv.toml"
    p.write_text('[cluster]\nname = "t"\nepoch_seconds = 300\n' + sections + NODES)
    return p


def error_of(tmp_path: Path, sections: str) -> str:
    with pytest.raises(InventoryError) as exc:
        load_inventory(inventory(tmp_path, sections))
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_planner_keys_override_the_defaults_key_by_key(tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path, """
[planner]
cap = 0.8
migration_j = 3000
workers = 2
grace_seconds = 60
[planner.forecast]
quantile = 0.9
"""))
    assert inv.planner == PlannerSettings(cap=0.8, migration_j=3000, workers=2, grace_seconds=60,
                                          forecast=ForecastSettings(quantile=0.9))
    assert inv.cluster.cap == 0.8  # one value: capacity checks read the same cap
    sources = dict(inv.planner_sources)
    assert sources["cap"] == "inventory [planner].cap"
    assert sources["forecast.quantile"] == "inventory [planner.forecast].quantile"
    assert sources["off_epochs"] == "default"
    assert Weights.from_settings(inv.planner, inv.cluster.epoch_seconds).migration_w == pytest.approx(10.0)


def test_older_places_are_still_read_and_must_agree(tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path, "[power_policy]\nspare_nodes = 2\n"))
    assert (
        inv.planner.spare_nodes == 2
        and dict(inv.planner_sources)["spare_nodes"] == "inventory [power_policy].spare_nodes"
    )
    same = load_inventory(inventory(tmp_path, "[planner]\nspare_nodes = 2\n[power_policy]\nspare_nodes = 2\n"))
    assert same.planner.spare_nodes == 2
    msg = error_of(tmp_path, "[planner]\nspare_nodes = 1\n[power_policy]\nspare_nodes = 2\n")
    assert "[planner].spare_nodes" in msg and "[power_policy].spare_nodes" in msg
    p = tmp_path / "cap.toml"
    p.write_text('[cluster]\nname = "t"\ncap = 0.6\n[planner]\ncap = 0.8\n' + NODES)
    with pytest.raises(InventoryError, match=r"\[planner\]\.cap = 0.8 and \[cluster\]\.cap = 0.6"):
        load_inventory(p)


@pytest.mark.parametrize("sections, field", [
    ("[planner]\ncap = 1.5\n", "planner.cap"),
    ("[planner]\noff_epochs = 0.5\n", "planner.off_epochs"),
    ("[planner]\nwindow_seconds = 60\n", "planner.window_seconds"),  # belongs in [planner.forecast]
    ("[planner.forecast]\nquantile = 0.9\nk_std = 1\n", "planner.forecast"),
])
def test_bad_planner_keys_name_the_field(tmp_path: Path, sections: str, field: str) -> None:
    assert field in error_of(tmp_path, sections)


def test_config_show_prints_every_setting_with_its_source(tmp_path: Path) -> None:
    path = inventory(tmp_path, "[planner]\ntime_limit_s = 1.5\nwork_limit = 0.5\n")
    result = CliRunner().invoke(app, ["config", "show", "--inventory", str(path), "--json"])
    assert result.exit_code == 0, result.output
    settings = json.loads(result.stdout)["settings"]
    assert set(settings) == set(PlannerSettings().by_key())
    assert settings["time_limit_s"] == {"value": 1.5, "source": "inventory [planner].time_limit_s"}
    assert settings["work_limit"] == {"value": 0.5, "source": "inventory [planner].work_limit"}
    assert settings["workers"] == {"value": 1, "source": "default"}


def test_qos_sections_override_the_defaults_key_by_key(tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path, "[qos]\ncpu_watermark = 0.75\nmemory_watermark = 0.15\ninstall = false\n"
                              "[planner.qos]\nstall_share = 0.2\nclear_epochs = 5\n"))
    assert (inv.qos.guard.cpu_watermark, inv.qos.guard.memory_watermark, inv.qos.install) == (0.75, 0.15, False)
    assert inv.qos.guard.be_share == 0.65 and inv.qos.restarts_per_hour == 3
    assert (inv.planner.qos.stall_share, inv.planner.qos.clear_epochs, inv.planner.qos.cap_step) == (0.2, 5, 0.1)
    assert dict(inv.planner_sources)["qos.stall_share"] == "inventory [planner.qos].stall_share"
    assert dict(inv.planner_sources)["qos.cap_step"] == "default"


@pytest.mark.parametrize("sections, line", [
    ('[qos]\ncpu_watermark = "80%"\n', "qos.cpu_watermark: '80%' is text; write a number, e.g. cpu_watermark = 0.8 "
                                       "for 80%"),
    ("[qos]\nmemory_watermark = 1.5\n", "qos.memory_watermark: must be <= 0.9"),
    ("[qos]\nstall_watermark = -0.1\n", "qos.stall_watermark: must be >= 0.001"),
    ("[qos]\nmemory_watermak = 0.1\n", "qos.memory_watermak: unknown key; remove it or check its spelling"),
    ("[planner]\ncap = 0.6\n[planner.qos]\nmin_cap = 0.65\n",
     "planner: qos.min_cap 0.65 is above cap 0.6; a lowered cap must be lower"),
    ("[planner.qos]\nstall_share = 0\n", "planner.qos.stall_share: must be > 0.0"),
])
def test_a_malformed_qos_key_is_one_line_naming_it_and_the_fix(tmp_path: Path, sections: str, line: str) -> None:
    assert error_of(tmp_path, sections).split(": ", 1)[1] == line


@pytest.mark.parametrize("value", ['"Cubic"', '"cubic; reboot"', '"a_name_of_sixteen"', "1"])
def test_a_page_stream_congestion_the_kernel_could_not_know_is_one_line_naming_it(tmp_path: Path, value: str) -> None:
    line = error_of(tmp_path, f"[migration]\npage_stream_congestion = {value}\n").split(": ", 1)[1]
    assert line.startswith("migration.page_stream_congestion: "), line


def test_page_streams_take_cubic_unless_the_inventory_says_otherwise(tmp_path: Path) -> None:
    assert load_inventory(inventory(tmp_path, "")).migration.page_stream_congestion == "cubic"
    own = load_inventory(inventory(tmp_path, '[migration]\npage_stream_congestion = ""\n'))
    assert own.migration.page_stream_congestion == ""
