"""Policies in the simulator (by name: `registry.py`).

- `peakpack`, `peakpack-curve` and the planner baselines (`bestfit95`, `spread`, `ffd`,
  `dotproduct`) run the PRODUCTION planner (`orchestrator.planning.make_plan` with the planner
  registry's policy), fed a snapshot whose demands are a forecast from the recent trace (never
  the future).
- `npa`, `thr-mmt-0.8`, `lr-mmt-1.2`: Beloglazov & Buyya's policies as in CloudSim 3.0.3 -
  overload detection by static threshold or local regression (safety 1.2), minimum-migration-time
  VM selection, power-aware best-fit-decreasing placement, and underload consolidation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import numpy as np

from ..decide.forecast import forecast, window_epochs
from ..decide.planner.rules import Remembered
from ..decide.solve import make_plan
from ..domain.capacity import capacity, within
from ..domain.errors import PeakpackError
from ..domain.model import ClusterConfig, ClusterSnapshot, Container, Inventory, NodeSpec, NodeState
from ..domain.plan import ActionKind
from ..domain.settings import PlannerSettings
from .loop import SimState
from .scenario import Scenario

#: planner units: cpus are counts of 10 MIPS, so heterogeneous hosts fit the planner's model
MIPS_PER_CPU = 10.0


# -- Beloglazov --------------------------------------------------------------------------------


class Npa:
    """Non power aware: every host on at full power; VMs placed once, never moved."""

    name = "npa"
    full_power = True

    def decide(self, st: SimState) -> dict[int, int]:
        if st.t:
            return {}
        hosts = len(st.s.host_mips)
        return {vm: vm % hosts for vm in range(len(st.s.vm_names))}


@dataclass
class Beloglazov:
    """Dynamic consolidation with MMT selection and PABFD placement."""

    name: str
    threshold: float = 0.8          # THR: overloaded above this utilization
    regression_safety: float | None = None  # LR: overloaded if safety x forecast >= 1
    history: int = 10
    fallback_threshold: float = 0.7

    def _overloaded(self, st: SimState, load: np.ndarray, hist: np.ndarray, host: int) -> bool:
        cap = st.s.host_mips[host]
        if self.regression_safety is None:
            return load[host] / cap > self.threshold
        if hist.shape[1] < self.history:
            return load[host] / cap > self.fallback_threshold
        u = hist[host] / cap
        return self.regression_safety * _loess_forecast(u) >= 1.0

    def decide(self, st: SimState) -> dict[int, int]:
        s = st.s
        demand = st.s.demand(st.observed)
        if st.t == 0:
            return _pabfd(st, list(range(len(demand))), demand, set(), self)
        placement = st.placement.copy()
        load = _loads(placement, demand, len(s.host_mips))
        hist = _host_history(st, placement)
        moves: dict[int, int] = {}
        overloaded = [h for h in np.flatnonzero(load > 0).tolist() if self._overloaded(st, load, hist, h)]
        to_place: list[int] = []
        for h in overloaded:
            vms = sorted(np.flatnonzero(placement == h).tolist(), key=lambda v: s.vm_ram_mb[v])  # MMT
            for vm in vms:
                if not self._overloaded(st, load, hist, int(h)):
                    break
                load[h] -= demand[vm]
                hist[h] -= st.history(self.history)[vm][-hist.shape[1]:] if hist.shape[1] else 0
                placement[vm] = -1
                to_place.append(int(vm))
        excluded = {int(h) for h in overloaded}
        placed = _pabfd_into(st, to_place, demand, excluded, self, placement, load, hist)
        moves.update(placed)
        # underload: empty the least-loaded hosts whose VMs all fit elsewhere
        tried: set[int] = set(excluded) | set(placed.values())
        while True:
            candidates = [int(h) for h in np.flatnonzero(load > 0) if int(h) not in tried]
            if not candidates:
                break
            h = min(candidates, key=lambda x: load[x] / s.host_mips[x])
            tried.add(h)
            vms = [int(v) for v in np.flatnonzero(placement == h)]
            trial_p, trial_l, trial_h = placement.copy(), load.copy(), hist.copy()
            for vm in vms:
                trial_p[vm] = -1
            trial_l[h] = 0
            trial_h[h] = 0
            got = _pabfd_into(st, vms, demand, tried, self, trial_p, trial_l, trial_h, only_active=True)
            if len(got) == len(vms):
                placement, load, hist = trial_p, trial_l, trial_h
                moves.update(got)
                tried.update(got.values())
        return {vm: int(placement[vm]) for vm in moves}


def _loads(placement: np.ndarray, demand: np.ndarray, hosts: int) -> np.ndarray:
    load = np.zeros(hosts)
    placed = placement >= 0
    np.add.at(load, placement[placed], demand[placed])
    return load


def _host_history(st: SimState, placement: np.ndarray) -> np.ndarray:
    hist_vm = st.history(10)
    hist = np.zeros((len(st.s.host_mips), hist_vm.shape[1]))
    placed = placement >= 0
    np.add.at(hist, placement[placed], hist_vm[placed])
    return hist


def _loess_forecast(u: np.ndarray) -> float:
    """CloudSim's local regression: tricube-weighted linear fit, forecast one step ahead."""
    n = len(u)
    x = np.arange(n, dtype=float)
    d = (n - 1 - x) / n
    w = (1 - d**3) ** 3
    wx, wy = np.sum(w * x) / w.sum(), np.sum(w * u) / w.sum()
    denom = np.sum(w * (x - wx) ** 2)
    slope = np.sum(w * (x - wx) * (u - wy)) / denom if denom > 0 else 0.0
    return float(wy + slope * (n - wx))


