"""The composition root: the live services (SSH + docker/CRIU from migrate/, IPMI + energy from
power/, the QoS guards from qos/, observation from observe/, the store) constructed and handed
over as `domain.ports.Services`. It builds and holds nothing else: every behaviour lives in the
adapter it belongs to (tests/unit/test_layering.py checks that this module defines no function
body beyond construction). Only the faces (the CLI, `serve`, `peakpack web`) import it."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from rich.console import Console

from peakpack.db.store import Store
from peakpack.migrate.node_ops import LiveContainers, settle_migrations
from peakpack.power import ipmi
from peakpack.power.policy import PowerCheck
from peakpack.power.sampler import EnergyAccount, EnergySampler
from peakpack.power.savings import SavingsRecorder
from peakpack.power.settle import bmc_is_on, settle_power_events
from peakpack.power.switch import PowerSwitch
from peakpack.qos.deploy import GuardInstaller

from ..act.settle import settle_actions
from ..domain.model import Inventory
from ..domain.ports import JoinedOps, Services, in_turn
from ..observe.cluster import Observer, running_on
from ..observe.traffic import TrafficMeter
from ..remote.shell import RemoteShell


def _logger(console: Console) -> Callable[[str], None]:
    return partial(console.print, markup=False, highlight=False)


def live_observer(inventory: Inventory, store: Store, console: Console) -> Observer:
    """Observing the live cluster without acting, and reading its conntrack tables between
    observations: `serve --dry-run` (its epochs still record what they read)."""
    return Observer(inventory, store, RemoteShell(inventory), ipmi.power_probe(inventory),
                    TrafficMeter(inventory, _logger(console)))


def live_settling(inventory: Inventory, store: Store, shell: RemoteShell,
                  stop_requested: Callable[[], bool] = lambda: False) -> Callable[[], list[str]]:
    """Settling what a crash left open, from what the nodes show: the migrations first, then the
    power events, then the plan actions they belonged to (`serve`, `apply`, `peakpack reconcile`)."""
    return in_turn(partial(settle_migrations, inventory, store, shell, ipmi.power_probe(inventory), stop_requested),
                   partial(settle_power_events, store.power, inventory),
                   partial(settle_actions, store, partial(bmc_is_on, inventory)))


def live_services(inventory: Inventory, store: Store, console: Console) -> Services:
    """The live services over SSH, docker/CRIU, IPMI and the store."""
    shell = RemoteShell(inventory)
    log = _logger(console)
    probe = ipmi.power_probe(inventory)
    savings = SavingsRecorder(inventory, store, shell, log)
    observer = Observer(inventory, store, shell, probe, TrafficMeter(inventory, log))
    containers = LiveContainers(inventory, store, shell, log, power_probe=probe,
                                containers=partial(running_on, shell), bracket=savings.migrations)
    return Services(
        observe=observer,
        ops=JoinedOps(power=PowerSwitch(inventory, store, shell, log, savings), containers=containers),
        settle=live_settling(inventory, store, shell),
        adjust_plan=PowerCheck(inventory, store.power, log),
        account_energy=EnergyAccount(EnergySampler(inventory, store, shell, log), savings, log),
        install_guard=GuardInstaller(inventory, shell),
        close=shell.close,
        sample_traffic=observer.sample_traffic,
    )
