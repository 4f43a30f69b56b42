"""The simulator's metrics on hand-made traces (values computed by hand), the production
planner behind the `peakpack` policy, and the CLI's contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import peakpack.orchestrator.decide.solve
from peakpack.orchestrator.simulate import policies
from peakpack.orchestrator.simulate.loop import SimState, fluid_bound_kwh, simulate
from peakpack.orchestrator.simulate.registry import get_sim_policy
from peakpack.orchestrator.simulate.scenario import G4, G5, Scenario, cloudsim_planetlab
from tests.support.paths import REPO


def tiny(util: list[list[float]], mips: list[float], ram: list[float] | None = None) -> Scenario:
    return Scenario(
        name="tiny", host_core_mips=np.array([1860.0, 2660.0]), host_cores=np.array([2, 2]),
        host_curves=(G4, G5), host_kind=("G4", "G5"), vm_names=tuple(f"vm{i}" for i in range(len(util))),
        vm_mips=np.array(mips), vm_ram_mb=np.array(ram or [625.0] * len(util)), utilization=np.array(util),
    )


class Fixed:
    """Places every VM on a given host at step 0 and moves VMs as scripted."""

    def __init__(self, name: str, start: list[int], moves: dict[int, dict[int, int]] | None = None) -> None:
        self.name, self.start, self.moves = name, start, moves or {}

    def decide(self, st: SimState) -> dict[int, int]:
        if st.t == 0:
            return dict(enumerate(self.start))
        return self.moves.get(st.t, {})


def test_energy_is_the_curve_at_the_load_and_idle_hosts_are_off() -> None:
    # one VM asking 2660 MIPS at 50% = 1330 MIPS on the G5 host (5320 MIPS): 25% load
    s = tiny([[0.5, 0.5]], [2660])
    r = simulate(s, Fixed("fixed", [1]))
    expected_w = G5.at(0.25)  # 103 W by linear interpolation between 101 and 105
    assert expected_w == pytest.approx(103.0)
    assert r.energy_kwh == pytest.approx(expected_w * 600 / 3.6e6)
    assert r.hosts_on == [1, 1] and r.migrations == 0 and r.slatah == 0 and r.pdm == 0


def test_slatah_is_time_at_full_cpu_over_active_time() -> None:
    # two VMs of 1860 MIPS on the G4 host (3720 MIPS): 100% busy in step 1 only, of 4 active steps
    s = tiny([[0.5, 1.0, 0.5, 0.5], [0.5, 1.0, 0.5, 0.5]], [1860, 1860])
    r = simulate(s, Fixed("fixed", [0, 0]))
    assert r.slatah == pytest.approx(1 / 4)


def test_pdm_is_ten_percent_of_cpu_during_migration_over_requested() -> None:
    # VM of 1000 MIPS at 100% with 625 MB RAM: migration takes 625 / 62.5 = 10 s and loses 10%
    s = tiny([[1.0, 1.0]], [1000], ram=[625.0])
    r = simulate(s, Fixed("mover", [0], {1: {0: 1}}))
    assert r.migrations == 1
    requested = 1000 * 300 * 2
    assert r.pdm == pytest.approx(0.1 * 1000 * 10 / requested)
    assert r.slav == pytest.approx(r.slatah * r.pdm) and r.esv == pytest.approx(r.energy_kwh * r.slav)


def test_policies_see_only_the_past() -> None:
    s = tiny([[0.1, 0.9, 0.2]], [1000])
    seen = []

    class Spy(Fixed):
        def decide(self, st: SimState) -> dict[int, int]:
            seen.append(st.history(10)[0].tolist())
            return super().decide(st)

    simulate(s, Spy("spy", [1]))
    assert seen == [[100.0], [100.0], [100.0, 900.0]]  # step 2 is decided with steps 0..1 only


def test_fluid_bound_uses_the_most_efficient_host_at_the_cap() -> None:
    s = tiny([[1.0]], [2660])
    per_mips = min(G4.at(0.7) / (3720 * 0.7), G5.at(0.7) / (5320 * 0.7))
    assert fluid_bound_kwh(s, 0.7) == pytest.approx(2660 * per_mips * 300 / 3.6e6)


def test_peakpack_policy_is_the_production_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    assert policies.make_plan is peakpack.orchestrator.decide.solve.make_plan
    calls = []

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs.get("policy"))
        return peakpack.orchestrator.decide.solve.make_plan(*args, **kwargs)

    monkeypatch.setattr(policies, "make_plan", spy)
    s = tiny([[0.2] * 3, [0.2] * 3, [0.2] * 3], [500, 500, 500])
    r = simulate(s, get_sim_policy("peakpack"))
    assert calls == ["peakpack"] * 3
    assert r.hosts_on[-1] == 1  # small VMs consolidated on one host


def test_vm_types_come_in_contiguous_quarters(tmp_path: Path) -> None:
    for i in range(8):
        (tmp_path / f"vm{i}").write_text("10\n20\n")
    s = cloudsim_planetlab(tmp_path, hosts=4)
    assert s.vm_mips.tolist() == [2500, 2500, 2000, 2000, 1000, 1000, 500, 500]
    assert s.vm_ram_mb.tolist() == [870, 870, 1740, 1740, 1740, 1740, 613, 613]
    assert s.host_core_mips.tolist() == [1860, 1860, 2660, 2660] and s.steps == 2


def test_cli_json_plot_and_errors(tmp_path: Path) -> None:
    day = tmp_path / "day"
    day.mkdir()
    for i in range(12):
        (day / f"vm{i:02d}").write_text("\n".join(str(10 + (i * 7 + t) % 40) for t in range(6)) + "\n")
    run = [sys.executable, "-m", "peakpack", "simulate", "--trace", str(day), "--scenario",
           "cloudsim-planetlab", "--json", "--plot", str(tmp_path / "p.png")]
    proc = subprocess.run([*run, "--policy", "lr-mmt-1.2"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)) == {"policy", "energy_kwh", "migrations", "slatah", "pdm", "slav", "esv",
                                            "plan_seconds_mean"}
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    bad = subprocess.run([*run, "--policy", "magic"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert bad.returncode == 2 and "--policy" in bad.stderr and "Traceback" not in bad.stderr
    missing = subprocess.run(
        [*run[:4], "--trace", str(tmp_path / "nope"), "--json"], capture_output=True, text=True, cwd=REPO
    )
    assert missing.returncode == 2 and "--trace" in missing.stderr
