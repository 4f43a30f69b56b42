"""The QoS guards' settings as the inventory declares them (`[qos]`), and the facts the controller
keeps about what the guards did.

Each node runs a guard (`qos/guard.py`): a single file with only Python's standard library, since
nodes need not have peakpack installed. It keeps its own defaults for when its `guard.json` is
missing; `GuardSettings` here is what peakpack writes into that file, and
`tests/unit/test_qos_guard.py` holds the two to the same keys, defaults and ranges.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class GuardSettings:
    """What every node's guard does between epochs (docs/qos.md). Shares are of the node's CPU
    capacity, of its memory limit, or of the guard's check interval."""

    interval_seconds: float = 1.0
    cpu_watermark: float = 0.80        # node CPU use above this share of its CPUs is a breach
    stall_watermark: float = 0.10      # a latency-sensitive container stalled this share of the interval
    be_share: float = 0.65             # best-effort may use CPUs x this - latency-sensitive use ...
    be_floor: float = 0.10             # ... and never less than CPUs x this
    cpu_step: float = 0.10             # the best-effort cap moves by CPUs x this per check
    breaches_to_act: int = 2           # checks in a row over a watermark before the guard acts
    clears_to_restore: int = 2         # clear checks in a row before it gives CPU back
    memory_watermark: float = 0.10     # available memory under this share: stop a best-effort container
    memory_full_watermark: float = 0.10  # memory.pressure `full` over this share for breaches_to_act checks: same

    def by_key(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class QosSettings:
    """Inventory `[qos]`: the guards' settings, whether `serve` installs and updates the guards
    itself, and how often it restarts a best-effort container its guard stopped."""

    guard: GuardSettings = field(default_factory=GuardSettings)
    #: `serve` copies the guard to a node where it is missing, outdated or stopped, and (re)starts it
    install: bool = True
    #: a container the guard stopped is restarted at most this often an hour; then it stays stopped
    #: (it grows again each time: an operator should look at it)
    restarts_per_hour: int = 3


__all__ = ["GuardSettings", "QosSettings"]
