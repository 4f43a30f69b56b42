"""Only the lease holder acts on a node (migrate/criu.py, the node leases), on the real lab:
- an ex-leader paused between its journal write and its node step, while another controller took
  the store's lease and settled the migration, is refused by the node itself when it comes back:
  the container is not dumped, and runs once where it was;
- a migration whose pre-copy outlasts its lease keeps its node leases and the QoS guards' hold
  renewed, so no guard may stop the container in mid-dump;
- `peakpack reconcile` lists a lease nobody renews any more, with its age and owner.
Nothing is mocked; the tests assert state, never time."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.node import docker
from peakpack.migrate.batch import reconcile_migrations
from peakpack.migrate.criu import NODE_SCRIPT
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.errors import FencedError
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote.shell import RemoteShell
from peakpack.power.ipmi import power_probe
from tests.support.labs import criu_daemons

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
NAME = "counter"
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /n; sleep 0.1; done"


def start_counter(lab: Lab) -> None:
    docker(lab.node("node-1"), "run", "-d", "--name", NAME, "--network", "none", "peakpack/busybox:lab",
           "sh", "-c", COUNTER)


def count(lab: Lab, node: str) -> int:
    return int(docker(lab.node(node), "exec", NAME, "cat", "/n").stdout)


def copies(lab: Lab) -> dict[str, str]:
    found = {}
    for n in lab.layout.nodes:
        state = docker(n, "inspect", "-f", "{{.State.Running}}", NAME, check=False)
        if state.returncode == 0:
            found[n.name] = "running" if state.stdout.strip() == "true" else "stopped"
    return found


class Paused:
    """The ex-leader's SSH pool: just before its first node-side dump command it is "paused"
    (`meanwhile` runs: another controller takes over and settles), then it goes on as if nothing
    happened; it has journaled the step already."""

    def __init__(self, pool: Any, meanwhile: Any) -> None:
        self.pool, self.meanwhile, self.paused = pool, meanwhile, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)

    async def run(self, node: str, argv: list[str], **kw: Any) -> Any:
        if not self.paused and NODE_SCRIPT in argv and argv[argv.index(NODE_SCRIPT) + 2] == "checkpoint":
            self.paused = True
            self.meanwhile()
        return await self.pool.run(node, argv, **kw)


def test_an_ex_leader_paused_before_its_node_step_is_refused_by_the_node(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    start_counter(lab)
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    inv = load_inventory(lab.inventory_path)
    old, new = Store.open(url), Store.open(url)
    old.fence(old.lease.acquire("serve@old:1:x:y", 600))
    settled: list[str] = []

    def take_over_and_settle() -> None:
        new.fence(new.lease.acquire("serve@new:1:x:y", 600, replacing="serve@old:1:x:y"))
        with RemoteShell(inv) as shell:
            settled.extend(shell.call(reconcile_migrations(shell.pool, shell.engines, new, power_probe(inv),
                                                           inventory=inv)))

    with RemoteShell(inv) as shell:
        paused = Paused(shell.pool, take_over_and_settle)
        with pytest.raises(FencedError):  # the node's refusal, then the store's as its step is journaled
            shell.call(Migration(paused, shell.engines, old, inv, NAME, "node-1", "node-2",  # type: ignore[arg-type]
                                 bmc_power=power_probe(inv)).run())
    assert paused.paused and any("ROLLED_BACK" in line for line in settled), settled  # the new leader settled it
    # the node refused the dump (the store noticed only once the step was over): the container was
    # never stopped, runs once, where it was
    assert copies(lab) == {"node-1": "running"}
    before = count(lab, "node-1")
    time.sleep(0.5)
    assert count(lab, "node-1") > before
    assert docker(lab.node("node-1"), "checkpoint", "ls", NAME).stdout.splitlines()[1:] == []  # no checkpoint
    [m] = new.migrations.history()
    assert m.state is MigrationState.ROLLED_BACK
    assert criu_daemons(lab) == []  # the page server it armed on the target went with the settling
    old.close()
    new.close()


def hold(lab: Lab, node: str) -> dict[str, Any]:
    return json.loads((lab.node(node).qos_dir / "holds" / NAME).read_text())


def lease_expiry(lab: Lab, node: str) -> int:
    return int((lab.node(node).etc_criu / "peakpack.lock").read_text().split()[3])


def test_a_pre_copy_longer_than_the_lease_keeps_the_hold_and_the_leases_renewed(clean_lab: Lab,
                                                                                tmp_path: Path) -> None:
    lab = clean_lab
    start_counter(lab)
    text = lab.inventory_path.read_text().replace("[migration]", "[migration]\nlease_seconds = 6", 1)
    (lab.dir / "short-lease.toml").write_text(text)
    inv = load_inventory(lab.dir / "short-lease.toml")
    seen: dict[str, Any] = {}

    async def slow_precopy(step: str) -> None:
        if step == "precopy":
            seen["first"] = {n: (hold(lab, n)["until"], lease_expiry(lab, n)) for n in ("node-1", "node-2")}
            await asyncio.sleep(10)  # a pre-copy that takes longer than the lease
        if step == "checkpointing":
            seen["at the freeze"] = {n: (hold(lab, n)["until"], lease_expiry(lab, n)) for n in ("node-1", "node-2")}
            seen["now"] = time.time()

    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        result = shell.call(Migration(shell.pool, shell.engines, store, inv, NAME, "node-1", "node-2",
                                      hook=slow_precopy, bmc_power=power_probe(inv)).run())
    assert result.state is MigrationState.SUCCEEDED, result.reason
    for node in ("node-1", "node-2"):
        (hold_then, lease_then), (hold_now, lease_now) = seen["first"][node], seen["at the freeze"][node]
        assert hold_now > hold_then and lease_now > lease_then, (node, seen)  # renewed meanwhile
        assert hold_now > seen["now"] and lease_now > seen["now"], (node, seen)  # not expired at the freeze
    assert not (lab.node("node-1").qos_dir / "holds" / NAME).exists()  # settled: the hold goes
    assert (lab.node("node-1").etc_criu / "peakpack.lock").read_text().endswith(" settled\n")


def test_reconcile_lists_a_lease_nobody_renews(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    lock = lab.node("node-2").etc_criu / "peakpack.lock"
    lock.write_text(f"41-deadbeef source 3 {int(time.time()) - 120}\n")  # its controller died 2 minutes ago
    try:
        done = subprocess.run([sys.executable, "-m", "peakpack", "reconcile", "--inventory", str(lab.inventory_path),
                               "--db", f"sqlite:///{tmp_path / 'pp.db'}"], capture_output=True, text=True, cwd=REPO,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        [line] = [x for x in done.stdout.splitlines() if "stale" in x]
        assert "node-2" in line and "migration 41 source, token 3, expired 1" in line  # 120-ish s ago
    finally:
        lock.unlink()
