"""The QoS guards' settings, each declared once with its default, range and help, and the facts
the controller keeps about what the guards did.

Each node runs a guard (`qos/guard/`, shipped as one archive, `guard.pyz`): it needs nothing but
Python >= 3.9's standard library, since nodes need not have peakpack installed. This module is
standard-library only too, and the archive carries it: the guard reads its `guard.json` by these
same fields and ranges (`parse_guard_json`), and peakpack writes that file from the inventory's
`[qos]` (the keys marked `inventory`), which `domain/config.py` validates against the same ranges.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def _key(default: Any, lo: float, hi: float, help: str, *, inventory: bool = True, integer: bool = False) -> Any:
    """One setting: its default, its range [lo, hi], whether the inventory's `[qos]` sets it (else
    only guard.json does), whether it is a whole number, and what it means."""
    return field(default=default, metadata={"range": (lo, hi), "inventory": inventory, "integer": integer,
                                            "help": help})


@dataclass(frozen=True)
class GuardSettings:
    """What every node's guard does between epochs (docs/qos.md). Shares are of the node's CPU
    capacity, of its memory limit, or of the guard's check interval."""

    interval_seconds: float = _key(1.0, 0.2, 60, "seconds between two checks")
    cpu_watermark: float = _key(0.80, 0.05, 1, "node CPU use above this share of its capacity is a breach")
    stall_watermark: float = _key(0.10, 0.001, 1, "a latency-sensitive container stalled this share of the "
                                                    "interval is a breach")
    be_share: float = _key(0.65, 0.01, 1, "best-effort may use capacity x this - latency-sensitive use ...")
    be_floor: float = _key(0.10, 0.01, 1, "... and never less than capacity x this")
    cpu_step: float = _key(0.10, 0.01, 1, "the best-effort cap moves by capacity x this per check")
    breaches_to_act: int = _key(2, 1, 60, "checks in a row over a watermark before the guard acts", integer=True)
    clears_to_restore: int = _key(2, 1, 600, "clear checks in a row before it gives CPU back", integer=True)
    memory_watermark: float = _key(0.10, 0.0, 0.9, "available memory under this share of the limit: stop a "
                                                   "best-effort container")
    memory_full_watermark: float = _key(0.10, 0.001, 1, "memory.pressure `full` over this share for "
                                                          "breaches_to_act checks: the same")
    # guard.json only (the inventory does not set these)
    stall_steps: int = _key(1, 0, 100, "on stall, the cap goes at most this many steps under the formula",
                            inventory=False, integer=True)
    be_busy_share: float = _key(0.05, 0.0, 1, "best-effort using less than capacity x this is not blamed for "
                                                "a stall", inventory=False)
    memory_release: float = _key(0.02, 0.0, 0.5, "stop best-effort until the watermark + this is available",
                                 inventory=False)
    evict_cooldown_seconds: float = _key(3.0, 0.0, 600, "seconds between two stops", inventory=False)
    hold_ttl_seconds: float = _key(900.0, 1, 86400, "a hold without `until` lasts this long after it was written",
                                   inventory=False)
    log_max_bytes: int = _key(4 << 20, 4096, 1 << 30, "events.jsonl rotates past this size", inventory=False,
                              integer=True)
    cpus: float | None = _key(None, 0.01, 100000, "the node's declared CPUs (None: its parent's quota, or the "
                                                     "host's)", inventory=False)
    memory_mb: float | None = _key(None, 1, 1 << 40, "its declared memory (None: its parent's limit, or "
                                                        "MemTotal)", inventory=False)
    node: str | None = field(default=None, metadata={"inventory": False, "help": "its inventory name"})

    @property
    def interval(self) -> float:
        return self.interval_seconds

    def by_key(self) -> dict[str, Any]:
        """The settings the inventory's `[qos]` gives, by key (what guard.json takes from it)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata["inventory"]}


#: the keys the inventory's `[qos]` may set, each with its range and whether it is whole
INVENTORY_KEYS = {f.name: f for f in dataclasses.fields(GuardSettings) if f.metadata["inventory"]}


def parse_guard_json(given: Any, where: str) -> tuple[GuardSettings, list[str]]:
    """guard.json's content -> the settings and one line per key it refuses (that key keeps its
    default): an unknown key, or a value out of range, each naming the key and the fix."""
    if not isinstance(given, dict):
        return GuardSettings(), [f"{where}: not a JSON object; write {{\"key\": value, ...}}, defaults in use"]
    known = {f.name: f for f in dataclasses.fields(GuardSettings)}
    values: dict[str, Any] = {}
    errors = []
    for key, value in given.items():
        spec = known.get(key)
        if spec is None:
            errors.append(f"{where}: unknown key {key!r}; known keys: {', '.join(sorted(known))}")
        elif key == "node":
            if isinstance(value, str):
                values[key] = value
            else:
                errors.append(f"{where}: node = {value!r}; give the node's name as a string")
        elif value is None and spec.default is None:
            continue
        elif (not isinstance(value, (int, float)) or isinstance(value, bool)
              or not spec.metadata["range"][0] <= value <= spec.metadata["range"][1]
              or (spec.metadata["integer"] and value != int(value))):
            lo, hi = spec.metadata["range"]
            kind = "a whole number" if spec.metadata["integer"] else "a number"
            errors.append(f"{where}: {key} = {value!r}; use {kind} in {lo:g}..{hi:g} "
                          f"(default {spec.default!r} in use)")
        else:
            values[key] = int(value) if spec.metadata["integer"] else float(value)
    return GuardSettings(**values), errors


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


__all__ = ["INVENTORY_KEYS", "GuardSettings", "QosSettings", "parse_guard_json"]
