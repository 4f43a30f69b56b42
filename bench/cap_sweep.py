"""Cap sweep for the peakpack policy: energy, SLATAH and migrations for caps 0.5 .. 1.0 on one
PlanetLab day, printed and plotted (a measurement, not a test).

    .venv/bin/python bench/cap_sweep.py 20110303 [--out cap_sweep.png] [--caps 0.5,0.6,0.7,0.8,0.9,1.0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from peakpack.orchestrator.simulate.loop import fluid_bound_kwh, simulate
from peakpack.orchestrator.simulate.registry import get_sim_policy
from peakpack.orchestrator.simulate.scenario import load_scenario

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "planetlab"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("day")
    ap.add_argument("--caps", default="0.5,0.6,0.7,0.8,0.9,1.0")
    ap.add_argument("--out", default="cap_sweep.png")
    args = ap.parse_args()
    folder = Path(args.day) if Path(args.day).is_dir() else DATA / args.day
    sc = load_scenario("cloudsim-planetlab", folder)
    caps = [float(c) for c in args.caps.split(",")]
    rows = []
    print(f"{'cap':>5} {'kWh':>8} {'bound':>8} {'/bound':>7} {'migrations':>10} {'SLATAH':>8}")
    for cap in caps:
        pol = get_sim_policy("peakpack")
        pol.cap = cap
        r = simulate(sc, pol)
        bound = fluid_bound_kwh(sc, cap)
        rows.append((cap, r.energy_kwh, bound, r.migrations, r.slatah))
        print(
            f"{cap:5.2f} {r.energy_kwh:8.2f} {bound:8.2f} {r.energy_kwh / bound:7.3f} "
            f"{r.migrations:10d} {r.slatah:8.2%}",
            flush=True,
        )
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5), dpi=100)
    axes[0].plot(caps, [r[1] for r in rows], "o-", label="peakpack")
    axes[0].plot(caps, [r[2] for r in rows], "--", label="fluid bound")
    axes[0].set_ylabel("energy (kWh)")
    axes[0].legend()
    axes[1].plot(caps, [100 * r[4] for r in rows], "o-")
    axes[1].set_ylabel("SLATAH (%)")
    axes[2].plot(caps, [r[3] for r in rows], "o-")
    axes[2].set_ylabel("migrations")
    for ax in axes:
        ax.set_xlabel("cap")
        ax.grid(alpha=0.3)
    fig.suptitle(f"peakpack cap sweep on {folder.name}")
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
