"""The simulator's policies by name: the one list that `peakpack simulate --policy` (and its
help), `bench/simulate_compare.py` and the tests read.

Kept light on purpose: the CLI lists the names when it starts, so this module imports nothing
heavy and each factory imports its policy (numpy, the planner) only when called."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from ..domain.errors import PeakpackError


def _policies() -> types.ModuleType:
    from . import policies  # lazy: the CLI lists the names at start-up; numpy and the planner load on use

    return policies


#: name -> a new policy; `peakpack` runs the production planner with exactly `PlannerSettings()`
POLICIES: dict[str, Callable[[], Any]] = {
    "peakpack": lambda: _policies().PlannerPolicy("peakpack"),
    "peakpack-curve": lambda: _policies().CurveCapPolicy("peakpack-curve"),
    "npa": lambda: _policies().Npa(),
    "thr-mmt-0.8": lambda: _policies().Beloglazov("thr-mmt-0.8", threshold=0.8),
    "lr-mmt-1.2": lambda: _policies().Beloglazov("lr-mmt-1.2", regression_safety=1.2),
    "bestfit95": lambda: _policies().PlannerPolicy("bestfit95", planner="bestfit95",
                                                   settings=_policies().PlannerSettings(cap=0.95)),
    "spread": lambda: _policies().PlannerPolicy("spread", planner="spread"),
    "ffd": lambda: _policies().PlannerPolicy("ffd", planner="ffd"),
    "dotproduct": lambda: _policies().PlannerPolicy("dotproduct", planner="dotproduct"),
}


def get_sim_policy(name: str) -> Any:
    """A new policy called `name`; one-line PeakpackError naming the others otherwise."""
    if name not in POLICIES:
        raise PeakpackError(f"--policy: unknown {name!r}; use one of {', '.join(POLICIES)}")
    return POLICIES[name]()


__all__ = ["POLICIES", "get_sim_policy"]
