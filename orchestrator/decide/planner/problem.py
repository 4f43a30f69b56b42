"""The placement problem every policy solves, and the answer it returns.

All policies (the CP-SAT planner and the baselines) implement `Policy.solve(problem) ->
Placement`; `build.build_plan` turns any placement into an ordered, replayable plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ...domain.budgets import Allowance
from ...domain.model import ClusterSnapshot, Inventory
from ...domain.plan import SolverReport
from ...domain.settings import PlannerSettings
from ..predict import FrozenFits


@dataclass(frozen=True)
class Weights:
    """Objective terms, all in watts averaged over one epoch, so they add up with power.

    A migration costs `migration_w + migration_w_per_gb * memory_gb`: the energy of copying the
    memory and the work lost while frozen, spread over the epoch. Saving one idle node (~100 W)
    therefore pays for a handful of moves, while shuffling between powered nodes (a few watts of
    curve difference at most) does not.
    """

    migration_w: float = 6.0
    migration_w_per_gb: float = 3.0
    contention_w: float = 10.0  # per pair of devils sharing a node
    affinity_w: float = 2.0  # per extra node a group spans
    #: epochs a node switched off is expected to stay off: its idle draw is saved in each, so a
    #: powered node's idle power counts this many times (1: only the epoch planned)
    off_epochs: float = 1.0
    #: per MB/s of forecast traffic between two containers on different nodes: its energy over
    #: the horizon it is charged for, spread over one epoch like a migration's
    traffic_w_per_mbps: float = 0.0

    @classmethod
    def from_settings(cls, settings: PlannerSettings, epoch_seconds: float) -> Weights:
        """The settings' energies spread over one epoch (J / s = W). Traffic: 1 MB/s over the
        horizon is `horizon` MB, at `traffic_j_per_gb` / 1000 J per MB, over one epoch."""
        return cls(migration_w=settings.migration_j / epoch_seconds,
                   migration_w_per_gb=settings.migration_j_per_gb / epoch_seconds,
                   off_epochs=settings.off_epochs,
                   traffic_w_per_mbps=settings.traffic_j_per_gb / 1000 * settings.traffic_horizon_s() / epoch_seconds)

    def migration_cost(self, memory_mb: float) -> float:
        return self.migration_w + self.migration_w_per_gb * memory_mb / 1024.0


@dataclass(frozen=True)
class PlacementProblem:
    """Data only: the inventory, the observed (or predicted) snapshot and the knobs.

    `eligible` restricts containers to some nodes (labels, CPU model, per-core speed); a
    container absent from it may go anywhere. `cap` overrides the inventory's CPU cap.
    """

    inventory: Inventory
    snapshot: ClusterSnapshot
    weights: Weights = field(default_factory=Weights)
    #: wall-clock seconds: only a safety net for a starved machine (`budget.Budget`)
    time_limit_s: float = 10.0
    #: the work a policy may spend, in CP-SAT's deterministic seconds: where its search stops
    work_limit: float = PlannerSettings.work_limit
    eligible: Mapping[str, frozenset[str]] = field(default_factory=dict)
    cap: float | None = None
    seed: int = 0
    #: what budgets and windows allow this epoch (orchestrator/domain/budgets.py); default: anything
    allowance: Allowance = field(default_factory=Allowance)
    #: containers the rules keep where they are (`eligible` has them on their node) -> why
    pinned: Mapping[str, str] = field(default_factory=dict)
    #: nodes the rules keep in their power state this epoch (not power-managed here) -> why
    keep_power: Mapping[str, str] = field(default_factory=dict)
    #: forecast bytes per second between two containers (both directions), by unordered pair of
    #: names (`decide.traffic.edge`); each pair on two nodes costs `Weights.traffic_w_per_mbps`
    traffic: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: what a migration freezes a container for, by node pair and memory (`predict.frozen_fits`)
    frozen: FrozenFits = field(default_factory=FrozenFits)
    #: nodes that plan under a lower cap (their `NodeSpec.cap`) -> why (`decide/pressure.lowered_caps`)
    lowered_caps: Mapping[str, str] = field(default_factory=dict)

    @property
    def cpu_cap(self) -> float:
        return self.cap if self.cap is not None else self.inventory.cluster.cap


@dataclass(frozen=True)
class Placement:
    """A policy's answer: where every container goes and which nodes stay powered.

    `cap` is the CPU cap the answer was packed under when a policy uses its own (best-fit at
    95%); None means the problem's. `build_plan` sequences and replays the plan under it.
    """

    assignment: Mapping[str, str]
    powered: frozenset[str]
    report: SolverReport
    cap: float | None = None


class Policy(Protocol):
    """A placement strategy. Pure: no I/O; the same problem gives the same answer (the clock
    only as its time limit's safety net, which its report says when it fired)."""

    @property
    def name(self) -> str: ...

    def solve(self, problem: PlacementProblem) -> Placement: ...
