"""Every simulator policy on the given PlanetLab days (a measurement, not a test).

    .venv/bin/python bench/simulate_compare.py 20110303 [20110306 ...] [--policies a,b]

Prints energy, migrations, SLATAH, SLAV, ratios to LR-MMT-1.2 and plan time, with the fluid lower
bound at the cap of 0.70 beside them. Days are folder names under ../shared/data/planetlab (the
project's shared folder beside the repository, not part of it) or paths.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peakpack.orchestrator.simulate.loop import fluid_bound_kwh, simulate
from peakpack.orchestrator.simulate.registry import POLICIES, get_sim_policy
from peakpack.orchestrator.simulate.scenario import load_scenario

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "planetlab"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("days", nargs="+")
    ap.add_argument("--policies", default=",".join(POLICIES))
    args = ap.parse_args()
    names = args.policies.split(",")
    if "lr-mmt-1.2" in names:  # the reference goes first so every row can show its ratio
        names.remove("lr-mmt-1.2")
        names.insert(0, "lr-mmt-1.2")
    header = (f"{'day':9} {'policy':12} {'kWh':>8} {'/LR':>6} {'/bound':>7} {'migr':>7} {'/LR':>6} "
              f"{'SLATAH':>7} {'/LR':>6} {'SLAV':>10} {'s/step':>7}")
    print(header)
    print("-" * len(header))
    for day in args.days:
        folder = Path(day) if Path(day).is_dir() else DATA / day
        sc = load_scenario("cloudsim-planetlab", folder)
        bound = fluid_bound_kwh(sc, 0.70)
        ref = None
        for name in names:
            r = simulate(sc, get_sim_policy(name))
            ref = ref or r

            def ratio(a: float, b: float) -> str:
                return f"{a / b:6.3f}" if b else "     -"

            print(
                f"{folder.name:9} {name:12} {r.energy_kwh:8.2f} {ratio(r.energy_kwh, ref.energy_kwh)} "
                f"{r.energy_kwh / bound:7.3f} {r.migrations:7d} {ratio(r.migrations, ref.migrations)} "
                f"{r.slatah:7.2%} {ratio(r.slatah, ref.slatah)} {r.slav:10.3e} {r.plan_seconds_mean:7.3f}",
                flush=True,
            )
        print(f"{folder.name:9} {'fluid bound':12} {bound:8.2f}  (demand on G5 hosts at exactly 0.70)")


if __name__ == "__main__":
    main()
