"""`ContainerOps` on real nodes: migrations (`batch.py`, bracketed for the savings ledger by
the caller's `bracket`), pinning, what a node still hosts, starting a container where it is; and
settling the migrations a crash left open (`batch.reconcile_migrations`), synchronously."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager

from peakpack.orchestrator.domain.inputs import container_name
from peakpack.orchestrator.domain.model import Container, Inventory
from peakpack.orchestrator.domain.plan import Action
from peakpack.orchestrator.domain.ports import Journal
from peakpack.orchestrator.domain.states import ActionState
from peakpack.orchestrator.remote.shell import RemoteShell

from .batch import execute_migrations, reconcile_migrations
from .pinning import apply_pinning

#: node name -> True/False (BMC power state) or None (no BMC)
PowerProbe = Callable[[str], bool | None]


class LiveContainers:
    """`containers(node)`: the node's running containers now (the observer's read of one node:
    none when it is off, PeakpackError when it cannot be seen); `bracket(nodes, count)`: the
    savings ledger's measurement around a batch."""

    def __init__(self, inventory: Inventory, store: Journal, shell: RemoteShell, log: Callable[[str], None], *,
                 power_probe: PowerProbe, containers: Callable[[str], list[Container]],
                 bracket: Callable[[Sequence[str], int], AbstractContextManager[object]]) -> None:
        self.inventory, self.store, self.shell, self.log = inventory, store, shell, log
        self.power_probe, self.containers, self.bracket = power_probe, containers, bracket

    def migrate(self, actions: Sequence[tuple[int, Action]],
                stop_requested: Callable[[], bool]) -> dict[int, ActionState]:
        nodes = [n for _, a in actions for n in (a.source, a.target) if n]
        with self.bracket(nodes, len(actions)):
            return self.shell.call(execute_migrations(
                self.shell.pool, self.shell.engines, self.store, self.inventory, actions, progress=self.log,
                per_node=self.inventory.budgets.migrations_per_node, bmc_power=self.power_probe,
                stop_requested=stop_requested))

    def pin(self, node: str) -> None:
        running = self.containers(node)
        if running:
            changed = self.shell.call(apply_pinning(self.shell.pool, self.shell.engines, self.store, node, running))
            for name, cpus in changed.items():
                self.log(f"{node}: pinned {name} to cpus {cpus}")

    def hosts_nothing(self, node: str, stopped: Collection[str] = ()) -> bool:
        listed = self.shell.run(node, ["docker", "ps", "-a", "--format", "{{.Names}} {{.State}}"], timeout=30).stdout
        there = dict(line.split(" ", 1) for line in listed.splitlines() if " " in line)
        return not any(state == "running" or name in stopped for name, state in there.items())

    def start(self, node: str, container: str) -> None:
        self.shell.run(node, ["docker", "start", container_name(container)], timeout=120)


def settle_migrations(inventory: Inventory, store: Journal, shell: RemoteShell, power_probe: PowerProbe,
                      stop_requested: Callable[[], bool] = lambda: False) -> list[str]:
    """Migrations a crash or a lost node left open, settled from what both nodes show (never
    assuming success); once `stop_requested()` no further one starts."""
    return shell.call(reconcile_migrations(shell.pool, shell.engines, store, power_probe, inventory=inventory,
                                           stop_requested=stop_requested))
