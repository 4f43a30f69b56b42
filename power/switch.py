"""Switching nodes on and off through their BMC: `PowerOps` for the executor and the controller's
wakes. Every switch is journaled as a power event (a failed wake quarantines the node), waited for
until the node answers SSH (or stops answering), and measured around for the savings ledger
(`savings.py`: an idle probe before a power-off, the way back after a wake)."""

from __future__ import annotations

import time
from collections.abc import Callable

from peakpack.orchestrator.domain.errors import PeakpackError, PowerError
from peakpack.orchestrator.domain.model import Inventory
from peakpack.orchestrator.domain.ports import Journal
from peakpack.orchestrator.remote.shell import RemoteShell

from . import ipmi
from .savings import SavingsRecorder

#: how long a node switched off may still answer SSH
POWER_OFF_WAIT_S = 120.0


class PowerSwitch:
    def __init__(self, inventory: Inventory, store: Journal, shell: RemoteShell, log: Callable[[str], None],
                 savings: SavingsRecorder) -> None:
        self.inventory, self.store, self.shell, self.log, self.savings = inventory, store, shell, log, savings

    def _answers(self, node: str) -> bool:
        try:
            return self.shell.run(node, ["docker", "version", "--format", "{{.Server.Version}}"], timeout=10).ok
        except PeakpackError:
            self.shell.forget(node)
            return False

    def _wait(self, node: str, up: bool, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._answers(node) == up:
                return True
            time.sleep(1.0)
        return False

    def power_on(self, node: str, reason: str) -> None:
        standby = self.savings.before_wake(node)
        event = self.store.power.begin(node, "power_on", reason)
        timeout = self.inventory.planner.wake_timeout_seconds
        try:
            ipmi.switch(self.inventory.node(node), ipmi.Chassis.ON)
            if not self._wait(node, True, timeout):
                raise PowerError(f"node {node}: powered on but SSH/docker did not answer within {timeout:g} s")
        except PeakpackError as exc:
            self.store.power.finish(event, "FAILED", str(exc))
            self.store.power.quarantine(node, f"failed to wake: {exc}")
            raise
        self.store.power.finish(event, "SUCCEEDED")
        self.savings.woke(node, standby)
        self.log(f"{node}: powered on")

    def power_off(self, node: str, reason: str) -> None:
        probe = self.savings.probe_idle(node)  # it hosts nothing now (the executor checked)
        event = self.store.power.begin(node, "power_off", reason)
        try:
            ipmi.switch(self.inventory.node(node), ipmi.Chassis.SOFT)
            if not self._wait(node, False, POWER_OFF_WAIT_S):
                raise PowerError(f"node {node}: BMC reports off but the node still answers SSH after "
                                 f"{POWER_OFF_WAIT_S:g} s")
        except PeakpackError as exc:
            self.store.power.finish(event, "FAILED", str(exc))
            raise
        self.shell.forget(node)
        self.store.power.set_idle_since(node, None)
        self.store.power.finish(event, "SUCCEEDED")
        self.savings.switched_off(node, reason, probe)
        self.log(f"{node}: powered off")
