"""Power actions left unfinished by a crash, settled from what each BMC reports: a power event
still ONGOING is SUCCEEDED when the chassis is in the state it asked for, else FAILED; a BMC that
cannot be read leaves it ONGOING (the facts are unknown, so nothing is decided)."""

from __future__ import annotations

from peakpack.orchestrator.domain.errors import PeakpackError
from peakpack.orchestrator.domain.model import Inventory
from peakpack.orchestrator.domain.ports import PowerRepo

from . import ipmi


def settle_power_events(power: PowerRepo, inventory: Inventory) -> list[str]:
    """One line per ONGOING power event, settled or left as it is."""
    lines = []
    for ev in power.events(state="ONGOING"):
        try:
            on = ipmi.is_on(inventory.node(ev.node))
        except PeakpackError as exc:
            lines.append(f"power event {ev.id} ({ev.action} {ev.node}): BMC unreadable, left ONGOING: {exc}")
            continue
        done = on == (ev.action == "power_on")
        power.finish(
            ev.id, "SUCCEEDED" if done else "FAILED", f"controller stopped; BMC reports {'on' if on else 'off'}"
        )
        lines.append(f"power event {ev.id} ({ev.action} {ev.node}): {'SUCCEEDED' if done else 'FAILED'}")
    return lines


def bmc_is_on(inventory: Inventory, node: str) -> bool:
    """The chassis state of `node` as its BMC reports it (PeakpackError when it cannot be read)."""
    return ipmi.is_on(inventory.node(node))
