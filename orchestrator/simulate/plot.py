"""One picture of a simulated day: hosts on and cluster power over time."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .loop import SimResult


def plot_run(result: SimResult, step_seconds: int, path: Path) -> Path:
    hours = [i * step_seconds / 3600 for i in range(len(result.hosts_on))]
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 5), sharex=True, dpi=100)
    a.step(hours, result.hosts_on, where="post")
    a.set_ylabel("hosts on")
    a.set_title(f"{result.policy}: {result.energy_kwh:.1f} kWh, {result.migrations} migrations, "
                f"SLATAH {result.slatah:.2%}")
    b.plot(hours, [w / 1000 for w in result.power_w])
    b.set_ylabel("power (kW)")
    b.set_xlabel("hour")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
