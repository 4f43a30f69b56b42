"""The planner's settings: one dataclass of defaults read by `plan`, `serve` and `simulate`.

The defaults are the settings the simulator measured (docs/simulator.md); an inventory's
`[planner]` section overrides them key by key (`peakpack config show` prints the effective
values and where each came from). Costs are energies, not watts, so the same settings mean the
same thing at any epoch length: the planner divides them by the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class ForecastSettings:
    """How a container's CPU demand for the coming epochs is predicted from its history.

    The mean of the last `window_seconds` of per-epoch samples plus `k_std` standard deviations,
    or, when `quantile` is set, that quantile of them instead. A consolidation should last at
    least the window, so it is planned against it, not against the last sample's noise.
    """

    window_seconds: float = 7200.0
    quantile: float | None = None
    k_std: float = 0.0


@dataclass(frozen=True)
class QosCapSettings:
    """A lower CPU cap for a node whose latency-sensitive containers stalled (docs/qos.md).

    A node whose most stalled latency-sensitive container was ready but not running (PSI cpu
    `some`, else run-queue wait) more than `stall_share` of an observed interval plans under a cap
    `cap_step` lower at the next epoch, one more step for each such interval in a row, down to
    `min_cap`; after `clear_epochs` clear intervals in a row it gets one step back. Lowered at
    once, raised slowly: hysteresis, so a node does not flap between two caps.
    """

    stall_share: float = 0.10
    cap_step: float = 0.10
    min_cap: float = 0.40
    clear_epochs: int = 3


@dataclass(frozen=True)
class PlannerSettings:
    """Everything the planner is told besides the cluster itself (inventory `[planner]`)."""

    cap: float = 0.70                 # CPU load per node, share of its cores
    memory_cap: float = 0.95          # memory per node, share of its MB
    #: energy of one migration: about what source and target draw while 1.7 GB copies at
    #: 62.5 MB/s (28 s); plus the part that grows with the memory copied
    migration_j: float = 4500.0
    migration_j_per_gb: float = 1800.0
    #: epochs a node switched off is expected to stay off (its idle power counts this many times)
    off_epochs: float = 1.5
    #: what one GB between containers on two different nodes costs, in joules: the NICs, the
    #: switches and the network stacks it crosses (and, at the operator's choice, a price for its
    #: latency); 0: the traffic graph plays no part. Charged over the forecast window
    #: (`traffic_horizon_s`), since a pair joined keeps its saving for as long as it keeps talking
    traffic_j_per_gb: float = 100.0
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    time_limit_s: float = 2.0
    workers: int | None = None        # CP-SAT search workers; None: its full portfolio of 8
    relative_gap: float = 0.01        # stop once the answer is proven within 1% of optimal
    #: a container that moved within the forecast window does not move again unless the cap
    #: forces it
    hysteresis: bool = True
    # -- power decisions (also accepted as `[power_policy]`); see orchestrator/planner/rules.py
    #: a node woken, or that became empty by itself, this recently is not switched off
    grace_seconds: float = 600.0
    spare_nodes: int = 0              # empty powered nodes kept on as spare capacity
    boot_seconds: float = 180.0       # power-on until the node answers SSH
    boot_power_w: float | None = None  # draw while booting; None: the node's max_w
    wake_timeout_seconds: float = 300.0  # a node not answering after this is quarantined
    #: `[planner.qos]`: the cap of a node whose latency-sensitive containers stalled
    qos: QosCapSettings = field(default_factory=QosCapSettings)

    def off_horizon_s(self, epoch_seconds: float) -> float:
        """How long a node switched off now is expected to stay off: what a boot must pay for."""
        return self.off_epochs * epoch_seconds

    def traffic_horizon_s(self) -> float:
        """How long a pair's forecast traffic is charged for: the forecast window, over which the
        forecast holds and hysteresis keeps a moved container where it went."""
        return self.forecast.window_seconds

    def by_key(self) -> dict[str, Any]:
        """Every setting by its inventory key (`forecast.window_seconds` for `[planner.forecast]`,
        `qos.stall_share` for `[planner.qos]`)."""
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in NESTED}
        for section in NESTED:
            value = getattr(self, section)
            flat.update({f"{section}.{f.name}": getattr(value, f.name) for f in fields(value)})
        return flat


#: the sub-tables of `[planner]`, each a settings dataclass of its own
NESTED = ("forecast", "qos")