def _pabfd(st: SimState, vms: list[int], demand: np.ndarray, excluded: set[int], pol: Beloglazov) -> dict[int, int]:
    p = np.full(len(demand), -1, dtype=int)
    load = np.zeros(len(st.s.host_mips))
    hist = np.zeros((len(st.s.host_mips), 0))
    return _pabfd_into(st, vms, demand, excluded, pol, p, load, hist)


def _pabfd_into(st: SimState, vms: list[int], demand: np.ndarray, excluded: set[int], pol: Beloglazov,
                placement: np.ndarray, load: np.ndarray, hist: np.ndarray, only_active: bool = False) -> dict[int, int]:
    """Power-aware best fit decreasing: each VM (largest first) to the host whose power grows
    least without becoming overloaded; an off host is woken only when no active host fits."""
    s = st.s
    result: dict[int, int] = {}
    vm_hist = st.history(pol.history)
    for vm in sorted(vms, key=lambda v: -demand[v]):
        best, best_inc = -1, math.inf
        for pass_active in (True, False):
            if not pass_active and (only_active or best >= 0):
                break
            hosts = np.flatnonzero((load > 0) if pass_active else (load == 0))
            for h in hosts.tolist():
                if h in excluded:
                    continue
                d = min(demand[vm], s.host_core_mips[h])
                if not within(load[h] + d, s.host_mips[h]):
                    continue
                load[h] += d
                if hist.shape[1]:
                    hist[h] += vm_hist[vm][-hist.shape[1]:]
                over = pol._overloaded(st, load, hist, h)
                load[h] -= d
                if hist.shape[1]:
                    hist[h] -= vm_hist[vm][-hist.shape[1]:]
                if over:
                    continue
                before = s.host_curves[h].at(load[h] / s.host_mips[h]) if load[h] > 0 else 0.0
                inc = s.host_curves[h].at((load[h] + d) / s.host_mips[h]) - before
                if inc < best_inc:
                    best, best_inc = h, inc
        if best < 0:
            if only_active:
                return result
            raise PeakpackError(f"simulation: no host can take VM {st.s.vm_names[vm]}")
        d = min(demand[vm], s.host_core_mips[best])
        load[best] += d
        if hist.shape[1]:
            hist[best] += vm_hist[vm][-hist.shape[1]:]
        placement[vm] = best
        result[vm] = best
    return result


# -- the production planner ----------------------------------------------------------------------


