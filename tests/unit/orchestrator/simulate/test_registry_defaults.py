"""The simulator's `peakpack` policy is what `plan` and `serve` run: exactly `PlannerSettings()` on
the scenario's step, nothing tuned for the simulator; its policies are listed from one registry."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import peakpack.orchestrator.decide.solve
from peakpack.orchestrator.domain.settings import PlannerSettings
from peakpack.orchestrator.faces.cli.app import app
from peakpack.orchestrator.simulate import policies
from peakpack.orchestrator.simulate.loop import simulate
from peakpack.orchestrator.simulate.registry import POLICIES, get_sim_policy
from peakpack.orchestrator.simulate.scenario import G4, G5, Scenario

TINY = Scenario(
    name="tiny", host_core_mips=np.array([1860.0, 2660.0]), host_cores=np.array([2, 2]), host_curves=(G4, G5),
    host_kind=("G4", "G5"), vm_names=("vm0", "vm1", "vm2"), vm_mips=np.array([500.0] * 3),
    vm_ram_mb=np.array([625.0] * 3), utilization=np.full((3, 3), 0.2), step_seconds=120,
)


def test_the_peakpack_policy_runs_exactly_the_default_settings_on_the_scenarios_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []

    def spy(inventory: Any, snapshot: Any, **kwargs: Any) -> Any:
        calls.append((inventory, kwargs))
        return peakpack.orchestrator.decide.solve.make_plan(inventory, snapshot, **kwargs)

    monkeypatch.setattr(policies, "make_plan", spy)
    simulate(TINY, get_sim_policy("peakpack"))
    assert len(calls) == TINY.steps
    for inventory, kwargs in calls:
        assert kwargs["policy"] == "peakpack" and kwargs.get("time_limit_s") is None
        assert kwargs["settings"] == PlannerSettings() == inventory.planner
        assert inventory.cluster.epoch_seconds == TINY.step_seconds
        assert (inventory.cluster.cap, inventory.cluster.memory_cap) == (PlannerSettings().cap,
                                                                          PlannerSettings().memory_cap)


def test_every_registered_policy_runs_and_the_cli_lists_them_all() -> None:
    short = replace(TINY, utilization=TINY.utilization[:, :1])
    for name in POLICIES:
        assert simulate(short, get_sim_policy(name)).policy == name
    shown = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "300"})
    assert shown.exit_code == 0 and ", ".join(POLICIES) in shown.stdout, shown.stdout
