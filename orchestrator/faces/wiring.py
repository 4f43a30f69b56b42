"""The composition root: the live services (SSH + docker/CRIU from migrate/, IPMI + energy from
power/, the power policy and crash reconciliation) assembled behind `domain.ports.Services`.
Only the faces (the CLI, `serve`, `peakpack web`) import it and hand what it builds in."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime

from rich.console import Console

from peakpack.db.store import Store
from peakpack.migrate.batch import execute_migrations, reconcile_migrations
from peakpack.migrate.pinning import apply_pinning
from peakpack.power import ipmi
from peakpack.power.policy import adjust_plan
from peakpack.power.reconcile import bmc_is_on, reconcile_power_events
from peakpack.power.sampler import EnergySampler
from peakpack.power.savings import SavingsRecorder

from ..act.reconcile import finish_unfinished_actions
from ..domain.errors import PeakpackError, PowerError
from ..domain.inputs import container_name
from ..domain.model import ClusterSnapshot, Inventory
from ..domain.plan import Action, Plan
from ..domain.ports import Services
from ..domain.records import EnergyRow
from ..domain.states import ActionState
from ..observe.cluster import observe_and_record, observe_node, sample_traffic, switched_off
from ..observe.traffic import TrafficMeter
from ..remote.shell import RemoteShell

#: how long a node switched off may still answer SSH
POWER_OFF_WAIT_S = 120.0


class LiveOps:
    """NodeOps on real nodes; every power switch is journaled as a power event, and measured
    around for the savings ledger (`power/savings.py`: an idle probe before a power-off, the
    way back after a wake, migrations bracketed)."""

    def __init__(self, inventory: Inventory, store: Store, shell: RemoteShell, log: Callable[[str], None],
                 savings: SavingsRecorder) -> None:
        self.inventory, self.store, self.shell, self.log = inventory, store, shell, log
        self.savings = savings
        #: nodes off at the last observation or switched off since: observed through their BMC first
        self.off: set[str] = set()

    def observed(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """Remember which nodes `snapshot` found off (for the next observation); `snapshot`."""
        self.off = {n.name for n in snapshot.nodes if not n.powered}
        return snapshot

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
        self.off.discard(node)
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
        self.off.add(node)
        self.savings.switched_off(node, reason, probe)
        self.log(f"{node}: powered off")

    def migrate(self, actions: Sequence[tuple[int, Action]],
                stop_requested: Callable[[], bool]) -> dict[int, ActionState]:
        nodes = [n for _, a in actions for n in (a.source, a.target) if n]
        with self.savings.migrations(nodes, len(actions)):
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

    def hosts_nothing(self, node: str, stopped: Collection[str] = ()) -> bool:
        listed = self.shell.run(node, ["docker", "ps", "-a", "--format", "{{.Names}} {{.State}}"], timeout=30).stdout
        there = dict(line.split(" ", 1) for line in listed.splitlines() if " " in line)
        return not any(state == "running" or name in stopped for name, state in there.items())

    def start(self, node: str, container: str) -> None:
        self.shell.run(node, ["docker", "start", container_name(container)], timeout=120)


def reconcile(inventory: Inventory, store: Store, shell: RemoteShell,
              stop_requested: Callable[[], bool] = lambda: False) -> list[str]:
    """Repair what a crash left ONGOING by looking at the nodes, never assuming success: the
    migrations first, then the power events, then the plan actions they belonged to. Once
    `stop_requested()` no further migration is settled (the one in progress ends)."""
    lines = shell.call(reconcile_migrations(shell.pool, shell.engines, store, ipmi.power_probe(inventory),
                                            inventory=inventory, stop_requested=stop_requested))
    lines += reconcile_power_events(store.power, inventory)
    lines += finish_unfinished_actions(store, lambda node: bmc_is_on(inventory, node))
    return lines


def _logger(console: Console) -> Callable[[str], None]:
    return lambda text: console.print(text, markup=False, highlight=False)


def live_observer(inventory: Inventory, store: Store, console: Console
                  ) -> tuple[Callable[[], ClusterSnapshot], Callable[[], None]]:
    """Observing the live cluster (and storing its demand and traffic) without acting, and
    reading its conntrack tables between observations: `serve --dry-run`."""
    meter = TrafficMeter(inventory, _logger(console))

    def sample() -> None:
        with RemoteShell(inventory) as shell:
            sample_traffic(inventory, shell, meter)

    return lambda: observe_and_record(inventory, store, bmc_power=ipmi.power_probe(inventory), meter=meter), sample


def live_services(inventory: Inventory, store: Store, console: Console, *, install_guards: bool = False) -> Services:
    """The live services over SSH, docker/CRIU, IPMI and the store. `install_guards`: observing
    also installs or updates the nodes' QoS guards (`serve`, the one long-lived process; a one-off
    command such as `apply` does not touch them)."""
    shell = RemoteShell(inventory)
    log = _logger(console)
    sampler = EnergySampler(inventory, store, shell, log)
    meter = TrafficMeter(inventory, log)
    savings = SavingsRecorder(inventory, store, shell, log)

    def adjust(plan: Plan, snapshot: ClusterSnapshot) -> Plan:
        adjusted = adjust_plan(plan, snapshot, inventory, store.power.quarantined())
        for note in adjusted.notes[len(plan.notes):]:
            log(f"power policy: {note}")
        return adjusted

    def account(snapshot: ClusterSnapshot, plan_id: int | None) -> list[EnergyRow]:
        savings.woken_outside(snapshot)
        rows = sampler.sample(snapshot, plan_id)
        nodes = [r for r in rows if r.container is None]
        if nodes:  # measured and modelled energy are never summed into one figure
            log("energy: " + ", ".join(f"{sum(r.energy_j for r in nodes if r.source == s) / 1000:.1f} kJ {s} "
                                       f"({sum(1 for r in nodes if r.source == s)} node(s))"
                                       for s in sorted({r.source for r in nodes})))
        return rows

    ops = LiveOps(inventory, store, shell, log, savings)
    return Services(
        observe=lambda: ops.observed(observe_and_record(
            inventory, store, shell, bmc_power=ipmi.power_probe(inventory), meter=meter, install_guards=install_guards,
            log=log, believed_off=frozenset(ops.off) | switched_off(store, datetime.now(UTC)))),
        ops=ops,
        reconcile=lambda: reconcile(inventory, store, shell),
        adjust_plan=adjust,
        account_energy=account,
        close=shell.close,
        sample_traffic=lambda: sample_traffic(inventory, shell, meter),
    )
