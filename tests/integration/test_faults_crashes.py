"""Exactly once when a node loses power, the controller is killed with SIGKILL or asked to stop
in the middle of a live migration, and planning around a node that cannot be observed. The
victim and what "exactly once" means are tests/support/victim.py's, as in test_faults_partition.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.faults import Fault
from peakpack.lab.node import stop_node
from peakpack.migrate.batch import reconcile_migrations
from peakpack.migrate.settle import PROCESSES_ARGV, in_flight
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote.shell import RemoteShell
from peakpack.power.ipmi import power_probe
from tests.support.victim import (
    COUNTER,
    IMAGE,
    NAME,
    NODES,
    REPO,
    STEPS,
    assert_exactly_once,
    copies,
    heal,
    migrate_with,
    settle,
    start_victim,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("side", sorted(NODES))
def test_power_cut_at_a_step(clean_lab: Lab, tmp_path: Path, side: str, step: str) -> None:
    """A node loses power (its containers die with it). Once the checkpoint exists the state
    survives and the container runs exactly once from it; a source that loses power before its
    checkpoint loses the container's memory with it (docs/migration.md names the case): its engine
    restarts it fresh when the node is back, and it still runs exactly once."""
    lab, db = clean_lab, tmp_path / "pp.db"
    before = start_victim(lab)
    layout = lab.node(NODES[side])

    async def cut(now: str) -> None:
        if now == step:
            stop_node(layout)

    try:
        migrate_with(lab, db, cut)
    finally:
        heal(lab)
    settle(lab, db)
    assert_exactly_once(lab, db, before, state_survives=not (side == "source" and step == "checkpointing"))


KILLED_AT = textwrap.dedent("""
    import os, signal, sys
    from peakpack.db.store import Store
    from peakpack.migrate.transaction import Migration
    from peakpack.orchestrator.domain.config import load_inventory
    from peakpack.orchestrator.remote.shell import RemoteShell
    inventory, db, step = sys.argv[1:]
    inv = load_inventory(inventory)

    async def die(now):
        if now == step:
            os.kill(os.getpid(), signal.SIGKILL)

    with RemoteShell(inv) as shell, Store.open(db) as store:
        shell.call(Migration(shell.pool, shell.engines, store, inv, "victim", "node-1", "node-2", hook=die).run())
""")


@pytest.mark.parametrize("step", STEPS)
def test_controller_killed_at_a_step_is_settled_by_reconcile(clean_lab: Lab, tmp_path: Path, step: str) -> None:
    lab, db = clean_lab, tmp_path / "pp.db"
    before = start_victim(lab)
    proc = subprocess.run([sys.executable, "-c", KILLED_AT, str(lab.inventory_path), f"sqlite:///{db}", step],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, proc.stderr
    with Store.open(f"sqlite:///{db}") as store:
        assert [m.container for m in store.migrations.unfinished()] == [NAME]
    out = subprocess.run([sys.executable, "-m", "peakpack", "reconcile", "--inventory",
                          str(lab.inventory_path), "--db", f"sqlite:///{db}"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "found 1 unfinished" in out.stdout and "did: migration" in out.stdout
    assert_exactly_once(lab, db, before)


def test_a_checkpoint_a_killed_leader_left_running_is_waited_for(clean_lab: Lab, tmp_path: Path) -> None:
    """The leader dies while `docker checkpoint create` dumps a large container; the dump goes on on
    the node. Reconciling meanwhile must not act on the half-made state (the source still shows
    running: removing the target and calling it rolled back would leave the container stopped,
    nowhere): it waits, IN_DOUBT, and once the dump has ended the source is restored from it."""
    lab, db = clean_lab, tmp_path / "pp.db"
    before = start_victim(lab, 'x=$(head -c 400000000 /dev/zero | tr "\\0" a); ' + COUNTER)
    ident = lab.exec("node-1", ["docker", "inspect", "-f", "{{.Id}}", NAME]).stdout.strip()
    leader = subprocess.Popen([sys.executable, "-c", KILLED_AT, str(lab.inventory_path), f"sqlite:///{db}", "never"],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def dumping() -> list[str]:
        return in_flight(lab.exec("node-1", PROCESSES_ARGV).stdout, NAME, ident, "peakpack-1")

    try:
        deadline = time.monotonic() + 300
        while not dumping() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        leader.kill()
        leader.wait()
    inv = load_inventory(lab.inventory_path)
    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{db}") as store:
        [line] = shell.call(reconcile_migrations(shell.pool, shell.engines, store, power_probe(inv)))
        assert "IN_DOUBT" in line and "node-1 still runs `" in line, line
        assert copies(lab).get("node-2") == "stopped"  # the target copy was not removed
    while dumping():
        time.sleep(0.5)
    settle(lab, db)
    assert assert_exactly_once(lab, db, before) is MigrationState.ROLLED_BACK


def test_a_node_that_cannot_be_observed_is_held_and_the_rest_planned(clean_lab: Lab, tmp_path: Path) -> None:
    """Observation degrades per node: a partitioned node is held (nothing planned onto, off or to
    switch it), the others are planned as usual, and nothing fails the whole epoch."""
    lab = clean_lab
    for i in (1, 2):
        lab.exec(f"node-{i}", ["docker", "run", "-d", "--name", f"app-{i}", "--network", "none", "--label",
                               "peakpack.cpu=0.2", "--label", "peakpack.memory_mb=32", IMAGE, "sleep", "3600"])
    lab.fault("node-3", Fault.PARTITION)
    try:
        proc = subprocess.run([sys.executable, "-m", "peakpack", "plan", "--inventory", str(lab.inventory_path),
                               "--json", "--time-limit", "2", "--db", f"sqlite:///{tmp_path / 'pp.db'}"],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
    finally:
        lab.fault("node-3", Fault.HEAL)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert "node-3" in plan["held"] and "not observed" in plan["held"]["node-3"]
    touched = {a.get("node") for a in plan["actions"]} | {a.get("target") for a in plan["actions"]}
    assert "node-3" not in touched
    assert [a["kind"] for a in plan["actions"]] == ["migrate", "power_off"]  # node-1 and node-2 still consolidate


@pytest.mark.parametrize("step, settled_as, ends_on", [
    ("precopy", MigrationState.FAILED, "node-1"),          # not frozen yet: abandoned, the source never stopped
    ("transferring", MigrationState.SUCCEEDED, "node-2"),  # frozen: rolled forward, it is the shorter way out
])
def test_a_stop_request_finishes_the_step_then_settles(clean_lab: Lab, tmp_path: Path, step: str,
                                                       settled_as: MigrationState, ends_on: str) -> None:
    """SIGTERM's path: the step in flight finishes, the rest of the migration is rolled forward (once
    frozen) or abandoned (before), and it ends settled with the container running once."""
    lab, db = clean_lab, tmp_path / "pp.db"
    before = start_victim(lab)
    stopping: list[bool] = []

    async def stop_at(now: str) -> None:
        if now == step:
            stopping.append(True)

    inv = load_inventory(lab.inventory_path)
    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{db}") as store:
        result = shell.call(Migration(shell.pool, shell.engines, store, inv, NAME, "node-1", "node-2", hook=stop_at,
                                      stop_requested=lambda: bool(stopping)).run())
    assert result.state is settled_as, result.reason
    assert copies(lab) == {ends_on: "running"}
    assert assert_exactly_once(lab, db, before) is settled_as
