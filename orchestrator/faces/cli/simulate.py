"""`peakpack simulate`: replay real traces under a policy and report energy, migrations and SLA."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ...domain import inputs
from ...simulate.registry import POLICIES
from .common import JsonOpt, bounded, checked, err, out


def simulate(
    trace: Annotated[Path, typer.Option("--trace", exists=True, file_okay=False,
                                        help="A folder of PlanetLab traces (one file per VM).")],
    scenario: Annotated[str, typer.Option("--scenario", help="cloudsim-planetlab")] = "cloudsim-planetlab",
    policy: Annotated[str, typer.Option("--policy", help=", ".join(POLICIES))] = "peakpack",
    cap: Annotated[
        Optional[float], typer.Option("--cap", callback=bounded(inputs.SIM_CAP),
                                      help="CPU cap for the planner policies.")
    ] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", dir_okay=False, callback=checked(inputs.output_file),
                                                 help="Write hosts on and power over time (PNG).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Replay a day of traces on the simulated cluster through the production planner (or a baseline)."""
    # lazy: start-up speed (each command loads only what it uses)
    from ...simulate.loop import fluid_bound_kwh
    from ...simulate.loop import simulate as run
    from ...simulate.policies import PlannerPolicy
    from ...simulate.registry import get_sim_policy
    from ...simulate.scenario import load_scenario

    sc = load_scenario(scenario, trace)
    pol = get_sim_policy(policy)
    if cap is not None:
        if not isinstance(pol, PlannerPolicy):
            raise typer.BadParameter("only the planner policies take --cap", param_hint="--cap")
        pol.cap = cap
    with Progress(TextColumn(f"{policy}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("steps", total=sc.steps)
        result = run(sc, pol, progress=lambda _t: bar.advance(task))
    if plot is not None:
        from ...simulate.plot import plot_run  # lazy: start-up speed (each command loads only what it uses)

        plot_run(result, sc.step_seconds, plot)
    if json_out:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
        return
    table = Table(title=Text(f"{scenario}: {trace.name}, {len(sc.vm_names)} VMs, {len(sc.host_mips)} hosts"))
    for col in ("policy", "energy kWh", "fluid bound kWh", "migrations", "SLATAH", "PDM", "SLAV", "ESV", "plan s/step"):
        table.add_column(col, justify="right")
    bound = fluid_bound_kwh(sc, getattr(pol, "cap", 0.7))
    table.add_row(result.policy, f"{result.energy_kwh:.2f}", f"{bound:.2f}", str(result.migrations),
                  f"{result.slatah:.2%}", f"{result.pdm:.4%}", f"{result.slav:.6f}", f"{result.esv:.5f}",
                  f"{result.plan_seconds_mean:.3f}")
    out.print(table)
