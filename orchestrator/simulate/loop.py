"""The simulation loop and Beloglazov's metrics.

At every 300 s step each policy sees the VMs' utilization up to the previous step (what the
monitors reported; never the step about to run); it returns migrations; the step then runs with
the new placement and its real demand: energy from each active host's SPECpower curve (hosts with no VM
are off and draw nothing), time at 100% CPU for SLATAH, migration degradation for PDM.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .scenario import Scenario


class SimState:
    """What a policy may look at: the scenario's fixed data, the placement, the past."""

    def __init__(self, scenario: Scenario) -> None:
        self.s = scenario
        self.placement = np.full(len(scenario.vm_names), -1, dtype=int)
        self.t = 0

    @property
    def observed(self) -> int:
        """The last step a policy has seen: decisions for step t use data up to t-1."""
        return max(0, self.t - 1)

    def demand(self, step: int | None = None) -> np.ndarray:
        """MIPS per VM at `step` (default: the last observed), within one core of its host."""
        d = self.s.demand(self.observed if step is None else step)
        placed = self.placement >= 0
        cap = np.where(placed, self.s.host_core_mips[np.maximum(self.placement, 0)], d.max(initial=0))
        return np.minimum(d, cap)

    def history(self, window: int) -> np.ndarray:
        """VMs x (up to `window`) past steps of requested MIPS, oldest first, ending at the last
        observed step."""
        lo = max(0, self.observed - window + 1)
        return self.s.utilization[:, lo:self.observed + 1] * self.s.vm_mips[:, None]

    def host_load(self, demand: np.ndarray | None = None) -> np.ndarray:
        d = self.demand() if demand is None else demand
        load = np.zeros(len(self.s.host_mips))
        placed = self.placement >= 0
        np.add.at(load, self.placement[placed], d[placed])
        return load


class SimPolicy(Protocol):
    name: str

    def decide(self, state: SimState) -> dict[int, int]:
        """VM index -> new host index for every VM to (re)place now; unplaced VMs must be placed."""
        ...


@dataclass
class SimResult:
    policy: str
    energy_kwh: float
    migrations: int
    slatah: float
    pdm: float
    slav: float
    esv: float
    plan_seconds_mean: float
    hosts_on: list[int] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"policy": self.policy, "energy_kwh": round(self.energy_kwh, 3), "migrations": self.migrations,
                "slatah": self.slatah, "pdm": self.pdm, "slav": self.slav, "esv": self.esv,
                "plan_seconds_mean": round(self.plan_seconds_mean, 4)}


def host_power(s: Scenario, load: np.ndarray) -> np.ndarray:
    util = np.minimum(load / s.host_mips, 1.0)
    return np.array([s.host_curves[h].at(util[h]) if load[h] > 0 else 0.0 for h in range(len(load))])


def simulate(scenario: Scenario, policy: SimPolicy, progress: Callable[[int], None] | None = None) -> SimResult:
    s = scenario
    st = SimState(s)
    n_hosts, n_vms = len(s.host_mips), len(s.vm_names)
    active_s = np.zeros(n_hosts)
    overload_s = np.zeros(n_hosts)
    requested = np.zeros(n_vms)
    degraded = np.zeros(n_vms)
    energy_j = 0.0
    migrations = 0
    plan_seconds: list[float] = []
    hosts_on: list[int] = []
    power_w: list[float] = []
    for t in range(s.steps):
        st.t = t
        t0 = time.perf_counter()
        moves = policy.decide(st)
        plan_seconds.append(time.perf_counter() - t0)
        for vm, host in moves.items():
            if st.placement[vm] >= 0 and st.placement[vm] != host:
                migrations += 1
                d = min(s.demand(t)[vm], s.host_core_mips[host])
                degraded[vm] += 0.1 * d * min(s.migration_seconds(vm), s.step_seconds)
            st.placement[vm] = host
        if (st.placement < 0).any():
            raise RuntimeError(f"policy {policy.name} left VMs unplaced at step {t}")
        demand = st.demand(t)
        load = st.host_load(demand)
        active = load > 0
        power = host_power(s, load) if not getattr(policy, "full_power", False) else np.array(
            [c.at(1.0) for c in s.host_curves])
        energy_j += float(power.sum()) * s.step_seconds
        active_s[active] += s.step_seconds
        overload_s[active & (load >= s.host_mips - 1e-9)] += s.step_seconds
        requested += s.demand(t) * s.step_seconds
        hosts_on.append(int(active.sum()))
        power_w.append(float(power.sum()))
        if progress:
            progress(t)
    used = active_s > 0
    slatah = float((overload_s[used] / active_s[used]).mean()) if used.any() else 0.0
    pdm = float(np.mean(np.divide(degraded, requested, out=np.zeros(n_vms), where=requested > 0)))
    slav = slatah * pdm
    kwh = energy_j / 3.6e6
    return SimResult(policy.name, kwh, migrations, slatah, pdm, slav, kwh * slav,
                     float(np.mean(plan_seconds)), hosts_on, power_w)


def fluid_bound_kwh(s: Scenario, cap: float) -> float:
    """The summed demand of each step served by the most efficient hosts loaded exactly at `cap`
    (fractional hosts allowed): no placement under that cap can use less energy."""
    best = min(range(len(s.host_mips)), key=lambda h: s.host_curves[h].at(cap) / (s.host_mips[h] * cap))
    watts_per_mips = s.host_curves[best].at(cap) / (s.host_mips[best] * cap)
    total = sum(float(s.demand(t).sum()) for t in range(s.steps))
    return total * watts_per_mips * s.step_seconds / 3.6e6
