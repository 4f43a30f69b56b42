"""The fault tests' victim: a container with an in-memory counter on a real lab, migrated from
node-1 to node-2 with a hook at each step, and what "exactly once" means afterwards (one copy,
running, the same process with a larger counter, the operator's restart policy back, the
migration ended). Shared by tests/integration/test_faults*.py."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.faults import Fault
from peakpack.lab.node import start_node
from peakpack.migrate.batch import reconcile_migrations
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote.shell import RemoteShell
from peakpack.power.ipmi import power_probe

REPO = Path(__file__).resolve().parents[2]
IMAGE = "peakpack/busybox:lab"
NAME = "victim"
COUNTER = 'id=$RANDOM; i=0; while :; do i=$((i+1)); echo "$id $i"; sleep 0.1; done'
NODES = {"source": "node-1", "target": "node-2"}
STEPS = ("checkpointing", "transferring", "restoring", "settling")


def start_victim(lab: Lab, script: str = COUNTER) -> tuple[int, int]:
    proc = lab.exec("node-1", ["docker", "run", "-d", "--name", NAME, "--network", "none", "--restart",
                               "unless-stopped", "--stop-timeout", "1", IMAGE, "sh", "-c", script])
    assert proc.returncode == 0, proc.stderr
    time.sleep(1.5)
    deadline = time.monotonic() + 120  # a script that fills its memory first counts only after that
    while (
        not lab.exec("node-1", ["docker", "logs", "--tail", "1", NAME]).stdout.strip() and time.monotonic() < deadline
    ):
        time.sleep(0.5)
    return counter(lab, "node-1")


def counter(lab: Lab, node: str) -> tuple[int, int]:
    ident, count = lab.exec(node, ["docker", "logs", "--tail", "1", NAME]).stdout.split()
    return int(ident), int(count)


def copies(lab: Lab) -> dict[str, str]:
    """node -> 'running' / 'stopped' for every node that has the container."""
    found = {}
    for n in ("node-1", "node-2"):
        state = lab.exec(n, ["docker", "inspect", "-f", "{{.State.Running}}", NAME])
        if state.returncode == 0:
            found[n] = "running" if state.stdout.strip() == "true" else "stopped"
    return found


def heal(lab: Lab) -> None:
    for layout in lab.layout.nodes:
        if layout.name in NODES.values():
            start_node(layout)  # a power cut is undone by powering on (no-op when on)
    lab.clear_faults()


def settle(lab: Lab, db: Path) -> None:
    inv = load_inventory(lab.inventory_path)
    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{db}") as store:
        for _ in range(3):  # a node just back may need a moment before it answers everything
            shell.call(reconcile_migrations(shell.pool, shell.engines, store, power_probe(inv)))
            if not store.migrations.unfinished():
                return
            time.sleep(3)
        pytest.fail(f"still unsettled: {store.migrations.unfinished()}")


def assert_exactly_once(lab: Lab, db: Path, before: tuple[int, int], state_survives: bool = True) -> MigrationState:
    where = copies(lab)
    assert list(where.values()) == ["running"], where  # one copy, running; none left stopped elsewhere
    ident, count = counter(lab, next(iter(where)))
    if state_survives:
        assert ident == before[0] and count > before[1], (before, ident, count)  # same process, state went on
    restart = lab.exec(next(iter(where)), ["docker", "inspect", "-f", "{{.HostConfig.RestartPolicy.Name}}", NAME])
    assert restart.stdout.strip() == "unless-stopped"  # the operator's policy is back on the survivor
    with Store.open(f"sqlite:///{db}") as store:
        [m] = store.migrations.history()
    assert m.state in (MigrationState.SUCCEEDED, MigrationState.ROLLED_BACK, MigrationState.FAILED), m
    return m.state


def migrate_with(lab: Lab, db: Path, hook: Callable[[str], Awaitable[None]]) -> MigrationState:
    inv = load_inventory(lab.inventory_path)
    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{db}") as store:
        result = shell.call(Migration(shell.pool, shell.engines, store, inv, NAME, "node-1", "node-2",
                                      hook=hook, bmc_power=power_probe(inv)).run())
    return result.state


def fault_at_a_step_ends_exactly_once(lab: Lab, db: Path, fault: Fault, side: str, step: str) -> None:
    """`fault` on `side`'s node at `step` of a live migration, then healed and settled: the victim
    runs on exactly one node, nothing of it is left on the other, and its memory state went on.
    Nothing is mocked (the fault is lab/faults.py's). One body for every fault, so that each
    fault's cases live in a file of their own (tests/integration/test_faults_*.py) and the suite's
    workers share them: in one file they took about 7 minutes of one worker."""
    before = start_victim(lab)

    async def inject(now: str) -> None:
        if now == step:
            lab.fault(NODES[side], fault)

    try:
        migrate_with(lab, db, inject)
    finally:
        heal(lab)
    settle(lab, db)
    # dockerd without live-restore stops every container when it starts again: a source killed
    # before the freeze loses the container's memory with its daemon (docs/migration.md)
    lost_with_daemon = fault is Fault.KILL_DOCKERD and side == "source" and step == "checkpointing"
    assert_exactly_once(lab, db, before, state_survives=not lost_with_daemon)


def fault_test(fault: Fault) -> Callable[[Lab, Path, str, str], None]:
    """The test of `fault` on either node at every step, for a file of its own to bind to a
    `test_...` name (pytest names the cases by it)."""

    @pytest.mark.parametrize("step", STEPS)
    @pytest.mark.parametrize("side", sorted(NODES))
    def test(clean_lab: Lab, tmp_path: Path, side: str, step: str) -> None:
        fault_at_a_step_ends_exactly_once(clean_lab, tmp_path / "pp.db", fault, side, step)

    return test
