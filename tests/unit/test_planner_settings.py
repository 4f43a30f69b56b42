"""`[planner]` in the inventory: one PlannerSettings, older keys still accepted, conflicts refused,
and `peakpack config show` says where every value came from."""

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
    path = inventory(tmp_path, "[planner]\ntime_limit_s = 1.5\n")
    result = CliRunner().invoke(app, ["config", "show", "--inventory", str(path), "--json"])
    assert result.exit_code == 0, result.output
    settings = json.loads(result.stdout)["settings"]
    assert set(settings) == set(PlannerSettings().by_key())
    assert settings["time_limit_s"] == {"value": 1.5, "source": "inventory [planner].time_limit_s"}
    assert settings["workers"] == {"value": None, "source": "default"}
