"""The planner's settings: one dataclass of defaults read by `plan`, `serve` and `simulate`.

The defaults are the settings the simulator measured (docs/simulator.md); an inventory's
`[planner]` section overrides them key by key. Costs are energies, not watts, so the same
settings mean the same thing at any epoch length: the planner divides them by the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    time_limit_s: float = 2.0
    workers: int | None = None        # CP-SAT search workers; None: the machine's cores
    relative_gap: float = 0.01        # stop once the answer is proven within 1% of optimal
    #: a container that moved within the forecast window does not move again unless the cap
    #: forces it
    hysteresis: bool = True