#: the simulated clock: step t is at SIM_T0 + t x the scenario's step
SIM_T0 = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass
class PlannerPolicy:
    """Any registry policy of the production planner, on a forecast snapshot every step, with
    exactly the service's settings (`PlannerSettings`, default: the defaults) on the scenario's
    epoch: the forecast rule (orchestrator/decide/forecast.py), the weights, the power rules and the
    hysteresis, fed by what the policy remembers as the store would (wake-ups, moves)."""

    name: str
    planner: str = "peakpack"
    settings: PlannerSettings = field(default_factory=PlannerSettings)
    _inventory: Inventory | None = field(default=None, init=False, repr=False)
    _facts: Remembered = field(default_factory=Remembered, init=False, repr=False)

    @property
    def cap(self) -> float:
        return self.settings.cap

    @cap.setter
    def cap(self, value: float) -> None:
        """`--cap` and the cap sweep: the same settings with another cap."""
        self.settings = replace(self.settings, cap=value)
        self._inventory = None

    def inventory(self, st: SimState) -> Inventory:
        if self._inventory is None:
            s = st.s
            nodes = tuple(
                NodeSpec(name=f"h{h}", address=f"10.{h // 250}.{h % 250}.1", cpus=int(s.host_mips[h] / MIPS_PER_CPU),
                         memory_mb=4096, power=s.host_curves[h])
                for h in range(len(s.host_mips))
            )
            cluster = ClusterConfig("sim", cap=self.settings.cap, memory_cap=self.settings.memory_cap,
                                    epoch_seconds=s.step_seconds)
            self._inventory = Inventory(cluster, nodes, planner=self.settings)
        return self._inventory

    def forecast(self, st: SimState) -> np.ndarray:
        """The service's forecast over the trace's past steps, within one core."""
        history = st.history(window_epochs(self.settings.forecast, st.s.step_seconds))
        return np.minimum(forecast(history, self.settings.forecast), st.s.host_core_mips.max())

    def initial_placement(self, st: SimState, pred: np.ndarray) -> np.ndarray:
        """First fit decreasing onto the hosts with the least watts per MIPS at the cap: what an
        operator's initial deployment would do; the planner improves it from there."""
        s = st.s
        hosts = sorted(range(len(s.host_mips)), key=lambda h: (s.host_curves[h].at(self.cap) / s.host_mips[h], h))
        room = {h: float(capacity(s.host_mips[h], 0.0, self.cap, self.settings.memory_cap)[0]) for h in hosts}
        placement = np.full(len(pred), -1, dtype=int)
        for vm in sorted(range(len(pred)), key=lambda v: -pred[v]):
            h = next((h for h in hosts if within(pred[vm], room[h])), None)
            if h is None:
                raise PeakpackError(f"simulation: VM {s.vm_names[vm]} fits on no host under cap {self.cap}")
            room[h] -= pred[vm]
            placement[vm] = h
        return placement

    def decide(self, st: SimState) -> dict[int, int]:
        s = st.s
        inv = self.inventory(st)
        pred = self.forecast(st)
        first = st.t == 0
        placement = st.placement if not first else np.zeros(len(pred), dtype=int)
        if first:
            placement = self.initial_placement(st, pred)
        on = set(int(h) for h in placement)
        now = SIM_T0 + timedelta(seconds=st.t * s.step_seconds)
        snap = ClusterSnapshot(
            nodes=tuple(NodeState(f"h{h}", powered=h in on) for h in range(len(s.host_mips))),
            containers=tuple(Container(name=f"v{v}", node=f"h{int(placement[v])}", cpu=float(pred[v]) / MIPS_PER_CPU,
                                       memory_mb=0.0) for v in range(len(pred))),
            taken_at=now,
        )
        plan = make_plan(inv, snap, policy=self.planner, settings=self.settings, facts=self._facts)
        moves = {v: int(placement[v]) for v in range(len(pred))} if first else {}
        moved, woken = dict(self._facts.moved_at), dict(self._facts.woken_at)
        for a in plan.actions:
            if a.kind is ActionKind.MIGRATE and a.container and a.target:
                moves[int(a.container[1:])] = int(a.target[1:])
                moved[a.container] = now
            elif a.kind is ActionKind.POWER_ON and a.node:
                woken[a.node] = now
        self._facts = Remembered(woken_at=woken, moved_at=moved)
        return moves


#: the share of a host kept free for demand above the forecast when the cap comes from the curve
SLA_HEADROOM = 0.20


def curve_cap(s: Scenario, headroom: float = SLA_HEADROOM) -> float:
    """Each host's load of peak work per watt, bounded by the SLA headroom; the planner takes one
    cap, so the lowest over the hosts (these SPECpower curves all peak at 100%, so 0.80 with 20% headroom;
    10% headroom measured SLATAH as high as LR-MMT-1.2's)."""
    return min(c.peak_efficiency_util(hi=1.0 - headroom) for c in set(s.host_curves))


class CurveCapPolicy(PlannerPolicy):
    """peakpack with the cap derived from the hosts' power curves instead of the default 0.70."""

    def decide(self, st: SimState) -> dict[int, int]:
        if st.t == 0:
            self.cap = curve_cap(st.s)
        return super().decide(st)
