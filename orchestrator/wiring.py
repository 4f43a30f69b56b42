"""The live controller's services: SSH + docker/CRIU (migrate/), IPMI + energy (power/), the
power policy and crash reconciliation, assembled behind the controller's `Services`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from rich.console import Console

from db.records import EnergyRow
from db.store import ActionState, Store
from migrate.batch import execute_migrations, reconcile_migrations
from migrate.pinning import apply_pinning
from orchestrator.remote import RemoteShell
from power import ipmi
from power.policy import adjust_plan
from power.sampler import EnergySampler

from .controller import Services
from .errors import PeakpackError, PowerError
from .model import ClusterSnapshot, Inventory
from .observe import observe_and_record, observe_node
from .plan import Action, Plan


class LiveOps:
    """NodeOps on real nodes; every power switch is journaled as a power event."""

    def __init__(self, inventory: Inventory, store: Store, shell: RemoteShell, log: Callable[[str], None]) -> None:
        self.inventory, self.store, self.shell, self.log = inventory, store, shell, log

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
        event = self.store.begin_power_event(node, "power_on", reason)
        timeout = self.inventory.planner.wake_timeout_seconds
        try:
            ipmi.switch(self.inventory.node(node), ipmi.Chassis.ON)
            if not self._wait(node, True, timeout):
                raise PowerError(f"node {node}: powered on but SSH/docker did not answer within {timeout:g} s")
        except PeakpackError as exc:
            self.store.finish_power_event(event, "FAILED", str(exc))
            self.store.quarantine(node, f"failed to wake: {exc}")
            raise
        self.store.finish_power_event(event, "SUCCEEDED")
        self.log(f"{node}: powered on")

    def power_off(self, node: str, reason: str) -> None:
        event = self.store.begin_power_event(node, "power_off", reason)
        try:
            ipmi.switch(self.inventory.node(node), ipmi.Chassis.SOFT)
            if not self._wait(node, False, 120):
                raise PowerError(f"node {node}: BMC reports off but the node still answers SSH after 120 s")
        except PeakpackError as exc:
            self.store.finish_power_event(event, "FAILED", str(exc))
            raise
        self.shell.forget(node)
        self.store.set_idle_since(node, None)
        self.store.finish_power_event(event, "SUCCEEDED")
        self.log(f"{node}: powered off")

    def migrate(self, actions: Sequence[tuple[int, Action]],
                stop_requested: Callable[[], bool]) -> dict[int, ActionState]:
        return self.shell.call(execute_migrations(
            self.shell.pool, self.shell.engines, self.store, self.inventory, actions, progress=self.log,
            per_node=self.inventory.budgets.migrations_per_node,
            bmc_power=ipmi.power_probe(self.inventory), stop_requested=stop_requested))

    def pin(self, node: str) -> None:
        view = self.shell.call(observe_node(self.shell.pool, node, lambda _: None))
        if view.unknown is not None:
            raise PeakpackError(view.unknown)
        if view.state.powered and view.containers:
            changed = self.shell.call(apply_pinning(self.shell.pool, self.shell.engines, self.store, node,
                                                    view.containers))
            for name, cpus in changed.items():
                self.log(f"{node}: pinned {name} to cpus {cpus}")

    def hosts_nothing(self, node: str) -> bool:
        return self.shell.run(node, ["docker", "ps", "-q"], timeout=30).stdout.strip() == ""


def reconcile(inventory: Inventory, store: Store, shell: RemoteShell) -> list[str]:
    """Repair what a crash left ONGOING by looking at the nodes; never assume success."""
    lines = shell.call(reconcile_migrations(shell.pool, shell.engines, store, ipmi.power_probe(inventory)))
    migrated = {m.action_id for m in store.list_migrations() if m.action_id is not None}
    for ev in store.list_power_events():
        if ev.state != "ONGOING":
            continue
        try:
            on = ipmi.is_on(inventory.node(ev.node))
        except PeakpackError as exc:
            lines.append(f"power event {ev.id} ({ev.action} {ev.node}): BMC unreadable, left ONGOING: {exc}")
            continue
        done = on == (ev.action == "power_on")
        store.finish_power_event(ev.id, "SUCCEEDED" if done else "FAILED",
                                 f"controller stopped; BMC reports {'on' if on else 'off'}")
        lines.append(f"power event {ev.id} ({ev.action} {ev.node}): {'SUCCEEDED' if done else 'FAILED'}")
    for a in store.unfinished_actions():
        if a.kind == "migrate" and a.id in migrated:
            continue  # finished by reconcile_migrations above
        if a.kind == "migrate":
            store.set_action_state(a.id, ActionState.FAILED, "controller stopped before the migration began")
        else:
            try:
                on = ipmi.is_on(inventory.node(a.node or ""))
            except PeakpackError as exc:
                lines.append(f"action {a.id} ({a.kind} {a.node}): BMC unreadable, left ONGOING: {exc}")
                continue
            ok = on == (a.kind == "power_on")
            store.set_action_state(a.id, ActionState.SUCCEEDED if ok else ActionState.FAILED,
                                   f"controller stopped; BMC reports {'on' if on else 'off'}")
        lines.append(f"action {a.id} ({a.kind}): finished from what the nodes show")
    return lines


def live_services(inventory: Inventory, store: Store, console: Console) -> Services:
    shell = RemoteShell(inventory)
    log = lambda text: console.print(text, markup=False, highlight=False)  # noqa: E731
    sampler = EnergySampler(inventory, store, shell, log)

    def adjust(plan: Plan, snapshot: ClusterSnapshot) -> Plan:
        adjusted = adjust_plan(plan, snapshot, inventory, store.quarantined())
        for note in adjusted.notes[len(plan.notes):]:
            log(f"power policy: {note}")
        return adjusted

    def account(snapshot: ClusterSnapshot, plan_id: int | None) -> list[EnergyRow]:
        rows = sampler.sample(snapshot, plan_id)
        nodes = [r for r in rows if r.container is None]
        if nodes:  # measured and modelled energy are never summed into one figure
            log("energy: " + ", ".join(f"{sum(r.energy_j for r in nodes if r.source == s) / 1000:.1f} kJ {s} "
                                       f"({sum(1 for r in nodes if r.source == s)} node(s))"
                                       for s in sorted({r.source for r in nodes})))
        return rows

    return Services(
        observe=lambda: observe_and_record(inventory, store, shell),
        ops=LiveOps(inventory, store, shell, log),
        reconcile=lambda: reconcile(inventory, store, shell),
        adjust_plan=adjust,
        account_energy=account,
        close=shell.close,
    )
