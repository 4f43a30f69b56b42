"""What a solve may spend, and what stops it: deterministic work, with the wall clock as a
safety net only.

Work is CP-SAT's deterministic time (an operation count scaled to about one second of one core on
its reference machine), summed over every CP-SAT solve of a search. It is the same on every run
of the same model with the same parameters, whatever the machine's load, so a search stopped by
its work limit, or by its own rules (patience, a proven gap), gives the same plan every time.
The wall-clock deadline only catches a machine too starved to finish the work in time: a search
the deadline stops remembers it (`clock_stopped`), and the plan says that another run may differ.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Budget:
    """Work left for one search, and its safety net."""

    limit: float  # deterministic seconds the search may spend
    deadline: float  # time.perf_counter() at which the safety net stops it
    spent: float = 0.0
    clock_stopped: bool = False

    @property
    def left(self) -> float:
        return max(self.limit - self.spent, 0.0)

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.limit

    def seconds_left(self) -> float:
        """Wall-clock seconds until the safety net: a CP-SAT solve's own time limit."""
        return max(self.deadline - time.perf_counter(), 0.0)

    def late(self) -> bool:
        """Whether the safety net stops the search here (remembered: the answer says so). Asked
        only where the deterministic rules would go on, so it fires only when it changes the
        answer."""
        if time.perf_counter() < self.deadline:
            return False
        self.clock_stopped = True
        return True

    def spend(self, work: float, *, clock_stopped: bool = False) -> None:
        """Count `work` deterministic seconds done; `clock_stopped`: the safety net cut it short."""
        self.spent += work
        self.clock_stopped = self.clock_stopped or clock_stopped
